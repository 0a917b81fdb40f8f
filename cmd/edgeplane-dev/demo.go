// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/lab"
)

func newDemoCmd(b *bins) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "SD-WAN lab demo: ping and iperf3 over both GRE paths, then per-path counters",
		Long: `Brings up the SD-WAN lab (see edgeplane-dev lab --help) under the name ` + lab.DemoName + `
with the default link settings, measures each path's RTT with ping (DSCP
46 takes path 2), runs iperf3 TCP (path 1) and UDP at 20 Mbit/s (path 2)
in both directions, prints the per-path counters of both gateways and
the emulators', and tears the lab down again, also when a step fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, dev, err := b.both()
			if err != nil {
				return err
			}
			return lab.Demo(cmd.Context(), bin, dev, cmd.OutOrStdout())
		},
	}
}
