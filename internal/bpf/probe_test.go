// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// probeBody builds a path probe's body (struct edge_probe) independently
// of bpf.ProbeBody: kind, the sender's path index, seq and send time.
func probeBody(kind uint8, path uint16, seq uint32, sent uint64) []byte {
	b := make([]byte, 24)
	copy(b, "EPRB")
	b[4] = kind
	binary.BigEndian.PutUint16(b[6:], path)
	binary.BigEndian.PutUint32(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], sent)
	return b
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
// back out of the interface it came in by, as the reply, addresses and
// MACs swapped, the header checksum still right; one from an address that
// is no path's remote is not answered (no open reflector); and malformed
// ones are dropped, counted.
func TestProbeReflect(t *testing.T) {
	h := newHarness(t, greConfig)
	greLanNeighbours(t, h)
	probe := layers.GRE{KeyPresent: true, Key: 1, Protocol: bpf.ProbeProto}
	body := probeBody(bpf.ProbeRequest, 9, 7, 123456789)
	reply := probeBody(bpf.ProbeReply, 9, 7, 123456789)
	back := greOuter{srcMAC: macWan0, dstMAC: macWanNeigh, src: "10.2.0.1", dst: "10.3.9.9", ttl: 61, gre: probe}
	greRun(t, h, greCase{name: "request", in: "wan0", frame: greFromRemote("10.3.9.9", probe).frame(t, body),
		verdict: bpf.XDPTx, out: back.frame(t, reply), pdr: 90, reason: bpf.ReasonProbeReflect})

	// Another path's (no key, remote 10.3.9.8): answered the same way.
	noKey := layers.GRE{Protocol: bpf.ProbeProto}
	back2 := greOuter{srcMAC: macWan0, dstMAC: macWanNeigh, src: "10.2.0.1", dst: "10.3.9.8", ttl: 61, gre: noKey}
	greRun(t, h, greCase{name: "request, path 2", in: "wan0", frame: greFromRemote("10.3.9.8", noKey).frame(t, body),
		verdict: bpf.XDPTx, out: back2.frame(t, reply), pdr: 90, reason: bpf.ReasonProbeReflect})

	for _, c := range []greCase{
		{name: "from no path's remote", frame: greFromRemote("10.3.9.1", probe).frame(t, body), reason: bpf.ReasonGRENoPath},
		{name: "bad magic", frame: greFromRemote("10.3.9.9", probe).frame(t, append([]byte("XPRB"), body[4:]...)), reason: bpf.ReasonBadProbe},
		{name: "unknown kind", frame: greFromRemote("10.3.9.9", probe).frame(t, probeBody(3, 9, 7, 1)), reason: bpf.ReasonBadProbe},
		{name: "short", frame: greFromRemote("10.3.9.9", probe).frame(t, body[:20]), reason: bpf.ReasonBadProbe},
	} {
		c.in, c.verdict, c.pdr = "wan0", bpf.XDPDrop, 90
		greRun(t, h, c)
	}
}

// TestProbeReply: the answers to our probes are timed and recorded for
// the path they came back over, under its stable index: RTT from the
// timestamp they carry (RFC 6298's estimators), the highest sequence
// number and which of the 64 below it were answered, late and reordered
// answers included, across the 32-bit wrap. Answers that cannot be ours
// (another path's index, a time in the future or too far back) are
// dropped, counted, and leave the record alone.
func TestProbeReply(t *testing.T) {
	h := newHarness(t, greConfig)
	idx := pathStats(t, h, 1)
	g := layers.GRE{KeyPresent: true, Key: 1, Protocol: bpf.ProbeProto}
	send := func(name string, path uint16, seq uint32, sent uint64, reason int) {
		t.Helper()
		greRun(t, h, greCase{name: name, in: "wan0", frame: greFromRemote("10.3.9.9", g).frame(t, probeBody(bpf.ProbeReply, path, seq, sent)),
			verdict: bpf.XDPDrop, pdr: 90, reason: reason})
	}
	read := func() bpf.PathProbe {
		t.Helper()
		r, err := h.dp.ReadPathProbe(idx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	p := uint16(idx)
	ms := uint64(time.Millisecond)

	t0 := monoNow()
	send("seq 5, 3 ms ago", p, 5, t0-3*ms, bpf.ReasonProbeReply)
	r := read()
	if r.Replies != 1 || r.HiSeq != 5 || r.Seen != 1 {
		t.Fatalf("after one answer: %+v", r)
	}
	if r.LastRttNs < 3*ms || r.LastRttNs > 3*ms+uint64(time.Second) || r.SrttNs != r.LastRttNs || r.MinNs != r.LastRttNs ||
		r.RttvarNs != r.LastRttNs/2 {
		t.Fatalf("first RTT sample: %+v", r)
	}
	first := r.LastRttNs
	send("seq 7, 20 ms ago", p, 7, monoNow()-20*ms, bpf.ReasonProbeReply)
	r = read()
	if r.HiSeq != 7 || r.Seen != 0b101 || !r.Answered(5) || r.Answered(6) || !r.Answered(7) {
		t.Fatalf("after seq 7: hi %d seen %b", r.HiSeq, r.Seen)
	}
	rtt := r.LastRttNs
	wantSRTT := first - first/8 + rtt/8
	if r.SrttNs != wantSRTT || r.MinNs != first {
		t.Errorf("srtt %d, want %d (first %d, then %d); min %d", r.SrttNs, wantSRTT, first, rtt, r.MinNs)
	}
	send("seq 6, late", p, 6, monoNow()-30*ms, bpf.ReasonProbeReply)
	send("seq 6 again", p, 6, monoNow()-30*ms, bpf.ReasonProbeReply)
	r = read()
	if r.HiSeq != 7 || r.Seen != 0b111 || r.Replies != 4 {
		t.Fatalf("after a late seq 6 twice: hi %d seen %b replies %d", r.HiSeq, r.Seen, r.Replies)
	}
	send("seq 7+70: the window moves past the old ones", p, 77, monoNow()-ms, bpf.ReasonProbeReply)
	if r = read(); r.HiSeq != 77 || r.Seen != 1 || r.Answered(7) {
		t.Fatalf("after a jump of 70: hi %d seen %b", r.HiSeq, r.Seen)
	}

	before := read()
	send("another path's index", p+1, 78, monoNow()-ms, bpf.ReasonBadProbe)
	send("sent in the future", p, 78, monoNow()+uint64(time.Hour), bpf.ReasonBadProbe)
	send("sent 11 s ago", p, 78, monoNow()-11*uint64(time.Second), bpf.ReasonBadProbe)
	if r = read(); r != before {
		t.Fatalf("bad answers changed the record: %+v, was %+v", r, before)
	}

	if err := h.dp.ClearPathProbe(idx); err != nil {
		t.Fatal(err)
	}
	send("seq 2^32-1", p, 0xffffffff, monoNow()-ms, bpf.ReasonProbeReply)
	send("seq 1, past the wrap", p, 1, monoNow()-ms, bpf.ReasonProbeReply)
	if r = read(); r.HiSeq != 1 || r.Seen != 0b101 || !r.Answered(0xffffffff) || r.Answered(0) {
		t.Fatalf("across the wrap: hi %d seen %b", r.HiSeq, r.Seen)
	}
}
