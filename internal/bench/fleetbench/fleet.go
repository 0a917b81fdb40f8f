// SPDX-License-Identifier: Apache-2.0

// Package fleetbench is the bench's fleet scenario: how long an Apply at
// a controller takes until every member of a fleet over a 3-member etcd
// cluster has committed it, and what it costs in etcd writes, for real
// gateways and for many members without a dataplane.
package fleetbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
	"github.com/edgeplane/edgeplane/internal/fleet"
	"github.com/edgeplane/edgeplane/internal/lab"
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
	// P50Ms, P99Ms, MaxMs and MeanMs are the time from just before the
	// controller's ApplyTo until the bench's watch saw the last member's
	// status carrying the Apply's revision (nearest-rank percentiles).
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
	// RatioFloor divides each by the etcd Put floor's p50.
	RatioFloor Ratios `json:"ratio_to_floor_p50"`
	// ApplyCall* are the controller's ApplyTo call alone (its read of
	// the revision and gateways, its checks, the transaction).
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
	// ListedConverged is the members the controller's gateway list
	// showed reachable, converged and out of drift after the last Apply.
	ListedConverged int `json:"listed_converged"`
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
	methodFleet = "one Apply at a time to a controller in the bench process (fleet.Controller.ApplyTo, target: all gateways), " +
		"alternately creating and deleting one PDR (id 50: in lan0, udp dport 7001, far 3 (drop)), so the config stays small; " +
		"each Apply starts once every member has committed the one before; %d Applies run untimed first; " +
		"a member commits an Apply when its watch of the objects delivers it, and writes its status (committed_revision) to etcd when asked: " +
		"the bench asks (fleet.Controller.Ask) as soon as ApplyTo returned, as a controller listing the gateways does; " +
		"the bench watches v1/gateways/ from a client of its own, started before the members, and times each Apply from just " +
		"before ApplyTo until that watch saw the last member's status with a committed_revision at or past the Apply's revision " +
		"(each member's first such status); percentiles are nearest-rank (with 100 Applies or fewer, p99 is the max); " +
		"a second watch from the same client, on all of v1/, counts the key-write events from the Apply's revision to that last " +
		"status write; every etcd client, the controller's, the bench's and each member's, has its own connections to all three members"
	methodFleetEtcd = "3 members of etcd's own server (go.etcd.io/etcd/server/v3/embed) in the bench process, peers on loopback, " +
		"tick 50 ms, election 500 ms, data (fsynced) in a temp dir; clients served on 0.0.0.0 (reached at 127.0.0.1 from the host, " +
		"at the management links' host end from the gateways); one cluster for both series, each under a prefix of its own"
	methodFleetFloor = "Put of one key (outside the fleets' prefixes) from a client of its own, back to back, after 20 untimed Puts, " +
		"on the idle cluster before the series: client wall time, nearest-rank percentiles; every Put is a raft round and an fsync, as every fleet write is"
	whatGateways = "gateways: edgeplane agent --etcd (the binary under test), each in a network namespace of its own (host A -- gateway -- host B, " +
		"native XDP on veths), reaching etcd over a management veth from the host; an Apply is committed as a rules generation of its dataplane " +
		"with its journal fsynced"
	whatNoDataplane = "members without a dataplane (reconcile loop against a no-op writer): fleet.Member on fleetlab.NewNoDataplane() in the bench " +
		"process, each with an etcd client of its own; a commit checks the batch against the member's config store and keeps it, and writes " +
		"nothing else: the figures are the control plane's alone, not gateways'"
)

// Options are what the scenario takes.
type Options struct {
	// Bins.Edgeplane is the binary the gateways' agents run.
	Bins measure.Binaries
	Log  measure.Logf
}

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
	// 0.0.0.0: the gateways reach it from their namespaces at addresses
	// that exist only once their management links do.
	etcd, err := fleetlab.StartCluster(filepath.Join(dir, "etcd"), 3, "0.0.0.0")
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()
	local := strings.Split(etcd.Endpoints("127.0.0.1"), ",")

	f := &Fleet{Method: fmt.Sprintf(methodFleet, fleetWarmup), Etcd: methodFleetEtcd}
	if f.Floor, err = etcdFloor(ctx, local); err != nil {
		return nil, fmt.Errorf("etcd floor: %w", err)
	}
	o.Log("fleet: etcd Put floor p50 %.2f ms, p99 %.2f ms", f.Floor.P50Ms, f.Floor.P99Ms)

	o.Log("fleet: %d gateways (agents in namespaces), %d Applies", fleetGateways, applies)
	if f.Gateways, err = runFleetGateways(ctx, o, bin, dir, etcd, applies); err != nil {
		return nil, fmt.Errorf("gateways: %w", err)
	}
	o.Log("fleet: %d members without a dataplane, %d Applies", members, applies)
	if f.NoDataplane, err = runFleetNoDataplane(ctx, o, local, applies, members); err != nil {
		return nil, fmt.Errorf("members without a dataplane: %w", err)
	}
	for _, s := range []*Series{&f.Gateways, &f.NoDataplane} {
		s.RatioFloor = Ratios{P50: s.P50Ms / f.Floor.P50Ms, P99: s.P99Ms / f.Floor.P50Ms, Max: s.MaxMs / f.Floor.P50Ms}
	}
	return f, nil
}

// Goals: at 100 members without a dataplane or more, an Apply
// committed by all of them within 100 ms at p99 (the goal; with
// fewer members it says nothing, and is left out).
func Goals(f *Fleet) []measure.Goal {
	if f == nil || f.NoDataplane.Members < 100 {
		return nil
	}
	return []measure.Goal{{Name: fmt.Sprintf("fleet p99 Apply to committed by all %d members without a dataplane (ms)", f.NoDataplane.Members),
		Value: f.NoDataplane.P99Ms, Limit: 100}}
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

// fleetGateway is one real gateway of the scenario: its topology, its
// agent's log and its management link.
type fleetGateway struct {
	*lab.OneGateway
	name string
	mgmt string // the host's end of the management veth
	logf *os.File
}

// runFleetGateways brings up fleetGateways gateways whose agents join a
// fleet under a prefix of its own, runs the series and takes them down.
func runFleetGateways(ctx context.Context, o Options, bin, dir string, etcd *fleetlab.Cluster, applies int) (s Series, err error) {
	rig, err := newFleetRig(ctx, strings.Split(etcd.Endpoints("127.0.0.1"), ","), fleetPrefixGateways)
	if err != nil {
		return s, err
	}
	defer rig.close()
	seed, err := rig.seed()
	if err != nil {
		return s, err
	}
	nets, err := freeMgmtNets(fleetGateways)
	if err != nil {
		return s, err
	}
	tag, err := randomTag()
	if err != nil {
		return s, err
	}
	var gws []*fleetGateway
	defer func() {
		for _, g := range gws {
			g.down(o)
		}
	}()
	var names []string
	for i := range fleetGateways {
		// The prefix names the namespaces (+a, +gw, +b), the pin dir
		// (+gw) and the management link (+m), a link name of at most
		// 15 bytes: "bfl", 6 hex digits, the index and "m" are 11.
		g := &fleetGateway{OneGateway: lab.NewOneGateway(fmt.Sprintf("bfl%s%d", tag, i)), name: fmt.Sprintf("gw%d", i+1)}
		g.mgmt = g.Prefix + "m"
		gws = append(gws, g) // before Up: down removes what a failed Up left
		if g.logf, err = os.Create(filepath.Join(dir, g.name+".log")); err != nil {
			return s, fmt.Errorf("agent log: %w", err)
		}
		if err := g.Up(); err != nil {
			return s, fmt.Errorf("%s up: %w", g.name, err)
		}
		host, peer := fmt.Sprintf("%s.%d.1", fleetMgmtNet, nets[i]), fmt.Sprintf("%s.%d.2", fleetMgmtNet, nets[i])
		if err := lab.LinkManagement(g.GW, g.mgmt, host, peer); err != nil {
			return s, fmt.Errorf("%s: %w", g.name, err)
		}
		// A config file each: an agent locks its own.
		cfgPath := filepath.Join(dir, g.name+".yaml")
		if err := os.WriteFile(cfgPath, []byte(fleetConfig), 0o600); err != nil {
			return s, fmt.Errorf("write agent config: %w", err)
		}
		if err := g.StartAgent(bin, cfgPath, g.logf, "--etcd", etcd.Endpoints(host), "--etcd-prefix", fleetPrefixGateways,
			"--gateway", g.name); err != nil {
			return s, fmt.Errorf("%s: %w", g.name, err)
		}
		names = append(names, g.name)
	}
	alive := func() error {
		for _, g := range gws {
			if !g.running() {
				return fmt.Errorf("%s's agent exited: %s", g.name, logTail(g.logf.Name()))
			}
		}
		return nil
	}
	if err := rig.ob.waitReady(ctx, names, seed, alive); err != nil {
		return s, err
	}
	o.Log("fleet: %d gateways joined and committed the base objects", len(names))
	s, err = rig.series(ctx, o, names, applies)
	if err != nil {
		if aerr := alive(); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return s, err
	}
	s.Name, s.What = "gateways", whatGateways
	return s, nil
}

// running reports whether the gateway's agent still runs (nobody reaps
// it before down: an exited one is a zombie).
func (g *fleetGateway) running() bool {
	cmd := g.Agent()
	if cmd == nil || cmd.Process == nil {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

// down stops the agent (SIGTERM, so it revokes its lease and leaves its
// pins for Down to remove; SIGKILL after 10 s), then removes the
// namespaces, which takes the management veth with them, and the link
// itself should a namespace have failed to go.
func (g *fleetGateway) down(o Options) {
	if cmd := g.Agent(); cmd != nil && cmd.Process != nil {
		done := make(chan struct{})
		go func() { _ = g.StopAgent(syscall.SIGTERM); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			o.Log("fleet: %s's agent ignored SIGTERM for 10 s, killing it", g.name)
			_ = cmd.Process.Kill()
			<-done
		}
	}
	g.Down()
	if _, err := net.InterfaceByName(g.mgmt); err == nil {
		if out, err := exec.Command("ip", "link", "del", g.mgmt).CombinedOutput(); err != nil {
			o.Log("fleet: remove %s: %v: %s", g.mgmt, err, strings.TrimSpace(string(out)))
		}
	}
	if g.logf != nil {
		g.logf.Close()
	}
}

// freeMgmtNets returns n third octets of fleetMgmtNet.X.0/30 that no
// address of the host is in: another run's links keep theirs.
func freeMgmtNets(n int) ([]int, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("host addresses: %w", err)
	}
	used := map[int]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip := ipn.IP.To4(); ip != nil && fmt.Sprintf("%d.%d", ip[0], ip[1]) == fleetMgmtNet {
				used[int(ip[2])] = true
			}
		}
	}
	var out []int
	for x := 0; x < 256 && len(out) < n; x++ {
		if !used[x] {
			out = append(out, x)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("no %d free management subnets in %s.0.0/16", n, fleetMgmtNet)
	}
	return out, nil
}

// randomTag is 6 hex digits, as testutil.UniqueName gives tests, so
// concurrent runs never share a namespace or a link name.
func randomTag() (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// logTail is the end of a log file, for errors.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// runFleetNoDataplane runs n members without a dataplane in this
// process, each with an etcd client of its own, under a prefix of their
// own, runs the series and stops them.
func runFleetNoDataplane(ctx context.Context, o Options, endpoints []string, applies, n int) (s Series, err error) {
	rig, err := newFleetRig(ctx, endpoints, fleetPrefixNoDataplane)
	if err != nil {
		return s, err
	}
	defer rig.close()
	seed, err := rig.seed()
	if err != nil {
		return s, err
	}
	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var clis []*clientv3.Client
	// The members stop before their clients close, so each revokes its
	// lease on the way out.
	defer func() {
		cancel()
		wg.Wait()
		for _, c := range clis {
			c.Close()
		}
	}()
	names := make([]string, n)
	for i := range names {
		cli, err := fleet.NewClient(fleet.ClientOptions{Endpoints: endpoints})
		if err != nil {
			return s, err
		}
		clis = append(clis, cli)
		names[i] = fmt.Sprintf("nd%03d", i)
		m := fleet.NewMember(cli, fleetlab.NewNoDataplane(), fleet.MemberOptions{Name: names[i], Prefix: fleetPrefixNoDataplane})
		wg.Go(func() { m.Run(mctx) })
	}
	if err := rig.ob.waitReady(ctx, names, seed, nil); err != nil {
		return s, err
	}
	o.Log("fleet: %d members without a dataplane joined and committed the base objects", n)
	if s, err = rig.series(ctx, o, names, applies); err != nil {
		return s, err
	}
	s.Name, s.What = "members_without_dataplane", whatNoDataplane
	return s, nil
}

// fleetRig is one series' controller and the bench's watches of its
// prefix.
type fleetRig struct {
	prefix string
	cli    *clientv3.Client // the controller's
	obs    *clientv3.Client // the statuses' watch
	obsAll *clientv3.Client // the watch counting every write
	ctl    *fleet.Controller
	ob     *fleetObserver
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newFleetRig starts a controller of the fleet under prefix and the
// watches, before any member joins.
func newFleetRig(ctx context.Context, endpoints []string, prefix string) (r *fleetRig, err error) {
	r = &fleetRig{prefix: prefix}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.cli, err = fleet.NewClient(fleet.ClientOptions{Endpoints: endpoints}); err != nil {
		return r, err
	}
	if r.obs, err = fleet.NewClient(fleet.ClientOptions{Endpoints: endpoints}); err != nil {
		return r, err
	}
	// The count of every write has a connection of its own: on one
	// stream with the statuses' watch, its bursts (a hundred statuses at
	// once) fill the stream, etcd parks both watches and sends again
	// only at its next 100 ms sync, and the commit times seen lag.
	if r.obsAll, err = fleet.NewClient(fleet.ClientOptions{Endpoints: endpoints}); err != nil {
		return r, err
	}
	if r.ctl, err = fleet.NewController(ctx, r.cli, prefix, nil); err != nil {
		return r, fmt.Errorf("controller: %w", err)
	}
	// The watches start at a revision read first: a watch without one
	// starts wherever the server is when it registers, and could miss
	// what comes between.
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	g, err := r.obs.Get(gctx, prefix+"/v1/layout")
	cancel()
	if err != nil {
		return r, fmt.Errorf("etcd: %w", err)
	}
	var wctx context.Context
	wctx, r.cancel = context.WithCancel(ctx)
	r.ob = newFleetObserver(prefix)
	r.ob.start(wctx, r.obs, r.obsAll, g.Header.Revision+1, &r.wg)
	return r, nil
}

func (r *fleetRig) close() {
	if r.cancel != nil {
		r.cancel()
		r.wg.Wait()
	}
	for _, c := range []*clientv3.Client{r.cli, r.obs, r.obsAll} {
		if c != nil {
			c.Close()
		}
	}
}

// seed gives every gateway the base objects (fleetConfig's) and returns
// the revision.
func (r *fleetRig) seed() (int64, error) {
	cfg, err := yamlcfg.Parse([]byte(fleetConfig))
	if err != nil {
		return 0, err
	}
	s := config.Builtin()
	var in []*pb.Operation
	for _, k := range s.Kinds() {
		for _, obj := range s.Objects(cfg, k) {
			in = append(in, &pb.Operation{Op: &pb.Operation_Create{Create: api.Object(k, api.ToPBRevealed(k, obj))}})
		}
	}
	ops, err := api.Ops(in)
	if err != nil {
		return 0, err
	}
	rev, err := r.ctl.ApplyTo(nil, ops, false)
	if err != nil {
		return 0, fmt.Errorf("seed the fleet: %w", err)
	}
	return int64(rev), nil
}

// fleetOps is Apply i of a series: even ones create the PDR, odd ones
// delete it.
func fleetOps(i int) ([]config.Op, error) {
	op := &pb.Operation{Op: &pb.Operation_Delete{Delete: &pb.Ref{Kind: pb.Kind_KIND_PDR, Id: fleetPDR}}}
	if i%2 == 0 {
		op = &pb.Operation{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Pdr{
			Pdr: &pb.Pdr{Id: fleetPDR, Precedence: 5, Far: 3, Match: &pb.Match{In: "lan0", Proto: "udp", Dport: "7001"}}}}}}
	}
	return api.Ops([]*pb.Operation{op})
}

// series runs fleetWarmup untimed Applies, then applies timed ones, each
// after every member named committed the one before, and counts the
// etcd writes each took.
func (r *fleetRig) series(ctx context.Context, o Options, names []string, applies int) (Series, error) {
	s := Series{Members: len(names), Applies: applies}
	type span struct{ rev, last int64 }
	var d, call []time.Duration
	var spans []span
	for i := range fleetWarmup + applies {
		// Converted anew each time: the controller keeps what it is
		// given.
		ops, err := fleetOps(i)
		if err != nil {
			return s, err
		}
		t0 := time.Now()
		rev, err := r.ctl.ApplyTo(nil, ops, false)
		c := time.Since(t0)
		if err == nil {
			// Members write how far they got when asked: as a
			// controller listing the gateways right after does.
			_, err = r.ctl.Ask(ctx)
		}
		if err != nil {
			return s, fmt.Errorf("apply %d: %w", i-fleetWarmup, err)
		}
		at, last, err := r.ob.waitCommitted(ctx, names, int64(rev), fleetCommitTimeout)
		if err != nil {
			return s, fmt.Errorf("apply %d (revision %d): %w", i-fleetWarmup, rev, err)
		}
		if i < fleetWarmup {
			continue
		}
		d, call = append(d, at.Sub(t0)), append(call, c)
		spans = append(spans, span{int64(rev), last})
		s.AppliesCommitted++
	}
	if err := r.ob.waitRev(ctx, spans[len(spans)-1].last, fleetCommitTimeout); err != nil {
		return s, err
	}
	var writes, txn, status, other, revs int
	for _, sp := range spans {
		for _, ev := range r.ob.eventsIn(sp.rev, sp.last) {
			switch {
			case ev.rev == sp.rev:
				txn++
			case r.ob.isStatus(ev.key):
				status++
			default:
				other++
			}
			writes++
		}
		revs += int(sp.last - sp.rev + 1)
	}
	n := float64(len(spans))
	s.WritesPerApply, s.TxnWritesPerApply, s.StatusWritesPerApply, s.OtherWritesPerApply = float64(writes)/n, float64(txn)/n, float64(status)/n, float64(other)/n
	s.RevisionsPerApply = float64(revs) / n

	sorted := measure.Sorted(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	s.P50Ms, s.P99Ms, s.MaxMs, s.MeanMs = measure.Ms(measure.Pct(sorted, 50)), measure.Ms(measure.Pct(sorted, 99)), measure.Ms(sorted[len(sorted)-1]), measure.Ms(sum)/n
	sc := measure.Sorted(call)
	s.ApplyCallP50Ms, s.ApplyCallMaxMs = measure.Ms(measure.Pct(sc, 50)), measure.Ms(sc[len(sc)-1])

	gws, err := r.ctl.Gateways(nil)
	if err != nil {
		return s, fmt.Errorf("list gateways: %w", err)
	}
	for _, g := range gws {
		if slices.Contains(names, g.GetName()) && g.GetReachable() && g.GetState() == fleet.StateConverged && !g.GetDrift() {
			s.ListedConverged++
		}
	}
	o.Log("fleet: %d members, %d Applies: p50 %.1f ms, p99 %.1f ms, max %.1f ms; %.1f etcd writes per Apply (transaction %.1f, statuses %.1f, other %.1f)",
		len(names), applies, s.P50Ms, s.P99Ms, s.MaxMs, s.WritesPerApply, s.TxnWritesPerApply, s.StatusWritesPerApply, s.OtherWritesPerApply)
	return s, nil
}

// fleetObserver follows a fleet's keys through the bench's own watches:
// the members' statuses (when each was seen to commit what) and every
// key write under v1/ (what an Apply cost).
type fleetObserver struct {
	base string // PREFIX/v1/

	mu sync.Mutex
	// wake is closed, and replaced, whenever something is seen.
	wake chan struct{}
	// status is each member's statuses as seen, in order.
	status map[string][]statusSeen
	// events are the key writes under v1/, in revision order; seenRev
	// the last one's revision.
	events  []fleetEvent
	seenRev int64
	err     error
}

type statusSeen struct {
	committed, rev int64
	state, error   string
	at             time.Time
}

type fleetEvent struct {
	rev int64
	key string
}

func newFleetObserver(prefix string) *fleetObserver {
	return &fleetObserver{base: strings.TrimRight(prefix, "/") + "/v1/", wake: make(chan struct{}), status: map[string][]statusSeen{}}
}

// start watches v1/gateways/ and v1/ from rev until ctx ends.
func (ob *fleetObserver) start(ctx context.Context, cli, cliAll *clientv3.Client, rev int64, wg *sync.WaitGroup) {
	gw := cli.Watch(ctx, ob.base+"gateways/", clientv3.WithPrefix(), clientv3.WithRev(rev))
	all := cliAll.Watch(ctx, ob.base, clientv3.WithPrefix(), clientv3.WithRev(rev))
	wg.Go(func() { ob.follow(ctx, "v1/gateways/", gw, ob.statuses) })
	wg.Go(func() { ob.follow(ctx, "v1/", all, ob.writes) })
}

// follow hands each response of wc to fn, time-stamped on arrival.
func (ob *fleetObserver) follow(ctx context.Context, what string, wc clientv3.WatchChan, fn func(clientv3.WatchResponse, time.Time)) {
	for resp := range wc {
		if err := resp.Err(); err != nil {
			ob.fail(fmt.Errorf("watch of %s: %w", what, err))
			return
		}
		at := time.Now()
		ob.mu.Lock()
		fn(resp, at)
		close(ob.wake)
		ob.wake = make(chan struct{})
		ob.mu.Unlock()
	}
	if ctx.Err() == nil {
		ob.fail(fmt.Errorf("watch of %s closed", what))
	}
}

func (ob *fleetObserver) fail(err error) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.err == nil {
		ob.err = err
	}
	close(ob.wake)
	ob.wake = make(chan struct{})
}

// statuses records the members' statuses of resp; ob.mu held.
func (ob *fleetObserver) statuses(resp clientv3.WatchResponse, at time.Time) {
	for _, ev := range resp.Events {
		name, ok := ob.statusOf(string(ev.Kv.Key))
		if !ok || ev.Type != mvccpb.PUT {
			continue
		}
		var st fleet.Status
		if err := json.Unmarshal(ev.Kv.Value, &st); err != nil {
			continue
		}
		ob.status[name] = append(ob.status[name], statusSeen{committed: st.Committed, rev: ev.Kv.ModRevision, state: st.State, error: st.Error, at: at})
	}
}

// writes records the key writes of resp; ob.mu held.
func (ob *fleetObserver) writes(resp clientv3.WatchResponse, _ time.Time) {
	for _, ev := range resp.Events {
		// A delete event's key-value carries the delete's revision.
		ob.events = append(ob.events, fleetEvent{rev: ev.Kv.ModRevision, key: string(ev.Kv.Key)})
		ob.seenRev = max(ob.seenRev, ev.Kv.ModRevision)
	}
}

// statusOf returns the member whose status key is key.
func (ob *fleetObserver) statusOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, ob.base+"gateways/")
	if !ok {
		return "", false
	}
	esc, ok := strings.CutSuffix(rest, "/status")
	if !ok || strings.Contains(esc, "/") {
		return "", false
	}
	name, err := url.PathUnescape(esc)
	return name, err == nil
}

func (ob *fleetObserver) isStatus(key string) bool {
	_, ok := ob.statusOf(key)
	return ok
}

// committed returns, of the statuses seen of a member, the first to
// carry rev or later; ob.mu held. A member's committed revision only
// grows while it runs, so the search walks back from the last.
func (ob *fleetObserver) committed(name string, rev int64) (statusSeen, bool) {
	h := ob.status[name]
	i := len(h)
	for i > 0 && h[i-1].committed >= rev {
		i--
	}
	if i == len(h) {
		return statusSeen{}, false
	}
	return h[i], true
}

// waitCommitted waits until every member named was seen to commit rev
// and returns when the last of them was seen to and the revision of
// that status write. Each wake looks again only at the members still
// missing, and names them without describing them: at 1,000 members a
// pass over all of them, with a Sprintf each, on every status seen was
// the bench's own quadratic cost.
func (ob *fleetObserver) waitCommitted(ctx context.Context, names []string, rev int64, timeout time.Duration) (time.Time, int64, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	missing := slices.Clone(names)
	var last time.Time
	var lastRev int64
	for {
		ob.mu.Lock()
		still := missing[:0]
		for _, n := range missing {
			s, ok := ob.committed(n, rev)
			if !ok {
				still = append(still, n)
				continue
			}
			if s.at.After(last) {
				last = s.at
			}
			lastRev = max(lastRev, s.rev)
		}
		missing = still
		err, wake := ob.err, ob.wake
		ob.mu.Unlock()
		switch {
		case err != nil:
			return time.Time{}, 0, err
		case len(missing) == 0:
			return last, lastRev, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return time.Time{}, 0, ctx.Err()
		case <-deadline.C:
			return time.Time{}, 0, fmt.Errorf("not committed by every member within %s: %s", timeout, ob.describeAll(missing))
		}
	}
}

// describe says what was last seen of a member; ob.mu held.
func (ob *fleetObserver) describe(name string) string {
	h := ob.status[name]
	if len(h) == 0 {
		return name + ": no status seen"
	}
	s := h[len(h)-1]
	out := fmt.Sprintf("%s: %s at revision %d", name, s.state, s.committed)
	if s.error != "" {
		out += " (" + s.error + ")"
	}
	return out
}

// describeAll describes the first five members named and counts the
// rest.
func (ob *fleetObserver) describeAll(names []string) string {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var out []string
	for i, n := range names {
		if i == 5 {
			out = append(out, fmt.Sprintf("and %d more", len(names)-5))
			break
		}
		out = append(out, ob.describe(n))
	}
	return strings.Join(out, "; ")
}

// waitReady waits until every member named has joined and committed
// rev, converged; alive, if given, fails the wait early.
func (ob *fleetObserver) waitReady(ctx context.Context, names []string, rev int64, alive func() error) error {
	deadline := time.Now().Add(fleetReadyTimeout)
	for {
		ob.mu.Lock()
		var missing []string
		for _, n := range names {
			h := ob.status[n]
			if len(h) == 0 || h[len(h)-1].committed < rev || h[len(h)-1].state != fleet.StateConverged {
				missing = append(missing, n)
			}
		}
		err := ob.err
		ob.mu.Unlock()
		switch {
		case err != nil:
			return err
		case len(missing) == 0:
			return nil
		}
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("members not joined within %s: %s", fleetReadyTimeout, ob.describeAll(missing))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitRev waits until the watch of v1/ has seen revision rev.
func (ob *fleetObserver) waitRev(ctx context.Context, rev int64, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ob.mu.Lock()
		seen, err, wake := ob.seenRev, ob.err, ob.wake
		ob.mu.Unlock()
		switch {
		case err != nil:
			return err
		case seen >= rev:
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the watch of v1/ saw revision %d, not %d, within %s", seen, rev, timeout)
		}
	}
}

// eventsIn returns the key writes seen from revision lo to hi.
func (ob *fleetObserver) eventsIn(lo, hi int64) []fleetEvent {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var out []fleetEvent
	for _, ev := range ob.events {
		if ev.rev >= lo && ev.rev <= hi {
			out = append(out, ev)
		}
	}
	return out
}

// Text renders the floor and each series, a line each.
func (f *Fleet) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "fleet: etcd Put floor (%d back to back): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", f.Floor.Puts, f.Floor.P50Ms, f.Floor.P99Ms, f.Floor.MaxMs)
	for _, s := range []Series{f.Gateways, f.NoDataplane} {
		what, _, _ := strings.Cut(s.What, ":")
		fmt.Fprintf(&sb, "fleet, %d %s, %d Applies, until all committed: p50 %.1f ms (%.1fx floor), p99 %.1f ms (%.1fx), max %.1f ms (%.1fx); "+
			"ApplyTo p50 %.1f ms; etcd writes per Apply %.1f (transaction %.1f, statuses %.1f, other %.1f), revisions %.1f\n",
			s.Members, what, s.Applies, s.P50Ms, s.RatioFloor.P50, s.P99Ms, s.RatioFloor.P99, s.MaxMs, s.RatioFloor.Max,
			s.ApplyCallP50Ms, s.WritesPerApply, s.TxnWritesPerApply, s.StatusWritesPerApply, s.OtherWritesPerApply, s.RevisionsPerApply)
	}
	return sb.String()
}
