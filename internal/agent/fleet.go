// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

// FleetOptions join the agent to a fleet (--etcd): its objects come from
// etcd, not from API calls to it.
type FleetOptions struct {
	Client fleet.ClientOptions
	Prefix string
	// Name is the gateway's (default: the host name). Its labels are
	// the operator's, given at the controller: a gateway never chooses
	// what its selectors reach.
	Name string
}

// fleetManaged is the agent as its API serves it in a fleet: the
// controller is where changes are made, so an Apply here (but a dry run)
// is refused instead of being undone at the next reconcile.
type fleetManaged struct{ *Agent }

func (f fleetManaged) Apply(ops []config.Op, dryRun bool, rec []byte) (uint32, error) {
	gen, _, err := f.ApplySynced(ops, dryRun, rec)
	return gen, err
}

// ApplySynced refuses what Apply does: the API prefers it to Apply.
func (f fleetManaged) ApplySynced(ops []config.Op, dryRun bool, rec []byte) (uint32, time.Duration, error) {
	if !dryRun {
		return 0, 0, config.Errors{{Path: "operations", Code: config.CodeInUse,
			Reason: "this gateway is run by a fleet controller (agent --etcd): apply at the controller"}}
	}
	return f.Agent.ApplySynced(ops, dryRun, rec)
}

// fleetStateFile is where the agent keeps the etcd revision it last
// committed, beside its config file.
func fleetStateFile(configPath string) string { return configPath + ".fleet" }

// joinFleet makes the agent's fleet member (a.member), which runFleet
// runs.
func (a *Agent) joinFleet(context.Context) error {
	o := a.opts.Fleet
	name := o.Name
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("gateway name: %w", err)
		}
		name = h
	}
	cli, err := fleet.NewClient(o.Client)
	if err != nil {
		return err
	}
	a.fleetClient = cli
	a.member = fleet.NewMember(cli, a, fleet.MemberOptions{
		Name: name, Prefix: o.Prefix, StateFile: fleetStateFile(a.opts.ConfigPath),
		Health: a.fleetHealth, Log: a.log.With("fleet", strings.Join(o.Client.Endpoints, ",")),
	})
	a.log.Info("fleet: joined", "gateway", name, "etcd", o.Client.Endpoints)
	return nil
}

// runFleet keeps the agent in step with its fleet until ctx ends.
func (a *Agent) runFleet(ctx context.Context) {
	a.member.Run(ctx)
	a.fleetClient.Close()
}

// fleetHealth is what the member reports besides the rules.
func (a *Agent) fleetHealth() fleet.Health {
	_, err := a.dp.Snapshot()
	h := fleet.Health{DataplaneOK: err == nil && a.Health().OK}
	for _, p := range a.PathStatus() {
		if p.State == "down" {
			h.PathsDown++
		} else {
			h.PathsUp++ // up, degraded (still carrying), or not judged yet
		}
	}
	return h
}

// fleetMetrics exposes a member's state.
type fleetMetrics struct {
	m                          *fleet.Member
	connected, committed, info *prometheus.Desc
}

func newFleetMetrics(m *fleet.Member) *fleetMetrics {
	return &fleetMetrics{m: m,
		connected: prometheus.NewDesc("edgeplane_fleet_connected", "1 while the agent reaches etcd (its lease renews), 0 while it serves its last committed state without it.", nil, nil),
		committed: prometheus.NewDesc("edgeplane_fleet_committed_revision", "The etcd revision of the fleet's desired state the gateway serves.", nil, nil),
		info:      prometheus.NewDesc("edgeplane_fleet_state", "1 for the gateway's fleet state: converged, behind, failing or waiting.", []string{"state"}, nil),
	}
}

func (f *fleetMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.connected
	ch <- f.committed
	ch <- f.info
}

func (f *fleetMetrics) Collect(ch chan<- prometheus.Metric) {
	st, ok := f.m.Status()
	c := 0.0
	if ok {
		c = 1
	}
	ch <- prometheus.MustNewConstMetric(f.connected, prometheus.GaugeValue, c)
	ch <- prometheus.MustNewConstMetric(f.committed, prometheus.GaugeValue, float64(st.Committed))
	for _, s := range []string{fleet.StateConverged, fleet.StateBehind, fleet.StateFailing, fleet.StateWaiting} {
		v := 0.0
		if s == st.State {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(f.info, prometheus.GaugeValue, v, s)
	}
}
