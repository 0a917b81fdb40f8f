// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// The session of the tests: UE 10.45.0.2, its uplink TEID, and the gNB
// (wan0's neighbour) with the TEID it gave for the downlink. N6 is
// wan1's side: 10.6.0.0/16 via 10.4.0.2.
const (
	ueAddr   = "10.45.0.2"
	ulTEID   = 0x100
	dlTEID   = 0x9000
	n6Remote = "10.6.0.5"
)

// sessionPDRs are the session's uplink and downlink PDRs: everything
// from the UE by its TEID, decapsulated and forwarded; everything to it
// encapsulated toward the gNB with QFI 9.
func sessionPDRs() []bpf.SessPDR {
	return []bpf.SessPDR{
		{Prec: 100, Flags: bpf.SessUL | bpf.SessUEIP | bpf.SessRemove | bpf.SessAny, Teid: bpf.BE32(ulTEID),
			Ueip: bpf.Addr4(netip.MustParseAddr(ueAddr)), Action: bpf.SessForw, Cnt: 0},
		{Prec: 100, Flags: bpf.SessUEIP | bpf.SessOHC | bpf.SessAny, Ueip: bpf.Addr4(netip.MustParseAddr(ueAddr)),
			Action: bpf.SessForw, Qfi: 9, OhcTeid: bpf.BE32(dlTEID), OhcAddr: bpf.Addr4(netip.MustParseAddr(topo.AddrWanNeigh)), Cnt: 1},
	}
}

func sessRec(pdrs ...bpf.SessPDR) *bpf.Sess {
	r := &bpf.Sess{Npdr: uint32(len(pdrs))}
	copy(r.Pdr[:], pdrs)
	return r
}

var sessKeys = commit.SessionKeys{TEIDs: []uint32{ulTEID}, UEs: []netip.Addr{netip.MustParseAddr(ueAddr)}}

// uePacket is an IPv4 UDP packet from the UE to the N6 host (or, down,
// back).
func uePacket(t *testing.T, src, dst string, ttl uint8) []byte {
	return serialize(t, []gopacket.SerializableLayer{
		&layers.IPv4{Version: 4, IHL: 5, TTL: ttl, Protocol: layers.IPProtocolUDP,
			SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()},
		&layers.UDP{SrcPort: 5000, DstPort: 7777}, gopacket.Payload("hello, N6")})
}

// pduSession is the optional octets and a PDU Session Container (UL
// PDU SESSION INFORMATION, type 1) with qfi, ahead of the inner packet.
func pduSession(qfi uint8) []byte {
	return []byte{0, 0, 0, 0x85, 1, 0x10, qfi, 0}
}

// n6Frame is a frame from the N6 side (wan1's neighbour) to dst.
func n6Frame(t *testing.T, src, dst string) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 50, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	udp := &layers.UDP{SrcPort: 7777, DstPort: 5000}
	_ = udp.SetNetworkLayerForChecksum(ip)
	return serialize(t, []gopacket.SerializableLayer{
		&layers.Ethernet{SrcMAC: topo.MACWan1Neigh, DstMAC: topo.MACWan1, EthernetType: layers.EthernetTypeIPv4},
		ip, udp, gopacket.Payload("hello, UE")})
}

// sessionHarness is a harness whose user plane is at n3Addr, its
// session writer and a slot given out.
func sessionHarness(t *testing.T) (*harness, *commit.Sessions, uint32) {
	t.Helper()
	h := newHarness(t, gtpuConfig)
	if err := h.dp.SetGTPU(netip.MustParseAddr(n3Addr)); err != nil {
		t.Fatal(err)
	}
	ss, err := h.dp.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	slot, err := ss.Slot()
	if err != nil {
		t.Fatal(err)
	}
	return h, ss, slot
}

// runner returns what runs a frame in by interface in through h's
// program and checks its verdict and that reason (unless ReasonNone)
// counted it; it returns the frame out.
func runner(t *testing.T, h *harness) func(name string, frame []byte, in string, verdict uint32, reason int) []byte {
	return func(name string, frame []byte, in string, verdict uint32, reason int) []byte {
		t.Helper()
		before := h.snapshot()
		v, out := h.run(frame, in)
		if v != verdict {
			t.Errorf("%s: verdict %s, want %s", name, verdictName(v), verdictName(verdict))
		}
		if reason != bpf.ReasonNone && h.snapshot().Reasons[reason].Packets-before.Reasons[reason].Packets != 1 {
			t.Errorf("%s: reason %s not counted", name, dataplane.ReasonNames[reason])
		}
		return out
	}
}

// TestGTPUSessions: a session written by commit.Sessions carries the
// UE's traffic at the driver hook. Uplink G-PDUs to its TEID (with a
// PDU Session Container or without) leave decapsulated toward N6, the
// inner packet whole and routed one hop; downlink to the UE leaves in
// GTP-U toward the gNB with its TEID and QFI, which tshark and gopacket
// decode. A QFI-specific PDR of better precedence takes its flow; a
// closed gate, a buffering or dropping FAR drop, each counted; an
// unknown TEID is answered with an Error Indication naming it; a modification is seen whole by the next packet; after
// deletion the UE's packets are the rules' again.
func TestGTPUSessions(t *testing.T) {
	h, ss, slot := sessionHarness(t)
	if err := ss.Put(slot, sessRec(sessionPDRs()...), sessKeys); err != nil {
		t.Fatal(err)
	}
	inner := uePacket(t, ueAddr, n6Remote, 64)
	run := runner(t, h)

	// Uplink, with and without the container.
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"G-PDU with a PDU Session Container", gtpuFrame(t, n3Addr, 2152, 0x34, 255, ulTEID, append(pduSession(9), inner...), false)},
		{"G-PDU, no extension", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID, inner, false)},
		{"G-PDU with a sequence number", gtpuFrame(t, n3Addr, 2152, 0x32, 255, ulTEID, append([]byte{0, 1, 0, 0}, inner...), false)},
	} {
		out := run(c.name, c.frame, "wan0", bpf.XDPRedirect, bpf.ReasonNone)
		checkDecapsulated(t, c.name, out, inner)
	}
	c, err := ss.Counters(slot)
	if err != nil {
		t.Fatal(err)
	}
	if c[0].Packets != 3 || c[0].Bytes != 3*uint64(len(inner)) {
		t.Errorf("uplink PDR counted %d packets, %d bytes; want 3, %d", c[0].Packets, c[0].Bytes, 3*len(inner))
	}
	out := run("unknown TEID", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID+1, inner, false), "wan0", bpf.XDPRedirect, bpf.ReasonGTPUErrorInd)
	checkErrorInd(t, "unknown TEID", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID+1, inner, false), out, ulTEID+1)
	run("another UE's address", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID, uePacket(t, "10.45.0.3", n6Remote, 64), false),
		"wan0", bpf.XDPDrop, bpf.ReasonGTPUNoPDR)
	run("not IP inside", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID, bytes.Repeat([]byte{0x11}, 24), false),
		"wan0", bpf.XDPDrop, bpf.ReasonGTPUInner)
	run("extension chain past the header", gtpuFrame(t, n3Addr, 2152, 0x34, 255, ulTEID, []byte{0, 0, 0, 0x85, 3, 0x10, 9, 0}, false),
		"wan0", bpf.XDPDrop, bpf.ReasonBadGTPU)

	// A session whose TEID names its slot (the UPF chose it): found with
	// no key in the TEID hash.
	slot2, err := ss.Slot()
	if err != nil {
		t.Fatal(err)
	}
	own := 0x5a5a<<16 | slot2
	ownRec := sessRec(bpf.SessPDR{Prec: 1, Flags: bpf.SessUL | bpf.SessRemove | bpf.SessAny, Teid: bpf.BE32(own),
		Action: bpf.SessForw})
	ownRec.Own = bpf.BE32(own)
	if err := ss.Put(slot2, ownRec, commit.SessionKeys{}); err != nil {
		t.Fatal(err)
	}
	out = run("TEID naming its slot", gtpuFrame(t, n3Addr, 2152, 0x30, 255, own, inner, false), "wan0", bpf.XDPRedirect, bpf.ReasonNone)
	checkDecapsulated(t, "TEID naming its slot", out, inner)
	// Another session's slot bits, not its own TEID: looked up, unknown.
	run("a TEID with another's slot bits", gtpuFrame(t, n3Addr, 2152, 0x30, 255, own+0x10000, inner, false), "wan0",
		bpf.XDPRedirect, bpf.ReasonGTPUErrorInd)
	if err := ss.Delete(slot2); err != nil {
		t.Fatal(err)
	}

	// Downlink.
	dl := n6Frame(t, n6Remote, ueAddr)
	out = run("downlink", dl, "wan1", bpf.XDPRedirect, bpf.ReasonNone)
	checkEncapsulated(t, out, dl, dlTEID, 9)

	// A UE whose bit is the first UE's: its session cannot own the
	// direct entry, and is found in the UE hash.
	other := netip.MustParseAddr(ueAddr)
	for b := commit.UEBit(other); ; {
		other = other.Next()
		if commit.UEBit(other) == b {
			break
		}
	}
	slot3, err := ss.Slot()
	if err != nil {
		t.Fatal(err)
	}
	rec3 := sessRec(bpf.SessPDR{Prec: 1, Flags: bpf.SessUEIP | bpf.SessOHC | bpf.SessAny, Ueip: bpf.Addr4(other),
		Action: bpf.SessForw, Qfi: 5, OhcTeid: bpf.BE32(0x7777), OhcAddr: bpf.Addr4(netip.MustParseAddr(topo.AddrWanNeigh))})
	if err := ss.Put(slot3, rec3, commit.SessionKeys{UEs: []netip.Addr{other}}); err != nil {
		t.Fatal(err)
	}
	if rec3.OwnUe != 0 {
		t.Errorf("a UE whose bit another owns got the direct entry (own_ue %#x)", rec3.OwnUe)
	}
	dl3 := n6Frame(t, n6Remote, other.String())
	checkEncapsulated(t, run("downlink to a UE sharing a bit", dl3, "wan1", bpf.XDPRedirect, bpf.ReasonNone), dl3, 0x7777, 5)
	checkEncapsulated(t, run("downlink to the first UE", dl, "wan1", bpf.XDPRedirect, bpf.ReasonNone), dl, dlTEID, 9)
	if err := ss.Delete(slot3); err != nil {
		t.Fatal(err)
	}
	checkTshark(t, [][]byte{out}, 2)
	checkTsharkGTP(t, out, dlTEID, 9)

	// A better PDR for QFI 5 that drops; the QFI 9 flow is untouched.
	drop5 := bpf.SessPDR{Prec: 10, Flags: bpf.SessUL | bpf.SessQFI | bpf.SessAny, Teid: bpf.BE32(ulTEID), Qfi: 5,
		Action: bpf.SessDrop, Cnt: 2}
	if err := ss.Put(slot, sessRec(append([]bpf.SessPDR{drop5}, sessionPDRs()...)...), sessKeys); err != nil {
		t.Fatal(err)
	}
	run("QFI 5", gtpuFrame(t, n3Addr, 2152, 0x34, 255, ulTEID, append(pduSession(5), inner...), false), "wan0", bpf.XDPDrop, bpf.ReasonGTPUFARDrop)
	run("QFI 9", gtpuFrame(t, n3Addr, 2152, 0x34, 255, ulTEID, append(pduSession(9), inner...), false), "wan0", bpf.XDPRedirect, bpf.ReasonNone)

	// The gate closed on the downlink, then its FAR buffering.
	pdrs := sessionPDRs()
	pdrs[1].Gate = 1
	if err := ss.Put(slot, sessRec(pdrs...), sessKeys); err != nil {
		t.Fatal(err)
	}
	run("gate closed", dl, "wan1", bpf.XDPDrop, bpf.ReasonGTPUGate)
	pdrs[1].Gate, pdrs[1].Action = 0, bpf.SessBuff
	if err := ss.Put(slot, sessRec(pdrs...), sessKeys); err != nil {
		t.Fatal(err)
	}
	rd, err := ringbuf.NewReader(h.dp.EdgeBuff)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	run("buffering", dl, "wan1", bpf.XDPDrop, bpf.ReasonGTPUBuffer)
	rd.SetDeadline(time.Now().Add(time.Second))
	rec, err := rd.Read()
	if err != nil {
		t.Fatalf("the buffered packet did not reach the ring: %v", err)
	}
	b := rec.RawSample
	if len(b) < 16 || binary.NativeEndian.Uint32(b) != slot || binary.NativeEndian.Uint32(b[4:]) != h.idx["wan1"] ||
		int(binary.NativeEndian.Uint16(b[8:])) != len(dl) || b[10] != 1 || !bytes.Equal(b[16:16+len(dl)], dl) {
		t.Errorf("buffered record % x, want slot %d, wan1, counter 1 and the frame", b[:min(len(b), 32)], slot)
	}

	// Deleted: the UE's downlink is the rules' (no_match: pass).
	if err := ss.Delete(slot); err != nil {
		t.Fatal(err)
	}
	run("deleted: downlink", dl, "wan1", bpf.XDPPass, bpf.ReasonNoMatch)
	run("deleted: uplink", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID, inner, false), "wan0", bpf.XDPRedirect, bpf.ReasonGTPUErrorInd)
}

// checkDecapsulated checks an uplink packet left as inner, toward N6's
// next hop, its TTL one less.
func checkDecapsulated(t *testing.T, name string, out, inner []byte) {
	t.Helper()
	if len(out) != 14+len(inner) {
		t.Fatalf("%s: %d bytes out, want Ethernet + the inner %d", name, len(out), len(inner))
	}
	if !bytes.Equal(out[0:6], topo.MACWan1Neigh) || !bytes.Equal(out[6:12], topo.MACWan1) || out[12] != 0x08 || out[13] != 0 {
		t.Errorf("%s: Ethernet header % x", name, out[:14])
	}
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil || ip.TTL != 63 || ip.SrcIP.String() != ueAddr || ip.DstIP.String() != n6Remote {
		t.Fatalf("%s: inner packet %v", name, p)
	}
	if !bytes.Equal(out[14+20:], inner[20:]) {
		t.Errorf("%s: the inner packet's payload changed", name)
	}
}

// checkEncapsulated checks a downlink frame left in GTP-U to the gNB:
// TEID, the PDU Session Container with qfi, the inner packet whole
// (TTL one less).
func checkEncapsulated(t *testing.T, out, in []byte, teid uint32, qfi uint8) {
	t.Helper()
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	g, _ := p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
	if eth == nil || ip == nil || udp == nil || g == nil {
		t.Fatalf("downlink out: %v", p)
	}
	if !bytes.Equal(eth.DstMAC, topo.MACWanNeigh) || ip.SrcIP.String() != n3Addr || ip.DstIP.String() != topo.AddrWanNeigh ||
		udp.SrcPort != 2152 || udp.DstPort != 2152 {
		t.Errorf("outer headers: %v", p)
	}
	if g.TEID != teid || g.MessageType != 255 || !g.ExtensionHeaderFlag || len(g.GTPExtensionHeaders) != 1 ||
		g.GTPExtensionHeaders[0].Type != 0x85 || g.GTPExtensionHeaders[0].Content[1]&0x3f != qfi {
		t.Errorf("GTP-U header: %+v", g)
	}
	// The inner packet without the padding of a short frame.
	n := int(in[14+2])<<8 | int(in[14+3])
	if int(g.MessageLength) != n+8 {
		t.Errorf("GTP-U length %d, want %d", g.MessageLength, n+8)
	}
	innerOut := out[14+20+8+16:]
	if len(innerOut) != n || innerOut[8] != in[14+8]-1 || !bytes.Equal(innerOut[20:], in[14+20:14+n]) {
		t.Errorf("inner packet changed:\n% x\nwant\n% x", innerOut, in[14:14+n])
	}
}

// checkTsharkGTP has tshark decode frame as GTP-U with teid and qfi.
func checkTsharkGTP(t *testing.T, frame []byte, teid uint32, qfi uint8) {
	t.Helper()
	testutil.RequireTool(t, "tshark")
	pcap := writePcap(t, filepath.Join(t.TempDir(), "gtpu"), frame)
	b, err := exec.Command("tshark", "-r", pcap, "-T", "fields", "-e", "gtp.teid", "-e", "gtp.ext_hdr.pdu_ses_con.qos_flow_id",
		"-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, b)
	}
	got := strings.Fields(string(b))
	var te, q uint64
	if len(got) == 2 {
		te, _ = strconv.ParseUint(got[0], 0, 32)
		q, _ = strconv.ParseUint(got[1], 0, 8)
	}
	if len(got) != 2 || te != uint64(teid) || q != uint64(qfi) {
		t.Errorf("tshark read TEID, QFI %q; want %#x, %d", got, teid, qfi)
	}
}

// TestGTPUMBR: a QER's maximum bit rate polices the PDRs that share
// its meter, on the inner packet's length: a full bucket lets a burst
// through, then only what the rate refilled meanwhile; the rest is
// dropped and counted (gtpu_mbr). A PDR without a meter is untouched,
// and a meter written again at another rate polices at that one.
func TestGTPUMBR(t *testing.T) {
	h, ss, slot := sessionHarness(t)
	// Uplink metered at 100,000 bytes a second (its bucket: the
	// 3,000-byte floor, 20 ms of it being 2,000); downlink not.
	const rate = 100000
	pdrs := sessionPDRs()
	pdrs[0].Meter = 1
	keys := sessKeys
	keys.Meters = []commit.Meter{{Index: 1, Rate: rate}}
	if err := ss.Put(slot, sessRec(pdrs...), keys); err != nil {
		t.Fatal(err)
	}
	inner := serialize(t, []gopacket.SerializableLayer{
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: net.ParseIP(ueAddr).To4(), DstIP: net.ParseIP(n6Remote).To4()},
		&layers.UDP{SrcPort: 5000, DstPort: 7777}, gopacket.Payload(bytes.Repeat([]byte{7}, 972))})
	frame := gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID, inner, false)
	l := uint64(len(inner)) // 1,000
	burst := func(n int) (passed, dropped int, took time.Duration) {
		before := h.snapshot()
		start := time.Now()
		for range n {
			if v, _ := h.run(frame, "wan0"); v == bpf.XDPRedirect {
				passed++
			}
		}
		took = time.Since(start)
		dropped = int(h.snapshot().Reasons[bpf.ReasonGTPUMBR].Packets - before.Reasons[bpf.ReasonGTPUMBR].Packets)
		return passed, dropped, took
	}
	// allowed is what a bucket of b bytes refilled for d lets through.
	allowed := func(b uint64, d time.Duration) int {
		return int((b + rate*uint64(d)/uint64(time.Second)) / l)
	}
	p, d, took := burst(20)
	if p < 3 || p > allowed(3000, took) || p+d != 20 {
		t.Errorf("a full bucket: %d passed, %d dropped as over the rate in %v; want 3 to %d, the rest dropped", p, d, took, allowed(3000, took))
	}
	time.Sleep(25 * time.Millisecond)
	start := time.Now()
	p, d, took = burst(20)
	if p < 2 || p > allowed(3000, took+time.Since(start)) || p+d != 20 {
		t.Errorf("after 25 ms: %d passed, %d dropped in %v; want 2 to %d", p, d, took, allowed(3000, took))
	}
	// The downlink has no meter.
	dl := n6Frame(t, n6Remote, ueAddr)
	for i := range 20 {
		if v, _ := h.run(dl, "wan1"); v != bpf.XDPRedirect {
			t.Fatalf("downlink packet %d: verdict %s", i, verdictName(v))
		}
	}
	// Ten times the rate, written again (a modification): a bucket of
	// 20 ms of it, 20,000 bytes.
	keys.Meters = []commit.Meter{{Index: 1, Rate: 10 * rate}}
	if err := ss.Put(slot, sessRec(pdrs...), keys); err != nil {
		t.Fatal(err)
	}
	p, _, took = burst(40)
	if p < 20 || p > allowed(20000, 10*took) {
		t.Errorf("at ten times the rate: %d passed in %v; want 20 to %d", p, took, allowed(20000, 10*took))
	}
}

// TestGTPUIPv6UE: a UE with an IPv6 /64 prefix (and an IPv4 address:
// an IPv4v6 session). Its IPv6 uplink is detected by the prefix and
// leaves decapsulated toward N6 routed by the FIB, its hop limit one
// less; a source outside the prefix, or an IPv6 source whose first
// bytes spell the UE's IPv4 address, is no PDR's. IPv6 to the prefix
// from N6 is encapsulated toward the gNB (gopacket decodes it), and an
// SDF filter with an IPv4 remote never detects IPv6.
func TestGTPUIPv6UE(t *testing.T) {
	h, ss, slot := sessionHarness(t)
	prefix := netip.MustParsePrefix("2001:db8:45:1::/64")
	ue6 := netip.MustParseAddr("2001:db8:45:1::7")
	pdrs := sessionPDRs()
	for i := range pdrs {
		pdrs[i].Flags |= bpf.SessUE6
		pdrs[i].Ue6 = commit.UE6Key(prefix.Addr())
	}
	keys := sessKeys
	keys.UEs = append(keys.UEs, prefix.Addr())
	if err := ss.Put(slot, sessRec(pdrs...), keys); err != nil {
		t.Fatal(err)
	}
	v6 := func(src, dst netip.Addr) []byte {
		return serialize(t, []gopacket.SerializableLayer{
			&layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()},
			&layers.UDP{SrcPort: 5000, DstPort: 7777}, gopacket.Payload("hello, v6")})
	}
	n6 := netip.MustParseAddr("fd03::5")
	run := runner(t, h)
	inner := v6(ue6, n6)
	out := run("IPv6 uplink", gtpuFrame(t, n3Addr, 2152, 0x34, 255, ulTEID, append(pduSession(9), inner...), false), "wan0", bpf.XDPRedirect, bpf.ReasonNone)
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if ip == nil || len(out) != 14+len(inner) || out[12] != 0x86 || out[13] != 0xdd || !bytes.Equal(out[0:6], topo.MACWanNeigh) ||
		ip.HopLimit != 63 || !ip.SrcIP.Equal(ue6.AsSlice()) || !ip.DstIP.Equal(n6.AsSlice()) || !bytes.Equal(out[14+40:], inner[40:]) {
		t.Errorf("IPv6 uplink out: %v", p)
	}
	run("IPv6 uplink from outside the prefix", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID,
		v6(netip.MustParseAddr("2001:db8:45:2::7"), n6), false), "wan0", bpf.XDPDrop, bpf.ReasonGTPUNoPDR)

	// Downlink from N6 to the prefix.
	dl := serialize(t, []gopacket.SerializableLayer{
		&layers.Ethernet{SrcMAC: topo.MACWan1Neigh, DstMAC: topo.MACWan1, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: 50, NextHeader: layers.IPProtocolUDP, SrcIP: n6.AsSlice(), DstIP: ue6.AsSlice()},
		&layers.UDP{SrcPort: 7777, DstPort: 5000}, gopacket.Payload("hello, UE over v6")})
	out = run("IPv6 downlink", dl, "wan1", bpf.XDPRedirect, bpf.ReasonNone)
	p = gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	g, _ := p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
	in6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if g == nil || g.TEID != dlTEID || in6 == nil || in6.HopLimit != 49 || !in6.DstIP.Equal(ue6.AsSlice()) ||
		!bytes.Equal(out[len(out)-len("hello, UE over v6"):], []byte("hello, UE over v6")) {
		t.Errorf("IPv6 downlink out: %v", p)
	}
	checkTsharkGTP(t, out, dlTEID, 9)

	// An IPv4-only session: an IPv6 source that begins with the UE's
	// IPv4 address is not the UE.
	if err := ss.Put(slot, sessRec(sessionPDRs()...), sessKeys); err != nil {
		t.Fatal(err)
	}
	spoof := netip.AddrFrom16([16]byte{10, 45, 0, 2, 15: 1})
	run("IPv6 spelling the UE's IPv4", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID, v6(spoof, n6), false),
		"wan0", bpf.XDPDrop, bpf.ReasonGTPUNoPDR)
	// An SDF filter with an IPv4 remote never detects IPv6; "any" does.
	narrow := sessionPDRs()
	narrow[0].Flags = narrow[0].Flags&^(bpf.SessAny|bpf.SessUEIP) | bpf.SessUE6
	narrow[0].Ue6 = commit.UE6Key(prefix.Addr())
	narrow[0].Remote, narrow[0].Rmask = bpf.Addr4(netip.MustParseAddr("10.6.0.0")), bpf.BE32(0xffff0000)
	narrow[0].RportHi, narrow[0].LportHi = 0xffff, 0xffff
	if err := ss.Put(slot, sessRec(narrow...), keys); err != nil {
		t.Fatal(err)
	}
	run("IPv6 against an IPv4 SDF remote", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID, inner, false),
		"wan0", bpf.XDPDrop, bpf.ReasonGTPUNoPDR)
	narrow[0].Remote, narrow[0].Rmask = 0, 0
	if err := ss.Put(slot, sessRec(narrow...), keys); err != nil {
		t.Fatal(err)
	}
	run("IPv6 against an SDF with any remote", gtpuFrame(t, n3Addr, 2152, 0x30, 255, ulTEID, inner, false),
		"wan0", bpf.XDPRedirect, bpf.ReasonNone)
	// Deleted: the prefix leads nowhere.
	if err := ss.Delete(slot); err != nil {
		t.Fatal(err)
	}
	var v uint32
	if err := h.dp.EdgeUe6.Lookup(commit.UE6Key(prefix.Addr()), &v); err == nil {
		t.Errorf("the prefix still leads to slot %d after deletion", v)
	}
}
