// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
)

// strategyEvery is how often the agent looks for processes its CPU
// strategies match (new ones, gone ones) and applies or gives back.
const strategyEvery = time.Second

// strategyState is where the agent keeps what its strategies changed
// (beside the config file, as the journal is), so that the next start
// after a crash gives it back.
func strategyState(configPath string) string { return configPath + ".sched" }

// runStrategies applies the config's CPU strategies every strategyEvery
// until ctx ends, then gives every thread back what it had. Errors (a
// policy the kernel refuses) are logged once each as they change.
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
	said := map[uint32]string{}
	for {
		cfg := a.Config()
		if len(cfg.Strategies) > 0 || len(e.Holdings()) > 0 {
			taken, given, err := e.Sync(cfg.Strategies)
			if err != nil {
				log.Warn("cpu strategies", "error", err)
			}
			if taken+given > 0 {
				log.Info("cpu strategies", "threads_taken", taken, "threads_given_back", given)
			}
			for id, msg := range e.Errors {
				if said[id] != msg {
					log.Warn("cpu strategy not applied", "strategy", id, "error", msg)
				}
			}
			said = e.Errors
			a.strategyThreads.Reset()
			a.strategyRanOn.Reset()
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
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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
