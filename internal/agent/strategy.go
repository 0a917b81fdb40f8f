// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/sched"
)

// newStrategies is the agent's CPU strategies (internal/sched): the
// strategies that serve, and the dataplane to hand interfaces' XDP work
// to their CPUs.
func (a *Agent) newStrategies() *sched.Runtime {
	return sched.NewRuntime(sched.RuntimeOptions{
		ConfigPath: a.opts.ConfigPath,
		Strategies: func() []config.Strategy {
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.store.Strategies()
		},
		PodList:  a.opts.PodList,
		SchedExt: a.opts.SchedExt,
		XDPSteer: func(name string, cpu int) error {
			itf, err := net.InterfaceByName(name)
			if err != nil {
				return err
			}
			return a.dp.SetIfSteer(uint32(itf.Index), cpu)
		},
		ClearXDPSteer: func() error { return a.dp.ClearIfSteer() },
		Log:           a.log,
	})
}

// StrategyStatus implements dataplane.Strategies: what each CPU
// strategy holds.
func (a *Agent) StrategyStatus() []dataplane.StrategyStatus {
	return a.strategies.Status()
}
