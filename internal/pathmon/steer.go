// SPDX-License-Identifier: Apache-2.0

package pathmon

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Steering. A steering group (an LBR of a steering algorithm, named by
// steer FARs) sends flows over its members, encap FARs over paths. The
// path monitor's states and measures decide, at every look at the probe
// records, which members are usable and how the group's table shares
// the flows among them; the dataplane only reads the table (steer.h).
//
// A member is usable in the best of three tiers that has one: its path
// up (or not monitored) and within the group's SLA; else its path not
// down; else every member (the traffic goes somewhere, the operator sees
// why in the path states). Within the tier the mode picks:
// active-standby the first member in the group's order, smallest-delay
// the one with the smallest RTT (another takes over only once 10 %
// faster), load-balancing and wrr every usable member, each its weight's
// share of the table's entries. A flow stays on its member while the
// member is in the usable set; it is decided again when it leaves it.

// Group is a steering group as the agent's config and compiler have
// it.
type Group struct {
	Index uint32     // its index in the dataplane (rules.Compiler.SteerGroups)
	LBR   config.LBR // mode, members, SLA
	Paths []uint32   // each member's path id
}

// steerPlan is what a group's table and usable set are.
type steerPlan struct {
	ok    uint32 // bit i: member i usable
	table [bpf.SteerTable]uint8
	chose int    // smallest-delay: the member chosen (-1: none yet)
	why   string // which tier the usable members are from
	// The adaptive modes' state, stepped every adaptEvery: rtt's and
	// dwrr's weight per member, priority's share spilled past the first
	// usable member, and each member's loss at the last step.
	weights  []float64
	spill    float64
	loss     []float64
	adjusted time.Time
	// cmon: the preferred member's window (bytes a step) and every
	// member's bytes sent at the last step.
	window float64
	tx     []uint64
	// written is when steer last wrote the plan (SetSteer).
	written time.Time
}

// The adaptive modes step their weights every adaptEvery. A path is
// congested when its smoothed RTT is past congestedRTT times its
// minimum (RTTMon's target of 1.5 × min RTT).
const (
	adaptEvery    = 100 * time.Millisecond
	congestedRTT  = 1.5
	cmonMinWindow = 12500 // bytes a step: 1 Mbit/s
)

func congested(s PathStatus) bool {
	return s.Monitored && s.MinRTT > 0 && float64(s.SRTT) > congestedRTT*float64(s.MinRTT)
}

// slaMet tells whether a path's measures meet the group's SLA.
func slaMet(sla config.SLA, s PathStatus) bool {
	if !s.Monitored {
		return true
	}
	return (sla.MaxRTT.D == 0 || s.SRTT <= sla.MaxRTT.D) &&
		(sla.MaxJitter.D == 0 || s.Jitter <= sla.MaxJitter.D) &&
		(!sla.MaxLoss.Set || s.Loss <= sla.MaxLoss.V)
}

// planSteer makes group g's plan from its members' path statuses (a
// missing one counts as not monitored: usable) at time now; prev is its
// last plan.
func planSteer(g Group, st map[uint32]PathStatus, prev steerPlan, now time.Time) steerPlan {
	l := steerLook{g: g, st: st, n: len(g.LBR.Members)}
	var why string
	l.cand, why = l.usable()
	p := steerPlan{chose: -1, why: why, weights: prev.weights, spill: prev.spill, loss: prev.loss, adjusted: prev.adjusted,
		window: prev.window, tx: prev.tx}
	if len(l.cand) == 0 {
		return p
	}
	l.p = &p
	l.step = l.startStep(now)
	weights := l.weights(prev.chose)
	if l.step {
		for i := range l.n {
			p.loss[i] = l.status(i).Loss
			p.tx[i] = l.status(i).TxBytes
		}
	}
	spills := g.LBR.Algorithm == config.AlgorithmPriority || g.LBR.Algorithm == config.AlgorithmCMon
	for i, w := range weights {
		if w > 0 || spills && slices.Contains(l.cand, i) {
			p.ok |= 1 << i
		}
	}
	p.table = shareTable(weights)
	return p
}

// steerLook is one look at a group's members while planSteer makes its
// plan: their statuses, the usable ones (cand) and whether the adaptive
// modes step at this look.
type steerLook struct {
	g    Group
	st   map[uint32]PathStatus
	n    int
	cand []int
	p    *steerPlan
	step bool
}

// status is member i's path status (not monitored, up: no status).
func (l *steerLook) status(i int) PathStatus {
	s, ok := l.st[l.g.Paths[i]]
	if !ok {
		return PathStatus{State: PathUp}
	}
	return s
}

// lossRose tells whether member i lost more of its window than at the
// last step.
func (l *steerLook) lossRose(i int) bool { return l.status(i).Loss > l.p.loss[i] }

// base is member i's configured weight, at least 1.
func (l *steerLook) base(i int) float64 {
	return max(float64(l.g.LBR.Members[i].EffectiveWeight()), 1)
}

// usable picks the members of the best tier that has one, and says
// which tier.
func (l *steerLook) usable() ([]int, string) {
	tiers := []struct {
		name string
		ok   func(PathStatus) bool
	}{
		{"paths up within the SLA", func(s PathStatus) bool {
			return (s.State == PathUp || s.State == PathUnknown && !s.Monitored) && slaMet(l.g.LBR.SLA, s)
		}},
		{"no path up within the SLA: paths not down", func(s PathStatus) bool { return s.State != PathDown }},
		{"every path down: all members", func(PathStatus) bool { return true }},
	}
	var cand []int
	var why string
	for _, t := range tiers {
		cand = cand[:0]
		for i := range l.n {
			if t.ok(l.status(i)) {
				cand = append(cand, i)
			}
		}
		if len(cand) > 0 {
			why = t.name
			break
		}
	}
	if l.g.LBR.Algorithm == config.AlgorithmRedundant && len(cand) < 2 {
		// Redundancy needs two paths: a path outside the SLA but not
		// down carries copies too, rather than none.
		var alive []int
		for i := range l.n {
			if l.status(i).State != PathDown {
				alive = append(alive, i)
			}
		}
		if len(alive) > len(cand) {
			cand, why = alive, "fewer than two paths up within the SLA: paths not down"
		}
	}
	return cand, why
}

// startStep sets up the adaptive state of a plan that has none for
// these members, and reports whether the modes step now (their state
// then copied, so the previous plan keeps its own).
func (l *steerLook) startStep(now time.Time) bool {
	p := l.p
	if len(p.weights) != l.n || len(p.loss) != l.n || len(p.tx) != l.n {
		p.weights, p.loss, p.tx = make([]float64, l.n), make([]float64, l.n), make([]uint64, l.n)
		for i := range l.n {
			p.tx[i] = l.status(i).TxBytes
			p.weights[i] = l.base(i)
		}
	}
	if now.Sub(p.adjusted) < adaptEvery {
		return false
	}
	p.weights, p.loss, p.tx = slices.Clone(p.weights), slices.Clone(p.loss), slices.Clone(p.tx)
	p.adjusted = now
	return true
}

// weights is each member's share of the table by the group's mode;
// chose is the member smallest-delay chose at the last plan.
func (l *steerLook) weights(chose int) []float64 {
	w := make([]float64, l.n)
	switch l.g.LBR.Algorithm {
	case config.AlgorithmActiveStandby:
		w[l.cand[0]] = 1
	case config.AlgorithmSmallestDelay:
		best := l.smallestDelay(chose)
		w[best] = 1
		l.p.chose = best
	case config.AlgorithmRTT:
		l.stepRTT()
		for _, i := range l.cand {
			w[i] = l.p.weights[i]
		}
	case config.AlgorithmDWRR:
		l.stepDWRR()
		for _, i := range l.cand {
			w[i] = l.p.weights[i]
		}
	case config.AlgorithmPriority:
		l.stepPriority()
		l.spill(w)
	case config.AlgorithmCMon:
		l.stepCMon()
		l.spill(w)
	case config.AlgorithmRedundant:
		// Every packet over every usable member (the table is unused).
		for _, i := range l.cand {
			w[i] = 1
		}
	default: // load-balancing, wrr
		for _, i := range l.cand {
			w[i] = float64(l.g.LBR.Members[i].EffectiveWeight())
		}
		if sum(w) == 0 { // every usable member drained: share evenly
			for _, i := range l.cand {
				w[i] = 1
			}
		}
	}
	return w
}

// smallestDelay is the usable member with the smallest RTT; the member
// chosen before keeps the group unless it left the usable set or
// another is 10 % faster.
func (l *steerLook) smallestDelay(chose int) int {
	rtt := func(i int) time.Duration {
		if s := l.status(i); s.Monitored && s.SRTT > 0 {
			return s.SRTT
		}
		return math.MaxInt64
	}
	best := l.cand[0]
	for _, i := range l.cand[1:] {
		if rtt(i) < rtt(best) {
			best = i
		}
	}
	if c := chose; c >= 0 && c < l.n && slices.Contains(l.cand, c) && float64(rtt(best)) > 0.9*float64(rtt(c)) {
		best = c
	}
	return best
}

// stepRTT is RTTMon, with its blind spot closed by the tiers (a path
// down is out): a congested member's weight halves every step, down to
// 1/20 of its configured one; an uncongested one regains a tenth of it
// a step.
func (l *steerLook) stepRTT() {
	if !l.step {
		return
	}
	for _, i := range l.cand {
		base := l.base(i)
		if congested(l.status(i)) {
			l.p.weights[i] = max(l.p.weights[i]/2, base/20)
		} else {
			l.p.weights[i] = min(l.p.weights[i]+base/10, base)
		}
	}
}

// stepDWRR: the P4 proxy's DWRR raises each weight step by step until
// loss shows and never lowers it; here a member's weight grows by its
// configured one a step while its path loses no more and is not
// congested, and halves (down to that configured weight) when it loses
// more or is congested: additive increase, multiplicative decrease, per
// path.
func (l *steerLook) stepDWRR() {
	if !l.step {
		return
	}
	for _, i := range l.cand {
		base := l.base(i)
		if l.lossRose(i) || congested(l.status(i)) {
			l.p.weights[i] = max(l.p.weights[i]/2, base)
		} else {
			l.p.weights[i] = min(l.p.weights[i]+base, 64*base)
		}
	}
}

// stepPriority: everything over the first usable member until it is
// congested or loses more; then a share spills over to the next,
// growing a tenth a step (up to nine tenths) while that lasts and
// shrinking a tenth a step once it is over.
func (l *steerLook) stepPriority() {
	if !l.step {
		return
	}
	first := l.cand[0]
	if len(l.cand) > 1 && (congested(l.status(first)) || l.lossRose(first)) {
		l.p.spill = min(l.p.spill+0.1, 0.9)
	} else {
		l.p.spill = max(l.p.spill-0.1, 0)
	}
}

// stepCMon keeps a congestion window on the first usable member: what
// it may carry a step (100 ms). Packets go to it while the window has
// room, the excess to the next: the share it gets is the window over
// what the group sent last step. The window grows by an eighth a step
// (and to what the member carried) while its path loses no more and is
// not congested, and halves when it loses more or is congested, not
// below 12.5 kB (1 Mbit/s).
func (l *steerLook) stepCMon() {
	if !l.step {
		return
	}
	p, first := l.p, l.cand[0]
	sent, total := 0.0, 0.0
	for i := range l.n {
		d := float64(l.status(i).TxBytes - p.tx[i])
		total += d
		if i == first {
			sent = d
		}
	}
	if congested(l.status(first)) || l.lossRose(first) {
		p.window = max(p.window/2, cmonMinWindow)
	} else {
		p.window = max(p.window+p.window/8, sent, cmonMinWindow)
	}
	p.spill = 0
	if total > p.window {
		p.spill = 1 - p.window/total
	}
}

// spill gives the first usable member all but the plan's spilled
// share, and the next one that share.
func (l *steerLook) spill(w []float64) {
	w[l.cand[0]] = 1 - l.p.spill
	if len(l.cand) > 1 {
		w[l.cand[1]] = l.p.spill
	}
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// shareTable gives each member as many of the table's entries as its
// weight's share (largest remainders for the rest), interleaved so that
// any run of entries is mixed.
func shareTable(weights []float64) (t [bpf.SteerTable]uint8) {
	total := sum(weights)
	if total == 0 {
		return t
	}
	counts := make([]int, len(weights))
	rem := make([]float64, len(weights))
	left := bpf.SteerTable
	for i, w := range weights {
		exact := w / total * bpf.SteerTable
		counts[i] = int(exact)
		rem[i] = exact - float64(counts[i])
		left -= counts[i]
	}
	for ; left > 0; left-- {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		counts[best]++
		rem[best] = -1
	}
	// Entry j goes to the member furthest behind its share so far.
	given := make([]int, len(weights))
	for j := range t {
		best, lag := -1, math.Inf(-1)
		for i, c := range counts {
			if given[i] >= c {
				continue
			}
			if l := float64(c)*float64(j+1)/bpf.SteerTable - float64(given[i]); l > lag {
				best, lag = i, l
			}
		}
		t[j] = uint8(best)
		given[best]++
	}
	return t
}

// steer brings every steering group's table and usable set to its plan
// from the paths' statuses st; m.mu held. A plan the group was given
// less than rewriteEvery ago is not written again while it and the
// groups stay as they are: writing takes the rule writer's lock, which
// commits hold for milliseconds (SetSteer is a no-op then anyway). The
// rewrite every rewriteEvery catches a commit that set the group's table
// back without changing what the monitor follows.
func (m *Monitor) steer(st map[uint32]PathStatus, now time.Time) {
	seen := map[uint32]bool{}
	changed := m.groupsChanged
	m.groupsChanged = false
	for _, g := range m.groupsNow {
		seen[g.Index] = true
		prev, had := m.plans[g.Index]
		if !had {
			prev = steerPlan{chose: -1}
		}
		p := planSteer(g, st, prev, now)
		if had && !changed && p.ok == prev.ok && p.table == prev.table && p.why == prev.why &&
			now.Sub(prev.written) < rewriteEvery {
			p.written = prev.written
			m.plans[g.Index] = p
			continue
		}
		// A no-op while the group already has the plan's table.
		ok, err := m.dp.SetSteer(g.Index, len(g.LBR.Members), p.ok, p.table)
		if err != nil {
			m.log.Error("steering", "lbr", g.LBR.ID, "error", err)
			continue
		}
		if !ok {
			continue
		}
		p.written = now
		m.plans[g.Index] = p
		if !had || p.ok != prev.ok || p.why != prev.why {
			m.log.Info("steering group usable members", "lbr", g.LBR.ID, "mode", g.LBR.Algorithm,
				"members", usableFARs(g, p.ok), "why", p.why)
		}
	}
	for idx := range m.plans {
		if !seen[idx] {
			delete(m.plans, idx)
		}
	}
}

// rewriteEvery is how often steer writes a group's plan unchanged.
const rewriteEvery = 100 * time.Millisecond

// usableFARs names the usable members by FAR id, for the log.
func usableFARs(g Group, ok uint32) string {
	var out []string
	for i, mb := range g.LBR.Members {
		if ok>>i&1 == 1 {
			out = append(out, fmt.Sprint(mb.FAR))
		}
	}
	return fmt.Sprint(out)
}
