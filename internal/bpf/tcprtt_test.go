// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// tcpTS is a TCP segment from sport to dport carrying the timestamps
// option (NOP, NOP, TS as Linux sends it) with tsval and tsecr, or no
// option at all when ts is false.
func tcpTS(sport, dport uint16, ts bool, tsval, tsecr uint32) upper {
	return tcpSeg(sport, dport, false, true, ts, tsval, tsecr, len("edgeplane tcp"))
}

// TestTCPRTT: a path's passive RTT from TCP timestamps. A TCP packet
// encapsulated onto path 1 is its sample while none is in flight (a
// retransmission or the next packet does not replace it), one without
// timestamps is none; the sample ends when the same flow comes back
// over the path echoing its TSval, and only then: not for another TSecr,
// another flow's echo or the flow's own direction. Equality makes the
// 32-bit wrap nothing special. A sample is given up when an echo of its
// flow goes past it (it will never be echoed), and when no echo comes
// for two ticks of the agent's clock.
func TestTCPRTT(t *testing.T) {
	h := newHarness(t, greConfig)
	greLanNeighbours(t, h)
	idx := pathStats(t, h, 1)
	read := func() bpf.PathTCPRTT {
		t.Helper()
		r, err := h.dp.ReadPathTCPRTT(idx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	out := func(sport uint16, ts bool, tsval uint32) {
		t.Helper()
		if ret, _ := h.run(serialize(t, v4("10.7.1.1", tcpTS(sport, 80, ts, tsval, 7))()), "lan0"); ret != bpf.XDPRedirect {
			t.Fatalf("TCP out of path 1: verdict %s, want redirect", verdictName(ret))
		}
	}
	back := func(dport uint16, tsecr uint32) {
		t.Helper()
		in := greIP{src: "10.7.1.1", dst: "10.1.0.2", u: tcpTS(80, dport, true, 99, tsecr)}.bytes(t, 64)
		if ret, _ := h.run(greFromRemote("10.3.9.9", layers.GRE{KeyPresent: true, Key: 1}).frame(t, in), "wan0"); ret != bpf.XDPRedirect {
			t.Fatalf("TCP back over path 1: verdict %s, want redirect to the LAN", verdictName(ret))
		}
	}
	want := func(what string, taken bool, tsval uint32, samples uint64) {
		t.Helper()
		r := read()
		if (r.Taken != 0) != taken || (taken && r.Tsval != tsval) || r.Samples != samples {
			t.Fatalf("%s: sample in flight %v (TSval %d), %d samples; want in flight %v (TSval %d), %d samples",
				what, r.Taken != 0, r.Tsval, r.Samples, taken, tsval, samples)
		}
	}

	out(40000, false, 0)
	want("no timestamps", false, 0, 0)
	out(40000, true, 1000)
	want("sampled", true, 1000, 0)
	out(40000, true, 1000) // a retransmission
	out(40000, true, 1001)
	want("the next packets", true, 1000, 0)
	back(40000, 999)
	want("another TSecr", true, 1000, 0)
	back(40001, 1000)
	want("another flow's echo", true, 1000, 0)
	out(40000, true, 1000) // the flow's own direction carries no echo
	want("its own direction", true, 1000, 0)
	back(40000, 1000)
	want("echoed", false, 0, 1)
	r := read()
	if r.LastNs == 0 || r.SrttNs != r.LastNs || r.MinNs != r.LastNs || r.LastNs > 1e9 {
		t.Fatalf("first sample: %+v", r)
	}

	out(40002, true, 0xffffffff)
	want("at the wrap", true, 0xffffffff, 1)
	back(40002, 0xffffffff)
	want("echoed at the wrap", false, 0, 2)

	out(40003, true, 5)
	want("sampled again", true, 5, 2)
	back(40003, 4)
	want("an echo before it", true, 5, 2)
	back(40003, 6)
	want("an echo past it: given up", false, 0, 2)
	out(40003, true, 5)
	want("sampled again", true, 5, 2)
	out(40004, true, 6)
	want("one in flight", true, 5, 2)
	for range 2 {
		if err := h.dp.Tick(); err != nil {
			t.Fatal(err)
		}
	}
	out(40004, true, 6)
	want("after two ticks without an echo", true, 6, 2)
}
