// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Measure the dataplane (see internal/bench)", Hidden: true}
}
