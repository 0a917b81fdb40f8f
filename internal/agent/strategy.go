// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/sched"
)

// strategyEvery is how often the agent looks for processes its CPU
// strategies match (new ones, gone ones) and applies or gives back, when
// no event wakes it sooner.
const strategyEvery = time.Second

// strategySettle is how long the agent waits after a process event for
// more before it scans: an exec or a burst of clones is one scan.
const strategySettle = 5 * time.Millisecond

// strategyEventGap is the least time between two scans an event asks
// for: a local user who execs matching processes in a loop gets at most
// 20 full scans of /proc a second out of the agent, not one per exec.
const strategyEventGap = 50 * time.Millisecond

// podListEvery is how often the pod list (pod labels) is read again, at
// most.
const podListEvery = 5 * time.Second

// strategyState is where the agent keeps what its strategies changed
// (beside the config file, as the journal is), so that the next start
// after a crash gives it back.
func strategyState(configPath string) string { return configPath + ".sched" }

// runStrategies applies the config's CPU strategies every strategyEvery,
// and as soon as a process event says one may have appeared, until ctx
// ends; then it gives every thread back what it had. Errors (a policy
// the kernel refuses) are logged once each as they change.
func (a *Agent) runStrategies(ctx context.Context, log *slog.Logger) {
	e := a.strategies
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
	var ev *sched.Events
	defer func() {
		if ev != nil {
			_ = ev.Close()
		}
	}()
	said := map[uint32]string{}
	for {
		cfg := a.Config()
		if len(cfg.Strategies) > 0 && ev == nil && events == nil {
			var err error
			if ev, err = sched.OpenEvents(); err != nil {
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
		if len(cfg.Strategies) > 0 || e.Changed() {
			taken, given, err := e.Sync(cfg.Strategies)
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
			said = e.Errors
			a.strategyMetrics(e)
		}
		scanned := time.Now()
		if !a.nextScan(ctx, t.C, events, ev, scanned) {
			return
		}
	}
}

// nextScan waits for the time of the next scan: the ticker's, a change
// of the strategies (wakeStrategies), or an event's whose processes a
// scan would change (Engine.Wanted); false when ctx ends.
func (a *Agent) nextScan(ctx context.Context, tick <-chan time.Time, events <-chan struct{}, ev *sched.Events, last time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-a.strategyWake:
			return true
		case <-events:
			time.Sleep(strategySettle)
			if a.strategies.Wanted(a.Config().Strategies, ev.Take()) {
				time.Sleep(time.Until(last.Add(strategyEventGap)))
				return true
			}
		}
	}
}

// wakeStrategies asks the strategy loop to scan now: the strategies
// changed (an apply, a reload), and the first one opens the process
// events at once rather than at the next tick.
func (a *Agent) wakeStrategies() {
	select {
	case a.strategyWake <- struct{}{}:
	default: // a scan is pending already
	}
}

// strategyMetrics sets the strategies' gauges from what e holds.
func (a *Agent) strategyMetrics(e *sched.Engine) {
	a.strategyThreads.Reset()
	a.strategyRanOn.Reset()
	a.strategyRefused.Reset()
	for id, by := range e.Refused {
		for reason, n := range by {
			a.strategyRefused.WithLabelValues(strconv.FormatUint(uint64(id), 10), reason).Set(float64(n))
		}
	}
	for _, st := range e.Status() {
		id := strconv.FormatUint(uint64(st.Strategy), 10)
		n := 0
		for _, p := range st.Procs {
			n += p.Threads
			for _, cpu := range p.RanOn {
				a.strategyRanOn.WithLabelValues(id, strconv.Itoa(cpu)).Set(1)
			}
		}
		if n > 0 {
			a.strategyThreads.WithLabelValues(id).Set(float64(n))
		}
	}
}

// StrategyStatus implements api.Backend: what each CPU strategy holds.
func (a *Agent) StrategyStatus() []*pb.StrategyStatus {
	if a.strategies == nil {
		return nil
	}
	var out []*pb.StrategyStatus
	for _, st := range a.strategies.Status() {
		ps := &pb.StrategyStatus{Strategy: st.Strategy, Error: st.Error, Others: st.Others}
		for _, p := range st.Procs {
			pp := &pb.StrategyProcess{Pid: int32(p.PID), Comm: p.Comm, Threads: uint32(p.Threads), Applied: p.Applied}
			for _, c := range p.RanOn {
				pp.RanOn = append(pp.RanOn, uint32(c))
			}
			ps.Processes = append(ps.Processes, pp)
		}
		out = append(out, ps)
	}
	return out
}

// checkStrategiesHost refuses what this host cannot give strategies
// without risking itself (sched.Host.Problems: a real-time policy while
// RT throttling is off, deadline runtimes past what real-time tasks may
// have of a CPU, no CPU left undedicated, fifo or rr with no CPU but
// the housekeeping one). Only the problems of strategies report
// accepts are reported, each at at(id) + "." + field; the others are
// checked first, so a problem of the set falls on a strategy reported.
func checkStrategiesHost(others, checked []config.Strategy, at func(id uint32) string) error {
	if len(checked) == 0 {
		return nil
	}
	host, err := sched.ReadHost("/proc", "/sys")
	if err != nil {
		return fmt.Errorf("cpu strategies: read the host's real-time limits and CPUs: %w", err)
	}
	mine := map[uint32]bool{}
	for _, s := range checked {
		mine[s.ID] = true
	}
	var errs config.Errors
	for _, p := range host.Problems(append(slices.Clone(others), checked...)) {
		if mine[p.ID] {
			errs = append(errs, config.FieldError{Path: at(p.ID) + "." + p.Field, Reason: p.Reason})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// checkFileStrategies is checkStrategiesHost for a whole config, each
// strategy named by its place in the file: those not in live (the
// strategies that serve, a reload's) exactly as they are.
func checkFileStrategies(cfg *config.Config, live []any) error {
	at := map[uint32]string{}
	var checked, others []config.Strategy
	for i, s := range cfg.Strategies {
		if slices.ContainsFunc(live, func(o any) bool { return reflect.DeepEqual(o, s) }) {
			others = append(others, s)
			continue
		}
		at[s.ID] = "strategies[" + strconv.Itoa(i) + "]"
		checked = append(checked, s)
	}
	return checkStrategiesHost(others, checked, func(id uint32) string { return at[id] })
}

// checkAppliedStrategies is checkStrategiesHost for a store batch that
// changed strategies (ch): those it created or updated, named by their
// operation, against the store's others.
func checkAppliedStrategies(st *config.Store, ch *config.Changes) error {
	if len(ch.Strategies) == 0 {
		return nil
	}
	at := map[uint32]string{}
	var checked, others []config.Strategy
	for _, d := range ch.Strategies {
		if d.New != nil {
			at[d.New.ID] = d.At
			checked = append(checked, *d.New)
		}
	}
	for _, o := range st.List(config.KindStrategy) {
		if s := o.(config.Strategy); at[s.ID] == "" {
			others = append(others, s)
		}
	}
	return checkStrategiesHost(others, checked, func(id uint32) string { return at[id] })
}
