// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// probeSecretHex is greConfig's path 1 probe secret: SipHash's
// reference key, 00 01 ... 0f.
const probeSecretHex = "000102030405060708090a0b0c0d0e0f"

// probeSecret is probeSecretHex as the dataplane holds it.
var probeSecret = bpf.NewProbeSecret([16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})

// probeBody builds a path probe's body (struct edge_probe) apart from
// bpf.ProbeBody: kind, the sender's path index, seq, its origin, send
// time and MAC (SipHash-2-4 of the 24 bytes before it under s, when s
// is not zero).
func probeBody(kind uint8, path uint16, seq uint32, origin string, sent uint64, s bpf.ProbeSecret) []byte {
	b := make([]byte, 32)
	copy(b, "EPR2")
	b[4] = kind
	binary.BigEndian.PutUint16(b[6:], path)
	binary.BigEndian.PutUint32(b[8:], seq)
	copy(b[12:16], net.ParseIP(origin).To4())
	binary.LittleEndian.PutUint64(b[16:], sent)
	if s != (bpf.ProbeSecret{}) {
		binary.LittleEndian.PutUint64(b[24:], bpf.SipHash24(s.K0, s.K1, b[:24]))
	}
	return b
}

// TestSipHash24Vectors: the Go SipHash-2-4 (which tests sign probes
// with, lib/probe.h's twin) gives the reference implementation's 64
// vectors (testdata/siphash24.txt, which the BPF one is held to in
// internal/bench).
func TestSipHash24Vectors(t *testing.T) {
	want := sipVectors(t)
	msg := make([]byte, 64)
	for i := range msg {
		msg[i] = byte(i)
	}
	k0, k1 := probeSecret.K0, probeSecret.K1
	for n, w := range want {
		if got := bpf.SipHash24(k0, k1, msg[:n]); got != w {
			t.Errorf("SipHash-2-4 of %d bytes: %016x, want %016x", n, got, w)
		}
	}
	if len(want) != 64 {
		t.Fatalf("%d vectors, want 64", len(want))
	}
}

// sipVectors reads testdata/siphash24.txt.
func sipVectors(t *testing.T) []uint64 {
	t.Helper()
	b, err := os.ReadFile("testdata/siphash24.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		v, err := strconv.ParseUint(l, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// pathStats returns the stable index of greConfig's path id.
func pathStats(t *testing.T, h *harness, id uint32) uint32 {
	t.Helper()
	paths, err := h.dp.ActivePaths()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if p.Id == id {
			return p.Stats
		}
	}
	t.Fatalf("no path %d", id)
	return 0
}

// TestProbeReflect: a peer's probe over one of our paths goes straight
// back out of the interface it came in by, as the answer signed with the
// path's secret (a path without one, insecure: unsigned), addresses and
// MACs swapped, the header checksum still right; one from an address
// that is no path's remote is not answered (no open reflector), nor is
// one whose MAC the secret does not give (forged by someone without it:
// probe_bad_mac), nor the first format, nor one whose origin is not the
// peer (our own answer sent back to us as a request); malformed ones are
// dropped, counted.
func TestProbeReflect(t *testing.T) {
	h := newHarness(t, greConfig)
	greLanNeighbours(t, h)
	probe := layers.GRE{KeyPresent: true, Key: 1, Protocol: bpf.ProbeProto}
	body := probeBody(bpf.ProbeRequest, 9, 7, "10.3.9.9", 123456789, probeSecret)
	reply := probeBody(bpf.ProbeReply, 9, 7, "10.3.9.9", 123456789, probeSecret)
	back := greOuter{srcMAC: macWan0, dstMAC: macWanNeigh, src: "10.2.0.1", dst: "10.3.9.9", ttl: 61, gre: probe}
	greRun(t, h, greCase{name: "request", in: "wan0", frame: greFromRemote("10.3.9.9", probe).frame(t, body),
		verdict: bpf.XDPRedirect, out: back.frame(t, reply), pdr: 90, reason: bpf.ReasonProbeReflect})

	// An insecure path's (no key, remote 10.3.9.8): answered unsigned.
	noKey := layers.GRE{Protocol: bpf.ProbeProto}
	back2 := greOuter{srcMAC: macWan0, dstMAC: macWanNeigh, src: "10.2.0.1", dst: "10.3.9.8", ttl: 61, gre: noKey}
	greRun(t, h, greCase{name: "request, insecure path 2", in: "wan0",
		frame:   greFromRemote("10.3.9.8", noKey).frame(t, probeBody(bpf.ProbeRequest, 9, 7, "10.3.9.8", 5, bpf.ProbeSecret{})),
		verdict: bpf.XDPRedirect, out: back2.frame(t, probeBody(bpf.ProbeReply, 9, 7, "10.3.9.8", 5, bpf.ProbeSecret{})), pdr: 90,
		reason: bpf.ReasonProbeReflect})

	other := bpf.NewProbeSecret([16]byte{1})
	old := make([]byte, 24) // the first format: "EPRB", no origin, no MAC
	copy(old, "EPRB")
	old[4] = bpf.ProbeRequest
	for _, c := range []greCase{
		{name: "from no path's remote", frame: greFromRemote("10.3.9.1", probe).frame(t, body), reason: bpf.ReasonGRENoPath},
		{name: "unsigned, on a path with a secret", frame: greFromRemote("10.3.9.9", probe).frame(t,
			probeBody(bpf.ProbeRequest, 9, 7, "10.3.9.9", 123456789, bpf.ProbeSecret{})), reason: bpf.ReasonProbeBadMAC},
		{name: "signed with another secret", frame: greFromRemote("10.3.9.9", probe).frame(t,
			probeBody(bpf.ProbeRequest, 9, 7, "10.3.9.9", 123456789, other)), reason: bpf.ReasonProbeBadMAC},
		{name: "a field changed after signing", frame: greFromRemote("10.3.9.9", probe).frame(t,
			append(probeBody(bpf.ProbeRequest, 9, 7, "10.3.9.9", 123456789, probeSecret)[:16], reply[16:]...)), reason: bpf.ReasonProbeBadMAC},
		{name: "origin not the peer", frame: greFromRemote("10.3.9.9", probe).frame(t,
			probeBody(bpf.ProbeRequest, 9, 7, "10.2.0.1", 123456789, probeSecret)), reason: bpf.ReasonBadProbe},
		{name: "the first format", frame: greFromRemote("10.3.9.9", probe).frame(t, old), reason: bpf.ReasonBadProbe},
		{name: "bad magic", frame: greFromRemote("10.3.9.9", probe).frame(t, append([]byte("XPR2"), body[4:]...)), reason: bpf.ReasonBadProbe},
		{name: "unknown kind", frame: greFromRemote("10.3.9.9", probe).frame(t, probeBody(3, 9, 7, "10.3.9.9", 1, probeSecret)), reason: bpf.ReasonBadProbe},
		{name: "short", frame: greFromRemote("10.3.9.9", probe).frame(t, body[:28]), reason: bpf.ReasonBadProbe},
	} {
		c.in, c.verdict, c.pdr = "wan0", bpf.XDPDrop, 90
		greRun(t, h, c)
	}
}

// inFlight makes the record of path idx say that probes from..to (at
// most bpf.ProbeRing) left at sent(seq), as the probe sender would
// have, leaving its answers as they are.
func inFlight(t *testing.T, h *harness, idx, from, to uint32, sent func(uint32) uint64) {
	t.Helper()
	r, err := h.dp.ReadPathProbe(idx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := from; seq != to+1; seq++ {
		r.SentNs[seq%bpf.ProbeRing] = sent(seq)
		r.Sent++
	}
	r.SentSeq = to
	if err := h.dp.EdgePathProbe.Update(idx, r, ebpf.UpdateLock); err != nil {
		t.Fatal(err)
	}
}

// TestProbeReply: an answer to one of our probes is timed against the
// time the record kept for it when it left (never the time it carries)
// and recorded for the path it came back over, under its stable index:
// RFC 6298's estimators, the highest sequence number and which of the
// 64 below it were answered, late and reordered answers included,
// across the 32-bit wrap. What cannot be an answer to a probe of ours in
// flight is dropped, counted, and leaves the record alone: one answered
// already (a replay), one with a sequence number we have not sent (far
// ahead) or too old, one whose send time is not the one kept (forged to
// fake an RTT), one whose MAC the secret does not give (anyone's but the
// peer's), another path's, one whose origin is not this end. A path
// without a secret takes unsigned answers, still only to probes in
// flight with their send times.
func TestProbeReply(t *testing.T) {
	h := newHarness(t, greConfig)
	idx, idx2 := pathStats(t, h, 1), pathStats(t, h, 2)
	g := layers.GRE{KeyPresent: true, Key: 1, Protocol: bpf.ProbeProto}
	sentAt := map[uint32]uint64{}
	answer := func(name string, body []byte, reason int) {
		t.Helper()
		greRun(t, h, greCase{name: name, in: "wan0", frame: greFromRemote("10.3.9.9", g).frame(t, body),
			verdict: bpf.XDPDrop, pdr: 90, reason: reason})
	}
	reply := func(seq uint32, sent uint64) []byte {
		return probeBody(bpf.ProbeReply, uint16(idx), seq, "10.2.0.1", sent, probeSecret)
	}
	send := func(name string, seq uint32, reason int) {
		t.Helper()
		answer(name, reply(seq, sentAt[seq]), reason)
	}
	read := func() bpf.PathProbe {
		t.Helper()
		r, err := h.dp.ReadPathProbe(idx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ms := uint64(time.Millisecond)
	fly := func(from, to uint32, ago uint64) {
		t.Helper()
		now := monoNow()
		inFlight(t, h, idx, from, to, func(seq uint32) uint64 {
			sentAt[seq] = now - ago + uint64(seq)%7 // distinct stamps
			return sentAt[seq]
		})
	}

	fly(0, 9, 3*ms)
	send("seq 5, 3 ms ago", 5, bpf.ReasonProbeReply)
	r := read()
	if r.Replies != 1 || r.HiSeq != 5 || r.Seen != 1 || r.SentAt(5) != 0 {
		t.Fatalf("after one answer: %+v", r)
	}
	if r.LastRttNs < 3*ms || r.LastRttNs > 3*ms+uint64(time.Second) || r.SrttNs != r.LastRttNs || r.MinNs != r.LastRttNs ||
		r.RttvarNs != r.LastRttNs/2 {
		t.Fatalf("first RTT sample: %+v", r)
	}
	first := r.LastRttNs
	fly(10, 12, 20*ms)
	send("seq 7", 7, bpf.ReasonProbeReply)
	r = read()
	if r.HiSeq != 7 || r.Seen != 0b101 || !r.Answered(5) || r.Answered(6) || !r.Answered(7) {
		t.Fatalf("after seq 7: hi %d seen %b", r.HiSeq, r.Seen)
	}
	rtt := r.LastRttNs
	wantSRTT := first - first/8 + rtt/8
	if r.SrttNs != wantSRTT || r.MinNs != min(first, rtt) {
		t.Errorf("srtt %d, want %d (first %d, then %d); min %d", r.SrttNs, wantSRTT, first, rtt, r.MinNs)
	}
	send("seq 6, late", 6, bpf.ReasonProbeReply)
	r = read()
	if r.HiSeq != 7 || r.Seen != 0b111 || r.Replies != 3 {
		t.Fatalf("after a late seq 6: hi %d seen %b replies %d", r.HiSeq, r.Seen, r.Replies)
	}

	before := read()
	other := bpf.NewProbeSecret([16]byte{1})
	for _, c := range []struct {
		name   string
		body   []byte
		reason int
	}{
		{"seq 6 again: a replay", reply(6, sentAt[6]), bpf.ReasonProbeStale},
		{"seq far ahead, sent now", reply(1000012, monoNow()), bpf.ReasonProbeStale},
		{"seq 13, not sent yet", reply(13, monoNow()-ms), bpf.ReasonProbeStale},
		{"seq 8, sent now: a forged time", reply(8, monoNow()), bpf.ReasonProbeStale},
		{"seq 8, its time 1 ns off", reply(8, sentAt[8]+1), bpf.ReasonProbeStale},
		{"seq 8, unsigned", probeBody(bpf.ProbeReply, uint16(idx), 8, "10.2.0.1", sentAt[8], bpf.ProbeSecret{}), bpf.ReasonProbeBadMAC},
		{"seq 8, another secret", probeBody(bpf.ProbeReply, uint16(idx), 8, "10.2.0.1", sentAt[8], other), bpf.ReasonProbeBadMAC},
		{"seq 8, another path's index", probeBody(bpf.ProbeReply, uint16(idx)+1, 8, "10.2.0.1", sentAt[8], probeSecret), bpf.ReasonBadProbe},
		{"seq 8, the peer's own", probeBody(bpf.ProbeReply, uint16(idx), 8, "10.3.9.9", sentAt[8], probeSecret), bpf.ReasonBadProbe},
	} {
		answer(c.name, c.body, c.reason)
	}
	if r = read(); r != before {
		t.Fatalf("refused answers changed the record: %+v, was %+v", r, before)
	}
	send("seq 8, as sent", 8, bpf.ReasonProbeReply)

	// Older than the ring: probes 0-9 are 64 and more behind 73.
	fly(13, 73, ms)
	answer("seq 9, out of the ring", reply(9, sentAt[9]), bpf.ReasonProbeStale)
	send("seq 73", 73, bpf.ReasonProbeReply)
	if r = read(); r.HiSeq != 73 || r.Seen != 1 || r.Answered(8) {
		t.Fatalf("after a jump of 65: hi %d seen %b", r.HiSeq, r.Seen)
	}

	if err := h.dp.ClearPathProbe(idx); err != nil {
		t.Fatal(err)
	}
	fly(0xfffffffe, 1, ms)
	send("seq 2^32-1", 0xffffffff, bpf.ReasonProbeReply)
	send("seq 1, past the wrap", 1, bpf.ReasonProbeReply)
	if r = read(); r.HiSeq != 1 || r.Seen != 0b101 || !r.Answered(0xffffffff) || r.Answered(0) {
		t.Fatalf("across the wrap: hi %d seen %b", r.HiSeq, r.Seen)
	}

	// The insecure path: unsigned answers, to probes in flight only.
	inFlight(t, h, idx2, 0, 3, func(uint32) uint64 { return monoNow() - ms })
	r2, _ := h.dp.ReadPathProbe(idx2)
	g2 := layers.GRE{Protocol: bpf.ProbeProto}
	greRun(t, h, greCase{name: "insecure path, in flight", in: "wan0", verdict: bpf.XDPDrop, pdr: 90, reason: bpf.ReasonProbeReply,
		frame: greFromRemote("10.3.9.8", g2).frame(t, probeBody(bpf.ProbeReply, uint16(idx2), 2, "10.2.0.1", r2.SentNs[2], bpf.ProbeSecret{}))})
	greRun(t, h, greCase{name: "insecure path, a forged time", in: "wan0", verdict: bpf.XDPDrop, pdr: 90, reason: bpf.ReasonProbeStale,
		frame: greFromRemote("10.3.9.8", g2).frame(t, probeBody(bpf.ProbeReply, uint16(idx2), 3, "10.2.0.1", monoNow(), bpf.ProbeSecret{}))})
}

// TestProbeSend: the dataplane sends a probe the agent hands it
// (BPF_PROG_TEST_RUN with live frames) out of its path's interface to
// the path's next hop, stamped as it leaves, the stamp kept in the
// path's record for the answer, signed with the path's secret; its
// answer, signed by the peer, is then timed against that stamp. A probe
// for a path whose next hop is unknown does not leave (no_neigh), and
// the record says so.
func TestProbeSend(t *testing.T) {
	h := newHarness(t, greConfig)
	if err := h.ns.SetGRO("wan0p", true); err != nil {
		t.Fatal(err)
	}
	cap0 := openCapture(t, h.ns, "wan0p")
	paths, err := h.dp.ActivePaths()
	if err != nil {
		t.Fatal(err)
	}
	var p1 bpf.Path
	for _, p := range paths {
		if p.Id == 1 {
			p1 = p
		}
	}
	sendProbe := func(p bpf.Path, seq uint32) {
		t.Helper()
		if err := h.ns.Do(func() error { return h.dp.SendProbe(bpf.ProbeFrame(p, seq)) }); err != nil {
			t.Fatal(err)
		}
	}
	before := monoNow()
	sendProbe(p1, 41)
	got := cap0.gre(t)
	if len(got) != 1 {
		t.Fatalf("%d GRE frames on wan0's peer, want the probe", len(got))
	}
	f := got[0]
	pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	gre, _ := pkt.Layer(layers.LayerTypeGRE).(*layers.GRE)
	if eth == nil || ip == nil || gre == nil {
		t.Fatalf("not Ethernet, IPv4, GRE: %v", pkt)
	}
	if eth.SrcMAC.String() != macWan0.String() || eth.DstMAC.String() != macWanNeigh.String() ||
		ip.SrcIP.String() != "10.2.0.1" || ip.DstIP.String() != "10.3.9.9" || !gre.KeyPresent || gre.Key != 1 ||
		gre.Protocol != bpf.ProbeProto {
		t.Errorf("probe frame: %s > %s, %s > %s, key %v %d, protocol %#x", eth.SrcMAC, eth.DstMAC, ip.SrcIP, ip.DstIP,
			gre.KeyPresent, gre.Key, uint16(gre.Protocol))
	}
	body := gre.Payload
	if len(body) != bpf.ProbeLen {
		t.Fatalf("probe body %d bytes, want %d", len(body), bpf.ProbeLen)
	}
	sent := binary.LittleEndian.Uint64(body[16:])
	if sent < before || sent > monoNow() {
		t.Errorf("stamped %d, sent between %d and now", sent, before)
	}
	if want := probeBody(bpf.ProbeRequest, uint16(p1.Stats), 41, "10.2.0.1", sent, probeSecret); !bytes.Equal(body, want) {
		t.Errorf("probe body\n%x, want\n%x", body, want)
	}
	r, err := h.dp.ReadPathProbe(p1.Stats)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 1 || r.SentSeq != 41 || r.SentAt(41) != sent {
		t.Errorf("record after the send: sent %d, last %d, its time %d (want 1, 41, %d)", r.Sent, r.SentSeq, r.SentAt(41), sent)
	}
	// The peer's answer, as its XDP would sign it: timed from the stamp.
	g := layers.GRE{KeyPresent: true, Key: 1, Protocol: bpf.ProbeProto}
	greRun(t, h, greCase{name: "the answer", in: "wan0", verdict: bpf.XDPDrop, pdr: 90, reason: bpf.ReasonProbeReply,
		frame: greFromRemote("10.3.9.9", g).frame(t, probeBody(bpf.ProbeReply, uint16(p1.Stats), 41, "10.2.0.1", sent, probeSecret))})
	if r, _ = h.dp.ReadPathProbe(p1.Stats); r.Replies != 1 || r.LastRttNs == 0 || r.LastRttNs > monoNow()-sent {
		t.Errorf("answer not timed from the stamp: %+v", r)
	}

	// Path 4 leaves by wan1, toward 10.5.9.9: no neighbour known there.
	var p4 bpf.Path
	for _, p := range paths {
		if p.Id == 4 {
			p4 = p
		}
	}
	b := snap(t, h)
	sendProbe(p4, 3)
	if r, _ := h.dp.ReadPathProbe(p4.Stats); r.Sent != 0 {
		t.Errorf("a probe with no next hop was recorded as sent: %+v", r)
	}
	if a := snap(t, h); a.Reasons[bpf.ReasonNoNeigh].Packets-b.Reasons[bpf.ReasonNoNeigh].Packets != 1 &&
		a.Reasons[bpf.ReasonFIBFail].Packets-b.Reasons[bpf.ReasonFIBFail].Packets != 1 {
		t.Errorf("a probe that could not leave was not counted (no_neigh or fib_fail)")
	}
}
