// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"fmt"

	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
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

// foVariants are the FlowOpt figures: each module alone and all, over
// the encapsulated flow of gre_encap_ip4_hit.
var foVariants = []struct {
	name    string
	modules []string
	method  string
}{
	{"flowopt_probe_hit", []string{config.ModuleProbe},
		"; probe on: the connection's record found (edge_fo) and its rate estimate counted (a UDP flow: no RTT sample)"},
	{"flowopt_fairness_hit", []string{config.ModuleFairness},
		"; fairness on: the record found, the flow's tokens refilled and spent within its share"},
	{"flowopt_relief_hit", []string{config.ModuleRelief},
		"; relief on, the CPU not hot: the record found at entry, the flow placed on this CPU (no handover)"},
	{"flowopt_all_hit", []string{config.ModuleProbe, config.ModuleFairness, config.ModuleRelief},
		"; probe, fairness and relief on"},
}

// measureFlowOpt adds the cost of each FlowOpt module on an established
// encapsulated flow, against gre_encap_ip4_hit (FlowOpt off) in the same
// run, through the same resize wrappers.
func (b *bencher) measureFlowOpt(r *Result) error {
	encap := testbed.UDPFrame(testbed.HostA, testbed.EncapDst, 5000)
	for _, v := range foVariants {
		cfg, err := yamlcfg.Parse([]byte(foConfig))
		if err != nil {
			return fmt.Errorf("flowopt config: %w", err)
		}
		cfg.PDRs[0].QoS = 1
		for _, m := range v.modules {
			cfg.FlowOpt = append(cfg.FlowOpt, config.FlowOptModule{Module: m})
		}
		gen, _, err := rules.Compile(cfg, b.ns.Resolve, b.alloc, b.dp.Limits)
		if err != nil {
			return fmt.Errorf("compile flowopt config: %w", err)
		}
		if err := b.ns.Do(func() error { _, err := b.dp.Commit(gen); return err }); err != nil {
			return fmt.Errorf("commit flowopt config: %w", err)
		}
		want := greFrame(topo.MACWan0, topo.MACWanNeigh, testbed.GRELocal, testbed.GRERemote, testbed.GREKey, testbed.FrameTTL(testbed.HostA, testbed.EncapDst, 5000, 63, topo.MACHostA, topo.MACLan0))
		if err := b.check(b.dp.Prog, encap, want); err != nil {
			return fmt.Errorf("%s, the dataplane program: %w", v.name, err)
		}
		raw, err := b.median(b.progs.BenchResize, encap, bpf.XDPRedirect)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		base := r.find("gre_encap_ip4_hit")
		undo := base.UndoNs
		b.o.Log("%s: %.1f ns raw (FlowOpt off: %.1f)", v.name, raw, base.RawNs)
		r.add(Figure{Name: v.name, RawNs: raw, NsPerPacket: r.FloorNs + raw - undo, UndoNs: undo,
			Rules: len(cfg.PDRs), Groups: len(gen.Groups), Method: methodResize + v.method + "; undo as gre_encap_ip4_hit's", Verdict: "redirect"})
	}
	return nil
}
