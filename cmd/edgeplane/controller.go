// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/internal/agent"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

func newControllerCmd() *cobra.Command {
	var o agent.Options
	e := &etcdFlags{}
	var debug bool
	var labels fleet.LabelSource
	var fromNodes string
	var labelsEvery time.Duration
	c := &cobra.Command{
		Use:   "controller --etcd ENDPOINTS",
		Short: "Serve the v1 API for a fleet of gateways, over their desired state in etcd",
		Long: `Serves the same control API as an agent (gRPC edgeplane.v1 and REST/JSON,
same objects, errors and auth) over a fleet's desired state in etcd.
Each Apply names its target: a gateway (--gateway), the gateways whose
labels match a selector (--selector KEY=VALUE,...), or all; it is checked
against every known gateway it reaches and written as one etcd
transaction, which each gateway's agent (agent --etcd) commits as one
rules generation. edgeplane get gateways lists the gateways with their
heartbeat, committed revision, drift and health. Several controllers may
serve one fleet. The TCP API needs --api-tokens or --api-jwt-key (or
--api-loopback-no-auth); unix sockets are off unless given.

A gateway's labels are the operator's, never its own: the controller
writes them to etcd from --gateway-labels (a file, NAME: {KEY: VALUE})
and --labels-from-nodes (the Kubernetes node of the gateway's name, its
labels under --node-label-prefix with the prefix removed), re-read every
--labels-every, on SIGHUP, and when a gateway joins. Controllers of one
fleet must be given the same sources. Without either, this controller
leaves the labels as they are.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lvl := slog.LevelInfo
			if debug {
				lvl = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			tcpOffWithoutAuth(cmd, &o)
			for _, s := range []*string{&o.APISocket, &o.RESTSocket} {
				if *s == "" {
					*s = "none"
				}
			}
			if o.GRPCAddr == "" && o.RESTAddr == "" && o.APISocket == "none" && o.RESTSocket == "none" {
				return fmt.Errorf("the controller would serve nothing: give --api-tokens or --api-jwt-key (TCP), --api-loopback-no-auth, or --api-socket PATH")
			}
			co := e.options()
			if len(co.Endpoints) == 0 {
				return fmt.Errorf("--etcd: give the endpoints of the fleet's etcd")
			}
			ao, cert, err := agent.APIOptions(o, log)
			if err != nil {
				return err
			}
			cli, err := fleet.NewClient(co)
			if err != nil {
				return err
			}
			defer cli.Close()
			ctl, err := fleet.NewController(cmd.Context(), cli, e.prefix, log)
			if err != nil {
				return err
			}
			reload := make(chan struct{}, 1)
			if fromNodes != "" {
				labels.Nodes = fleet.NodesFile(fromNodes)
				if fromNodes == "in-cluster" {
					labels.Nodes = fleet.InClusterNodes
				}
			}
			if labelsEvery <= 0 {
				return fmt.Errorf("--labels-every: must be positive")
			}
			if labels.File != "" || labels.Nodes != nil {
				// Refused at the start, where the operator sees it; later
				// errors are logged and the labels stay as they are.
				if _, err := ctl.SyncLabels(cmd.Context(), labels); err != nil {
					return err
				}
				go ctl.RunLabels(cmd.Context(), labels, labelsEvery, reload)
			}
			errc := make(chan error, 1)
			ls, err := api.Serve(api.NewServer(ctl), ao, errc)
			if err != nil {
				return err
			}
			defer ls.Close()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			log.Info("controller ready", "etcd", co.Endpoints, "prefix", e.prefix, "grpc", ls.GRPC, "rest", ls.REST)
			for {
				select {
				case <-cmd.Context().Done():
					return nil
				case err := <-errc:
					return err
				case <-hup:
					select {
					case reload <- struct{}{}:
					default:
					}
					if ao.Auth != nil {
						if err := ao.Auth.Reload(); err != nil {
							log.Error("reload api tokens", "error", err)
						}
					}
					if cert != nil {
						if err := cert.Reload(); err != nil {
							log.Error("reload tls certificate; the one loaded before keeps serving", "error", err)
						}
					}
				}
			}
		},
	}
	fs := c.Flags()
	e.add(fs)
	addAPIFlags(fs, &o, "none", "none")
	fs.BoolVar(&debug, "debug", false, "debug logging")
	fs.StringVar(&labels.File, "gateway-labels", "", "file of the gateways' labels, NAME: {KEY: VALUE} (YAML); re-read on SIGHUP")
	fs.StringVar(&fromNodes, "labels-from-nodes", "", "give each gateway the labels of the Kubernetes node of its name: in-cluster (list nodes with the pod's service account) or a file holding a v1 NodeList")
	fs.StringVar(&labels.NodePrefix, "node-label-prefix", fleet.DefaultNodePrefix, "take only the node labels under this prefix, the prefix removed (the default is the one a kubelet may not set on its own node; empty takes them all)")
	fs.DurationVar(&labelsEvery, "labels-every", 10*time.Second, "how often the label sources are read again")
	return c
}
