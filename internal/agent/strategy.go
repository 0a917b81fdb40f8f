// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/sched"
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
func (a *Agent) runStrategies(ctx context.Context, log *slog.Logger, threads *prometheus.GaugeVec) {
	e := sched.New("/proc", strategyState(a.opts.ConfigPath))
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
			threads.Reset()
			for id, hs := range e.Holdings() {
				threads.WithLabelValues(strconv.FormatUint(uint64(id), 10)).Set(float64(len(hs)))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
