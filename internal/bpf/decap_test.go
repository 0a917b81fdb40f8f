// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

// decapConfig is greConfig with rules for decapsulated packets: over
// path 1, UDP to port 9999 is dropped (PDR 91) and UDP to port 7000
// redirected to lan0 (PDR 92); GRE inside GRE from path 1 would be
// decapsulated again (PDR 93). Path 2 has no rule of its own: what comes
// out of it goes where the FIB routes it.
var decapConfig = strings.NewReplacer(
	"  - {id: 9, action: decap}\n",
	"  - {id: 9, action: decap}\n  - {id: 20, action: drop}\n  - {id: 21, action: redirect, interface: lan0}\n",
	"limits:", pdr91+`  - {id: 92, precedence: 6, match: {in_path: 1, proto: udp, dport: 7000}, far: 21}
  - {id: 93, precedence: 5, match: {in_path: 1, proto: gre}, far: 9}
limits:`).Replace(greConfig)

const pdr91 = "  - {id: 91, precedence: 5, match: {in_path: 1, proto: udp, dport: 9999}, far: 20}\n"

// decapCase is one GRE frame received on wan0 and what must become of it.
type decapCase struct {
	name    string
	frame   []byte
	verdict uint32
	out     []byte   // the frame sent, for redirect; nil: not checked
	pdrs    []uint32 // PDRs that count it (outer, then inner)
	reason  int      // reason counted, or bpf.ReasonNone
	hits    uint64   // flow-cache hits of its two lookups
}

func runDecap(t *testing.T, h *harness, c decapCase) {
	t.Helper()
	before := snap(t, h)
	v, out := h.run(c.frame, "wan0")
	after := snap(t, h)
	n := uint64(len(c.frame))
	if v != c.verdict {
		t.Errorf("verdict %s, want %s", verdictName(v), verdictName(c.verdict))
	}
	if c.out != nil && string(out) != string(c.out) {
		t.Errorf("output frame %s\n got %x\nwant %x", greDiff(out, c.out), out, c.out)
	}
	want := map[uint32]bool{}
	for _, id := range c.pdrs {
		want[id] = true
	}
	for id, a := range after.PDRs {
		var wp uint64
		if want[id] {
			wp = 1
		}
		if dp, db := a.Packets-before.PDRs[id].Packets, a.Bytes-before.PDRs[id].Bytes; dp != wp || db != wp*n {
			t.Errorf("PDR %d: +%d packets +%d bytes, want +%d +%d", id, dp, db, wp, wp*n)
		}
	}
	wantReason := c.reason
	if wantReason == bpf.ReasonNone {
		wantReason = -1
	}
	checkOne(t, "reason", reasonName, before.Reasons, after.Reasons, wantReason, n)
	checkOne(t, "verdict", func(i int) string { return verdictName(uint32(i)) }, before.Verdicts, after.Verdicts, int(c.verdict), n)
	if hit, miss := after.CacheHit-before.CacheHit, after.CacheMiss-before.CacheMiss; hit+miss != 2 || hit != c.hits {
		t.Errorf("flow cache: +%d hits +%d misses, want 2 lookups, %d hits", hit, miss, c.hits)
	}
	if t.Failed() {
		t.Logf("frames: %s", writePcap(t, t.Name(), c.frame, out))
	}
}

// TestDecapClassified sends GRE packets whose inner packets PDRs decide:
// the decapsulated packet is classified with the path it came by, so one
// inner flow of path 1 is dropped and another redirected, while the same
// inner packets out of path 2 go where the FIB routes them. A second
// packet of each flow admits it to the flow cache, and the third is
// decided from it: the outer and the inner flow each hit.
func TestDecapClassified(t *testing.T) {
	h := newHarness(t, decapConfig)
	greLanNeighbours(t, h)
	key1 := layers.GRE{KeyPresent: true, Key: 1}
	from := func(path int, p greIP) []byte {
		if path == 1 {
			return greFromRemote("10.3.9.9", key1).frame(t, p.bytes(t, 64))
		}
		return greFromRemote("10.3.9.8", layers.GRE{}).frame(t, p.bytes(t, 64))
	}
	drop4 := greIP{src: "10.7.1.1", dst: "10.1.0.2", u: greUDP(40001, 9999)}
	drop6 := greIP{src: "fd07::1", dst: "fd01::2", u: greUDP(40001, 9999)}
	pass4 := greIP{src: "10.7.1.1", dst: "10.1.0.2", u: greUDP(40001, 7000)}
	nested := greIP{src: "10.7.1.1", dst: "10.1.0.2", u: rawU(layers.IPProtocolGRE, []byte{0, 0, 0x08, 0})}

	// The outer flow is one per path, shared by the inner flows: admitted
	// to the flow table on the path's second packet, it hits from the
	// third on; an inner flow from its own third.
	seen := map[int]int{}
	for round := range 3 {
		for _, c := range []struct {
			path int
			decapCase
		}{
			{1, decapCase{name: "path 1 inner udp 9999 dropped", frame: from(1, drop4), verdict: bpf.XDPDrop, pdrs: []uint32{90, 91}}},
			{1, decapCase{name: "path 1 inner ip6 udp 9999 dropped", frame: from(1, drop6), verdict: bpf.XDPDrop, pdrs: []uint32{90, 91}}},
			{1, decapCase{name: "path 1 inner udp 7000 redirected", frame: from(1, pass4), verdict: bpf.XDPRedirect,
				out: pass4.unpadded(t, macLan0, macHostA, 63), pdrs: []uint32{90, 92}}},
			{2, decapCase{name: "path 2 inner udp 9999 routed", frame: from(2, drop4), verdict: bpf.XDPRedirect,
				out: drop4.unpadded(t, macLan0, macHostA, 63), pdrs: []uint32{90}}},
			{2, decapCase{name: "path 2 inner ip6 udp 9999 routed", frame: from(2, drop6), verdict: bpf.XDPRedirect,
				out: drop6.unpadded(t, macLan0, macHostA, 63), pdrs: []uint32{90}}},
			{1, decapCase{name: "path 1 gre inside gre", frame: from(1, nested), verdict: bpf.XDPDrop, pdrs: []uint32{90, 93},
				reason: bpf.ReasonGRENested}},
		} {
			if seen[c.path] >= 2 {
				c.hits++
			}
			if round == 2 {
				c.hits++
			}
			seen[c.path]++
			t.Run(fmt.Sprintf("%s/packet %d", c.name, round+1), func(t *testing.T) { runDecap(t, h, c.decapCase) })
		}
	}

	// A commit that takes the drop rule away reclassifies the inner flow:
	// routed now, both flows missing once (a new generation).
	cfg, err := yamlcfg.Parse([]byte(strings.Replace(decapConfig, pdr91, "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	h.apply(cfg)
	runDecap(t, h, decapCase{name: "after commit", frame: from(1, drop4), verdict: bpf.XDPRedirect,
		out: drop4.unpadded(t, macLan0, macHostA, 63), pdrs: []uint32{90}})
}
