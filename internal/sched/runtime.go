// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/sched/scx"
)

// strategyEvery is how often the runtime looks for processes its CPU
// strategies match (new ones, gone ones) and applies or gives back, when
// no event wakes it sooner.
const strategyEvery = time.Second

// strategySettle is how long the runtime waits after a process event
// for more before it scans: an exec or a burst of clones is one scan.
const strategySettle = 5 * time.Millisecond

// strategyEventGap is the least time between two scans an event asks
// for: a local user who execs matching processes in a loop gets at most
// 20 full scans of /proc a second out of the agent, not one per exec.
const strategyEventGap = 50 * time.Millisecond

// podListEvery is how often the pod list (pod labels) is read again, at
// most.
const podListEvery = 5 * time.Second

// StatePath is where an agent keeps what its strategies changed (beside
// its config file, as its journal is), so that the next start after a
// crash gives it back.
func StatePath(configPath string) string { return configPath + ".sched" }

// RuntimeOptions configure a gateway's CPU strategies.
type RuntimeOptions struct {
	// ConfigPath is the agent's config file: the state is kept beside
	// it (StatePath).
	ConfigPath string
	// Strategies returns the strategies that serve; called at every
	// scan, it must be cheap.
	Strategies func() []config.Strategy
	// PodList is where pod_labels are read (a URL, such as the
	// kubelet's /pods, or a file); "": none.
	PodList string
	// SchedExt schedules every task with edgeplane's sched_ext
	// scheduler (sched/scx), priority strategies' processes first;
	// without sched_ext in the kernel the runtime says so once and
	// keeps to the real-time policies.
	SchedExt bool
	// XDPSteer hands an interface's XDP work to a CPU (irq_affinity of
	// an interface without IRQs, such as a veth); ClearXDPSteer takes
	// back every hand-over, a crashed agent's included. Nil: none.
	XDPSteer      func(ifname string, cpu int) error
	ClearXDPSteer func() error
	Log           *slog.Logger
}

// Runtime runs a gateway's CPU strategies: it applies the strategies
// that serve every strategyEvery, and as soon as a process event says
// one may have appeared or Wake asks, until its Run ends; then it gives
// every thread back what it had. Its metrics are its own (Collectors).
type Runtime struct {
	o    RuntimeOptions
	log  *slog.Logger
	wake chan struct{}
	e    *Engine        // nil until Start
	x    *scx.Scheduler // the sched_ext scheduler loaded (nil: none)

	// threads: the threads each strategy holds; ranOn: the CPUs its
	// processes were seen on; refused: what each refused at the last
	// scan, by reason.
	threads, ranOn, refused *prometheus.GaugeVec
}

// NewRuntime returns the strategies' runtime, not started.
func NewRuntime(o RuntimeOptions) *Runtime {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	return &Runtime{o: o, log: log, wake: make(chan struct{}, 1),
		threads: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgeplane_strategy_threads", Help: "Threads a CPU strategy holds (its policy and CPUs applied).",
		}, []string{"strategy"}),
		ranOn: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgeplane_strategy_ran_on",
			Help: "1 for each CPU a CPU strategy's processes were seen running on (each thread's last CPU at the agent's scans, every second).",
		}, []string{"strategy", "cpu"}),
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgeplane_strategy_refused",
			Help: "What a CPU strategy refused at the agent's last scan, by reason: processes it matched by command_regex or env alone (untrusted_selection) or in a delegated cgroup (delegated_cgroup), threads the kernel refused its policy or CPUs (kernel), 1 for a strategy the host refuses (host).",
		}, []string{"strategy", "reason"}),
	}
}

// Recover gives back what a previous run (a crashed agent) left
// applied: real-time policies, lowered weights, moved threads, IRQs.
// An agent calls it first, before anything that can fail, so a restart
// that fails still gives it back; the caller holds the config file's
// lock, so no other agent holds the state.
func (r *Runtime) Recover() {
	if n, err := Recover("/proc", StatePath(r.o.ConfigPath)); err != nil {
		r.log.Warn("cpu strategies: give back a previous run's", "error", err)
	} else if n > 0 {
		r.log.Info("cpu strategies: gave back what a previous run left applied", "threads", n)
	}
}

// Start makes the engine: it clears a previous run's XDP hand-overs,
// reads the pod list and loads the sched_ext scheduler when asked for.
func (r *Runtime) Start() error {
	e := New("/proc", StatePath(r.o.ConfigPath))
	// A crashed agent's hand-overs go first.
	if r.o.ClearXDPSteer != nil {
		if err := r.o.ClearXDPSteer(); err != nil {
			r.log.Warn("cpu strategies: clear a previous run's XDP hand-overs", "error", err)
		}
	}
	if r.o.XDPSteer != nil {
		e.SetXDPSteer(r.o.XDPSteer)
	}
	if r.o.PodList != "" {
		pods, err := NewPods(r.o.PodList, podListEvery)
		if err != nil {
			return fmt.Errorf("--pod-list: %w", err)
		}
		e.SetPods(pods)
	}
	if r.o.SchedExt {
		if x, err := scx.Load(); err != nil {
			r.log.Warn("cpu strategies: no sched_ext scheduler; priority strategies use real-time policies", "why", err)
		} else {
			r.log.Info("cpu strategies: sched_ext scheduler loaded; priority strategies' processes run first", "ops", scx.Ops())
			e.SetExt(x)
			r.x = x
		}
	}
	r.e = e
	return nil
}

// Stop unloads the sched_ext scheduler, once Run has given the
// strategies back.
func (r *Runtime) Stop() {
	if r.x == nil {
		return
	}
	if err := r.x.Close(); err != nil {
		r.log.Warn("cpu strategies: unload the sched_ext scheduler", "error", err)
	}
	r.x = nil
}

// Run applies the strategies every strategyEvery, and as soon as a
// process event says one may have appeared, until ctx ends; then it
// gives every thread back what it had. Errors (a policy the kernel
// refuses) are logged once each as they change.
func (r *Runtime) Run(ctx context.Context) {
	e, log := r.e, r.log
	defer func() {
		if err := e.RevertAll(); err != nil {
			log.Warn("cpu strategies: give back", "error", err)
		} else if len(e.Holdings()) == 0 {
			log.Debug("cpu strategies: every thread given back")
		}
	}()
	t := time.NewTicker(strategyEvery)
	defer t.Stop()
	var events <-chan struct{}
	var ev *Events
	defer func() {
		if ev != nil {
			_ = ev.Close()
		}
	}()
	said := map[uint32]string{}
	for {
		strategies := r.o.Strategies()
		if len(strategies) > 0 && ev == nil && events == nil {
			var err error
			if ev, err = OpenEvents(); err != nil {
				log.Info("cpu strategies: no process events; new processes are found at the scan every second", "why", err)
				events = make(chan struct{}) // never: tried once
			} else {
				events = ev.C
			}
		}
		// While anything is changed, not only while a strategy holds a
		// thread: a strategy that goes holding none still gives back
		// the cpusets, weights, IRQs and hand-overs it changed, and the
		// state file is cleared.
		if len(strategies) > 0 || e.Changed() {
			r.scan(strategies, ev, said)
			said = e.Errors
		}
		scanned := time.Now()
		if !r.nextScan(ctx, t.C, events, ev, scanned) {
			return
		}
	}
}

// scan applies strategies once, watches the held processes' forks and
// logs the errors that are not in said (the last scan's).
func (r *Runtime) scan(strategies []config.Strategy, ev *Events, said map[uint32]string) {
	e, log := r.e, r.log
	taken, given, err := e.Sync(strategies)
	if err != nil {
		log.Warn("cpu strategies", "error", err)
	}
	if taken+given > 0 {
		log.Info("cpu strategies", "threads_taken", taken, "threads_given_back", given)
	}
	if ev != nil {
		if err := ev.Watch(e.HeldPIDs()); err != nil {
			log.Warn("cpu strategies: watch the held processes' forks", "error", err)
		}
	}
	for id, msg := range e.Errors {
		if said[id] != msg {
			log.Warn("cpu strategy not applied", "strategy", id, "error", msg)
		}
	}
	r.setMetrics()
}

// nextScan waits for the time of the next scan: the ticker's, a change
// of the strategies (Wake), or an event's whose processes a scan would
// change (Engine.Wanted); false when ctx ends.
func (r *Runtime) nextScan(ctx context.Context, tick <-chan time.Time, events <-chan struct{}, ev *Events, last time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-r.wake:
			return true
		case <-events:
			time.Sleep(strategySettle)
			if r.e.Wanted(r.o.Strategies(), ev.Take()) {
				time.Sleep(time.Until(last.Add(strategyEventGap)))
				return true
			}
		}
	}
}

// Wake asks the runtime to scan now: the strategies changed (an apply,
// a reload), and the first one opens the process events at once rather
// than at the next tick.
func (r *Runtime) Wake() {
	select {
	case r.wake <- struct{}{}:
	default: // a scan is pending already
	}
}

// Status is what each strategy holds (nil before Start).
func (r *Runtime) Status() []dataplane.StrategyStatus {
	if r == nil || r.e == nil {
		return nil
	}
	return r.e.Status()
}

// Collectors are the runtime's metrics.
func (r *Runtime) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.threads, r.ranOn, r.refused}
}

// setMetrics sets the strategies' gauges from what the engine holds.
func (r *Runtime) setMetrics() {
	e := r.e
	r.threads.Reset()
	r.ranOn.Reset()
	r.refused.Reset()
	for id, by := range e.Refused {
		for reason, n := range by {
			r.refused.WithLabelValues(strconv.FormatUint(uint64(id), 10), reason).Set(float64(n))
		}
	}
	for _, st := range e.Status() {
		id := strconv.FormatUint(uint64(st.Strategy), 10)
		n := 0
		for _, p := range st.Procs {
			n += p.Threads
			for _, cpu := range p.RanOn {
				r.ranOn.WithLabelValues(id, strconv.Itoa(cpu)).Set(1)
			}
		}
		if n > 0 {
			r.threads.WithLabelValues(id).Set(float64(n))
		}
	}
}
