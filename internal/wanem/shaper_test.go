// SPDX-License-Identifier: Apache-2.0

package wanem

import (
	"math"
	"testing"
	"time"
)

func TestShaperLoss(t *testing.T) {
	s := newShaper(1)
	s.imp = Impairment{LossPercent: 1}
	const n = 200000
	lost := 0
	for i := range n {
		if _, v := s.admit(int64(i)*1000, 100); v == dropLoss {
			lost++
		}
	}
	// σ of the count is √(n·p·(1-p)) ≈ 44: allow 5σ.
	if got := float64(lost) / n * 100; math.Abs(got-1) > 0.11 {
		t.Errorf("lost %.3f%%, want 1%%", got)
	}
}

func TestShaperRate(t *testing.T) {
	s := newShaper(1)
	s.imp = Impairment{RateBps: 10e6} // 1250 bytes take 1 ms
	limit := int(s.imp.queueLimit())
	if limit != 64<<10 {
		t.Fatalf("default queue limit at 10 Mbit/s %d, want 64 KiB (50 ms would be 62500)", limit)
	}
	// A burst at t=0: frames serialize one after the other until the
	// queue holds the limit, then tail drop.
	fit := limit / 1250
	for i := range fit + 3 {
		dep, v := s.admit(0, 1250)
		if i < fit {
			if v != pass || dep != int64(i+1)*int64(time.Millisecond) {
				t.Fatalf("frame %d: %v departs %v, want pass at %v", i, v, time.Duration(dep), time.Duration(i+1)*time.Millisecond)
			}
		} else if v != dropQueue {
			t.Fatalf("frame %d beyond the queue limit: %v, want queue drop", i, v)
		}
	}
	// Once the queue drains, frames pass again, right after serializing.
	now := int64(fit) * int64(time.Millisecond)
	if dep, v := s.admit(now, 1250); v != pass || dep != now+int64(time.Millisecond) {
		t.Errorf("after draining: %v at %v", v, time.Duration(dep-now))
	}
	// Delay comes on top of serialization.
	s.imp.Delay = 10 * time.Millisecond
	now += int64(time.Second)
	if dep, _ := s.admit(now, 1250); dep-now != int64(11*time.Millisecond) {
		t.Errorf("rate plus delay: departs after %v, want 11ms", time.Duration(dep-now))
	}
}

func TestShaperQueueLimit(t *testing.T) {
	for _, c := range []struct {
		imp  Impairment
		want uint64
	}{
		{Impairment{RateBps: 1e6}, 64 << 10},
		{Impairment{RateBps: 50e6}, 312500},
		{Impairment{RateBps: 1e9}, 6250000},
		{Impairment{RateBps: 1e9, QueueLimit: 3000}, 3000},
	} {
		if got := c.imp.queueLimit(); got != c.want {
			t.Errorf("%v: queue limit %d, want %d", c.imp, got, c.want)
		}
	}
}

func TestShaperJitter(t *testing.T) {
	s := newShaper(7)
	s.imp = Impairment{Delay: 20 * time.Millisecond, Jitter: 5 * time.Millisecond}
	var sum, lo, hi float64 = 0, math.Inf(1), math.Inf(-1)
	const n = 10000
	for i := range n {
		// Arrivals 100 ms apart: order never constrains the departure.
		now := int64(i) * int64(100*time.Millisecond)
		dep, v := s.admit(now, 100)
		if v != pass {
			t.Fatal(v)
		}
		d := float64(dep-now) / 1e6
		sum += d
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 15 || hi > 25 || lo > 15.1 || hi < 24.9 {
		t.Errorf("delays within [%.2f, %.2f] ms, want uniform in [15, 25]", lo, hi)
	}
	if avg := sum / n; math.Abs(avg-20) > 0.1 {
		t.Errorf("mean delay %.2f ms, want 20", avg)
	}
	// Arrivals 1 µs apart: jitter must not reorder.
	var last int64
	for i := range n {
		dep, _ := s.admit(int64(2*time.Hour)+int64(i)*1000, 100)
		if dep < last {
			t.Fatalf("frame %d departs %v before the one ahead of it", i, time.Duration(last-dep))
		}
		last = dep
	}
	// Jitter beyond the delay never sends a frame before it arrived.
	s.imp = Impairment{Delay: time.Millisecond, Jitter: 10 * time.Millisecond}
	for i := range n {
		now := int64(3*time.Hour) + int64(i)*int64(time.Second)
		if dep, _ := s.admit(now, 100); dep < now {
			t.Fatalf("departs %v before arrival", time.Duration(now-dep))
		}
	}
}

func TestFIFO(t *testing.T) {
	var f fifo
	next, want := 0, 0
	for round := range 50 {
		for range round * 7 {
			f.push(pending{n: next})
			next++
		}
		for range round * 5 {
			if p := f.pop(); p.n != want {
				t.Fatalf("popped %d, want %d", p.n, want)
			}
			want++
		}
	}
	for f.len() > 0 {
		if f.peek().n != want || f.pop().n != want {
			t.Fatalf("drain: want %d", want)
		}
		want++
	}
	if want != next {
		t.Errorf("popped %d, pushed %d", want, next)
	}
}

func TestImpairmentValidate(t *testing.T) {
	for _, c := range []struct {
		imp Impairment
		ok  bool
	}{
		{Impairment{}, true},
		{Impairment{Delay: 30 * time.Millisecond, Jitter: time.Millisecond, LossPercent: 100, RateBps: 1}, true},
		{Impairment{Delay: -1}, false},
		{Impairment{Jitter: -1}, false},
		{Impairment{Delay: time.Hour}, false},
		{Impairment{LossPercent: 100.5}, false},
		{Impairment{LossPercent: math.NaN()}, false},
	} {
		if err := c.imp.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", c.imp, err, c.ok)
		}
		if err := c.imp.clamp().Validate(); err != nil {
			t.Errorf("%+v clamped: %v", c.imp, err)
		}
	}
}
