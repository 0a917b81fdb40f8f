// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/lab"
)

func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "One-gateway namespace demo: real traffic through the XDP gateway, then its counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary: %w", err)
			}
			return lab.Demo(cmd.Context(), bin, cmd.OutOrStdout())
		},
	}
}
