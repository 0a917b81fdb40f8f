// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"fmt"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// foConfig is testbed.GREConfig with FlowOpt: PDR 1's flows (encapsulated over
// path 1) in an eMBB class whose rate no run reaches (every packet within
// its share: the token accounting's whole path, never a mark), and the
// modules listed in flowopt.
const foConfig = testbed.GREConfig + `
qos_classes:
  - {id: 1, type: embb, rate: 100gbit}
`

// foVariants are the FlowOpt figures: FlowOpt off (the same rules, no
// module), each module alone and all, over the encapsulated flow of
// gre_encap_ip4_hit.
var foVariants = []struct {
	name    string
	modules []string
	method  string
}{
	{"flowopt_off_hit", nil,
		"; FlowOpt off: the same rules and class, no module (the baseline the others are set against)"},
	{"flowopt_probe_hit", []string{config.ModuleProbe},
		"; probe on: the connection's record found (edge_fo) and its rate estimate counted (a UDP flow: no RTT sample)"},
	{"flowopt_fairness_hit", []string{config.ModuleFairness},
		"; fairness on: the record found, the flow's tokens refilled and spent within its share"},
	{"flowopt_relief_hit", []string{config.ModuleRelief},
		"; relief on, the CPU not hot: the record found at entry, the flow placed on this CPU (no handover)"},
	{"flowopt_all_hit", []string{config.ModuleProbe, config.ModuleFairness, config.ModuleRelief},
		"; probe, fairness and relief on"},
}

// foRoundRobin is how the FlowOpt figures are timed: round after round,
// each variant committed and timed once a round, so all of them see the
// machine in the same state; a variant's cost over FlowOpt off is the
// median of its per-round differences (drift between rounds taken out,
// as paired does for a wrapper). Four times the rounds of a quarter of
// the repeats: these VMs switch between a fast and a slow state every
// few hundred ms, and a round should see one.
const foRoundRobin = "; round-robin with the other FlowOpt variants (4 x rounds + 1 rounds of repeat / 4), one run each a round; ns_over_baseline: median of the per-round differences from flowopt_off_hit"

// measureFlowOpt adds the cost of each FlowOpt module on an established
// encapsulated flow, against FlowOpt off timed round-robin with them in
// the same run, through the same resize wrappers.
func (b *bencher) measureFlowOpt(r *Result) error {
	encap := testbed.UDPFrame(testbed.HostA, testbed.EncapDst, 5000)
	want := greFrame(topo.MACWan0, topo.MACWanNeigh, testbed.GRELocal, testbed.GRERemote, testbed.GREKey, testbed.FrameTTL(testbed.HostA, testbed.EncapDst, 5000, 63, topo.MACHostA, topo.MACLan0))
	gens := make([]*commit.Generation, len(foVariants))
	pdrs := 0
	for i, v := range foVariants {
		cfg, err := yamlcfg.Parse([]byte(foConfig))
		if err != nil {
			return fmt.Errorf("flowopt config: %w", err)
		}
		cfg.PDRs[0].QoS = 1
		for _, m := range v.modules {
			cfg.FlowOpt = append(cfg.FlowOpt, config.FlowOptModule{Module: m})
		}
		if gens[i], _, err = rules.Compile(cfg, b.ns.Resolve, b.alloc, b.dp.Limits); err != nil {
			return fmt.Errorf("compile flowopt config: %w", err)
		}
		pdrs = len(cfg.PDRs)
	}
	samples := make([][]float64, len(foVariants))
	repeat := max(b.o.Repeat/4, 1)
	for round := 0; round < 4*b.o.Rounds+1; round++ {
		for i, v := range foVariants {
			if err := b.ns.Do(func() error { _, err := b.dp.Commit(gens[i]); return err }); err != nil {
				return fmt.Errorf("commit flowopt config: %w", err)
			}
			if round == 0 {
				if err := b.check(b.dp.Prog, encap, want); err != nil {
					return fmt.Errorf("%s, the dataplane program: %w", v.name, err)
				}
			}
			var ns float64
			err := b.ns.Do(func() (err error) {
				ns, err = timeRun(b.progs.BenchResize, encap, bpf.XDPRedirect, repeat)
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			samples[i] = append(samples[i], ns)
		}
	}
	undo := r.find("gre_encap_ip4_hit").UndoNs
	for i, v := range foVariants {
		raw := medianOf(samples[i])
		over := make([]float64, len(samples[i]))
		for j := range over {
			over[j] = samples[i][j] - samples[0][j]
		}
		f := Figure{Name: v.name, RawNs: raw, NsPerPacket: r.FloorNs + raw - undo, UndoNs: undo, Rules: pdrs, Groups: len(gens[i].Groups),
			Method: methodResize + v.method + foRoundRobin + "; undo as gre_encap_ip4_hit's", Verdict: "redirect"}
		if i > 0 {
			f.OverBaseNs = medianOf(over)
		}
		b.o.Log("%s: %.1f ns raw, %.1f over FlowOpt off", v.name, raw, f.OverBaseNs)
		r.add(f)
	}
	return nil
}

// flowOptGoals is FlowOpt's goal: all modules on cost an established
// flow's packet at most 40 ns more than FlowOpt off, timed beside it.
func flowOptGoals(r *Result) []measure.Goal {
	return []measure.Goal{{Name: "flowopt all modules on over off (ns, same rounds)", Value: r.find("flowopt_all_hit").OverBaseNs, Limit: 40}}
}
