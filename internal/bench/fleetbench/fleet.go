// SPDX-License-Identifier: Apache-2.0

// Package fleetbench is the bench's fleet scenario: how long an Apply at
// a controller takes until every member of a fleet over a 3-member etcd
// cluster has committed it, and what it costs in etcd writes, CPU time
// and memory, for real gateways and for many members without a
// dataplane.
package fleetbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

// Fleet is the fleet scenario (--scenario fleet): how long an Apply at
// the controller takes until every gateway of a fleet has committed it,
// and how many etcd writes it costs, for real gateways and for many
// members without a dataplane, beside etcd's own round trip measured in
// the same run.
type Fleet struct {
	Method string `json:"method"`
	Etcd   string `json:"etcd"`
	// Floor is etcd's round trip here, the baseline the series' figures
	// are divided by.
	Floor EtcdFloor `json:"etcd_put_floor"`
	// Gateways are real gateways: agents with a dataplane in namespaces.
	Gateways Series `json:"gateways"`
	// NoDataplane are members without a dataplane: the reconcile loop
	// against a writer that checks and keeps the config and writes
	// nothing else. It measures the control plane alone, not gateways.
	NoDataplane Series `json:"members_without_dataplane"`
}

// EtcdFloor is the time of a Put of one key, back to back.
type EtcdFloor struct {
	Puts   int     `json:"puts"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	Method string  `json:"method"`
}

// Series is one series of Applies to one set of members.
type Series struct {
	Name string `json:"name"`
	// What says what the members are; the figures are theirs alone.
	What    string `json:"what"`
	Members int    `json:"members"`
	Applies int    `json:"applies"`
	// AppliesCommitted is the Applies every member was seen to commit
	// (a run in which one is not fails instead).
	AppliesCommitted int `json:"applies_committed_by_all"`
	Timing
	// RatioFloor divides each by the etcd Put floor's p50.
	RatioFloor Ratios `json:"ratio_to_floor_p50"`
	// ListedConverged is the members the controller's gateway list
	// showed reachable, converged and out of drift after the last Apply.
	ListedConverged int `json:"listed_converged"`
	// Costs are the processes' over the timed Applies.
	Costs Costs `json:"costs"`
	// Unasked is the same Applies with nobody asking for statuses, timed
	// until every member has committed (members without a dataplane
	// only: the bench sees them commit).
	Unasked *Unasked `json:"unasked,omitempty"`
	// MembersPerClient is how many members share an etcd client (members
	// without a dataplane).
	MembersPerClient int `json:"members_per_etcd_client,omitempty"`
	// Idle is the processes' costs with the members joined and nothing
	// applied, over fleetIdle (members without a dataplane, 100 or more;
	// its per-Apply figures are the window's totals): what a
	// quiet fleet costs etcd, its lease renewals and each member's check
	// of etcd's history, which every Apply competes with.
	Idle *Costs `json:"idle,omitempty"`
}

// Timing is a series' figures over its timed Applies.
type Timing struct {
	// P50Ms, P99Ms, MaxMs and MeanMs are the time from just before the
	// Apply until the bench's watch saw the last member's status
	// carrying the Apply's revision (nearest-rank percentiles), the
	// bench asking for statuses, as a controller listing the gateways
	// does, as soon as the Apply returned.
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
	// ApplyCall* are the Apply call alone (the controller's read of the
	// revision and gateways, its checks, the transaction, the gRPC call).
	ApplyCallP50Ms float64 `json:"apply_call_p50_ms"`
	ApplyCallMaxMs float64 `json:"apply_call_max_ms"`
	// WritesPerApply is the key-write events (puts and deletes) a watch
	// on the fleet's whole v1/ prefix saw from an Apply's transaction to
	// the status write of the last member to commit it, averaged over
	// the Applies: TxnWrites (the transaction's own: the objects, the
	// scope mark, the revision key), StatusWrites (the members') and
	// OtherWrites (anything else meanwhile: the ask, a lease's alive
	// key).
	WritesPerApply       float64 `json:"etcd_writes_per_apply"`
	TxnWritesPerApply    float64 `json:"txn_writes_per_apply"`
	StatusWritesPerApply float64 `json:"status_writes_per_apply"`
	OtherWritesPerApply  float64 `json:"other_writes_per_apply"`
	// RevisionsPerApply is the etcd revisions over the same span, both
	// ends counted.
	RevisionsPerApply float64 `json:"etcd_revisions_per_apply"`
}

// Unasked are a series' figures with nobody asking for statuses: from
// just before the Apply until the last member's gateway had applied it
// (its Apply returned, seen in the bench process), and the etcd writes
// from the Apply's transaction until the next Apply (the last: until
// every member had committed it). A member writes no status for a
// commit nobody asks about, so the writes are the transaction's.
type Unasked struct {
	Applies int `json:"applies"`
	Timing
	Costs Costs `json:"costs"`
	// ListMs is a listing of the gateways at the controller right after
	// the last Apply, which asks for the statuses nobody asked for and
	// waits for the answers; ListedConverged the members it lists
	// reachable, converged and out of drift.
	ListMs          float64 `json:"list_ms"`
	ListedConverged int     `json:"listed_converged"`
}

// Ratios are a series' figures over the floor's p50.
type Ratios struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

const (
	// fleetGateways is the real gateways of the scenario.
	fleetGateways = 3
	// fleetWarmup Applies run untimed before each series (an even count,
	// so the timed ones start with a create): connections, caches and
	// the agents' first commits of the PDR.
	fleetWarmup = 4
	// fleetFloorPuts are the Puts the floor times, after 20 untimed
	// ones (the connections, the leader's first proposals).
	fleetFloorPuts = 200
	// fleetCommitTimeout bounds the wait for every member to commit one
	// Apply; a member that does not fails the run.
	fleetCommitTimeout = 30 * time.Second
	// fleetReadyTimeout bounds the wait for the members to join.
	fleetReadyTimeout = 60 * time.Second
	// fleetIdle is how long the members without a dataplane are left
	// idle, once joined, to measure what they cost then: a few of their
	// lease renewals and history checks each, after a second to settle.
	fleetIdle = 15 * time.Second
	// fleetPDR is the PDR the Applies create and delete in turn.
	fleetPDR = 50
	// fleetMgmtNet is the /16 of the gateways' management links, one
	// /30 each (TestFleet uses 10.250, the fleet lab 10.252).
	fleetMgmtNet = "10.251"
	// Each series has a prefix of its own in the one etcd cluster, so
	// the controller of one never sees the other's members.
	fleetPrefixGateways    = "/edgeplane-bench-gateways"
	fleetPrefixNoDataplane = "/edgeplane-bench-nodataplane"
	fleetFloorKey          = "/edgeplane-bench-floor"
)

const (
	methodFleet = "one Apply at a time to a controller (edgeplane controller, a process of its own, over its gRPC API on loopback; " +
		"target: all gateways), alternately creating and deleting one PDR (id 50: in lan0, udp dport 7001, far 3 (drop)), so the config stays small; " +
		"each Apply starts once every member has committed the one before; %d Applies run untimed first; " +
		"a member commits an Apply when its watch of the objects delivers it, and writes its status (committed_revision) to etcd when asked; " +
		"the series' figures ask after each Apply (the bench rewrites v1/poll as a controller listing the gateways does), " +
		"and the bench watches v1/gateways/ from a client of its own, started before the members, and times each Apply from just " +
		"before the call until that watch saw the last member's status with a committed_revision at or past the Apply's revision " +
		"(each member's first such status); the unasked figures (members without a dataplane) ask nothing and time each Apply " +
		"until the last member's gateway had applied it, seen in the bench process; percentiles are nearest-rank " +
		"(with 100 Applies or fewer, p99 is the max); a second watch, on all of v1/, counts the key-write events from the Apply's " +
		"revision to that last status write (unasked: to the next Apply, the last to etcd's revision once all had committed); " +
		"the controller's and the bench's etcd clients have connections of their own to all three members, the members share theirs " +
		"(members_per_etcd_client), where each gateway has its own: a thousand clients in one process on 2 CPUs measure the " +
		"process's scheduling more than the fleet"
	methodFleetEtcd = "3 members of etcd's own server (go.etcd.io/etcd/server/v3/embed) in a process of their own (edgeplane-dev etcd), peers on loopback, " +
		"tick 50 ms, election 500 ms, data (fsynced) in a temp dir; clients served on 0.0.0.0 (reached at 127.0.0.1 from the host, " +
		"at the management links' host end from the gateways); one cluster for both series, each under a prefix of its own"
	methodFleetFloor = "Put of one key (outside the fleets' prefixes) from a client of its own, back to back, after 20 untimed Puts, " +
		"on the idle cluster before the series: client wall time, nearest-rank percentiles; every Put is a raft round and an fsync, as every fleet write is"
	whatGateways = "gateways: edgeplane agent --etcd (the binary under test), each in a network namespace of its own (host A -- gateway -- host B, " +
		"native XDP on veths), reaching etcd over a management veth from the host; an Apply is committed as a rules generation of its dataplane " +
		"with its journal fsynced"
	whatNoDataplane = "members without a dataplane (reconcile loop against a no-op writer): fleet.Member on fleetlab.NewNoDataplane() in the bench " +
		"process, members_per_etcd_client of them on each etcd client; a commit checks the batch against the member's config store and keeps it, and writes " +
		"nothing else: the figures are the control plane's alone, not gateways'"
)

// Options are what the scenario takes.
type Options struct {
	// Bins.Edgeplane is the binary the gateways' agents and the
	// controllers run, Bins.Dev the one etcd runs in.
	Bins measure.Binaries
	Log  measure.Logf
	// MembersPerClient is how many members without a dataplane share an
	// etcd client (0: defaultMembersPerClient).
	MembersPerClient int
}

// defaultMembersPerClient: 25 members on each etcd client, 40 clients at
// 1,000 members. At one client each, the 1,000 clients' connections,
// streams and lease renewals make this process's scheduling on 2 CPUs
// the figure (p50 472 ms without a status written, against 60-95 ms at
// 50 on each, in one window); a real gateway has a client and a
// machine of its own. What etcd sees per member is the same either way:
// a watcher, a lease and its renewals.
const defaultMembersPerClient = 25

// fleetConfig is what every gateway of the scenario serves, given for all
// and each agent's config file, so joining the fleet changes nothing.
const fleetConfig = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: redirect, interface: lan0}
  - {id: 3, action: drop}
pdrs:
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.2.0.0/24}, far: 1}
  - {id: 30, precedence: 100, match: {in: wan0, dst: 10.1.0.0/24}, far: 2}
limits: {flows: 65536, rules: 1024}
`

// Run starts a 3-member etcd cluster, measures its Put floor, then
// each series, and removes everything, also on error.
func Run(ctx context.Context, o Options, applies, members int) (*Fleet, error) {
	perClient := o.MembersPerClient
	if perClient <= 0 {
		perClient = defaultMembersPerClient
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the gateways need %s: %w", tool, err)
		}
	}
	bin, err := o.Bins.Gateway()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "epfleet")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	o.Log("fleet: starting a 3-member etcd cluster")
	// Every address: the gateways reach it from their namespaces at
	// addresses that exist only once their management links do.
	etcd, endpoints, err := startEtcd(o.Bins.Dev, dir)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	defer etcd.stop()
	local := endpointsAt(endpoints, "127.0.0.1")

	f := &Fleet{Method: fmt.Sprintf(methodFleet, fleetWarmup), Etcd: methodFleetEtcd}
	if f.Floor, err = etcdFloor(ctx, local); err != nil {
		return nil, fmt.Errorf("etcd floor: %w", err)
	}
	o.Log("fleet: etcd Put floor p50 %.2f ms, p99 %.2f ms", f.Floor.P50Ms, f.Floor.P99Ms)

	o.Log("fleet: %d gateways (agents in namespaces), %d Applies", fleetGateways, applies)
	if f.Gateways, err = runFleetGateways(ctx, o, bin, dir, etcd, endpoints, applies); err != nil {
		return nil, fmt.Errorf("gateways: %w", err)
	}
	o.Log("fleet: %d members without a dataplane, %d Applies", members, applies)
	if f.NoDataplane, err = runFleetNoDataplane(ctx, o, bin, dir, etcd, local, applies, members, perClient); err != nil {
		return nil, fmt.Errorf("members without a dataplane: %w", err)
	}
	for _, s := range []*Series{&f.Gateways, &f.NoDataplane} {
		s.RatioFloor = Ratios{P50: s.P50Ms / f.Floor.P50Ms, P99: s.P99Ms / f.Floor.P50Ms, Max: s.MaxMs / f.Floor.P50Ms}
	}
	return f, nil
}

// Goals: at 100 members without a dataplane or more, an Apply
// committed by all of them within 100 ms at p99, nobody asking for
// statuses, with the etcd writes of the Apply's transaction alone (with
// fewer members they say nothing, and are left out).
func Goals(f *Fleet) []measure.Goal {
	if f == nil || f.NoDataplane.Members < 100 || f.NoDataplane.Unasked == nil {
		return nil
	}
	u := f.NoDataplane.Unasked
	n := f.NoDataplane.Members
	return []measure.Goal{
		{Name: fmt.Sprintf("fleet p99 Apply to committed by all %d members without a dataplane, nobody asking for statuses (ms)", n),
			Value: u.P99Ms, Limit: 100},
		{Name: fmt.Sprintf("fleet etcd writes per Apply at %d members, nobody asking for statuses (the transaction's 3)", n),
			Value: u.WritesPerApply, Limit: 3},
	}
}

// etcdFloor times fleetFloorPuts Puts of one key.
func etcdFloor(ctx context.Context, endpoints []string) (EtcdFloor, error) {
	cli, err := fleet.NewClient(fleet.ClientOptions{Endpoints: endpoints})
	if err != nil {
		return EtcdFloor{}, err
	}
	defer cli.Close()
	put := func(i int) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		t0 := time.Now()
		_, err := cli.Put(cctx, fleetFloorKey, strconv.Itoa(i))
		return time.Since(t0), err
	}
	for i := range 20 {
		if _, err := put(i); err != nil {
			return EtcdFloor{}, err
		}
	}
	d := make([]time.Duration, fleetFloorPuts)
	for i := range d {
		if d[i], err = put(i); err != nil {
			return EtcdFloor{}, err
		}
	}
	s := measure.Sorted(d)
	return EtcdFloor{Puts: len(d), P50Ms: measure.Ms(measure.Pct(s, 50)), P99Ms: measure.Ms(measure.Pct(s, 99)), MaxMs: measure.Ms(s[len(s)-1]), Method: methodFleetFloor}, nil
}

// Text renders the floor and each series, a line each.
func (f *Fleet) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "fleet: etcd Put floor (%d back to back): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", f.Floor.Puts, f.Floor.P50Ms, f.Floor.P99Ms, f.Floor.MaxMs)
	for _, s := range []Series{f.Gateways, f.NoDataplane} {
		what, _, _ := strings.Cut(s.What, ":")
		fmt.Fprintf(&sb, "fleet, %d %s, %d Applies, each asked for statuses, until all committed: p50 %.1f ms (%.1fx floor), p99 %.1f ms (%.1fx), max %.1f ms (%.1fx); "+
			"Apply call p50 %.1f ms; etcd writes per Apply %.1f (transaction %.1f, statuses %.1f, other %.1f), revisions %.1f\n",
			s.Members, what, s.Applies, s.P50Ms, s.RatioFloor.P50, s.P99Ms, s.RatioFloor.P99, s.MaxMs, s.RatioFloor.Max,
			s.ApplyCallP50Ms, s.WritesPerApply, s.TxnWritesPerApply, s.StatusWritesPerApply, s.OtherWritesPerApply, s.RevisionsPerApply)
		sb.WriteString(s.Costs.text())
		if c := s.Idle; c != nil {
			fmt.Fprintf(&sb, "fleet, %d %s, idle for %.0f s: CPU share etcd %.2f, members and bench %.2f, controller %.2f\n",
				s.Members, what, c.Seconds, c.Etcd.CPUShare, c.MembersAndBench.CPUShare, c.Controller.CPUShare)
		}
		if u := s.Unasked; u != nil {
			fmt.Fprintf(&sb, "fleet, %d %s, %d Applies, nobody asking for statuses, until all committed: p50 %.1f ms, p99 %.1f ms, max %.1f ms; "+
				"etcd writes per Apply %.1f (transaction %.1f, statuses %.1f, other %.1f); then a listing, asking: %.0f ms, %d listed converged\n",
				s.Members, what, u.Applies, u.P50Ms, u.P99Ms, u.MaxMs, u.WritesPerApply, u.TxnWritesPerApply, u.StatusWritesPerApply, u.OtherWritesPerApply,
				u.ListMs, u.ListedConverged)
			sb.WriteString(u.Costs.text())
		}
	}
	return sb.String()
}

// text renders the costs on one line.
func (c Costs) text() string {
	return fmt.Sprintf("  CPU ms per Apply (share of a CPU), resident MiB (peak): controller %.2f (%.2f), %.0f (%.0f); etcd %.2f (%.2f), %.0f (%.0f); members and bench %.2f (%.2f), %.0f (%.0f)\n",
		c.Controller.CPUMsPerApply, c.Controller.CPUShare, c.Controller.RSSMiB, c.Controller.PeakRSSMiB,
		c.Etcd.CPUMsPerApply, c.Etcd.CPUShare, c.Etcd.RSSMiB, c.Etcd.PeakRSSMiB,
		c.MembersAndBench.CPUMsPerApply, c.MembersAndBench.CPUShare, c.MembersAndBench.RSSMiB, c.MembersAndBench.PeakRSSMiB)
}
