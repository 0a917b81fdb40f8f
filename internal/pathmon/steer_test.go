// SPDX-License-Identifier: Apache-2.0

package pathmon

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

func weight(w uint32) *uint32 { return &w }

func group(alg string, weights ...uint32) Group {
	g := Group{Index: 3, LBR: config.LBR{ID: 9, Algorithm: alg}}
	for i, w := range weights {
		g.LBR.Members = append(g.LBR.Members, config.Member{FAR: uint32(10 + i), Weight: weight(w)})
		g.Paths = append(g.Paths, uint32(1+i))
	}
	return g
}

func up(rtt time.Duration) PathStatus {
	return PathStatus{State: PathUp, Monitored: true, SRTT: rtt}
}

// shares counts each member's entries in a table.
func shares(t [bpf.SteerTable]uint8) map[uint8]int {
	out := map[uint8]int{}
	for _, m := range t {
		out[m]++
	}
	return out
}

// TestPlanSteer checks each mode's choice of usable members and shares
// as paths go up, degrade and down, and the fallback tiers.
func TestPlanSteer(t *testing.T) {
	ms := time.Millisecond
	none := steerPlan{chose: -1}
	for _, c := range []struct {
		name   string
		g      Group
		st     map[uint32]PathStatus
		prev   steerPlan
		ok     uint32
		shares map[uint8]int
		why    string
	}{
		{"active-standby: the first", group(config.AlgorithmActiveStandby, 1, 1),
			map[uint32]PathStatus{1: up(10 * ms), 2: up(60 * ms)}, none, 0b01, map[uint8]int{0: 64}, "paths up"},
		{"active-standby: the first down, the second", group(config.AlgorithmActiveStandby, 1, 1),
			map[uint32]PathStatus{1: {State: PathDown, Monitored: true}, 2: up(60 * ms)}, none, 0b10, map[uint8]int{1: 64}, "paths up"},
		{"active-standby: the first degraded, the second", group(config.AlgorithmActiveStandby, 1, 1),
			map[uint32]PathStatus{1: {State: PathDegraded, Monitored: true}, 2: up(60 * ms)}, none, 0b10, map[uint8]int{1: 64}, "paths up"},
		{"active-standby: none up, the first not down", group(config.AlgorithmActiveStandby, 1, 1),
			map[uint32]PathStatus{1: {State: PathDown, Monitored: true}, 2: {State: PathDegraded, Monitored: true}}, none, 0b10, map[uint8]int{1: 64}, "not down"},
		{"active-standby: all down, the first", group(config.AlgorithmActiveStandby, 1, 1),
			map[uint32]PathStatus{1: {State: PathDown, Monitored: true}, 2: {State: PathDown, Monitored: true}}, none, 0b01, map[uint8]int{0: 64}, "every path down"},
		{"smallest-delay: the faster", group(config.AlgorithmSmallestDelay, 1, 1),
			map[uint32]PathStatus{1: up(30 * ms), 2: up(10 * ms)}, none, 0b10, map[uint8]int{1: 64}, "paths up"},
		{"smallest-delay: keeps its choice within 10%", group(config.AlgorithmSmallestDelay, 1, 1),
			map[uint32]PathStatus{1: up(10 * ms), 2: up(9500 * time.Microsecond)}, steerPlan{chose: 0}, 0b01, map[uint8]int{0: 64}, "paths up"},
		{"smallest-delay: moves past 10%", group(config.AlgorithmSmallestDelay, 1, 1),
			map[uint32]PathStatus{1: up(10 * ms), 2: up(8 * ms)}, steerPlan{chose: 0}, 0b10, map[uint8]int{1: 64}, "paths up"},
		{"load-balancing 70/30", group(config.AlgorithmLoadBalancing, 70, 30),
			map[uint32]PathStatus{1: up(10 * ms), 2: up(60 * ms)}, none, 0b11, map[uint8]int{0: 45, 1: 19}, "paths up"},
		{"load-balancing: one down takes it all", group(config.AlgorithmLoadBalancing, 70, 30),
			map[uint32]PathStatus{1: up(10 * ms), 2: {State: PathDown, Monitored: true}}, none, 0b01, map[uint8]int{0: 64}, "paths up"},
		{"wrr 1:1:2", group(config.AlgorithmWRR, 1, 1, 2),
			map[uint32]PathStatus{1: up(ms), 2: up(ms), 3: up(ms)}, none, 0b111, map[uint8]int{0: 16, 1: 16, 2: 32}, "paths up"},
		{"redundant: every path up", group(config.AlgorithmRedundant, 1, 1, 1),
			map[uint32]PathStatus{1: up(10 * ms), 2: up(60 * ms), 3: up(5 * ms)}, none, 0b111, nil, "paths up"},
		{"redundant: not over a path down", group(config.AlgorithmRedundant, 1, 1, 1),
			map[uint32]PathStatus{1: up(10 * ms), 2: {State: PathDown, Monitored: true}, 3: up(5 * ms)}, none, 0b101, nil, "paths up"},
		{"redundant: one up, a degraded one carries copies too", group(config.AlgorithmRedundant, 1, 1),
			map[uint32]PathStatus{1: {State: PathDegraded, Monitored: true}, 2: up(60 * ms)}, none, 0b11, nil, "fewer than two paths up"},
		{"redundant: one left", group(config.AlgorithmRedundant, 1, 1),
			map[uint32]PathStatus{1: {State: PathDown, Monitored: true}, 2: up(60 * ms)}, none, 0b10, nil, "paths up"},
		{"unmonitored members count as up", group(config.AlgorithmLoadBalancing, 1, 1),
			map[uint32]PathStatus{}, none, 0b11, map[uint8]int{0: 32, 1: 32}, "paths up"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := planSteer(c.g, c.st, c.prev, time.Time{})
			if p.ok != c.ok {
				t.Errorf("usable %b, want %b", p.ok, c.ok)
			}
			got := shares(p.table)
			for m, n := range c.shares {
				if got[m] != n {
					t.Errorf("member %d has %d entries, want %d (%v)", m, got[m], n, got)
				}
			}
			if !strings.Contains(p.why, c.why) {
				t.Errorf("why %q, want %q", p.why, c.why)
			}
		})
	}
	// The SLA: a path past it is used only when none meets it.
	g := group(config.AlgorithmActiveStandby, 1, 1)
	g.LBR.SLA = config.SLA{MaxRTT: config.Duration{D: 20 * ms}}
	if p := planSteer(g, map[uint32]PathStatus{1: up(30 * ms), 2: up(15 * ms)}, none, time.Time{}); p.ok != 0b10 {
		t.Errorf("SLA: usable %b, want the second (within 20 ms)", p.ok)
	}
	if p := planSteer(g, map[uint32]PathStatus{1: up(30 * ms), 2: up(25 * ms)}, none, time.Time{}); p.ok != 0b01 || !strings.Contains(p.why, "no path up within the SLA") {
		t.Errorf("SLA met by none: usable %b (%s), want the first, not down", p.ok, p.why)
	}
}

// TestShareTable: the table gives each member its share, interleaved:
// any 16 consecutive entries hold a 70/30 split within one entry.
func TestShareTable(t *testing.T) {
	tab := shareTable([]float64{70, 30})
	for start := 0; start+16 <= len(tab); start++ {
		n := 0
		for _, m := range tab[start : start+16] {
			if m == 0 {
				n++
			}
		}
		if n < 10 || n > 12 {
			t.Errorf("entries %d-%d: %d of 16 to member 0, want 11±1", start, start+15, n)
		}
	}
}

// TestPlanSteerAdaptive steps the adaptive modes through congestion and
// recovery, 100 ms at a time (and checks nothing moves in between).
func TestPlanSteerAdaptive(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Unix(1000, 0)
	ok := PathStatus{State: PathUp, Monitored: true, SRTT: 10 * ms, MinRTT: 10 * ms}
	slow := PathStatus{State: PathUp, Monitored: true, SRTT: 30 * ms, MinRTT: 10 * ms} // past 1.5 × min
	lossy := func(l float64) PathStatus { s := ok; s.Loss = l; return s }
	run := func(g Group, p steerPlan, steps int, st map[uint32]PathStatus) steerPlan {
		for range steps {
			t0 = t0.Add(adaptEvery)
			p = planSteer(g, st, p, t0)
			if q := planSteer(g, st, p, t0.Add(adaptEvery/2)); !slices.Equal(q.weights, p.weights) || q.spill != p.spill {
				t.Fatalf("a plan 50 ms after a step changed the weights: %v -> %v", p.weights, q.weights)
			}
		}
		return p
	}

	g := group(config.AlgorithmRTT, 1, 1)
	p := run(g, steerPlan{chose: -1}, 1, map[uint32]PathStatus{1: ok, 2: ok})
	if s := shares(p.table); s[0] != 32 || s[1] != 32 {
		t.Fatalf("rtt, both fine: %v, want 32/32", s)
	}
	p = run(g, p, 6, map[uint32]PathStatus{1: slow, 2: ok})
	if p.weights[0] != 0.05 || p.weights[1] != 1 {
		t.Errorf("rtt after 6 congested steps: weights %v, want [0.05 1] (halved to the 1/20 floor)", p.weights)
	}
	if s := shares(p.table); s[0] > 4 || p.ok != 0b11 {
		t.Errorf("rtt, path 1 congested: %v entries to it, usable %b; want at most 4, both usable", s[0], p.ok)
	}
	p = run(g, p, 10, map[uint32]PathStatus{1: ok, 2: ok})
	if s := shares(p.table); s[0] != 32 {
		t.Errorf("rtt, 10 steps after recovery: %v, want back to 32/32", s)
	}

	g = group(config.AlgorithmDWRR, 1, 1)
	p = run(g, steerPlan{chose: -1}, 5, map[uint32]PathStatus{1: ok, 2: ok})
	if p.weights[0] != 6 || p.weights[1] != 6 {
		t.Errorf("dwrr, 5 clean steps: %v, want [6 6] (+1 a step from 1)", p.weights)
	}
	p = run(g, p, 1, map[uint32]PathStatus{1: lossy(0.05), 2: ok})
	if p.weights[0] != 3 || p.weights[1] != 7 {
		t.Errorf("dwrr, loss on path 1: %v, want [3 7] (halved, the other still growing)", p.weights)
	}
	p = run(g, p, 1, map[uint32]PathStatus{1: lossy(0.05), 2: slow})
	if p.weights[0] != 4 || p.weights[1] != 3.5 {
		t.Errorf("dwrr, path 1 loss steady, path 2 congested: %v, want [4 3.5]", p.weights)
	}

	g = group(config.AlgorithmPriority, 1, 1)
	p = run(g, steerPlan{chose: -1}, 2, map[uint32]PathStatus{1: ok, 2: ok})
	if s := shares(p.table); s[0] != 64 || p.ok != 0b11 {
		t.Errorf("priority, the first fine: %v (usable %b), want all on it, both usable", s, p.ok)
	}
	p = run(g, p, 3, map[uint32]PathStatus{1: slow, 2: ok})
	if s := shares(p.table); s[1] < 18 || s[1] > 20 {
		t.Errorf("priority, 3 congested steps: %v, want 30%% (19 entries) spilled", s)
	}
	p = run(g, p, 20, map[uint32]PathStatus{1: slow, 2: ok})
	if p.spill < 0.89 || p.spill > 0.91 {
		t.Errorf("priority spill after 23 congested steps: %v, want 0.9 at most", p.spill)
	}
	p = run(g, p, 9, map[uint32]PathStatus{1: ok, 2: ok})
	if s := shares(p.table); s[0] != 64 {
		t.Errorf("priority, 9 steps after: %v, want all back on the first", s)
	}

	// cmon: the window follows what the first member carries, halves on
	// congestion, and the excess over it goes to the second.
	g = group(config.AlgorithmCMon, 1, 1)
	tx := func(a, b uint64, first PathStatus) map[uint32]PathStatus {
		first.TxBytes = a
		second := ok
		second.TxBytes = b
		return map[uint32]PathStatus{1: first, 2: second}
	}
	p = run(g, steerPlan{chose: -1}, 1, tx(0, 0, ok))
	p = run(g, p, 1, tx(50000, 0, ok))
	if p.window != 50000 || p.spill != 0 {
		t.Errorf("cmon, 50 kB on the first: window %v spill %v, want 50000 and 0", p.window, p.spill)
	}
	p = run(g, p, 1, tx(150000, 0, slow))
	if p.window != 25000 || p.spill != 0.75 {
		t.Errorf("cmon, 100 kB into a congested first: window %v spill %v, want 25000 and 0.75", p.window, p.spill)
	}
	if p.ok != 0b11 {
		t.Errorf("cmon usable %b, want both", p.ok)
	}
	p = run(g, p, 1, tx(175000, 75000, ok))
	if p.window != 28125 || p.spill != 0.71875 {
		t.Errorf("cmon, recovering: window %v spill %v, want 28125 and 0.71875", p.window, p.spill)
	}
}
