// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/bench"
)

func newBenchCmd() *cobra.Command {
	var o bench.Options
	var asJSON bool
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure ns/packet of the dataplane beside an XDP_PASS floor, and Mpps end to end beside the kernel's forwarding, in one run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Log = func(format string, a ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...) }
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
	c.Flags().BoolVar(&o.Quick, "quick", false, "only the floor, 1-rule and GRE figures; no end to end")
	_ = c.Flags().MarkHidden("quick")
	return c
}
