// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgeplane/edgeplane/internal/agent"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

const defaultPinDir = "/sys/fs/bpf/edgeplane"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "edgeplane",
		Short:         "eBPF/XDP dataplane for private-5G and SD-WAN edge gateways",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newAgentCmd(), newValidateCmd(), newStatsCmd(), newDownCmd(),
		newGetCmd(), newApplyCmd(), newDeleteCmd(), newFlowsCmd(), newControllerCmd(), newJournalCmd())
	return root
}

func newAgentCmd() *cobra.Command {
	var o agent.Options
	var debug bool
	var finishFleet func() error
	c := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Load the dataplane on the configured interfaces and serve it",
		Long: `Loads (or adopts an already pinned) XDP dataplane, attaches it to the
configured interfaces, writes the rules and serves Prometheus metrics and
the control API (gRPC edgeplane.v1 and REST/JSON, OpenAPI at
/openapi.json): to root on unix sockets in /run/edgeplane/PIN-DIR/, and
over TCP (:50051, :8080) with bearer tokens. An API change is committed
atomically and written back to the config file, which always holds what
serves. SIGHUP re-reads the config and applies the difference
atomically (an invalid config is refused and the live rules keep
serving), and re-reads the API's tokens, JWT key and certificate. On exit the
dataplane stays attached and forwarding (pinned) unless --detach-on-exit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lvl := slog.LevelInfo
			if debug {
				lvl = slog.LevelDebug
			}
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			tcpOffWithoutAuth(cmd, &o)
			if err := finishFleet(); err != nil {
				return err
			}
			return agent.Run(cmd.Context(), o)
		},
	}
	fs := c.Flags()
	fs.StringVar(&o.ConfigPath, "config", "/etc/edgeplane/config.yaml", "config file")
	fs.StringVar(&o.PinDir, "pin-dir", defaultPinDir, "bpffs directory for pinned maps, program and links (one per gateway)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "127.0.0.1:9090", "Prometheus listen address, unauthenticated: give an address beyond loopback to expose it (empty to disable)")
	fs.BoolVar(&o.DetachOnExit, "detach-on-exit", false, "detach XDP and remove pins when the agent exits")
	addAPIFlags(fs, &o, agent.DefaultAPISocket("PIN-DIR")+", PIN-DIR the last element of --pin-dir", agent.DefaultRESTSocket("PIN-DIR"))
	fs.BoolVar(&o.NormalGracePeriods, "normal-grace-periods", false, "do not expedite the RCU grace period a commit waits for (commits take 5-20 ms instead of ~0.1 ms; no IPIs)")
	fs.BoolVar(&debug, "debug", false, "debug logging")
	fs.BoolVar(&o.Pprof, "pprof", false, "serve Go profiles under /debug/pprof/ on --metrics-addr (which must be loopback)")
	fs.StringVar(&o.PprofAddr, "pprof-addr", "", "serve Go profiles under /debug/pprof/ on this loopback address, unauthenticated (see --pprof-beyond-loopback)")
	fs.BoolVar(&o.PprofBeyondLoopback, "pprof-beyond-loopback", false, "let --pprof-addr be an address beyond loopback: anyone who reaches it reads the agent's profiles (its memory, goroutine stacks) and makes it profile itself")
	fs.BoolVar(&o.SchedExt, "sched-ext", false, "schedule every task with edgeplane's sched_ext scheduler, priority strategies' processes first with their execution_time as slice (kernels with CONFIG_SCHED_CLASS_EXT; without it the agent says so and uses real-time policies)")
	fs.StringVar(&o.N4Addr, "n4-addr", "", "serve N4 (PFCP, for a 5G core's SMF) on this UDP address, e.g. 10.0.0.1:8805 (empty: no N4); unauthenticated, as N4 is: give an address only the core's network reaches")
	fs.DurationVar(&o.N3EchoInterval, "n3-echo-interval", 0, "how often the user plane sends a GTP-U Echo Request to each gNB or N3IWF a multi-access session steers over (0: 1s); one left unanswered twice in a row is down until it answers")
	fs.StringVar(&o.N3Addr, "n3-addr", "", "the user plane's GTP-U address on N3 (IPv4, IPv6, or one of each comma-separated; needs --n4-addr): XDP answers GTP-U echo requests there and drops G-PDUs of no session")
	fs.StringVar(&o.N4NodeID, "n4-node-id", "", "the node ID SMFs see: an IP address or an FQDN (default: --n4-addr's address)")
	finishFleet = addFleetFlags(fs, &o.Fleet)
	fs.StringVar(&o.PodList, "pod-list", "", "where CPU strategies' pod_labels are read: the kubelet's pod list (https://127.0.0.1:10250/pods, with the service account's token and CA when mounted) or a file holding a v1 PodList")
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
			cfg, err := yamlcfg.Load(path)
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

// addAPIFlags declares the control API's flags of o (the agent's and the
// controller's), the unix sockets' defaults named as given.
func addAPIFlags(fs *pflag.FlagSet, o *agent.Options, grpcSock, restSock string) {
	fs.StringVar(&o.GRPCAddr, "grpc-addr", ":50051", "gRPC API TCP listen address, with --api-tokens/--api-jwt-key (else off unless given with --api-loopback-no-auth; empty to disable)")
	fs.StringVar(&o.RESTAddr, "rest-addr", ":8080", "REST API TCP listen address (same rule)")
	fs.StringVar(&o.APISocket, "api-socket", "", "gRPC API unix socket, root only, no tokens (default "+grpcSock+"; none to disable)")
	fs.StringVar(&o.RESTSocket, "rest-socket", "", "REST API unix socket, root only, no tokens (default "+restSock+"; none to disable)")
	fs.BoolVar(&o.APILoopbackNoAuth, "api-loopback-no-auth", false, "serve the TCP API without tokens, on loopback only (any local user can then drive the dataplane)")
	fs.StringVar(&o.APITokens, "api-tokens", "", "file of accepted bearer tokens, one per line (re-read on SIGHUP)")
	fs.StringVar(&o.APIJWTKey, "api-jwt-key", "", "file with the HMAC key of accepted JWT bearer tokens (HS256/384/512, exp required; re-read on SIGHUP)")
	fs.StringVar(&o.JWT.Audience, "api-jwt-audience", "", "accept only JWTs whose aud includes this")
	fs.StringVar(&o.JWT.Issuer, "api-jwt-issuer", "", "accept only JWTs whose iss is this")
	fs.DurationVar(&o.JWT.Leeway, "api-jwt-leeway", api.DefaultJWTLeeway, "clock skew allowed on a JWT's exp, nbf and iat")
	fs.DurationVar(&o.JWT.MaxLifetime, "api-jwt-max-lifetime", api.DefaultJWTMaxLifetime, "refuse JWTs valid for longer than this (exp after iat, or after now; 0: no cap)")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "serve the TCP API over TLS with this certificate (PEM; re-read on SIGHUP)")
	fs.StringVar(&o.TLSKey, "tls-key", "", "private key of --tls-cert (PEM)")
}

// tcpOffWithoutAuth turns the TCP API off when no tokens are given and
// its addresses were left at their defaults: the unix socket serves
// root, and a loopback port would serve every local user.
func tcpOffWithoutAuth(cmd *cobra.Command, o *agent.Options) {
	if o.APITokens == "" && o.APIJWTKey == "" && !o.APILoopbackNoAuth {
		for flag, addr := range map[string]*string{"grpc-addr": &o.GRPCAddr, "rest-addr": &o.RESTAddr} {
			if !cmd.Flags().Changed(flag) {
				*addr = ""
			}
		}
	}
}

// etcdFlags are the flags that reach etcd, the agent's and the
// controller's.
type etcdFlags struct {
	endpoints string
	client    fleet.ClientOptions
	prefix    string
}

func (e *etcdFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&e.endpoints, "etcd", "", "etcd endpoints, comma-separated (http://10.0.0.1:2379,...)")
	fs.StringVar(&e.prefix, "etcd-prefix", fleet.DefaultPrefix, "the fleet's keys in etcd live under PREFIX/v1/")
	fs.StringVar(&e.client.CA, "etcd-ca", "", "CA certificate (PEM) that verifies etcd's members")
	fs.StringVar(&e.client.Cert, "etcd-cert", "", "client certificate (PEM) for etcd's mutual TLS")
	fs.StringVar(&e.client.Key, "etcd-key", "", "private key of --etcd-cert")
	fs.StringVar(&e.client.User, "etcd-user", "", "etcd user (auth enabled; a gateway's own user may write only its status: see docs/fleet.md)")
	fs.StringVar(&e.client.PasswordFile, "etcd-password-file", "", "file holding --etcd-user's password")
}

func (e *etcdFlags) options() fleet.ClientOptions {
	o := e.client
	for _, ep := range strings.Split(e.endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			o.Endpoints = append(o.Endpoints, ep)
		}
	}
	return o
}

// addFleetFlags declares the agent's fleet flags and returns what sets
// *f from them once parsed (when --etcd is given).
func addFleetFlags(fs *pflag.FlagSet, f **agent.FleetOptions) func() error {
	e := &etcdFlags{}
	e.add(fs)
	fo := &agent.FleetOptions{}
	var labels, fromNode string
	fs.StringVar(&fo.Name, "gateway", "", "the gateway's name in the fleet (default: the host name); its labels are given at the controller")
	// A gateway's labels decide what its selectors give it, so they are
	// the operator's, set at the controller: these flags only say so.
	fs.StringVar(&labels, "labels", "", "")
	fs.StringVar(&fromNode, "labels-from-node", "", "")
	_ = fs.MarkHidden("labels")
	_ = fs.MarkHidden("labels-from-node")
	return func() error {
		for flag, v := range map[string]string{"--labels": labels, "--labels-from-node": fromNode} {
			if v != "" {
				return fmt.Errorf("%s: a gateway's labels are given at the controller (controller --gateway-labels FILE or --labels-from-nodes), not chosen by the gateway", flag)
			}
		}
		if e.endpoints == "" {
			return nil
		}
		fo.Client, fo.Prefix = e.options(), e.prefix
		*f = fo
		return nil
	}
}
