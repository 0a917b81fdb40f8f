// SPDX-License-Identifier: Apache-2.0

package fleetbench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

// fleetRig is one series' controller (a process of its own, reached
// over its gRPC API as an operator's client does) and the bench's
// watches of its prefix.
type fleetRig struct {
	prefix string
	ctl    *child
	conn   *grpc.ClientConn
	api    pb.GatewayClient
	obs    *clientv3.Client // the statuses' watch, and the bench's asks
	obsAll *clientv3.Client // the watch counting every write
	ob     *fleetObserver
	meter  *meter
	seeded int64 // the revision of the base objects
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newFleetRig starts a controller (bin controller) of the fleet under
// prefix and the watches, before any member joins, and gives every
// gateway the base objects (fleetConfig's), at r.seeded.
func newFleetRig(ctx context.Context, bin, dir string, etcd *child, endpoints []string, prefix string) (r *fleetRig, err error) {
	r = &fleetRig{prefix: prefix}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	port, err := fleetlab.FreePort("127.0.0.1")
	if err != nil {
		return r, err
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	if r.ctl, _, err = startChild("controller"+strings.ReplaceAll(prefix, "/", "-"), dir, bin, false, "controller",
		"--etcd", strings.Join(endpoints, ","), "--etcd-prefix", prefix, "--grpc-addr", addr, "--rest-addr", "", "--api-loopback-no-auth"); err != nil {
		return r, err
	}
	r.meter = newMeter(r.ctl, etcd)
	// Serving once it has written the layout and moved the epoch on.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) || r.ctl.cmd.ProcessState != nil {
			return r, fmt.Errorf("controller not serving on %s within 30 s: %s", addr, logTail(r.ctl.logf.Name()))
		}
	}
	if r.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return r, err
	}
	r.api = pb.NewGatewayClient(r.conn)
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
	// The watches start at a revision read first: a watch without one
	// starts wherever the server is when it registers, and could miss
	// what comes between.
	rev, err := r.now(ctx)
	if err != nil {
		return r, err
	}
	var wctx context.Context
	wctx, r.cancel = context.WithCancel(ctx)
	r.ob = newFleetObserver(prefix)
	r.ob.start(wctx, r.obs, r.obsAll, rev+1, &r.wg)
	r.seeded, err = r.seed(ctx)
	return r, err
}

func (r *fleetRig) close() {
	if r.cancel != nil {
		r.cancel()
		r.wg.Wait()
	}
	for _, c := range []*clientv3.Client{r.obs, r.obsAll} {
		if c != nil {
			c.Close()
		}
	}
	if r.conn != nil {
		r.conn.Close()
	}
	r.ctl.stop()
}

// now returns etcd's revision.
func (r *fleetRig) now(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g, err := r.obs.Get(ctx, r.prefix+"/v1/layout")
	if err != nil {
		return 0, fmt.Errorf("etcd: %w", err)
	}
	return g.Header.Revision, nil
}

// apply applies ops for every gateway through the controller's API and
// returns the revision that holds them.
func (r *fleetRig) apply(ctx context.Context, ops []*pb.Operation) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := r.api.Apply(ctx, &pb.ApplyRequest{Operations: ops})
	if err != nil {
		return 0, err
	}
	return int64(resp.GetRevision()), nil
}

// ask asks the members for their statuses as a controller does.
func (r *fleetRig) ask(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := r.obs.Put(ctx, fleet.PollKey(r.prefix), fmt.Sprint(time.Now().UnixNano()))
	return err
}

// seed gives every gateway the base objects (fleetConfig's) and returns
// the revision.
func (r *fleetRig) seed(ctx context.Context) (int64, error) {
	cfg, err := yamlcfg.Parse([]byte(fleetConfig))
	if err != nil {
		return 0, err
	}
	s := config.Builtin()
	var ops []*pb.Operation
	for _, k := range s.Kinds() {
		for _, obj := range s.Objects(cfg, k) {
			ops = append(ops, &pb.Operation{Op: &pb.Operation_Create{Create: api.Object(k, api.ToPBRevealed(k, obj))}})
		}
	}
	rev, err := r.apply(ctx, ops)
	if err != nil {
		return 0, fmt.Errorf("seed the fleet: %w", err)
	}
	return rev, nil
}

// fleetOps is Apply i of a series: even ones create the PDR, odd ones
// delete it.
func fleetOps(i int) []*pb.Operation {
	op := &pb.Operation{Op: &pb.Operation_Delete{Delete: &pb.Ref{Kind: pb.Kind_KIND_PDR, Id: fleetPDR}}}
	if i%2 == 0 {
		op = &pb.Operation{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Pdr{
			Pdr: &pb.Pdr{Id: fleetPDR, Precedence: 5, Far: 3, Match: &pb.Match{In: "lan0", Proto: "udp", Dport: "7001"}}}}}}
	}
	return []*pb.Operation{op}
}

// timed are the figures common to a series' ways of timing its Applies.
type timed struct {
	d, call []time.Duration
	spans   []span
}

// span is an Apply's revision and the last revision its figures take in.
type span struct{ rev, last int64 }

// series runs fleetWarmup untimed Applies, then applies timed ones, each
// followed by an ask for statuses and started after every member named
// was seen (in its status in etcd) to commit the one before, and counts
// the etcd writes each took.
func (r *fleetRig) series(ctx context.Context, o Options, names []string, applies int) (Series, error) {
	s := Series{Members: len(names), Applies: applies}
	var t timed
	for i := range fleetWarmup + applies {
		if i == fleetWarmup {
			if err := r.meter.begin(); err != nil {
				return s, err
			}
		}
		t0 := time.Now()
		rev, err := r.apply(ctx, fleetOps(i))
		c := time.Since(t0)
		if err == nil {
			err = r.ask(ctx)
		}
		if err != nil {
			return s, fmt.Errorf("apply %d: %w", i-fleetWarmup, err)
		}
		at, last, err := r.ob.waitCommitted(ctx, names, rev, fleetCommitTimeout)
		if err != nil {
			return s, fmt.Errorf("apply %d (revision %d): %w", i-fleetWarmup, rev, err)
		}
		if i >= fleetWarmup {
			t.add(at.Sub(t0), c, span{rev, last})
		}
	}
	costs, err := r.meter.end(applies)
	if err != nil {
		return s, err
	}
	s.Costs = costs
	s.AppliesCommitted = len(t.d)
	if s.Timing, err = r.figures(ctx, t); err != nil {
		return s, err
	}
	if s.ListedConverged, _, err = r.listed(ctx, names); err != nil {
		return s, err
	}
	o.Log("fleet: %d members, %d Applies, each asked for statuses: p50 %.1f ms, p99 %.1f ms, max %.1f ms; %.1f etcd writes per Apply (transaction %.1f, statuses %.1f, other %.1f)",
		len(names), applies, s.P50Ms, s.P99Ms, s.MaxMs, s.WritesPerApply, s.TxnWritesPerApply, s.StatusWritesPerApply, s.OtherWritesPerApply)
	return s, nil
}

func (t *timed) add(d, call time.Duration, sp span) {
	t.d, t.call, t.spans = append(t.d, d), append(t.call, call), append(t.spans, sp)
}

// figures makes t's figures, once the watch of v1/ has seen the last
// span's end.
func (r *fleetRig) figures(ctx context.Context, t timed) (Timing, error) {
	var f Timing
	if err := r.ob.waitRev(ctx, t.spans[len(t.spans)-1].last, fleetCommitTimeout); err != nil {
		return f, err
	}
	var writes, txn, status, other, revs int
	for _, sp := range t.spans {
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
	n := float64(len(t.spans))
	f.WritesPerApply, f.TxnWritesPerApply, f.StatusWritesPerApply, f.OtherWritesPerApply = float64(writes)/n, float64(txn)/n, float64(status)/n, float64(other)/n
	f.RevisionsPerApply = float64(revs) / n
	sorted := measure.Sorted(t.d)
	var sum time.Duration
	for _, v := range t.d {
		sum += v
	}
	f.P50Ms, f.P99Ms, f.MaxMs, f.MeanMs = measure.Ms(measure.Pct(sorted, 50)), measure.Ms(measure.Pct(sorted, 99)), measure.Ms(sorted[len(sorted)-1]), measure.Ms(sum)/n
	sc := measure.Sorted(t.call)
	f.ApplyCallP50Ms, f.ApplyCallMaxMs = measure.Ms(measure.Pct(sc, 50)), measure.Ms(sc[len(sc)-1])
	return f, nil
}

// listed returns how many of the members named the controller lists
// reachable, converged and out of drift (it asks for their statuses
// when some have not reported the last change), and how long the
// listing took.
func (r *fleetRig) listed(ctx context.Context, names []string) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	resp, err := r.api.ListGateways(ctx, &pb.ListRequest{})
	took := time.Since(t0)
	if err != nil {
		return 0, took, fmt.Errorf("list gateways: %w", err)
	}
	n := 0
	for _, g := range resp.GetGateways() {
		if slices.Contains(names, g.GetName()) && g.GetReachable() && g.GetState() == fleet.StateConverged && !g.GetDrift() {
			n++
		}
	}
	return n, took, nil
}

// idle measures the processes' costs over fleetIdle with nothing
// applied, after a second for the joins to settle.
func (r *fleetRig) idle(ctx context.Context) (Costs, error) {
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if err := wait(time.Second); err != nil {
		return Costs{}, err
	}
	if err := r.meter.begin(); err != nil {
		return Costs{}, err
	}
	if err := wait(fleetIdle); err != nil {
		return Costs{}, err
	}
	// Per Apply means nothing here: the share of a CPU does.
	return r.meter.end(1)
}

// unasked runs fleetWarmup untimed Applies, then applies timed ones with
// nobody asking for statuses, each after every member committed the one
// before; wait blocks until every member has committed the Apply under
// way and says when the last did (expect starts each Apply's count).
func (r *fleetRig) unasked(ctx context.Context, o Options, names []string, applies int, expect func(), wait func(context.Context) (time.Time, error)) (*Unasked, error) {
	var t timed
	for i := range fleetWarmup + applies {
		if i == fleetWarmup {
			if err := r.meter.begin(); err != nil {
				return nil, err
			}
		}
		expect()
		t0 := time.Now()
		rev, err := r.apply(ctx, fleetOps(i))
		c := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("apply %d: %w", i-fleetWarmup, err)
		}
		at, err := wait(ctx)
		if err != nil {
			return nil, fmt.Errorf("apply %d (revision %d): %w", i-fleetWarmup, rev, err)
		}
		if i >= fleetWarmup {
			t.add(at.Sub(t0), c, span{rev, 0})
		}
	}
	costs, err := r.meter.end(applies)
	if err != nil {
		return nil, err
	}
	// Each span ends where the next Apply begins, the last at etcd's
	// revision once every member had committed it: what the members
	// wrote meanwhile (nothing, unless asked or their state changed)
	// counts.
	end, err := r.now(ctx)
	if err != nil {
		return nil, err
	}
	for i := range t.spans {
		t.spans[i].last = end
		if i+1 < len(t.spans) {
			t.spans[i].last = t.spans[i+1].rev - 1
		}
	}
	tm, err := r.figures(ctx, t)
	if err != nil {
		return nil, err
	}
	f := Unasked{Applies: len(t.d), Timing: tm, Costs: costs}
	// What an operator sees listing the gateways now: the controller
	// asks, and each member answers with the status it did not write.
	var took time.Duration
	if f.ListedConverged, took, err = r.listed(ctx, names); err != nil {
		return nil, err
	}
	f.ListMs = measure.Ms(took)
	members := len(names)
	o.Log("fleet: %d members, %d Applies, nobody asking: until all committed p50 %.1f ms, p99 %.1f ms, max %.1f ms; %.1f etcd writes per Apply (transaction %.1f, statuses %.1f, other %.1f); CPU per Apply: controller %.2f ms, etcd %.2f ms, members and bench %.2f ms",
		members, applies, f.P50Ms, f.P99Ms, f.MaxMs, f.WritesPerApply, f.TxnWritesPerApply, f.StatusWritesPerApply, f.OtherWritesPerApply,
		costs.Controller.CPUMsPerApply, costs.Etcd.CPUMsPerApply, costs.MembersAndBench.CPUMsPerApply)
	return &f, nil
}
