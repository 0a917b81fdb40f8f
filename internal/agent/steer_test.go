// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

func weight(w uint32) *uint32 { return &w }

func group(alg string, weights ...uint32) steerGroup {
	g := steerGroup{index: 3, lbr: config.LBR{ID: 9, Algorithm: alg}}
	for i, w := range weights {
		g.lbr.Members = append(g.lbr.Members, config.Member{FAR: uint32(10 + i), Weight: weight(w)})
		g.paths = append(g.paths, uint32(1+i))
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
		g      steerGroup
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
		{"unmonitored members count as up", group(config.AlgorithmLoadBalancing, 1, 1),
			map[uint32]PathStatus{}, none, 0b11, map[uint8]int{0: 32, 1: 32}, "paths up"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := planSteer(c.g, c.st, c.prev)
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
	g.lbr.SLA = config.SLA{MaxRTT: config.Duration{D: 20 * ms}}
	if p := planSteer(g, map[uint32]PathStatus{1: up(30 * ms), 2: up(15 * ms)}, none); p.ok != 0b10 {
		t.Errorf("SLA: usable %b, want the second (within 20 ms)", p.ok)
	}
	if p := planSteer(g, map[uint32]PathStatus{1: up(30 * ms), 2: up(25 * ms)}, none); p.ok != 0b01 || !strings.Contains(p.why, "no path up within the SLA") {
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
