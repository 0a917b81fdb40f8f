// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// steerConfig is greConfig's paths 1 and 2 (wan0) as one steering group:
// a steer FAR (20) over encap FARs 1 and 2, for 10.11.0.0/16; and a
// per-packet one (21, wrr) for 10.12.0.0/16.
const steerConfig = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
paths:
  - {id: 1, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.3.9.9, key: 1, monitor: {insecure: true}}
  - {id: 2, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.3.9.8, monitor: {insecure: true}}
fars:
  - {id: 1, action: encap, path: 1}
  - {id: 2, action: encap, path: 2}
  - {id: 20, action: steer, lbr: 5}
  - {id: 21, action: steer, lbr: 6}
lbrs:
  - {id: 5, algorithm: active-standby, members: [{far: 1}, {far: 2}]}
  - {id: 6, algorithm: wrr, members: [{far: 1}, {far: 2}]}
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0, dst: 10.11.0.0/16}, far: 20}
  - {id: 11, precedence: 10, match: {in: lan0, dst: 10.12.0.0/16}, far: 21}
limits: {flows: 4096, rules: 1024}
`

// steerSend sends flow sport's next packet to dst and returns the path
// (1 or 2) its GRE outer destination names, decoded by gopacket.
func steerSend(t *testing.T, h *harness, dst string, sport uint16) int {
	t.Helper()
	ret, out := h.run(serialize(t, v4(dst, udpU(sport, 5000))()), "lan0")
	if ret != bpf.XDPRedirect {
		t.Fatalf("flow %d to %s: verdict %s, want redirect", sport, dst, verdictName(ret))
	}
	pkt := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil || ip.Protocol != layers.IPProtocolGRE {
		t.Fatalf("flow %d: not GRE: %v", sport, pkt)
	}
	switch {
	case ip.DstIP.Equal(net.IPv4(10, 3, 9, 9)):
		return 1
	case ip.DstIP.Equal(net.IPv4(10, 3, 9, 8)):
		return 2
	}
	t.Fatalf("flow %d: outer destination %s is no path's", sport, ip.DstIP)
	return 0
}

// steerSet gives group idx the table (member per entry) and usable set.
func steerSet(t *testing.T, h *harness, idx, ok uint32, members ...uint8) {
	t.Helper()
	var table [bpf.SteerTable]uint8
	for i := range table {
		table[i] = members[i%len(members)]
	}
	set, err := h.dp.SetSteer(idx, len(h.dp.SteerMembers(idx)), ok, table)
	if err != nil || !set {
		t.Fatalf("set steering group %d: %v (set %v)", idx, err, set)
	}
}

// TestSteerPerFlow: a steering group sends each flow over the member its
// table gives it and keeps it there (sticky: the entry records the
// member) while the member stays usable, whatever the table says since;
// once the member leaves the usable set, the flow's next packet is
// decided again (counted steer_moved) onto a usable one.
func TestSteerPerFlow(t *testing.T) {
	h := newHarness(t, steerConfig)
	h.pin = 1 // exact-match copies are per CPU
	groups := map[uint32]bool{}
	for i := uint32(0); i < bpf.MaxSteer; i++ {
		if m := h.dp.SteerMembers(i); m != nil {
			groups[i] = true
			if len(m) != 2 {
				t.Fatalf("group %d has %d members, want 2", i, len(m))
			}
		}
	}
	if len(groups) != 2 {
		t.Fatalf("%d steering groups, want 2", len(groups))
	}
	const as = 0 // lbr 5 gets the first index
	// A new group starts even over its members: flows go both ways.
	seen := map[int]int{}
	for f := range uint16(64) {
		seen[steerSend(t, h, "10.11.0.1", 1000+f)]++
	}
	if seen[1] == 0 || seen[2] == 0 {
		t.Fatalf("a new group's flows went %v, want both paths", seen)
	}
	// Path 1 only: new flows take it; flows on path 2 stay (usable).
	steerSet(t, h, as, 0b11, 0)
	for f := range uint16(16) {
		if p := steerSend(t, h, "10.11.0.1", 2000+f); p != 1 {
			t.Fatalf("new flow %d went over path %d, want 1", f, p)
		}
	}
	var onTwo []uint16
	for f := range uint16(64) {
		if steerSend(t, h, "10.11.0.1", 1000+f) == 2 {
			onTwo = append(onTwo, 1000+f)
		}
	}
	if len(onTwo) != seen[2] {
		t.Fatalf("%d flows still on path 2 after the table changed, want the %d that were (sticky)", len(onTwo), seen[2])
	}
	// Path 2 unusable: its flows move, each once.
	before := snap(t, h)
	steerSet(t, h, as, 0b01, 0)
	for _, f := range onTwo {
		if p := steerSend(t, h, "10.11.0.1", f); p != 1 {
			t.Fatalf("flow %d stayed on path %d after it left the usable set", f, p)
		}
		if p := steerSend(t, h, "10.11.0.1", f); p != 1 {
			t.Fatalf("flow %d went back to path %d", f, p)
		}
	}
	after := snap(t, h)
	if d := after.Reasons[bpf.ReasonSteerMoved].Packets - before.Reasons[bpf.ReasonSteerMoved].Packets; d != uint64(len(onTwo)) {
		t.Errorf("steer_moved counted %d, want %d (one per moved flow)", d, len(onTwo))
	}
	// Path 1 flows were never disturbed: their PDR counted every packet.
	if d := after.PDRs[10].Packets - before.PDRs[10].Packets; d != uint64(2*len(onTwo)) {
		t.Errorf("PDR 10 counted %d packets, want %d", d, 2*len(onTwo))
	}
}

// TestSteerPerPacket: a wrr group picks a member for every packet, as
// its table shares them: one flow's packets go over both paths.
func TestSteerPerPacket(t *testing.T) {
	h := newHarness(t, steerConfig)
	const wrr = 1
	steerSet(t, h, wrr, 0b11, 0, 1, 1, 1) // 1:3
	n := map[int]int{}
	for range 400 {
		n[steerSend(t, h, "10.12.0.1", 7)]++
	}
	if n[1] < 60 || n[1] > 140 || n[2] < 260 {
		t.Errorf("one flow's 400 packets went %v, want about 100 and 300", n)
	}
}
