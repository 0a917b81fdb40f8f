// SPDX-License-Identifier: Apache-2.0

// Command edgeplane is what runs on a gateway or a controller: the agent,
// the controller, and the verbs that drive and inspect them (validate,
// get, apply, delete, flows, stats, down). The developer tools (lab,
// demo, bench, the WAN emulator) are edgeplane-dev, so this binary links
// none of them, nor an etcd server (TestBinariesByAudience).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/edgeplane/edgeplane/internal/config"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	cancel()
	if err != nil {
		var fe config.Errors
		if errors.As(err, &fe) {
			for _, e := range fe {
				fmt.Fprintln(os.Stderr, e.Error())
			}
		} else {
			fmt.Fprintln(os.Stderr, "edgeplane:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root := newRootCmd()
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
