// SPDX-License-Identifier: Apache-2.0

package pathmon

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/config"
)

// TestPathJudge walks a path through every state by its probe outcomes
// and measures: unknown until UpAfter answers in a row, down after
// DownAfter unanswered in a row (and only then: one loss is no outage),
// degraded past a limit and up again only below the limit less the
// hysteresis, UpAfter judgements in a row.
func TestPathJudge(t *testing.T) {
	mon := (&config.PathMonitor{
		MaxRTT:  config.Duration{D: 50 * time.Millisecond},
		MaxLoss: config.Ratio{V: 0.2, Set: true},
		Window:  10,
	}).Effective()
	j := newPathJudge(mon)
	ms := time.Millisecond
	step := func(answered bool, rtt time.Duration, want PathState, wantWhy string) {
		t.Helper()
		j.add(answered)
		got, why := j.judge(rtt, ms)
		if got != want || !strings.Contains(why, wantWhy) || (wantWhy == "" && why != "") {
			t.Fatalf("after %v at %s: %s (%q), want %s (%q)", answered, rtt, got, why, want, wantWhy)
		}
	}
	step(true, 10*ms, PathUnknown, "")
	step(true, 10*ms, PathUnknown, "")
	step(true, 10*ms, PathUp, "3 probes in a row answered")
	for range 7 {
		step(true, 10*ms, PathUp, "")
	}
	step(false, 10*ms, PathUp, "") // one loss, 10% of the window: no outage
	step(false, 10*ms, PathDown, "2 probes in a row unanswered")
	step(true, 10*ms, PathDown, "")
	step(true, 10*ms, PathDown, "")
	step(true, 10*ms, PathUp, "3 probes in a row answered") // 20% lost: at the limit, not past it
	step(true, 60*ms, PathDegraded, "RTT 60ms past 50ms")
	step(true, 48*ms, PathDegraded, "") // below the limit, not below it less 10%
	step(true, 40*ms, PathDegraded, "") // and 20% lost: not below 18%
	step(true, 40*ms, PathDegraded, "")
	step(true, 40*ms, PathDegraded, "")
	step(true, 40*ms, PathDegraded, "") // one loss left in the window: calm 1
	step(true, 40*ms, PathDegraded, "")
	step(true, 40*ms, PathUp, "within the limits less 10% 3 times in a row")
	step(false, 10*ms, PathUp, "")
	step(false, 10*ms, PathDown, "2 probes in a row unanswered")
	step(true, 10*ms, PathDown, "")
	step(true, 10*ms, PathDown, "")
	step(true, 10*ms, PathUp, "3 probes in a row answered")
	step(false, 10*ms, PathDegraded, "loss 30.0% past 20.0%")
	if l := j.loss(); l != 0.3 {
		t.Errorf("loss %v, want 0.3 (3 of the last 10)", l)
	}
}

// TestPathJudgeLossyPath: a path that loses probes at random is not
// taken down by a run its own loss makes likely: at 19 % random loss it
// takes 4 or 5 in a row (0.19^5 < 0.1 %; the loss is estimated from 100
// probes), not the configured 2; a clean one,
// or one with 1 % loss, still goes down after 2, and so does one whose
// window holds an earlier outage (15 probes lost in a row: loss, but not
// random loss).
func TestPathJudgeLossyPath(t *testing.T) {
	ms := time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name string
		lost func(i int) bool // whether probe i of the 200 before the run is lost
		// the run of unanswered probes takes it down at no fewer than
		// from and no more than to in a row
		from, to int
	}{
		{"clean", func(int) bool { return false }, 2, 2},
		{"1 % loss", func(i int) bool { return i%100 == 7 }, 2, 2},
		{"19 % random loss", func(int) bool { return rng.Float64() < 0.19 }, 5, 7},
		{"an outage in the window", func(i int) bool { return i >= 150 && i < 165 }, 2, 2},
	} {
		j := newPathJudge((&config.PathMonitor{}).Effective())
		for i := range 200 {
			j.add(!c.lost(i))
			j.judge(10*ms, ms)
		}
		for range 5 { // the run starts from an answered probe
			j.add(true)
			j.judge(10*ms, ms)
		}
		if st, _ := j.judge(10*ms, ms); st != PathUp {
			t.Fatalf("%s: %s after 200 probes, want up", c.name, st)
		}
		for k := 1; k <= c.to; k++ {
			j.add(false)
			st, why := j.judge(10*ms, ms)
			if st == PathDown {
				if k < c.from {
					t.Errorf("%s: down (%q) after %d unanswered in a row, want %d to %d", c.name, why, k, c.from, c.to)
				}
				break
			}
			if k == c.to {
				t.Errorf("%s: %s after %d unanswered in a row, want down", c.name, st, k)
			}
		}
	}
}

// TestMinWindow: the minimum RTT forgets samples older than two
// windows, so a path whose base delay rose for good gets a new minimum.
func TestMinWindow(t *testing.T) {
	var w minWindow
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	w.add(10*ms, t0)
	w.add(30*ms, t0.Add(5*time.Second))
	if m := w.min(t0.Add(9 * time.Second)); m != 10*ms {
		t.Errorf("in the first window: %s, want 10ms", m)
	}
	w.add(40*ms, t0.Add(12*time.Second)) // second window
	if m := w.min(t0.Add(15 * time.Second)); m != 10*ms {
		t.Errorf("in the second window: %s, want the first's 10ms", m)
	}
	w.add(40*ms, t0.Add(22*time.Second)) // third: the first is gone
	if m := w.min(t0.Add(25 * time.Second)); m != 40*ms {
		t.Errorf("in the third window: %s, want 40ms (the base delay rose)", m)
	}
}

// TestJudgeClock: a look on time judges at its own time; one after a
// pause (the machine's, most often) judges at most two ticks past the
// previous look, and the look after it at its own time again, so a
// pause of 24 ms delays a verdict by one tick and turns no answer that
// came during it into a loss.
func TestJudgeClock(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		name          string
		prev, now, at int64
	}{
		{"first look", 0, 100 * ms, 100 * ms},
		{"on time", 100 * ms, 102 * ms, 102 * ms},
		{"a little late", 100 * ms, 103 * ms, 103 * ms},
		{"two ticks late", 100 * ms, 104 * ms, 104 * ms},
		{"after a 24 ms pause", 100 * ms, 126 * ms, 104 * ms},
		{"the next look", 126 * ms, 128 * ms, 128 * ms},
	} {
		if got := judgeClock(c.prev, c.now); got != c.at {
			t.Errorf("%s: previous look at %d ms, this one at %d ms: judged at %d ms, want %d", c.name, c.prev/ms, c.now/ms, got/ms, c.at/ms)
		}
	}
}
