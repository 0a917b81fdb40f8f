// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/agent"
	"github.com/edgeplane/edgeplane/internal/config"
)

const defaultPinDir = "/sys/fs/bpf/edgeplane"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "edgeplane",
		Short:         "eBPF/XDP dataplane for private-5G and SD-WAN edge gateways",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newAgentCmd(), newValidateCmd(), newStatsCmd(), newDownCmd(), newBenchCmd(), newDemoCmd(), newLabCmd(), newWanemCmd(),
		newGetCmd(), newApplyCmd(), newDeleteCmd(), newFlowsCmd())
	return root
}

func newAgentCmd() *cobra.Command {
	var o agent.Options
	var debug bool
	c := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Load the dataplane on the configured interfaces and serve it",
		Long: `Loads (or adopts an already pinned) XDP dataplane, attaches it to the
configured interfaces, writes the rules and serves Prometheus metrics and
the control API (gRPC edgeplane.v1 and REST/JSON, OpenAPI at
/openapi.json). An API change is committed atomically and written back to
the config file, which always holds what serves. SIGHUP re-reads the
config and applies the difference atomically; an invalid config is
refused and the live rules keep serving. On exit the
dataplane stays attached and forwarding (pinned) unless --detach-on-exit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lvl := slog.LevelInfo
			if debug {
				lvl = slog.LevelDebug
			}
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			return agent.Run(cmd.Context(), o)
		},
	}
	c.Flags().StringVar(&o.ConfigPath, "config", "/etc/edgeplane/config.yaml", "config file")
	c.Flags().StringVar(&o.PinDir, "pin-dir", defaultPinDir, "bpffs directory for pinned maps, program and links (one per gateway)")
	c.Flags().StringVar(&o.MetricsAddr, "metrics-addr", ":9090", "Prometheus listen address (empty to disable)")
	c.Flags().BoolVar(&o.DetachOnExit, "detach-on-exit", false, "detach XDP and remove pins when the agent exits")
	c.Flags().StringVar(&o.GRPCAddr, "grpc-addr", ":50051", "gRPC API listen address (empty to disable; loopback only without --api-tokens/--api-jwt-key)")
	c.Flags().StringVar(&o.RESTAddr, "rest-addr", ":8080", "REST API listen address (empty to disable; same rule)")
	c.Flags().StringVar(&o.APITokens, "api-tokens", "", "file of accepted bearer tokens, one per line")
	c.Flags().StringVar(&o.APIJWTKey, "api-jwt-key", "", "file with the HMAC key of accepted JWT bearer tokens (HS256/384/512, exp required)")
	c.Flags().StringVar(&o.TLSCert, "tls-cert", "", "serve the API over TLS with this certificate (PEM)")
	c.Flags().StringVar(&o.TLSKey, "tls-key", "", "private key of --tls-cert (PEM)")
	c.Flags().BoolVar(&o.NormalGracePeriods, "normal-grace-periods", false, "do not expedite the RCU grace period a commit waits for (commits take 5-20 ms instead of ~0.1 ms; no IPIs)")
	c.Flags().BoolVar(&debug, "debug", false, "debug logging")
	c.Flags().BoolVar(&o.Pprof, "pprof", false, "serve Go profiles under /debug/pprof/ on the metrics address")
	return c
}

func newValidateCmd() *cobra.Command {
	var path string
	var offline bool
	c := &cobra.Command{
		Use:   "validate --config FILE",
		Short: "Check a config file; print every problem as path: reason",
		Long: `Checks the file and, unless --offline, that this host has what it names
(its interfaces): the same checks the agent makes before it applies a
config. Run it where the agent runs (in the gateway's network namespace).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(path)
			if err != nil {
				return err
			}
			if !offline {
				if err := agent.CheckHost(cfg); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), path+": ok")
			return nil
		},
	}
	c.Flags().StringVar(&path, "config", "/etc/edgeplane/config.yaml", "config file")
	c.Flags().BoolVar(&offline, "offline", false, "check only the file, not this host's interfaces")
	return c
}

func newDownCmd() *cobra.Command {
	var pinDir string
	c := &cobra.Command{
		Use:   "down",
		Short: "Detach the dataplane from every interface and remove its pins",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := agent.Down(pinDir); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "removed", pinDir)
			return nil
		},
	}
	c.Flags().StringVar(&pinDir, "pin-dir", defaultPinDir, "bpffs directory of the gateway")
	return c
}
