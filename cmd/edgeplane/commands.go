// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/agent"
	"github.com/edgeplane/edgeplane/internal/bpf"
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

func newStatsCmd() *cobra.Command {
	var pinDir string
	var asJSON bool
	var af apiFlags
	c := &cobra.Command{
		Use:   "stats",
		Short: "Print counters read straight from the pinned maps (no agent needed), or with --server from an agent's API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("server") {
				s, err := apiStats(cmd, &af)
				if err != nil {
					return err
				}
				return printStats(cmd, s, asJSON)
			}
			if f := apiFlagWithoutServer(cmd); f != "" {
				return fmt.Errorf("--%s needs --server", f)
			}
			s, err := bpf.PinnedSnapshot(pinDir)
			if err != nil {
				return err
			}
			return printStats(cmd, s, asJSON)
		},
	}
	c.Flags().StringVar(&pinDir, "pin-dir", defaultPinDir, "bpffs directory of the gateway")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	af.register(c)
	c.MarkFlagsMutuallyExclusive("server", "pin-dir")
	return c
}

// statsJSON is the stable JSON shape of `edgeplane stats --json`.
type statsJSON struct {
	Generation uint32                      `json:"generation"`
	PDRs       map[string]bpf.Counter      `json:"pdrs"`
	Verdicts   map[string]bpf.Counter      `json:"verdicts"`
	Reasons    map[string]bpf.Counter      `json:"reasons"`
	FlowCache  map[string]uint64           `json:"flow_cache"`
	Paths      map[string]bpf.PathCounters `json:"paths"`
	Backends   []backendJSON               `json:"backends,omitempty"`
}

// backendJSON is one service backend's counters (far 0: the service's
// NAT replies).
type backendJSON struct {
	Service  uint32 `json:"service"`
	FAR      uint32 `json:"far"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
	NewConns uint64 `json:"new_connections"`
	Active   uint64 `json:"active_connections"`
}

func printStats(cmd *cobra.Command, s *bpf.Snapshot, asJSON bool) error {
	out := statsJSON{
		Generation: s.Gen,
		PDRs:       map[string]bpf.Counter{},
		Verdicts:   map[string]bpf.Counter{},
		Reasons:    map[string]bpf.Counter{},
		FlowCache:  map[string]uint64{"hit": s.CacheHit, "miss": s.CacheMiss},
		Paths:      map[string]bpf.PathCounters{},
	}
	for id, c := range s.Paths {
		out.Paths[fmt.Sprint(id)] = c
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, backendJSON{Service: b.Service, FAR: b.FAR, Packets: b.Packets, Bytes: b.Bytes,
			NewConns: b.NewConns, Active: b.Active})
	}
	for id, c := range s.PDRs {
		out.PDRs[fmt.Sprint(id)] = c
	}
	for i, c := range s.Verdicts {
		out.Verdicts[bpf.VerdictNames[i]] = c
	}
	for i, c := range s.Reasons {
		if i != bpf.ReasonNone {
			out.Reasons[bpf.ReasonNames[i]] = c
		}
	}
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "generation %d\t\t\t\n\n", s.Gen)
	fmt.Fprintln(w, "PDR\tPACKETS\tBYTES\t")
	ids := make([]uint32, 0, len(s.PDRs))
	for id := range s.PDRs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		fmt.Fprintf(w, "%d\t%d\t%d\t\n", id, s.PDRs[id].Packets, s.PDRs[id].Bytes)
	}
	fmt.Fprintln(w, "\t\t\t\nVERDICT\tPACKETS\tBYTES\t")
	for i, c := range s.Verdicts {
		fmt.Fprintf(w, "%s\t%d\t%d\t\n", bpf.VerdictNames[i], c.Packets, c.Bytes)
	}
	fmt.Fprintln(w, "\t\t\t\nREASON\tPACKETS\tBYTES\t")
	for i, c := range s.Reasons {
		if i != bpf.ReasonNone && c.Packets > 0 {
			fmt.Fprintf(w, "%s\t%d\t%d\t\n", bpf.ReasonNames[i], c.Packets, c.Bytes)
		}
	}
	if len(s.Paths) > 0 {
		fmt.Fprintln(w, "\t\t\t\nPATH\tTX PKTS/BYTES\tRX PKTS/BYTES\t")
		pids := make([]uint32, 0, len(s.Paths))
		for id := range s.Paths {
			pids = append(pids, id)
		}
		sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
		for _, id := range pids {
			c := s.Paths[id]
			fmt.Fprintf(w, "%d\t%d / %d\t%d / %d\t\n", id, c.Tx.Packets, c.Tx.Bytes, c.Rx.Packets, c.Rx.Bytes)
		}
	}
	if len(s.Backends) > 0 {
		fmt.Fprintln(w, "\t\t\t\nSERVICE/FAR\tPKTS/BYTES\tNEW/ACTIVE CONNS\t")
		for _, b := range s.Backends {
			name := fmt.Sprintf("%d/%d", b.Service, b.FAR)
			if b.FAR == 0 {
				name = fmt.Sprintf("%d/replies", b.Service)
			}
			fmt.Fprintf(w, "%s\t%d / %d\t%d / %d\t\n", name, b.Packets, b.Bytes, b.NewConns, b.Active)
		}
	}
	fmt.Fprintf(w, "\t\t\t\nflow cache\thit %d\tmiss %d\t\n", s.CacheHit, s.CacheMiss)
	return w.Flush()
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
