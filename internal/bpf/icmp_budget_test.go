// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// The ICMP errors XDP answers packets too big for a path with: each
// source (an IPv4 address, an IPv6 /64) has a share of them, spent
// before the CPU's budget (bpf/lib/too_big.h).
const (
	icmpSrcBurst = 10   // EDGE_ICMP_SRC_BURST
	icmpSrcRate  = 100  // EDGE_ICMP_SRC_RATE, a second
	icmpBurst    = 50   // EDGE_ICMP_BURST, per CPU
	icmpRate     = 1000 // EDGE_ICMP_RATE, a second and CPU
)

// setLanAddrs writes lan0's addresses (10.1.0.1, fd01::1) as the agent
// does for XDP's ICMP errors.
func setLanAddrs(t *testing.T, h *harness) {
	t.Helper()
	var v6 [16]uint8
	copy(v6[:], net.ParseIP("fd01::1").To16())
	addrs := map[uint32]bpf.IfAddr{h.idx["lan0"]: {V4: binary.NativeEndian.Uint32([]byte{10, 1, 0, 1}), HasV6: 1, V6: v6}}
	if err := h.dp.SetIfAddrs(addrs); err != nil {
		t.Fatal(err)
	}
}

// icmpHarness is greConfig's gateway with lan0's addresses written for
// XDP's ICMP errors, every run on CPU 0.
func icmpHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, greConfig)
	setLanAddrs(t, h)
	h.pin = 1
	return h
}

// bigFrom is a 1,500-byte packet from src toward path 1 (too big for it
// once encapsulated).
func bigFrom(t *testing.T, src string) []byte {
	t.Helper()
	dst, six := "10.7.3.2", false
	if net.ParseIP(src).To4() == nil {
		dst, six = "fd07::32", true
	}
	return greIP{src: src, dst: dst, u: greBigUDP(1500, six)}.frame(t, macHostA, macLan0, 64)
}

// icmpCounts sends frames on lan0 and returns how many were answered,
// refused for their source's share and refused for the CPU's budget,
// and how long they took.
func icmpCounts(t *testing.T, h *harness, frames [][]byte) (answered, src, cpu uint64, took time.Duration) {
	t.Helper()
	before := snap(t, h)
	start := time.Now()
	for i, f := range frames {
		if v, _ := h.run(f, "lan0"); v != bpf.XDPRedirect && v != bpf.XDPDrop {
			t.Fatalf("packet %d: verdict %s", i, verdictName(v))
		}
	}
	took = time.Since(start)
	after := snap(t, h)
	d := func(r int) uint64 { return after.Reasons[r].Packets - before.Reasons[r].Packets }
	return d(bpf.ReasonMTUICMP), d(bpf.ReasonICMPSrcLimit), d(bpf.ReasonICMPLimit), took
}

// TestICMPRateLimit sends 500 packets too big for a path back to back,
// from one source and then from 500 spoofed ones: the one source gets
// its share answered (a burst of 10 and 100 a second), the rest dropped
// counted icmp_src_limit; the spoofed ones together get at most the
// CPU's budget (a burst of 50 and 1,000 a second), the rest dropped
// counted icmp_limit, so a flood of spoofed big packets cannot make the
// gateway flood their sources with errors.
func TestICMPRateLimit(t *testing.T) {
	h := icmpHarness(t)
	const sent = 500
	one := bigFrom(t, "10.1.0.2")
	var frames [][]byte
	for range sent {
		frames = append(frames, one)
	}
	answered, src, cpu, took := icmpCounts(t, h, frames)
	t.Logf("one source, %d too-big packets in %s: %d answered, %d over its share, %d over the CPU's", sent, took.Round(time.Millisecond), answered, src, cpu)
	if answered+src+cpu != sent || cpu != 0 {
		t.Errorf("%d answered + %d over the share + %d over the CPU's budget, want %d and none over the CPU's", answered, src, cpu, sent)
	}
	if most := uint64(icmpSrcBurst + took.Seconds()*icmpSrcRate + 1); answered < icmpSrcBurst || answered > most {
		t.Errorf("one source: %d answered, want %d (its burst) to %d", answered, icmpSrcBurst, most)
	}

	// Let the CPU's bucket fill again, then spoof.
	time.Sleep(100 * time.Millisecond)
	frames = frames[:0]
	for i := range sent {
		frames = append(frames, bigFrom(t, fmt.Sprintf("10.1.%d.%d", 2+i/200, 10+i%200)))
	}
	answered, src, cpu, took = icmpCounts(t, h, frames)
	t.Logf("%d spoofed sources, a too-big packet each in %s: %d answered, %d over a share, %d over the CPU's", sent, took.Round(time.Millisecond), answered, src, cpu)
	if answered+src+cpu != sent || src != 0 {
		t.Errorf("%d answered + %d over a share + %d over the CPU's budget, want %d and none over a share", answered, src, cpu, sent)
	}
	if most := uint64(icmpBurst + took.Seconds()*icmpRate + 1); answered < icmpBurst || answered > most {
		t.Errorf("spoofed sources: %d answered, want %d (the CPU's burst) to %d", answered, icmpBurst, most)
	}
}

// TestICMPPerSourceShare: a sender floods big packets through a path, as
// one would to silence path MTU discovery for everyone behind the
// gateway (with one budget per CPU, 500 packets back to back spent it
// and every other host's packets too big went unanswered, dropped:
// their connections stalled). Its flood now spends its own share only:
// another host's packet right after is still answered. An IPv6 sender
// rotating through addresses of its /64 is one source.
func TestICMPPerSourceShare(t *testing.T) {
	h := icmpHarness(t)
	for _, c := range []struct {
		name, victim string
		flood        func(i int) string
	}{
		{"ipv4", "10.1.0.2", func(int) string { return "10.1.0.66" }},
		{"ipv6 /64", "fd01::2", func(i int) string { return fmt.Sprintf("fd01:0:0:66::%x", i+1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var frames [][]byte
			for i := range 500 {
				frames = append(frames, bigFrom(t, c.flood(i)))
			}
			answered, src, cpu, took := icmpCounts(t, h, frames)
			t.Logf("flood of 500 in %s: %d answered, %d over its share, %d over the CPU's", took.Round(time.Millisecond), answered, src, cpu)
			if most := uint64(icmpSrcBurst + took.Seconds()*icmpSrcRate + 1); answered > most {
				t.Errorf("the flooding source got %d answers, its share allows %d", answered, most)
			}
			answered, src, cpu, _ = icmpCounts(t, h, [][]byte{bigFrom(t, c.victim)})
			if answered != 1 {
				t.Errorf("another host's packet too big after the flood: %d answered, %d over its share, %d over the CPU's budget; want it answered", answered, src, cpu)
			}
		})
	}
}
