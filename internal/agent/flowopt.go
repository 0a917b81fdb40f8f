// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// foEvery is how often FlowOpt's control loop looks at the counters.
const foEvery = 100 * time.Millisecond

// foTarget is the share of a class's rate its flows' fair shares add up
// to.
const foTarget = 0.98

// foPeriod is the dataplane's activity period (EDGE_FO_PERIOD_SHIFT): a
// flow direction is counted once in each it is active in.
const foPeriod = time.Duration(1 << 26)

// foClass is a QoS class as the control loop serves it.
type foClass struct {
	id, idx uint32
	q       config.QoSClass // effective
	// share is the fair share a flow gets (bytes a second), flows the
	// active flows (smoothed), both as last set.
	share, flows float64
	// last: the counters at the last look; rate the bytes a second the
	// class passed then, held its marked and dropped packets.
	last                   bpf.QoSCounters
	rate                   float64
	held, hints, congested float64
}

// foLoop is FlowOpt's control loop state, read by its metrics.
type foLoop struct {
	mu      sync.Mutex
	on      map[string]bool     // modules by name: on
	classes map[uint32]*foClass // by id
	// pps and hot are each CPU's packet rate and whether relief found it
	// hot at the last look.
	pps    []float64
	hot    []bool
	relief bool // edge_cpus filled
}

// foView returns the QoS classes (effective, with their index) and the
// FlowOpt modules of the config that serves.
func (a *Agent) foView() (map[uint32]foClass, map[string]config.FlowOptModule) {
	a.mu.Lock()
	defer a.mu.Unlock()
	classes := map[uint32]foClass{}
	for _, q := range a.store.QoSClasses() {
		if idx, ok := a.comp.QoSIndex(q.ID); ok {
			classes[q.ID] = foClass{id: q.ID, idx: idx, q: q.Effective()}
		}
	}
	mods := map[string]config.FlowOptModule{}
	for _, m := range a.store.FlowOpt() {
		mods[m.Module] = m.Effective()
	}
	return classes, mods
}

// runFlowOpt is FlowOpt's control loop (fairness and relief; the probe
// needs none), every foEvery until ctx ends.
func (a *Agent) runFlowOpt(ctx context.Context, l *foLoop, log *slog.Logger) {
	t := time.NewTicker(foEvery)
	defer t.Stop()
	var cpuLast []uint64
	last := time.Now()
	defer func() {
		if l.relief {
			_ = a.dp.SetRelief(false)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		dt := now.Sub(last).Seconds()
		last = now
		classes, mods := a.foView()
		on := map[string]bool{}
		for name, m := range mods {
			on[name] = !m.Off
		}
		st, err := a.dp.QoSStats()
		if err != nil {
			log.Debug("flowopt: class counters", "error", err)
			continue
		}
		l.mu.Lock()
		for name, v := range on {
			if l.on[name] != v {
				log.Info("flowopt: module switched", "module", name, "on", v)
			}
		}
		for name := range l.on {
			if _, ok := on[name]; !ok {
				log.Info("flowopt: module switched", "module", name, "on", false)
			}
		}
		l.on = on
		for id := range l.classes {
			if _, ok := classes[id]; !ok {
				delete(l.classes, id)
			}
		}
		for id, c := range classes {
			cur := l.classes[id]
			if cur == nil || cur.idx != c.idx {
				cur = &c
				cur.last = st[c.idx]
				l.classes[id] = cur
				continue
			}
			cur.q = c.q
			if err := a.fairShare(cur, st[c.idx], dt); err != nil {
				log.Warn("flowopt: class round", "class", id, "error", err)
			}
		}
		l.mu.Unlock()

		relief := on[config.ModuleRelief]
		if relief != l.relief {
			if err := a.dp.SetRelief(relief); err != nil {
				log.Warn("flowopt: relief's cpumap", "error", err)
			} else {
				l.relief = relief
			}
		}
		pkts, err := a.dp.CPUPackets()
		if err != nil {
			continue
		}
		if len(cpuLast) == len(pkts) {
			m := mods[config.ModuleRelief]
			loads, pps, hot := judgeCPUs(pkts, cpuLast, dt, m.Hot.V, float64(m.MinPPS))
			if relief {
				if err := a.dp.SetCPULoads(loads); err != nil {
					log.Debug("flowopt: cpu loads", "error", err)
				}
			}
			l.mu.Lock()
			l.pps, l.hot = pps, hot
			l.mu.Unlock()
		}
		cpuLast = pkts
	}
}

// judgeCPUs turns each CPU's packet counts now and dt seconds before into
// a rate and says which are hot: over hot × the mean of the CPUs and at
// least minPPS.
func judgeCPUs(now, before []uint64, dt, hot, minPPS float64) ([]bpf.CPULoad, []float64, []bool) {
	n := min(len(now), bpf.MaxCPUs)
	pps, hots, loads := make([]float64, n), make([]bool, n), make([]bpf.CPULoad, n)
	mean := 0.0
	for i := range n {
		pps[i] = float64(now[i]-before[i]) / dt
		mean += pps[i] / float64(n)
	}
	for i := range n {
		hots[i] = n > 1 && pps[i] >= minPPS && pps[i] > hot*mean
		loads[i] = bpf.CPULoad{Pps: uint32(min(pps[i], math.MaxUint32))}
		if hots[i] {
			loads[i].Hot = 1
		}
	}
	return loads, pps, hots
}

// fairShare sets class c's round from what it did in the last dt seconds
// (counters now): each flow's share starts at the class's target (98 % of
// its rate: its phantom queue, draining at the rate, then only catches
// bursts) over its active flows and moves, as CSFQ's fair-share estimate
// does, so the class passes its target (and back to even parts at once
// while its phantom queue is past its depth): down when it passed more, up
// when it passed less while holding flows back (flows that need less
// leave their part to the others: max-min fairness), and down by 3 %
// while most of its packets carry the probe's congestion hint (a
// bottleneck beyond the gateway slower than the rate: its queue grows).
func (a *Agent) fairShare(c *foClass, now bpf.QoSCounters, dt float64) error {
	d := bpf.QoSCounters{
		Packets: now.Packets - c.last.Packets, Bytes: now.Bytes - c.last.Bytes,
		Marked: now.Marked - c.last.Marked, Dropped: now.Dropped - c.last.Dropped,
		Flows: now.Flows - c.last.Flows, Hinted: now.Hinted - c.last.Hinted,
		Congested: now.Congested - c.last.Congested,
	}
	c.last = now
	if dt <= 0 || c.q.Rate.BPS == 0 || c.q.Type == config.QoSURLLC {
		return nil
	}
	if d.Packets+d.Dropped == 0 {
		// Idle (or fairness off): nothing to judge by; the share starts
		// afresh from the flows when packets come again (a share kept
		// from long ago, or raised to the floor of one flow's, would let
		// a new crowd of flows past the rate at once).
		c.share, c.flows = 0, 0
		return nil
	}
	flows := float64(d.Flows) * foPeriod.Seconds() / dt
	c.flows = 0.7*c.flows + 0.3*flows
	if c.flows < 0.5 {
		c.flows = flows
	}
	n := max(c.flows, 1)
	rate := float64(c.q.Rate.BPS) / 8
	c.rate = float64(d.Bytes) / dt
	c.held = float64(d.Marked+d.Dropped) / dt
	all := float64(d.Packets + d.Dropped)
	c.hints = float64(d.Hinted) / all
	c.congested = float64(d.Congested) / all
	target := foTarget * rate
	switch {
	case c.share == 0, c.congested > 0.01 && c.share > target/n:
		// New, or the phantom queue past its depth with every flow
		// allowed more than an even part: even parts, at once.
		c.share = target / n
	case c.hints > 0.5:
		c.share *= 0.97
	case c.rate > target*1.02:
		c.share *= max(0.8, target/c.rate)
	case c.held > 0 && c.rate < target*0.98:
		c.share *= min(1.2, target/max(c.rate, target/2))
	}
	c.share = min(max(c.share, rate/(4*n)), rate)
	round := uint64(float64(c.q.Quantum) * 1e9 / c.share)
	return a.dp.SetQoSRound(c.idx, c.id, max(round, 1))
}

// foMetrics exposes FlowOpt's state: modules on, each class's counters,
// active flows and fair share, each CPU's rate and heat.
type foMetrics struct {
	a *Agent
	l *foLoop
}

var (
	foModuleDesc  = prometheus.NewDesc("edgeplane_flowopt_module_on", "1 if a FlowOpt module (probe, fairness, relief) is on.", []string{"module"}, nil)
	foPacketsDesc = prometheus.NewDesc("edgeplane_qos_class_packets_total", "Packets of a QoS class's flows the fairness stage passed (ECN-marked ones included).", []string{"class"}, nil)
	foBytesDesc   = prometheus.NewDesc("edgeplane_qos_class_bytes_total", "Bytes of a QoS class's flows the fairness stage passed.", []string{"class"}, nil)
	foMarkedDesc  = prometheus.NewDesc("edgeplane_qos_class_marked_total", "Packets over their flow's fair share, ECN-marked (CE).", []string{"class"}, nil)
	foDroppedDesc = prometheus.NewDesc("edgeplane_qos_class_dropped_total", "Packets over their flow's fair share, dropped.", []string{"class"}, nil)
	foHintedDesc  = prometheus.NewDesc("edgeplane_qos_class_hinted_total", "Packets of flows whose RTT was over k times their minimum (the probe's congestion hint).", []string{"class"}, nil)
	foCongDesc    = prometheus.NewDesc("edgeplane_qos_class_congestion_marked_total", "Packets within their flow's share ECN-marked (CE) for the probe's congestion hint.", []string{"class"}, nil)
	foFlowsDesc   = prometheus.NewDesc("edgeplane_qos_class_active_flows", "Flows of a QoS class active lately (smoothed).", []string{"class"}, nil)
	foShareDesc   = prometheus.NewDesc("edgeplane_qos_class_fair_share_bytes_per_second", "What each flow of a QoS class may send.", []string{"class"}, nil)
	foCPUDesc     = prometheus.NewDesc("edgeplane_cpu_packets_per_second", "Packets a second the dataplane handled on a CPU.", []string{"cpu"}, nil)
	foHotDesc     = prometheus.NewDesc("edgeplane_cpu_hot", "1 if relief found a CPU hot: new flows arriving on it are placed on cooler ones.", []string{"cpu"}, nil)
)

func (m foMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{foModuleDesc, foPacketsDesc, foBytesDesc, foMarkedDesc, foDroppedDesc, foHintedDesc, foCongDesc, foFlowsDesc, foShareDesc, foCPUDesc, foHotDesc} {
		ch <- d
	}
}

func (m foMetrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label)
	}
	counter := func(d *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	st, err := m.a.dp.QoSStats()
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	for _, name := range []string{config.ModuleProbe, config.ModuleFairness, config.ModuleRelief} {
		gauge(foModuleDesc, b2f(m.l.on[name]), name)
	}
	for _, id := range slices.Sorted(maps.Keys(m.l.classes)) {
		c := m.l.classes[id]
		label := strconv.FormatUint(uint64(id), 10)
		if err == nil {
			s := st[c.idx]
			counter(foPacketsDesc, s.Packets, label)
			counter(foBytesDesc, s.Bytes, label)
			counter(foMarkedDesc, s.Marked, label)
			counter(foDroppedDesc, s.Dropped, label)
			counter(foHintedDesc, s.Hinted, label)
			counter(foCongDesc, s.Congested, label)
		}
		gauge(foFlowsDesc, c.flows, label)
		if c.share > 0 {
			gauge(foShareDesc, c.share, label)
		}
	}
	for cpu, v := range m.l.pps {
		label := strconv.Itoa(cpu)
		gauge(foCPUDesc, v, label)
		gauge(foHotDesc, b2f(m.l.hot[cpu]), label)
	}
}
