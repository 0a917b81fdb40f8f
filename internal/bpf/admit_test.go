// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// TestFlowAdmittedOnSecondPacket: a flow a rule decides enters the flow
// table on its second packet, its entry then counting both packets
// (IPv4 and IPv6); a flood of one-packet flows records nothing and
// evicts nothing; a note older than the doorkeeper's ticks is forgotten;
// a connection to a service is recorded on its first packet.
func TestFlowAdmittedOnSecondPacket(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}, {far: 12}"))
	out := func(src, dst string, sport uint16) lbPkt {
		return lbPkt{src: src, dst: dst, sport: sport, dport: 5000, udp: true, smac: macHostA, dmac: macLan0}
	}
	sendOK := func(p lbPkt) int {
		t.Helper()
		f := p.frame(t)
		if v, _ := h.run(f, "lan0"); v != bpf.XDPRedirect {
			t.Fatalf("%s:%d -> %s: verdict %s", p.src, p.sport, p.dst, verdictName(v))
		}
		return len(f)
	}
	entry := func(sport uint16) *bpf.FTWay {
		t.Helper()
		ws, _, err := h.dp.FlowWays()
		if err != nil {
			t.Fatal(err)
		}
		for i := range ws {
			if ws[i].K.Sport == uint16(be16(sport)) && ws[i].F.Flags&bpf.FlowConn == 0 {
				return &ws[i]
			}
		}
		return nil
	}

	for _, c := range []struct {
		src, dst string
		sport    uint16
	}{{"10.1.0.2", "10.3.1.1", 40000}, {"fd01::2", "fd03::1", 40001}} {
		p := out(c.src, c.dst, c.sport)
		before := snap(t, h)
		n := sendOK(p)
		mid := snap(t, h)
		if e := entry(c.sport); e != nil {
			t.Errorf("%s: recorded on its first packet: %+v", c.src, e.F)
		}
		if d := mid.CacheFirst - before.CacheFirst; d != 1 {
			t.Errorf("%s: first packets not recorded +%d, want +1", c.src, d)
		}
		sendOK(p)
		e := entry(c.sport)
		if e == nil {
			t.Fatalf("%s: not recorded on its second packet", c.src)
		}
		if e.F.Packets != 2 || e.F.Bytes != uint64(2*n) {
			t.Errorf("%s: entry counts %d packets %d bytes, want 2 and %d (the first packet's too)", c.src, e.F.Packets, e.F.Bytes, 2*n)
		}
		after := snap(t, h)
		if d := after.CacheFirst - mid.CacheFirst; d != 0 {
			t.Errorf("%s: second packet counted as a first (+%d)", c.src, d)
		}
		sendOK(p)
		if d := snap(t, h).CacheHit - after.CacheHit; d != 1 {
			t.Errorf("%s: third packet: cache hits +%d, want +1", c.src, d)
		}
	}

	// A flood of one-packet flows: nothing recorded, nothing evicted.
	const flood = 2000
	before := snap(t, h)
	for i := range flood {
		sendOK(out("10.1.0.99", "10.3.1.1", uint16(10000+i)))
	}
	after := snap(t, h)
	if d := after.CacheFirst - before.CacheFirst; d != flood {
		t.Errorf("flood: first packets not recorded +%d, want +%d", d, flood)
	}
	src99 := netip.MustParseAddr("10.1.0.99").As4()
	if n := countFlows(t, h.dp, func(w *bpf.FTWay) bool { return [4]byte(w.K.Src[:4]) == src99 }); n != 0 {
		t.Errorf("flood: %d one-packet flows recorded, want 0", n)
	}
	for _, r := range tableReasons {
		if d := after.Reasons[r].Packets - before.Reasons[r].Packets; d != 0 {
			t.Errorf("flood: %s +%d, want 0", reasonName(r), d)
		}
	}
	if entry(40000) == nil {
		t.Error("flood: the established flow left the flow table")
	}

	// A second packet after the note expired counts as a first again.
	p := out("10.1.0.2", "10.3.1.1", 41000)
	sendOK(p)
	for range 3 { // EDGE_DK_TICKS + 1
		if err := h.dp.Tick(); err != nil {
			t.Fatal(err)
		}
	}
	sendOK(p)
	if e := entry(41000); e != nil {
		t.Errorf("admitted by a note %d ticks old", 3)
	}
	sendOK(p)
	if e := entry(41000); e == nil || e.F.Packets != 2 {
		t.Errorf("not admitted by its next two packets: %+v", e)
	}

	// A connection to a service: recorded on its first packet.
	svc := lbPkt{src: "10.3.9.9", dst: "203.0.113.10", sport: 42000, dport: 9999, udp: true, smac: macWanNeigh, dmac: macWan0}
	if v, _ := h.send(svc, "wan0"); v != bpf.XDPRedirect {
		t.Fatalf("service: verdict %s", verdictName(v))
	}
	if n := countFlows(t, h.dp, connsOf(4)); n != 1 {
		t.Errorf("service: %d connections recorded after its first packet, want 1", n)
	}
}

// tableReasons are the reasons the flow table counts its evictions and
// refusals by.
var tableReasons = []int{bpf.ReasonFlowEvictCold, bpf.ReasonFlowEvictIdle, bpf.ReasonFlowFull, bpf.ReasonFlowBusy}

// TestDoorkeeperTagsShared: two flows whose flow-table tags agree (the
// keyed hash's high half; found among 2^18 ports by the birthday bound)
// but whose buckets differ land in one doorkeeper set under one tag.
// The second's first packet must not take the first's note: each flow
// ends with exactly its own packets. By the tag alone the second was
// admitted on its first packet with the first's counted in (4 and 2 of
// 3), as TestFlowCountsAcrossEMCEvictions failed in 2.6 of 1,000 runs.
func TestDoorkeeperTagsShared(t *testing.T) {
	h := harnessEdited(t, greConfig, "limits: {flows: 4096, rules: 1024}", "limits: {flows: 65536, rules: 1024}")
	buckets := h.dp.EdgeFtMeta.MaxEntries()
	type flow struct {
		src   string
		sport uint16
	}
	var pair [2]flow
	seen := map[uint32]flow{}
	found := false
	for s := 0; s < 4 && !found; s++ {
		src := fmt.Sprintf("10.1.9.%d", 1+s)
		for p := 1024; p < 65536 && !found; p++ {
			k := foKeyOf(src, "10.7.1.1", uint16(p), 5000)
			hash := bpf.FTHash(h.dp.Secret, &k)
			tag := uint32(hash>>32) | 1
			if o, ok := seen[tag]; ok {
				ko := foKeyOf(o.src, "10.7.1.1", o.sport, 5000)
				if uint32(bpf.FTHash(h.dp.Secret, &ko))&(buckets-1) != uint32(hash)&(buckets-1) {
					pair, found = [2]flow{o, {src, uint16(p)}}, true
				}
			}
			seen[tag] = flow{src, uint16(p)}
		}
	}
	if !found {
		t.Fatal("no two flows of one tag in 2^18 ports")
	}
	t.Logf("flows %v share their tag", pair)
	const rounds = 3
	for range rounds {
		for _, f := range pair {
			fr := greIP{src: f.src, dst: "10.7.1.1", u: udpU(f.sport, 5000)}.frame(t, macHostA, macLan0, 64)
			if v, _ := h.run(fr, "lan0"); v != bpf.XDPRedirect {
				t.Fatalf("%v: verdict %s", f, verdictName(v))
			}
		}
	}
	got, err := h.dp.Flows(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d flows listed, want 2", len(got))
	}
	for _, f := range got {
		if f.Packets != rounds {
			t.Errorf("flow %s:%d: %d packets, want %d", f.Src, f.Sport, f.Packets, rounds)
		}
	}
}
