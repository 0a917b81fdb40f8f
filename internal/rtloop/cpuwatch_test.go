// SPDX-License-Identifier: Apache-2.0

package rtloop

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestCPUWatchLost: the time CPUs ran nothing within a span is the
// stalls seen and one going on, each instant counted once however many
// CPUs stopped in it, at most maxLost; a nil watch loses nothing.
func TestCPUWatchLost(t *testing.T) {
	ms := int64(time.Millisecond)
	w := &CPUWatch{tick: 2 * ms, beats: make([]atomic.Int64, 2)}
	w.beats[0].Store(1000 * ms)
	w.beats[1].Store(1000 * ms)
	w.note(gap{100 * ms, 120 * ms}) // CPU 0
	w.note(gap{110 * ms, 130 * ms}) // CPU 1, overlapping
	w.note(gap{200 * ms, 205 * ms})
	for _, c := range []struct {
		name        string
		from, to    int64
		beat1, lost int64
	}{
		{"before any stall", 0, 100 * ms, 1000, 0},
		{"two overlapping stalls", 90 * ms, 150 * ms, 1000, 30 * ms},
		{"part of one", 115 * ms, 125 * ms, 1000, 10 * ms},
		{"all three", 0, 300 * ms, 1000, 35 * ms},
		{"one going on: CPU 1 last woke at 290 ms", 280 * ms, 300 * ms, 290, 8 * ms},
		{"on time: CPU 1 woke 3 ms ago", 280 * ms, 300 * ms, 297, 0},
		{"going on for long", 0, 5000 * ms, 100, maxLost},
		{"an empty span", 120 * ms, 110 * ms, 1000, 0},
	} {
		w.beats[1].Store(c.beat1 * ms)
		if got := w.Lost(c.from, c.to); got != c.lost {
			t.Errorf("%s: lost %d ms of [%d, %d) ms, want %d", c.name, got/ms, c.from/ms, c.to/ms, c.lost/ms)
		}
	}
	var none *CPUWatch
	if got := none.Lost(0, 1000*ms); got != 0 {
		t.Errorf("nil watch: lost %d, want 0", got)
	}
}

// TestWatchCPUs: a watch thread wakes on every CPU the process may run
// on.
func TestWatchCPUs(t *testing.T) {
	testutil.RequireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := Monotonic()
	w := WatchCPUs(ctx, slog.New(slog.DiscardHandler), 2*time.Millisecond)
	if w == nil {
		t.Fatal("no watch as root")
	}
	deadline := time.Now().Add(time.Second)
	for i := range w.beats {
		for w.beats[i].Load() <= start+int64(10*time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("CPU %d's watch thread did not wake within 1 s", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
