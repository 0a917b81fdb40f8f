// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/upgrade"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// smallTable is lbConfig (NAT service 1 at 203.0.113.10:80 over far 11
// and 12) with a flow table of 2,048 entries (256 buckets).
func smallTable(members string) string {
	c := strings.Replace(fmt.Sprintf(lbConfig, far11, members), "limits: {flows: 65536, rules: 64, maglev_table: 4099, connections: 65536}",
		"limits: {flows: 1024, rules: 64, maglev_table: 4099, connections: 1024}", 1)
	if !strings.Contains(c, "flows: 1024,") {
		panic("lbConfig's limits moved: smallTable no longer makes the table small")
	}
	return c
}

// spoofed is flood packet n: a SYN to the NAT service from a source
// address and port no established connection uses.
func spoofed(n int) lbPkt {
	return lbPkt{src: fmt.Sprintf("10.9.%d.%d", n/250%250, 1+n%250), dst: "203.0.113.10", sport: uint16(1024 + n%50000), dport: 80,
		smac: macWanNeigh, dmac: macWan0, flags: "S"}
}

func reason(s *dataplane.Snapshot, r int) uint64 { return s.Reasons[r].Packets }

// TestFlowTableFloodKeepsEstablished floods a 2,048-entry flow table
// with 20,000 one-packet connections from spoofed sources while 300
// established connections (two packets each) live in it: the flood
// evicts only its own kind (flow_evict_cold), no established entry goes,
// and after a commit that drains a backend every established connection
// keeps its backend without being decided again. Once the established
// connections have gone unused for FTIdle ticks, a flood may take their
// places (flow_evict_idle). The keyed hash places connections at
// random, and now and then more than a bucket's eight of 300 in one:
// the connections are taken with room in their bucket, as the test is
// about the flood, not about how full the table gets.
func TestFlowTableFloodKeepsEstablished(t *testing.T) {
	h := newHarness(t, smallTable("{far: 11}, {far: 12}"))
	const est, flood = 300, 20000
	owner := make([]string, est)
	var conns []int // the clients of the established connections
	inBucket := map[uint32]int{}
	for n := 0; len(conns) < est; n++ {
		c := client(n, "203.0.113.10", 80, "S")
		b := h.dp.FTBucket(tcpKeyOf(c.src, c.dst, c.sport, c.dport))
		if inBucket[b] == bpf.FTWays-2 {
			continue
		}
		inBucket[b]++
		h.send(c, "wan0")
		_, out := h.send(client(n, "203.0.113.10", 80, "A"), "wan0")
		owner[len(conns)] = backendOf(t, out)
		conns = append(conns, n)
	}
	established := func(w *bpf.FTWay) bool {
		return w.F.Flags&bpf.FlowConn != 0 && w.K.Src[0] == 10 && w.K.Src[1] == 3
	}
	if n := countFlows(t, h.dp, established); n != est {
		t.Fatalf("%d established connections in the table, want %d", n, est)
	}
	newBefore, _ := lbCounters(t, h.dp)
	before := snap(t, h)
	for n := range flood {
		if v, _ := h.send(spoofed(n), "wan0"); v != bpf.XDPRedirect {
			t.Fatalf("flood packet %d: verdict %s", n, verdictName(v))
		}
	}
	after := snap(t, h)
	newFlood, _ := lbCounters(t, h.dp)
	cold := reason(after, bpf.ReasonFlowEvictCold) - reason(before, bpf.ReasonFlowEvictCold)
	idle := reason(after, bpf.ReasonFlowEvictIdle) - reason(before, bpf.ReasonFlowEvictIdle)
	full := reason(after, bpf.ReasonFlowFull) - reason(before, bpf.ReasonFlowFull)
	t.Logf("flood of %d: %d one-packet flows evicted, %d idle, %d not recorded (bucket all active)", flood, cold, idle, full)
	if n := countFlows(t, h.dp, established); n != est {
		t.Errorf("%d established connections left in the table after the flood, want all %d", n, est)
	}
	if cold == 0 || idle != 0 {
		t.Errorf("flood evicted %d one-packet and %d idle flows, want some and none", cold, idle)
	}
	if n, err := h.dp.CheckFlowPlaces(); err != nil || n < est {
		t.Errorf("flow places: %d entries, %v", n, err)
	}

	// Drain far 11; exact-match copies go stale with the commit, so the
	// table answers: established connections keep their backend.
	drained, err := yamlcfg.Parse([]byte(smallTable("{far: 11, weight: 0}, {far: 12}")))
	if err != nil {
		t.Fatal(err)
	}
	h.apply(drained)
	newMid, _ := lbCounters(t, h.dp)
	for i, n := range conns {
		if _, out := h.send(client(n, "203.0.113.10", 80, "A"), "wan0"); backendOf(t, out) != owner[i] {
			t.Fatalf("connection %d moved from %s to %s after the flood", n, owner[i], backendOf(t, out))
		}
	}
	newAfter, _ := lbCounters(t, h.dp)
	var flooded, again uint64
	for i := range newAfter {
		flooded += newFlood[i] - newBefore[i]
		again += newAfter[i] - newMid[i]
	}
	if flooded != flood || again != 0 {
		t.Errorf("%d new connections counted for the flood (want %d), %d for established ones (want 0)", flooded, flood, again)
	}

	// Unused for FTIdle ticks, established connections become idle: a
	// flood may now take their places.
	for range bpf.FTIdle + 1 {
		if err := h.dp.Tick(); err != nil {
			t.Fatal(err)
		}
	}
	before = snap(t, h)
	for n := flood; n < 2*flood; n++ {
		h.send(spoofed(n), "wan0")
	}
	after = snap(t, h)
	if idle := reason(after, bpf.ReasonFlowEvictIdle) - reason(before, bpf.ReasonFlowEvictIdle); idle == 0 {
		t.Errorf("no idle flow evicted by a flood after %d ticks unused", bpf.FTIdle+1)
	}
}

// TestConnKeptAcrossDSCP: a connection's packets with another DSCP are a
// flow of their own (PDRs may tell them apart), but the same connection:
// after a commit that drains its backend, they keep it, found by the
// connection's 5-tuple in the same bucket, and are not counted new.
func TestConnKeptAcrossDSCP(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}, {far: 12}"))
	var on11 []int
	owner := map[int]string{}
	for n := 0; len(on11) < 5 && n < 200; n++ {
		_, out := h.send(client(n, "203.0.113.10", 80, "S"), "wan0")
		owner[n] = backendOf(t, out)
		if owner[n] == "10.6.0.11:8080" {
			on11 = append(on11, n)
		}
	}
	if len(on11) == 0 {
		t.Fatal("no connection on 10.6.0.11")
	}
	h.apply(lbCfg(t, far11, "{far: 11, weight: 0}, {far: 12}"))
	newBefore, _ := lbCounters(t, h.dp)
	for _, n := range on11 {
		q := client(n, "203.0.113.10", 80, "A")
		q.tos = 46 << 2 // EF
		if _, out := h.send(q, "wan0"); backendOf(t, out) != owner[n] {
			t.Errorf("connection %d with DSCP 46 went to %s, want its backend %s", n, backendOf(t, out), owner[n])
		}
	}
	newAfter, _ := lbCounters(t, h.dp)
	for i := range newAfter {
		if d := newAfter[i] - newBefore[i]; d != 0 {
			t.Errorf("counter %d: %d new connections, want none", i, d)
		}
	}
	// Two entries per connection now, one per DSCP.
	for _, n := range on11 {
		src := net.ParseIP(client(n, "203.0.113.10", 80, "A").src).To4()
		if c := countFlows(t, h.dp, func(w *bpf.FTWay) bool {
			return w.F.Flags&bpf.FlowConn != 0 && [4]byte(w.K.Src[:4]) == [4]byte(src)
		}); c != 2 {
			t.Errorf("connection %d: %d entries, want 2 (DSCP 0 and 46)", n, c)
		}
	}
}

// TestUpgradeFromConnectionTable: the connections of a build before the
// flow table (its LRU connection table, edge_conns: 5-tuple -> backend
// FAR index and id, counter, service, closed) are placed in the flow
// table as an upgrade from it does, and keep their backend: a connection
// recorded on the backend Maglev would not pick now goes there, and is
// not counted new.
func TestUpgradeFromConnectionTable(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}, {far: 12}"))
	q := client(7, "203.0.113.10", 80, "S")
	_, out := h.send(q, "wan0")
	picked := backendOf(t, out)
	other := map[string]uint32{"10.6.0.11:8080": 12, "10.6.0.12:8080": 11}[picked]
	fars, _, err := h.dp.ActiveFARs()
	if err != nil {
		t.Fatal(err)
	}
	var fi uint32
	for i, f := range fars {
		if f.Id == other {
			fi = i
		}
	}
	// Nothing of the connection left in this build's tables.
	if _, err := h.dp.ClearFlows(func(*bpf.FTWay) bool { return true }); err != nil {
		t.Fatal(err)
	}
	h.apply(lbCfg(t, far11, "{far: 11, weight: 1}, {far: 12, weight: 1}"))

	u32 := &btf.Int{Name: "__u32", Size: 4}
	value := &btf.Struct{Name: "edge_conn", Size: 24, Members: []btf.Member{
		{Name: "far", Type: u32, Offset: 0}, {Name: "far_id", Type: u32, Offset: 32}, {Name: "stats", Type: u32, Offset: 64},
		{Name: "svc", Type: u32, Offset: 96}, {Name: "closed", Type: u32, Offset: 128}, {Name: "pad", Type: u32, Offset: 160}}}
	key := &btf.Struct{Name: "edge_conn_key", Size: 40, Members: []btf.Member{
		{Name: "bytes", Type: &btf.Array{Type: &btf.Int{Name: "__u8", Size: 1}, Index: u32, Nelems: 40}}}}
	conns, err := ebpf.NewMap(&ebpf.MapSpec{Name: "edge_conns", Type: ebpf.LRUHash, KeySize: 40, ValueSize: 24, MaxEntries: 64,
		Key: key, Value: value})
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	var k bpf.ConnKey
	copy(k.Src[:], net.ParseIP(q.src).To4())
	copy(k.Dst[:], net.ParseIP(q.dst).To4())
	k.Sport, k.Dport = bits.ReverseBytes16(q.sport), bits.ReverseBytes16(q.dport)
	k.Proto, k.Family = 6, 4
	v := make([]byte, 24)
	binary.LittleEndian.PutUint32(v[0:], fi)
	binary.LittleEndian.PutUint32(v[4:], other)
	binary.LittleEndian.PutUint32(v[12:], 1) // service 1
	if err := conns.Put(k, v); err != nil {
		t.Fatal(err)
	}
	if placed, dropped, err := upgrade.CarryLegacyConns(conns, h.dp.Object); err != nil || placed != 1 || dropped != 0 {
		t.Fatalf("carry: %d placed, %d without room, %v", placed, dropped, err)
	}
	newBefore, _ := lbCounters(t, h.dp)
	q.flags = "A"
	want := map[uint32]string{11: "10.6.0.11:8080", 12: "10.6.0.12:8080"}[other]
	if _, out := h.send(q, "wan0"); backendOf(t, out) != want {
		t.Errorf("carried connection went to %s, want its recorded backend %s (Maglev picks %s)", backendOf(t, out), want, picked)
	}
	newAfter, _ := lbCounters(t, h.dp)
	for i := range newAfter {
		if d := newAfter[i] - newBefore[i]; d != 0 {
			t.Errorf("counter %d: %d new connections, want none", i, d)
		}
	}
}
