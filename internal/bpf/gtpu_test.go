// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// gtpuConfig passes what no rule takes and drops UDP to 10.2.0.1 on
// 2152 (had a rule been asked, a GTP-U datagram to the user plane
// would be dropped by it, not answered).
const gtpuConfig = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: drop}
pdrs:
  - {id: 10, precedence: 10, match: {proto: udp, dport: 2152}, far: 1}
defaults: {no_match: pass}
limits: {flows: 4096, rules: 64}
`

// n3Addr is the user plane's GTP-U address in the tests, gnbAddr a gNB.
const (
	n3Addr  = "10.2.0.1"
	gnbAddr = "10.2.0.9"
)

// gtpuFrame is a GTP-U datagram from the gNB (source port sport) to dst
// on wan0: header flags, message type, TEID and what follows the
// mandatory header (its length the GTP-U length); ipOpts adds 4 bytes
// of IPv4 options.
func gtpuFrame(t *testing.T, dst string, sport uint16, flags, typ uint8, teid uint32, rest []byte, ipOpts bool) []byte {
	t.Helper()
	g := gtpuMessage(flags, typ, teid, rest)
	eth := &layers.Ethernet{SrcMAC: macWanNeigh, DstMAC: macWan0, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 60, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP(gnbAddr).To4(), DstIP: net.ParseIP(dst).To4()}
	if ipOpts {
		ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 2152}
	_ = udp.SetNetworkLayerForChecksum(ip)
	return serialize(t, []gopacket.SerializableLayer{eth, ip, udp, gopacket.Payload(g)})
}

// gtpuMessage is a GTP-U message: header flags, message type, TEID and
// what follows the mandatory header (its length the GTP-U length).
func gtpuMessage(flags, typ uint8, teid uint32, rest []byte) []byte {
	g := make([]byte, 8, 8+len(rest))
	g[0], g[1] = flags, typ
	binary.BigEndian.PutUint16(g[2:], uint16(len(rest)))
	binary.BigEndian.PutUint32(g[4:], teid)
	return append(g, rest...)
}

// seqRest is the optional octets of a header with S set: sequence
// number seq, N-PDU number 0, no next extension.
func seqRest(seq uint16) []byte { return []byte{byte(seq >> 8), byte(seq), 0, 0} }

// TestGTPUEcho: with a GTP-U address set, an Echo Request to it is
// answered at the driver hook (sent back out of wan0): addresses swapped, from port
// 2152 to the gNB's port, the request's sequence number, the Recovery
// IE; tshark decodes every answer as GTP-U with checksums good. G-PDUs
// (no session yet) and signalling are dropped, counted; a header not
// version 1 or longer than its datagram is malformed; the same datagram
// to another address, or with no GTP-U address set, goes to the rules.
func TestGTPUEcho(t *testing.T) {
	h := newHarness(t, gtpuConfig)
	if err := h.dp.SetGTPU(netip.MustParseAddr(n3Addr)); err != nil {
		t.Fatal(err)
	}
	inner := serialize(t, []gopacket.SerializableLayer{
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: net.ParseIP("10.45.0.2").To4(), DstIP: net.ParseIP("8.8.8.8").To4()},
		&layers.UDP{SrcPort: 5000, DstPort: 53}, gopacket.Payload("q")})
	var answers [][]byte
	for _, c := range []struct {
		name    string
		frame   []byte
		verdict uint32
		reason  int
		seq     uint16 // the answer's, for an answer
	}{
		{"echo with a sequence number", gtpuFrame(t, n3Addr, 40000, 0x32, 1, 0, seqRest(0x1234), false), bpf.XDPRedirect, bpf.ReasonGTPUEcho, 0x1234},
		{"echo without", gtpuFrame(t, n3Addr, 2152, 0x30, 1, 0, nil, false), bpf.XDPRedirect, bpf.ReasonGTPUEcho, 0},
		{"echo with a private extension", gtpuFrame(t, n3Addr, 2152, 0x32, 1, 0,
			append(seqRest(7), 0xff, 0, 4, 0, 1, 2, 3), false), bpf.XDPRedirect, bpf.ReasonGTPUEcho, 7},
		{"G-PDU for no session", gtpuFrame(t, n3Addr, 2152, 0x30, 255, 0x100, inner, false), bpf.XDPRedirect, bpf.ReasonGTPUErrorInd, 0},
		{"error indication", gtpuFrame(t, n3Addr, 2152, 0x32, 26, 0, seqRest(1), false), bpf.XDPDrop, bpf.ReasonGTPUSignal, 0},
		{"end marker", gtpuFrame(t, n3Addr, 2152, 0x30, 254, 0x100, nil, false), bpf.XDPDrop, bpf.ReasonGTPUEndMarker, 0},
		{"version 2", gtpuFrame(t, n3Addr, 2152, 0x50, 1, 0, nil, false), bpf.XDPDrop, bpf.ReasonBadGTPU, 0},
		{"GTP' (protocol type 0)", gtpuFrame(t, n3Addr, 2152, 0x20, 1, 0, nil, false), bpf.XDPDrop, bpf.ReasonBadGTPU, 0},
		{"length past the datagram", lengthen(gtpuFrame(t, n3Addr, 2152, 0x30, 255, 1, []byte{1, 2}, false), 40),
			bpf.XDPDrop, bpf.ReasonBadGTPU, 0},
		{"S set, no octets for it", gtpuFrame(t, n3Addr, 2152, 0x32, 1, 0, nil, false), bpf.XDPDrop, bpf.ReasonBadGTPU, 0},
		{"IPv4 options", gtpuFrame(t, n3Addr, 2152, 0x32, 1, 0, seqRest(1), true), bpf.XDPDrop, bpf.ReasonBadGTPU, 0},
		{"echo to another address", gtpuFrame(t, "10.2.0.77", 2152, 0x32, 1, 0, seqRest(1), false), bpf.XDPDrop, bpf.ReasonNone, 0},
	} {
		before := h.snapshot()
		v, out := h.run(c.frame, "wan0")
		after := h.snapshot()
		if v != c.verdict {
			t.Errorf("%s: verdict %s, want %s", c.name, verdictName(v), verdictName(c.verdict))
		}
		if c.reason != bpf.ReasonNone && after.Reasons[c.reason].Packets-before.Reasons[c.reason].Packets != 1 {
			t.Errorf("%s: reason %s not counted", c.name, dataplane.ReasonNames[c.reason])
		}
		if c.reason == bpf.ReasonNone && after.PDRs[10].Packets-before.PDRs[10].Packets != 1 {
			t.Errorf("%s: not decided by the rules (PDR 10 did not count it)", c.name)
		}
		if v == bpf.XDPRedirect {
			if c.reason == bpf.ReasonGTPUErrorInd {
				checkErrorInd(t, c.name, c.frame, out, 0x100)
			} else {
				checkEchoResponse(t, c.name, c.frame, out, c.seq)
			}
			answers = append(answers, out)
		}
	}
	checkTshark(t, answers, 2*len(answers))
	// The end marker reached the agent's ring: its kind, its TEID.
	rd, err := ringbuf.NewReader(h.dp.EdgeBuff)
	if err != nil {
		t.Fatal(err)
	}
	rd.SetDeadline(time.Now().Add(time.Second))
	rec, err := rd.Read()
	rd.Close()
	if err != nil {
		t.Fatalf("the end marker did not reach the ring: %v", err)
	}
	if b := rec.RawSample; len(b) < 16+50 || b[11] != 1 || binary.BigEndian.Uint32(b) != 0x100 {
		t.Errorf("end marker record % x, want kind 1, TEID 0x100", b[:min(len(b), 16)])
	}

	// A flood of echoes (or of G-PDUs for no session) from one source
	// gets its share of the error budget, the rest dropped: a forged
	// source cannot turn N3 into a reflector, nor flood the agent with
	// end markers.
	for i, c := range []struct {
		name   string
		frame  []byte
		answer int
	}{
		{"echo", gtpuFrame(t, n3Addr, 2152, 0x32, 1, 0, seqRest(1), false), bpf.ReasonGTPUEcho},
		{"G-PDU for no session", gtpuFrame(t, n3Addr, 2152, 0x30, 255, 0x100, inner, false), bpf.ReasonGTPUErrorInd},
		{"end marker (to the agent)", gtpuFrame(t, n3Addr, 2152, 0x30, 254, 0x100, nil, false), bpf.ReasonGTPUEndMarker},
	} {
		c.frame[14+15] = 77 + byte(i) // a source of its own
		c.frame[14+10], c.frame[14+11] = 0, 0
		binary.BigEndian.PutUint16(c.frame[14+10:], ^inetSum(c.frame[14:14+20]))
		before := h.snapshot()
		tx := 0
		for range 200 {
			if v, _ := h.run(c.frame, "wan0"); v == bpf.XDPRedirect {
				tx++
			}
		}
		after := h.snapshot()
		limited := after.Reasons[bpf.ReasonICMPSrcLimit].Packets - before.Reasons[bpf.ReasonICMPSrcLimit].Packets
		// Answered (sent back), or handed to the agent (an end marker).
		answered := int(after.Reasons[c.answer].Packets - before.Reasons[c.answer].Packets)
		if c.answer == bpf.ReasonGTPUEndMarker && tx != 0 || c.answer != bpf.ReasonGTPUEndMarker && tx != answered {
			t.Errorf("%s flood: %d sent back, %d counted %s", c.name, tx, answered, dataplane.ReasonNames[c.answer])
		}
		if answered < 5 || answered > 40 || limited != uint64(200-answered) {
			t.Errorf("%s flood from one source: %d of 200 answered, %d counted icmp_src_limit; want its burst of 10 and what refills meanwhile", c.name, answered, limited)
		}
	}

	// No GTP-U address: an echo to it is the rules' (PDR 10 drops it).
	if err := h.dp.SetGTPU(netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	before := h.snapshot()
	if v, _ := h.run(gtpuFrame(t, n3Addr, 2152, 0x32, 1, 0, seqRest(1), false), "wan0"); v != bpf.XDPDrop ||
		h.snapshot().PDRs[10].Packets-before.PDRs[10].Packets != 1 {
		t.Errorf("echo with no GTP-U address: verdict %s, not the rules'", verdictName(v))
	}
}

// lengthen raises frame's GTP-U length field by n past what follows.
func lengthen(frame []byte, n uint16) []byte {
	at := 14 + 20 + 8 + 2
	binary.BigEndian.PutUint16(frame[at:], binary.BigEndian.Uint16(frame[at:])+n)
	return frame
}

// checkEchoResponse checks out is the Echo Response to request req with
// sequence number seq.
func checkEchoResponse(t *testing.T, name string, req, out []byte, seq uint16) {
	t.Helper()
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
	g, _ := pk.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
	if eth == nil || ip == nil || udp == nil || g == nil {
		t.Fatalf("%s: answer % x does not decode as Ethernet/IPv4/UDP/GTP-U", name, out)
	}
	rq := gopacket.NewPacket(req, layers.LayerTypeEthernet, gopacket.Default)
	rudp := rq.Layer(layers.LayerTypeUDP).(*layers.UDP)
	gnb := rq.Layer(layers.LayerTypeIPv4).(*layers.IPv4).SrcIP.String()
	if eth.DstMAC.String() != macWanNeigh.String() || eth.SrcMAC.String() != macWan0.String() {
		t.Errorf("%s: MACs %s -> %s, want back to the gNB's", name, eth.SrcMAC, eth.DstMAC)
	}
	if ip.SrcIP.String() != n3Addr || ip.DstIP.String() != gnb || ip.TTL != 64 {
		t.Errorf("%s: %s -> %s ttl %d, want %s -> %s ttl 64", name, ip.SrcIP, ip.DstIP, ip.TTL, n3Addr, gnb)
	}
	if udp.SrcPort != 2152 || udp.DstPort != rudp.SrcPort {
		t.Errorf("%s: ports %d -> %d, want 2152 -> %d", name, udp.SrcPort, udp.DstPort, rudp.SrcPort)
	}
	if g.MessageType != 2 || !g.SequenceNumberFlag || g.SequenceNumber != seq || g.TEID != 0 {
		t.Errorf("%s: GTP-U type %d seq %v/%d teid %d, want an Echo Response with sequence %d", name,
			g.MessageType, g.SequenceNumberFlag, g.SequenceNumber, g.TEID, seq)
	}
	if p := g.LayerPayload(); len(p) != 2 || p[0] != 14 || p[1] != 0 {
		t.Errorf("%s: after the header % x, want the Recovery IE (0e 00)", name, p)
	}
	if len(out) != 14+20+8+14 {
		t.Errorf("%s: answer of %d bytes, want %d", name, len(out), 14+20+8+14)
	}
}

// FuzzGTPUAnswers feeds arbitrary GTP-U payloads (what follows the UDP
// header, the UDP length fitting them or not) to the user plane's
// address, from sources the input picks: the program never aborts,
// answers (sent back) only a version 1 Echo Request or G-PDU whose length
// fits its datagram, and what it sends is always the well-formed Echo
// Response to the one, the Error Indication naming the TEID (no session
// is held) to the other; everything else is dropped. Answers are
// bounded by the error budget, so most of a long run's are dropped.
//
//	go test -run XXX -fuzz FuzzGTPUAnswers -fuzztime 30s ./internal/bpf/
func FuzzGTPUAnswers(f *testing.F) {
	h := newHarness(f, gtpuConfig)
	if err := h.dp.SetGTPU(netip.MustParseAddr(n3Addr)); err != nil {
		f.Fatal(err)
	}
	for _, s := range [][]byte{
		{0x32, 1, 0, 4, 0, 0, 0, 0, 0x12, 0x34, 0, 0},
		{0x30, 1, 0, 0, 0, 0, 0, 0},
		{0x34, 255, 0, 8, 0, 0, 1, 0, 0, 0, 0, 0x85, 1, 0x09, 0, 0},
		{0x32, 26, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0},
	} {
		f.Add(s, uint16(0))
	}
	f.Fuzz(func(t *testing.T, g []byte, udpDelta uint16) {
		if len(g) > 1400 {
			return
		}
		frame := gtpuFrame(t, n3Addr, 40000, 0, 0, 0, nil, false)
		// The source's last octet from the input: sources' shares of
		// the budget differ.
		frame[14+15] = 100 + byte(udpDelta>>8)%100
		frame = append(frame[:14+20+8], g...)
		// The IPv4 and UDP lengths follow the payload (and the UDP length
		// is skewed by udpDelta when it is small enough to stay inside).
		binary.BigEndian.PutUint16(frame[14+2:], uint16(20+8+len(g)))
		ulen := uint16(8 + len(g))
		if udpDelta < ulen-8 {
			ulen -= udpDelta
		}
		binary.BigEndian.PutUint16(frame[14+20+4:], ulen)
		frame[14+10], frame[14+11] = 0, 0
		binary.BigEndian.PutUint16(frame[14+10:], ^inetSum(frame[14:14+20]))
		v, out, err := h.runErr(frame, "wan0", 1)
		if err != nil {
			t.Fatal(err)
		}
		if v == bpf.XDPAborted {
			t.Fatalf("aborted on % x", g)
		}
		if v != bpf.XDPRedirect {
			if v != bpf.XDPDrop {
				t.Fatalf("verdict %s for GTP-U % x", verdictName(v), g)
			}
			return
		}
		glen := -1
		if len(g) >= 8 {
			glen = int(binary.BigEndian.Uint16(g[2:]))
		}
		if len(g) < 8 || g[0]&0xf0 != 0x30 || g[1] != 1 && g[1] != 255 || 8+8+glen > int(ulen) {
			t.Fatalf("answered % x (UDP length %d): not a v1 Echo Request or G-PDU that fits", g, ulen)
		}
		if inetSum(out[14:14+20]) != 0xffff {
			t.Fatalf("answer's IPv4 checksum does not verify: % x", out[14:34])
		}
		if g[1] == 255 {
			checkErrorInd(t, "fuzzed G-PDU", frame, out, binary.BigEndian.Uint32(g[4:]))
			return
		}
		var seq uint16
		if g[0]&0x02 != 0 {
			seq = binary.BigEndian.Uint16(g[8:])
		}
		checkEchoResponse(t, "fuzzed echo", frame, out, seq)
	})
}

// checkErrorInd checks out is the Error Indication answering G-PDU req
// to TEID teid: back to the sender's address and MAC, from 2152 to
// 2152, TEID 0 with a sequence number, the TEID Data I IE naming teid
// and the GTP-U Peer Address IE naming the user plane.
func checkErrorInd(t *testing.T, name string, req, out []byte, teid uint32) {
	t.Helper()
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
	g, _ := pk.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
	if ip == nil || udp == nil || g == nil {
		t.Fatalf("%s: answer % x does not decode as IPv4/UDP/GTP-U", name, out)
	}
	if !bytes.Equal(out[0:6], req[6:12]) || ip.SrcIP.String() != n3Addr || !ip.DstIP.Equal(net.IP(req[14+12:14+16])) ||
		udp.SrcPort != 2152 || udp.DstPort != 2152 {
		t.Errorf("%s: answer to %s (%x) ports %d -> %d", name, ip.DstIP, out[0:6], udp.SrcPort, udp.DstPort)
	}
	want := []byte{16, byte(teid >> 24), byte(teid >> 16), byte(teid >> 8), byte(teid), 133, 0, 4, 10, 2, 0, 1}
	if g.MessageType != 26 || !g.SequenceNumberFlag || g.TEID != 0 || !bytes.Equal(g.LayerPayload(), want) || len(out) != 14+20+8+24 {
		t.Errorf("%s: GTP-U type %d teid %d IEs % x (%d bytes), want an Error Indication with % x", name,
			g.MessageType, g.TEID, g.LayerPayload(), len(out), want)
	}
}
