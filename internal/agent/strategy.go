// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/sched"
)

// newStrategies is the agent's CPU strategies (internal/sched): the
// strategies that serve, and the dataplane to hand interfaces' XDP work
// to their CPUs.
func (a *Agent) newStrategies() *sched.Runtime {
	return sched.NewRuntime(sched.RuntimeOptions{
		ConfigPath: a.opts.ConfigPath,
		Strategies: func() []config.Strategy { return a.Config().Strategies },
		PodList:    a.opts.PodList,
		SchedExt:   a.opts.SchedExt,
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

// StrategyStatus implements api.Backend: what each CPU strategy holds.
func (a *Agent) StrategyStatus() []*pb.StrategyStatus {
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
