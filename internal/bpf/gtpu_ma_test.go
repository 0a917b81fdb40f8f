// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// The second access of the multi-access tests: an N3IWF behind wan0's
// neighbour (10.3.0.0/16 is routed via it), with its own downlink TEID.
const (
	n3iwfAddr = "10.3.0.7"
	n3iwfTEID = 0xa000
)

// maSession is the tests' session with its downlink steered by a
// multi-access rule of mode between the gNB (peer place 0) and the
// N3IWF (place 1).
func maSession(mode, weight1 uint8) *bpf.Sess {
	pdrs := sessionPDRs()
	pdrs[1].Ma = 1
	r := sessRec(pdrs...)
	alt := pdrs[1]
	alt.Ma, alt.OhcTeid, alt.OhcAddr = 0, bpf.BE32(n3iwfTEID), bpf.Addr4(netip.MustParseAddr(n3iwfAddr))
	r.Ma[0] = bpf.SessMA{Mode: mode, Weight1: weight1, Peer1: 1, Peer2: 2, Alt: alt}
	return r
}

// accessOf tells which access a downlink frame out went over: 1 the
// gNB's, 2 the N3IWF's, 0 neither (t.Error'd).
func accessOf(t *testing.T, name string, out []byte) int {
	t.Helper()
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	g, _ := p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
	switch {
	case ip == nil || g == nil:
	case ip.DstIP.String() == topo.AddrWanNeigh && g.TEID == dlTEID:
		return 1
	case ip.DstIP.String() == n3iwfAddr && g.TEID == n3iwfTEID:
		return 2
	}
	t.Errorf("%s: not GTP-U toward either access: %v", name, p)
	return 0
}

// TestGTPUMultiAccess: a downlink PDR under a multi-access rule leaves
// toward the access its mode picks, with that access's TEID: the
// active one while its peer answers echoes and the standby while it
// does not (either way round); the access with the smaller echo RTT,
// the preferred one until both have one; under load balancing each
// flow keeps one access and the flows split as the weights say, all to
// one access at 100 or 0, and none to an access that stopped answering.
// The frame over the second access decodes whole.
func TestGTPUMultiAccess(t *testing.T) {
	h, ss, slot := sessionHarness(t)
	for i, a := range []string{topo.AddrWanNeigh, n3iwfAddr} {
		if err := h.dp.SetGTPUPeer(uint32(i), netip.MustParseAddr(a)); err != nil {
			t.Fatal(err)
		}
	}
	peer := func(i uint32, down bool, rtt uint32) {
		t.Helper()
		v := bpf.GTPUPeer{RttUs: rtt}
		if down {
			v.Down = 1
		}
		if err := h.dp.PutGTPUPeer(i, v); err != nil {
			t.Fatal(err)
		}
	}
	put := func(r *bpf.Sess) {
		t.Helper()
		if err := ss.Put(slot, r, sessKeys); err != nil {
			t.Fatal(err)
		}
	}
	run := runner(t, h)
	dl := n6Frame(t, n6Remote, ueAddr)
	via := func(name string) int {
		t.Helper()
		return accessOf(t, name, run(name, dl, "wan1", bpf.XDPRedirect, bpf.ReasonNone))
	}

	for _, c := range []struct {
		name         string
		mode         uint8
		down1, down2 bool
		rtt1, rtt2   uint32
		want         int
	}{
		{"active-standby, both up", bpf.MAActiveStandby, false, false, 0, 0, 1},
		{"active-standby, the active one down", bpf.MAActiveStandby, true, false, 0, 0, 2},
		{"active-standby, both down", bpf.MAActiveStandby, true, true, 0, 0, 1},
		{"active-standby, the second active", bpf.MAActiveStandby | bpf.MAPrefer2, false, false, 0, 0, 2},
		{"active-standby, the second active and down", bpf.MAActiveStandby | bpf.MAPrefer2, false, true, 0, 0, 1},
		{"priority, the high one up", bpf.MAPriority, false, false, 0, 0, 1},
		{"priority, the high one down", bpf.MAPriority, true, false, 0, 0, 2},
		{"smallest delay, no RTT yet", bpf.MASmallestDelay, false, false, 0, 0, 1},
		{"smallest delay, one RTT only", bpf.MASmallestDelay, false, false, 0, 800, 1},
		{"smallest delay, the second faster", bpf.MASmallestDelay, false, false, 5000, 2000, 2},
		{"smallest delay, the first faster", bpf.MASmallestDelay, false, false, 1000, 2000, 1},
		{"smallest delay, the faster down", bpf.MASmallestDelay, false, true, 5000, 2000, 1},
		{"load balancing 100/0", bpf.MALoadBalancing, false, false, 0, 0, 1},
	} {
		w := uint8(0)
		if c.mode&0x0f == bpf.MALoadBalancing {
			w = 100
		}
		put(maSession(c.mode, w))
		peer(0, c.down1, c.rtt1)
		peer(1, c.down2, c.rtt2)
		if got := via(c.name); got != c.want {
			t.Errorf("%s: over access %d, want %d", c.name, got, c.want)
		}
	}

	// The frame over the second access, as tshark reads it.
	put(maSession(bpf.MAActiveStandby|bpf.MAPrefer2, 0))
	peer(0, false, 0)
	peer(1, false, 0)
	out := run("second access", dl, "wan1", bpf.XDPRedirect, bpf.ReasonNone)
	checkTsharkGTP(t, out, n3iwfTEID, 9)
	if c, err := ss.Counters(slot); err != nil || c[1].Packets == 0 {
		t.Errorf("the steered PDR's counter: %+v (%v)", c, err)
	}

	// Load balancing 70/30 over 2,000 flows (source ports); each flow
	// again over the access it took first.
	put(maSession(bpf.MALoadBalancing, 70))
	flow := func(port uint16) []byte {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 50, Protocol: layers.IPProtocolUDP,
			SrcIP: net.ParseIP(n6Remote).To4(), DstIP: net.ParseIP(ueAddr).To4()}
		udp := &layers.UDP{SrcPort: layers.UDPPort(port), DstPort: 5000}
		_ = udp.SetNetworkLayerForChecksum(ip)
		return serialize(t, []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: topo.MACWan1Neigh, DstMAC: topo.MACWan1, EthernetType: layers.EthernetTypeIPv4},
			ip, udp, gopacket.Payload("hello, UE")})
	}
	const flows = 2000
	first := map[uint16]int{}
	n := [3]int{}
	for i := range uint16(flows) {
		_, o := h.run(flow(10000+i), "wan1")
		a := accessOf(t, "load balancing", o)
		first[10000+i] = a
		n[a]++
	}
	share := float64(n[1]) / flows
	t.Logf("load balancing 70/30: access 1 took %d of %d flows (%.1f %%), access 2 %d", n[1], flows, 100*share, n[2])
	if share < 0.65 || share > 0.75 {
		t.Errorf("load balancing 70/30: access 1 took %.1f %% of the flows", 100*share)
	}
	for i := range uint16(50) {
		_, o := h.run(flow(10000+i), "wan1")
		if a := accessOf(t, "again", o); a != first[10000+i] {
			t.Errorf("flow %d: over access %d, then %d", 10000+i, first[10000+i], a)
		}
	}
	// The second access's peer down: every flow over the first.
	peer(1, true, 0)
	for i := range uint16(100) {
		_, o := h.run(flow(10000+i), "wan1")
		if a := accessOf(t, "second down", o); a != 1 {
			t.Fatalf("load balancing, the second access down: flow %d over access %d", 10000+i, a)
		}
	}
	put(maSession(bpf.MALoadBalancing, 0))
	peer(1, false, 0)
	for i := range uint16(100) {
		_, o := h.run(flow(10000+i), "wan1")
		if a := accessOf(t, "0/100", o); a != 2 {
			t.Fatalf("load balancing 0/100: flow %d over access %d", 10000+i, a)
		}
	}
}

// TestGTPUEchoResponseTimed: an Echo Response from a peer the agent
// probes, to the sequence number it asked with last (which names the
// peer's place), is timed in XDP (echo_ns, echo_seq) and dropped,
// counted; a second answer to it, an answer with another sequence
// number, from another address than the peer's, or naming a place no
// peer holds, times nothing (gtpu_signal).
func TestGTPUEchoResponseTimed(t *testing.T) {
	h, _, _ := sessionHarness(t)
	if err := h.dp.SetGTPUPeer(3, netip.MustParseAddr(gnbAddr)); err != nil {
		t.Fatal(err)
	}
	v, err := h.dp.GTPUPeer(3)
	if err != nil {
		t.Fatal(err)
	}
	want := commit.GTPUSeq(3, 7)
	if err := h.dp.AskGTPUPeer(3, v, want); err != nil {
		t.Fatal(err)
	}
	run := runner(t, h)
	resp := func(src string, seq uint16) []byte {
		f := gtpuFrame(t, n3Addr, 2152, 0x32, 2, 0, append(seqRest(seq), 14, 0), false)
		if src != gnbAddr {
			f = gtpuFrameFrom(t, src, f)
		}
		return f
	}
	timed := func() bpf.GTPUPeer {
		t.Helper()
		v, err := h.dp.GTPUPeer(3)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	run("an older request's answer", resp(gnbAddr, commit.GTPUSeq(3, 6)), "wan0", bpf.XDPDrop, bpf.ReasonGTPUSignal)
	run("another place's", resp(gnbAddr, commit.GTPUSeq(4, 7)), "wan0", bpf.XDPDrop, bpf.ReasonGTPUSignal)
	run("from another address", resp("10.2.0.77", want), "wan0", bpf.XDPDrop, bpf.ReasonGTPUSignal)
	if v := timed(); v.EchoNs != 0 {
		t.Errorf("a wrong answer was timed: %+v", v)
	}
	run("the answer", resp(gnbAddr, want), "wan0", bpf.XDPDrop, bpf.ReasonGTPUEchoResp)
	v = timed()
	if v.EchoNs == 0 || v.EchoSeq != uint32(want) {
		t.Fatalf("the answer was not timed: %+v", v)
	}
	run("the answer again", resp(gnbAddr, want), "wan0", bpf.XDPDrop, bpf.ReasonGTPUSignal)
	if w := timed(); w.EchoNs != v.EchoNs {
		t.Errorf("a second answer to one request timed again: %+v", w)
	}
	if err := h.dp.ClearGTPUPeers(); err != nil {
		t.Fatal(err)
	}
	run("a place cleared", resp(gnbAddr, want), "wan0", bpf.XDPDrop, bpf.ReasonGTPUSignal)
	if w := timed(); w.EchoNs != 0 {
		t.Errorf("an answer to a place no peer holds was timed: %+v", w)
	}
}

// gtpuFrameFrom is frame (from gtpuFrame) sent from src instead, its
// checksums made again.
func gtpuFrameFrom(t *testing.T, src string, frame []byte) []byte {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	ip.SrcIP = net.ParseIP(src).To4()
	_ = udp.SetNetworkLayerForChecksum(ip)
	return serialize(t, []gopacket.SerializableLayer{eth, ip, udp, gopacket.Payload(udp.Payload)})
}
