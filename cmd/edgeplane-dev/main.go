// SPDX-License-Identifier: Apache-2.0

// Command edgeplane-dev is the developer's tools: the two-site lab, the
// demo, the bench and the WAN emulator. They run the gateway's own
// binary, edgeplane, for the agents and the CLI verbs, so that what they
// try and measure is what a gateway runs; edgeplane itself links none of
// them.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgeplane-dev:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root := newRootCmd()
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// bins are the two binaries the tools run: edgeplane, the gateway's
// (agents, the CLI verbs), and this one (the WAN emulators).
type bins struct {
	flag string // --edgeplane
}

func newRootCmd() *cobra.Command {
	var b bins
	root := &cobra.Command{
		Use:   "edgeplane-dev",
		Short: "edgeplane's developer tools: the SD-WAN lab, the demo, the bench and the WAN emulator",
		Long: `The tools to try and measure edgeplane on one machine. They run the
gateway's binary, edgeplane, for the agents and the CLI verbs: --edgeplane
names it, else the one beside this binary (make build puts both in bin/),
else the one on PATH.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&b.flag, "edgeplane", "", "the edgeplane binary the agents run (default: the one beside this binary, else on PATH)")
	root.AddCommand(newLabCmd(&b), newDemoCmd(&b), newBenchCmd(&b), newWanemCmd(), newEtcdCmd())
	return root
}

// edgeplane returns the gateway's binary: --edgeplane, else edgeplane
// beside this binary, else on PATH.
func (b *bins) edgeplane() (string, error) {
	if b.flag != "" {
		return filepath.Abs(b.flag)
	}
	self, err := b.dev()
	if err != nil {
		return "", err
	}
	beside := filepath.Join(filepath.Dir(self), "edgeplane")
	if st, err := os.Stat(beside); err == nil && !st.IsDir() {
		return beside, nil
	}
	p, err := exec.LookPath("edgeplane")
	if err != nil {
		return "", fmt.Errorf("find the edgeplane binary: none beside %s nor on PATH (make build builds both; or give --edgeplane): %w", self, err)
	}
	return filepath.Abs(p)
}

// dev returns this binary, which runs the lab's WAN emulators.
func (b *bins) dev() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own binary: %w", err)
	}
	return self, nil
}

// both returns the gateway's binary and this one.
func (b *bins) both() (edgeplane, dev string, err error) {
	if edgeplane, err = b.edgeplane(); err != nil {
		return "", "", err
	}
	dev, err = b.dev()
	return edgeplane, dev, err
}
