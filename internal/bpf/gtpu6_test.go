// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// The user plane's IPv6 N3 address in the tests (wan0's) and a gNB's
// (wan0's neighbour).
const (
	n3Addr6  = "fd02::1"
	gnbAddr6 = "fd02::2"
)

// gtpuFrame6 is gtpuFrame over IPv6: a GTP-U datagram from the gNB's
// IPv6 address (port sport) to dst on wan0, its UDP checksum computed.
func gtpuFrame6(t *testing.T, dst string, sport uint16, flags, typ uint8, teid uint32, rest []byte) []byte {
	t.Helper()
	g := gtpuMessage(flags, typ, teid, rest)
	return serialize(t, []gopacket.SerializableLayer{
		&layers.Ethernet{SrcMAC: macWanNeigh, DstMAC: macWan0, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: 60, NextHeader: layers.IPProtocolUDP,
			SrcIP: net.ParseIP(gnbAddr6), DstIP: net.ParseIP(dst)},
		&layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 2152}, gopacket.Payload(g)})
}

// TestGTPUOverIPv6: with an IPv6 N3 address beside the IPv4 one, N3
// works over IPv6 as over IPv4. A G-PDU from the gNB's IPv6 address is
// decapsulated and forwarded; an Echo Request is answered and a G-PDU
// for no session gets an Error Indication naming the IPv6 address,
// both with the UDP checksum IPv6 requires; downlink toward a FAR's
// IPv6 peer leaves in GTP-U/UDP/IPv6 with its TEID and QFI, the
// checksum good at every length (tshark checks each). A datagram whose
// UDP header is behind an extension header, or without a UDP checksum,
// is malformed; one to
// another IPv6 address, or sent when N3 has no IPv6 address, is the
// rules'.
func TestGTPUOverIPv6(t *testing.T) {
	h, ss, slot := sessionHarness(t)
	if err := h.dp.SetGTPU(netip.MustParseAddr(n3Addr), netip.MustParseAddr(n3Addr6)); err != nil {
		t.Fatal(err)
	}
	pdrs := sessionPDRs()
	pdrs[1].OhcAddr, pdrs[1].Ohc6 = 0, 1
	rec := sessRec(pdrs...)
	rec.Peer6[0] = netip.MustParseAddr(gnbAddr6).As16()
	if err := ss.Put(slot, rec, sessKeys); err != nil {
		t.Fatal(err)
	}
	run := runner(t, h)
	var checked [][]byte

	// Uplink: decapsulated, the inner packet routed one hop to N6.
	inner := uePacket(t, ueAddr, n6Remote, 64)
	out := run("uplink over IPv6", gtpuFrame6(t, n3Addr6, 2152, 0x34, 255, ulTEID, append(pduSession(9), inner...)),
		"wan0", bpf.XDPRedirect, bpf.ReasonNone)
	if len(out) != 14+len(inner) || out[12] != 0x08 || out[13] != 0x00 || out[14+8] != 63 ||
		!bytes.Equal(out[14+20:], inner[20:]) || !bytes.Equal(out[0:6], topo.MACWan1Neigh) {
		t.Errorf("uplink over IPv6 out: % x", out)
	}

	// Echo: answered over IPv6.
	req := gtpuFrame6(t, n3Addr6, 40000, 0x32, 1, 0, seqRest(0x4321))
	out = run("echo over IPv6", req, "wan0", bpf.XDPRedirect, bpf.ReasonGTPUEcho)
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	g, _ := p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
	if ip == nil || udp == nil || g == nil || ip.SrcIP.String() != n3Addr6 || ip.DstIP.String() != gnbAddr6 ||
		ip.HopLimit != 64 || udp.SrcPort != 2152 || udp.DstPort != 40000 || udp.Checksum == 0 ||
		g.MessageType != 2 || g.SequenceNumber != 0x4321 || len(out) != 14+40+8+14 ||
		!bytes.Equal(out[0:6], macWanNeigh) {
		t.Errorf("echo response over IPv6: %v", p)
	}
	checked = append(checked, out)

	// A G-PDU for no session: the Error Indication's peer address IE
	// is the IPv6 N3 address, 16 octets.
	out = run("G-PDU for no session over IPv6", gtpuFrame6(t, n3Addr6, 2152, 0x30, 255, 0x777, inner),
		"wan0", bpf.XDPRedirect, bpf.ReasonGTPUErrorInd)
	p = gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	g, _ = p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
	want := append([]byte{16, 0, 0, 0x07, 0x77, 133, 0, 16}, netip.MustParseAddr(n3Addr6).AsSlice()...)
	if g == nil || g.MessageType != 26 || !bytes.Equal(g.LayerPayload(), want) || len(out) != 14+40+8+36 {
		t.Errorf("error indication over IPv6: %v", p)
	}
	checked = append(checked, out)

	// Downlink: GTP-U/UDP/IPv6 toward the FAR's peer, at lengths that
	// end on every byte of a 4-octet word and cross the 512-octet
	// chunks the checksum is summed in (a short frame's Ethernet
	// padding left behind).
	for _, n := range []int{9, 10, 11, 12, 509, 510, 511, 1024, 1377} {
		// Text, so tshark's heuristic dissectors leave the inner
		// payload alone (four octets of anything read as TAPA).
		payload := append([]byte("hello, UE"), bytes.Repeat([]byte("x"), n-9)...)
		ipl := &layers.IPv4{Version: 4, IHL: 5, TTL: 50, Protocol: layers.IPProtocolUDP,
			SrcIP: net.ParseIP(n6Remote).To4(), DstIP: net.ParseIP(ueAddr).To4()}
		u := &layers.UDP{SrcPort: 7777, DstPort: 5000}
		dl := serialize(t, []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: topo.MACWan1Neigh, DstMAC: topo.MACWan1, EthernetType: layers.EthernetTypeIPv4},
			ipl, u, gopacket.Payload(payload)})
		out = run("downlink over IPv6", dl, "wan1", bpf.XDPRedirect, bpf.ReasonNone)
		p = gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ = p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		udp, _ = p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		g, _ = p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
		if ip == nil || udp == nil || g == nil || ip.SrcIP.String() != n3Addr6 || ip.DstIP.String() != gnbAddr6 ||
			out[12] != 0x86 || out[13] != 0xdd || !bytes.Equal(out[0:6], macWanNeigh) ||
			int(ip.Length) != 8+16+20+8+n || udp.SrcPort != 2152 || udp.DstPort != 2152 || g.TEID != dlTEID ||
			len(out) != 14+40+8+16+20+8+n || !bytes.Equal(out[len(out)-n:], payload) {
			t.Errorf("downlink of %d bytes over IPv6: %v", n, p)
			continue
		}
		checkTsharkGTP(t, out, dlTEID, 9)
		checked = append(checked, out)
	}
	// Every checksum good: IPv6 answers' and encapsulations' UDP, and
	// the inner IPv4 and UDP of the downlink frames.
	checkTshark(t, checked, 2+3*(len(checked)-2))

	// Another IPv6 address: the rules' (PDR 10 drops UDP to 2152). An
	// IPv6 datagram whose UDP header follows a hop-by-hop options
	// header: malformed.
	before := h.snapshot()
	run("echo to another IPv6 address", gtpuFrame6(t, "fd02::77", 2152, 0x32, 1, 0, seqRest(1)), "wan0", bpf.XDPDrop, bpf.ReasonNone)
	if h.snapshot().PDRs[10].Packets-before.PDRs[10].Packets != 1 {
		t.Errorf("echo to another IPv6 address: not decided by the rules")
	}
	hbh := gtpuFrame6(t, n3Addr6, 2152, 0x32, 1, 0, seqRest(1))
	ext := []byte{17, 0, 1, 4, 0, 0, 0, 0} // next UDP; PadN of 4
	hbh = append(append(append([]byte{}, hbh[:14+40]...), ext...), hbh[14+40:]...)
	hbh[14+6] = 0 // hop-by-hop
	binary.BigEndian.PutUint16(hbh[14+4:], binary.BigEndian.Uint16(hbh[14+4:])+8)
	run("echo behind a hop-by-hop header", hbh, "wan0", bpf.XDPDrop, bpf.ReasonBadGTPU)
	// A zero UDP checksum is none, which IPv6 does not allow: a G-PDU
	// of the session without one is malformed, not decapsulated.
	none := gtpuFrame6(t, n3Addr6, 2152, 0x34, 255, ulTEID, append(pduSession(9), inner...))
	if binary.BigEndian.Uint16(none[14+40+6:]) == 0 {
		t.Fatal("the frame builder left the UDP checksum zero")
	}
	none[14+40+6], none[14+40+7] = 0, 0
	run("G-PDU without a UDP checksum over IPv6", none, "wan0", bpf.XDPDrop, bpf.ReasonBadGTPU)

	// Without the IPv6 address, the same echo is the rules'.
	if err := h.dp.SetGTPU(netip.MustParseAddr(n3Addr)); err != nil {
		t.Fatal(err)
	}
	before = h.snapshot()
	run("echo with no IPv6 N3 address", req, "wan0", bpf.XDPDrop, bpf.ReasonNone)
	if h.snapshot().PDRs[10].Packets-before.PDRs[10].Packets != 1 {
		t.Errorf("echo with no IPv6 N3 address: not decided by the rules")
	}
}
