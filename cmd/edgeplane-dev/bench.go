// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/bench"
)

func newBenchCmd(b *bins) *cobra.Command {
	var o bench.Options
	var asJSON bool
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure ns/packet of the dataplane beside an XDP_PASS floor, Mpps end to end beside the kernel's forwarding, and API latency beside a gRPC floor, in one run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Log = func(format string, a ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...) }
			// The per-packet figures need neither binary: a missing
			// edgeplane fails only the parts that run agents, saying so.
			o.EdgeplaneBin, _ = b.edgeplane()
			o.DevBin, _ = b.dev()
			r, err := bench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			fmt.Fprint(cmd.OutOrStdout(), r.Text())
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	c.Flags().IntVar(&o.Repeat, "repeat", 1_000_000, "BPF_PROG_TEST_RUN repeats per round")
	c.Flags().IntVar(&o.Rounds, "rounds", 5, "rounds per figure (median reported)")
	c.Flags().Float64Var(&o.E2ESeconds, "e2e-seconds", 3, "length of one end-to-end run")
	c.Flags().IntVar(&o.E2ERounds, "e2e-rounds", 3, "runs per end-to-end figure (median reported)")
	c.Flags().IntVar(&o.ControlOps, "control-ops", 1000, "single-PDR creates, updates and deletes (each) over gRPC, and gRPC floor calls; 0 skips the control part")
	c.Flags().IntVar(&o.ControlPaced, "control-paced", 200, "single-PDR creates paced at one per 20 ms")
	c.Flags().IntVar(&o.ControlBatch, "control-batch", 10_000, "PDRs created, then deleted, by one Apply each")
	c.Flags().IntVar(&o.N4Sessions, "n4-sessions", 100_000, "PFCP sessions the control part's N4 figures establish at once (the agent's limits.sessions follows)")
	c.Flags().Float64Var(&o.ControlConcurrentSeconds, "control-concurrent-seconds", 1, "length of each round of one-PDR Applies from 1 and 64 concurrent clients (3 rounds, alternated); below 0 skips them")
	c.Flags().IntVar(&o.FailoverRounds, "failover-rounds", 3, "failovers measured in an SD-WAN lab of the bench's own; 0 skips the failover part")
	c.Flags().BoolVar(&o.OnlyFailover, "only-failover", false, "only the failover figure")
	c.Flags().StringVar(&o.Scenario, "scenario", "", "run one scenario alone: flowopt (a mixed eMBB/URLLC/mMTC workload through a rate-limited WAN path of a lab of its own) "+
		"cpu (request/response latency to a userspace responder under stress-ng --cpu 8, with no strategy and with each mechanism) "+
		"fleet (time from an Apply at a controller until every gateway of a fleet over a 3-member etcd committed it, its etcd writes, "+
		"and the controller's and etcd's CPU time and memory: three real gateways, then members without a dataplane) "+
		"or multiqueue (end-to-end Mpps of redirect, GRE encap, decap and a NAT service, and the kernel's forwarding, with two-queue veths "+
		"at one queue and two, senders pinned one to a CPU; --e2e-seconds and --e2e-rounds apply)")
	c.Flags().Float64Var(&o.CPUSeconds, "cpu-seconds", 0, "seconds each mode of the cpu scenario measures (default 5)")
	c.Flags().IntVar(&o.CPURate, "cpu-rate", 0, "requests a second of the cpu scenario's probes (default 500)")
	c.Flags().IntVar(&o.FleetApplies, "fleet-applies", 50, "Applies the fleet scenario times in each series")
	c.Flags().IntVar(&o.FleetAgents, "fleet-agents", 100, "members without a dataplane in the fleet scenario's second series")
	c.Flags().IntVar(&o.FleetMembersPerClient, "fleet-members-per-client", 25, "members without a dataplane on each etcd client in the fleet scenario (a gateway has its own)")
	c.Flags().IntSliceVar(&o.FlowOptFlows, "flowopt-flows", nil, "eMBB flow counts of the flowopt scenario (default 20,50,200)")
	c.Flags().Float64Var(&o.FlowOptSeconds, "flowopt-seconds", 10, "length of each flowopt run")
	c.Flags().BoolVar(&o.Quick, "quick", false, "only the floor, 1-rule and GRE figures; no end to end, no control")
	_ = c.Flags().MarkHidden("quick")
	c.Flags().BoolVar(&o.OnlyControl, "only-control", false, "only the control figures (agent over gRPC)")
	_ = c.Flags().MarkHidden("only-control")
	c.Flags().BoolVar(&o.OnlyLB, "only-lb", false, "only the floor and the L4 balancer's per-packet figures")
	c.Flags().IntSliceVar(&o.ScaleFlows, "scale-flows", nil, "sizes of the established ring timed beside a plain LRU hash, powers of two from 2 to 2097152 (default 4096,65536,1048576)")
	return c
}
