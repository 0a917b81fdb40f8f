// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
)

func farOp(verb string, id uint32, action string) *pb.Operation {
	o := &pb.Object{Kind: &pb.Object_Far{Far: &pb.Far{Id: id, Action: action}}}
	if verb == "update" {
		return &pb.Operation{Op: &pb.Operation_Update{Update: o}}
	}
	return &pb.Operation{Op: &pb.Operation_Create{Create: o}}
}

func pdrOp(id, far uint32, dport string) *pb.Operation {
	return &pb.Operation{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Pdr{Pdr: &pb.Pdr{
		Id: id, Precedence: 10, Far: far, Match: &pb.Match{Proto: "udp", Dport: dport}}}}}}
}

// testFleet is a 3-member etcd cluster, a controller and members on
// NoDataplane gateways.
type testFleet struct {
	t       *testing.T
	etcd    *fleetlab.Cluster
	ctl     *Controller
	members map[string]*testMember
	// labels are the gateways' labels, as the operator gives them to
	// the controller.
	labels map[string]map[string]string
}

type testMember struct {
	m      *Member
	gw     *fleetlab.NoDataplane
	cancel context.CancelFunc
	done   chan struct{}
}

func newTestFleet(t *testing.T) *testFleet {
	c, err := fleetlab.StartCluster(t.TempDir(), 3, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &testFleet{t: t, etcd: c, members: map[string]*testMember{}, labels: map[string]map[string]string{}}
	f.ctl, err = NewController(context.Background(), f.client(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *testFleet) client() *clientv3.Client {
	cli, err := NewClient(ClientOptions{Endpoints: strings.Split(f.etcd.Endpoints(""), ",")})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { cli.Close() })
	return cli
}

// join gives gateway name labels at the controller and starts its
// member.
func (f *testFleet) join(name string, labels map[string]string, stateFile string) *testMember {
	f.labels[name] = labels
	if _, err := f.ctl.SetLabels(context.Background(), f.labels); err != nil {
		f.t.Fatal(err)
	}
	tm := &testMember{gw: fleetlab.NewNoDataplane(), done: make(chan struct{})}
	tm.m = NewMember(f.client(), tm.gw, MemberOptions{Name: name, TTL: 2 * time.Second, StateFile: stateFile})
	f.run(tm)
	f.members[name] = tm
	return tm
}

func (f *testFleet) run(tm *testMember) {
	ctx, cancel := context.WithCancel(context.Background())
	tm.cancel, tm.done = cancel, make(chan struct{})
	go func() { tm.m.Run(ctx); close(tm.done) }()
	f.t.Cleanup(func() { tm.stop() })
}

func (tm *testMember) stop() {
	tm.cancel()
	<-tm.done
}

// apply applies ops to target t through the API server, as a client of
// the controller does.
func (f *testFleet) apply(t *pb.Target, ops ...*pb.Operation) (uint64, error) {
	r, err := api.NewServer(f.ctl).Apply(context.Background(), &pb.ApplyRequest{Operations: ops, Target: t})
	return r.GetRevision(), err
}

// waitCommitted waits until the members named have committed rev.
func (f *testFleet) waitCommitted(rev uint64, names ...string) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range names {
		for {
			st, _ := f.members[n].m.Status()
			if uint64(st.Committed) >= rev {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("%s did not commit revision %d within 10s: %+v", n, rev, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func fars(gw *fleetlab.NoDataplane) map[uint32]string {
	out := map[uint32]string{}
	for _, f := range gw.Config().FARs {
		out[f.ID] = f.Action
	}
	return out
}

// TestFleetTargets applies to a label group, one gateway and all, and
// checks each member holds exactly what targets it, and what the
// controller refuses.
func TestFleetTargets(t *testing.T) {
	f := newTestFleet(t)
	f.join("gw1", map[string]string{"site": "a"}, "")
	f.join("gw2", map[string]string{"site": "a"}, "")
	f.join("gw3", map[string]string{"site": "b"}, "")
	siteA := &pb.Target{Selector: map[string]string{"site": "a"}}

	rev, err := f.apply(siteA, farOp("create", 1, "drop"), pdrOp(1, 1, "7777"))
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := f.apply(&pb.Target{Gateway: "gw3"}, farOp("create", 2, "pass"))
	if err != nil {
		t.Fatal(err)
	}
	rev3, err := f.apply(nil, farOp("create", 9, "drop"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitCommitted(rev3, "gw1", "gw2", "gw3")
	want := map[string]map[uint32]string{
		"gw1": {1: "drop", 9: "drop"}, "gw2": {1: "drop", 9: "drop"}, "gw3": {2: "pass", 9: "drop"}}
	for n, w := range want {
		if got := fars(f.members[n].gw); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s holds FARs %v, want %v", n, got, w)
		}
	}
	if len(f.members["gw1"].gw.Config().PDRs) != 1 || len(f.members["gw3"].gw.Config().PDRs) != 0 {
		t.Errorf("PDRs: gw1 %v, gw3 %v; want one on gw1, none on gw3", f.members["gw1"].gw.Config().PDRs, f.members["gw3"].gw.Config().PDRs)
	}
	t.Logf("revisions %d %d %d", rev, rev2, rev3)

	// Refused like an agent refuses: a field error at its operation's
	// path, and nothing written.
	_, err = f.apply(siteA, pdrOp(2, 42, "7778"))
	if err == nil || !strings.Contains(err.Error(), "operations[0].create.pdr.far") {
		t.Errorf("a PDR whose FAR no gateway of site=a has: %v, want an error at operations[0].create.pdr.far", err)
	}
	// An id that gateway gw1 already gets from site=a.
	_, err = f.apply(&pb.Target{Gateway: "gw1"}, farOp("create", 1, "pass"))
	if err == nil || !strings.Contains(err.Error(), "gateway gw1") || !strings.Contains(err.Error(), "AlreadyExists") && !strings.Contains(err.Error(), "exists") {
		t.Errorf("FAR 1 for gw1, which site=a gives it: %v, want it refused as existing for gateway gw1", err)
	}
	// A reference across targets is fine: FAR 9 is for all.
	rev4, err := f.apply(siteA, pdrOp(3, 9, "7779"))
	if err != nil {
		t.Fatalf("a site=a PDR using FAR 9 (for all): %v", err)
	}
	// gw3 is not targeted, but follows the fleet's revision all the same.
	f.waitCommitted(rev4, "gw1", "gw2", "gw3")

	// The members write their statuses as they commit: listed converged
	// once etcd holds them.
	var gws []*pb.GatewayStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if gws, err = f.ctl.Gateways(nil); err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, g := range gws {
			ok = ok && g.Reachable && !g.Drift && g.State == StateConverged
		}
		if ok || time.Now().After(deadline) {
			break
		}
	}
	for _, g := range gws {
		t.Logf("%s: reachable %v, committed %d, state %s, drift %v, objects %d", g.Name, g.Reachable, g.CommittedRevision, g.State, g.Drift, g.Objects)
		if !g.Reachable || g.Drift || g.State != StateConverged {
			t.Errorf("%s: reachable %v, drift %v, state %s; want reachable, converged", g.Name, g.Reachable, g.Drift, g.State)
		}
	}
	if len(gws) != 3 {
		t.Errorf("%d gateways listed, want 3", len(gws))
	}
	if gws, _ := f.ctl.Gateways(map[string]string{"site": "b"}); len(gws) != 1 || gws[0].Name != "gw3" {
		t.Errorf("site=b lists %v, want gw3", gws)
	}
}

// TestFleetFailures: an etcd member killed, a member away while the
// fleet changes and etcd compacts, and a gateway whose lease lapses.
func TestFleetFailures(t *testing.T) {
	f := newTestFleet(t)
	state := t.TempDir() + "/fleet.json"
	f.join("gw1", map[string]string{"site": "a"}, state)
	gw2 := f.join("gw2", map[string]string{"site": "a"}, "")
	siteA := &pb.Target{Selector: map[string]string{"site": "a"}}
	rev, err := f.apply(siteA, farOp("create", 1, "drop"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitCommitted(rev, "gw1", "gw2")

	// One etcd member of three down: the fleet keeps its quorum.
	f.etcd.Stop(0)
	rev, err = f.apply(siteA, farOp("update", 1, "pass"))
	if err != nil {
		t.Fatalf("apply with one etcd member down: %v", err)
	}
	f.waitCommitted(rev, "gw1", "gw2")
	if err := f.etcd.Restart(0); err != nil {
		t.Fatal(err)
	}

	// gw2 away; the fleet changes and etcd compacts the revisions it
	// missed: back, it reads everything and converges.
	gw2.stop()
	for i := uint32(2); i < 6; i++ {
		if rev, err = f.apply(siteA, farOp("create", i, "drop")); err != nil {
			t.Fatal(err)
		}
	}
	cli := f.client()
	if _, err := cli.Compact(context.Background(), int64(rev)); err != nil {
		t.Fatal(err)
	}
	f.run(gw2)
	f.waitCommitted(rev, "gw1", "gw2")
	if got := len(fars(gw2.gw)); got != 5 {
		t.Errorf("gw2 after compaction: %d FARs, want 5", got)
	}

	// gw1 stops without revoking (a crash): its lease lapses within the
	// TTL and the controller lists it unreachable; its state file keeps
	// the revision it committed.
	gw1 := f.members["gw1"]
	gw1.stop() // revokes: gone at once
	gws, err := f.ctl.Gateways(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gws {
		if g.Name == "gw1" && (g.Reachable || g.State != StateDisconnected) {
			t.Errorf("gw1 stopped: reachable %v, state %s; want unreachable, disconnected", g.Reachable, g.State)
		}
	}
	if c, err := readState(state); err != nil || uint64(c) < rev {
		t.Errorf("state file: committed %d (%v), want at least %d", c, err, rev)
	}
	// Changed while gw1 is away: it is in drift until it is back.
	if rev, err = f.apply(siteA, farOp("create", 7, "drop")); err != nil {
		t.Fatal(err)
	}
	gws, _ = f.ctl.Gateways(nil)
	for _, g := range gws {
		if g.Name == "gw1" && !g.Drift {
			t.Errorf("gw1 away while site=a changed: drift %v, want true", g.Drift)
		}
	}
	m := NewMember(f.client(), gw1.gw, MemberOptions{Name: "gw1", StateFile: state, TTL: 2 * time.Second})
	if st, _ := m.Status(); st.Committed == 0 {
		t.Errorf("a restarted member starts at committed 0; the state file said more")
	}
	gw1.m = m
	f.run(gw1)
	f.waitCommitted(rev, "gw1")
}

// TestFleetConcurrentControllers: two controllers applying at once never
// lose a batch.
func TestFleetConcurrentControllers(t *testing.T) {
	f := newTestFleet(t)
	other, err := NewController(context.Background(), f.client(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var errs [2]error
	for i, c := range []*Controller{f.ctl, other} {
		wg.Go(func() {
			for j := range 20 {
				ops, err := api.Ops([]*pb.Operation{farOp("create", uint32(1+i*100+j), "drop")})
				if err == nil {
					_, err = c.ApplyTo(nil, ops, false)
				}
				if err != nil {
					errs[i] = errors.Join(errs[i], err)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := other.ViewTarget(nil, func(s *config.Store) { n = len(s.List(config.KindFAR)) }); err != nil {
		t.Fatal(err)
	}
	if n != 40 {
		t.Errorf("%d FARs after 40 creates from two controllers", n)
	}
}

// TestFleetNoLayout: a member pointed at a prefix no controller has set
// up commits nothing (its gateway keeps what it serves) and says why.
func TestFleetNoLayout(t *testing.T) {
	f := newTestFleet(t)
	gw := fleetlab.NewNoDataplane()
	ops, err := api.Ops([]*pb.Operation{farOp("create", 5, "drop")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Apply(ops, false, nil); err != nil {
		t.Fatal(err)
	}
	m := NewMember(f.client(), gw, MemberOptions{Name: "gw1", Prefix: "/elsewhere", TTL: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := m.Status()
		if st.State == StateWaiting {
			if !strings.Contains(st.Error, "/elsewhere/v1/layout") {
				t.Errorf("waiting, but the error does not name the layout key: %q", st.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a member on an empty prefix: state %q, want %q", st.State, StateWaiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := fars(gw); len(got) != 1 || got[5] != "drop" {
		t.Errorf("the gateway's FARs after a member on an empty prefix: %v, want FAR 5 kept", got)
	}
}

// TestFleetUnreadableObject: an object a member cannot read (a newer
// controller's field, a damaged value) stops it from committing, rather
// than committing a state without it; the gateway keeps what it served.
func TestFleetUnreadableObject(t *testing.T) {
	f := newTestFleet(t)
	tm := f.join("gw1", nil, "")
	rev, err := f.apply(nil, farOp("create", 1, "drop"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitCommitted(rev, "gw1")
	k := newKeys(DefaultPrefix)
	cli := f.client()
	if _, err := cli.Put(context.Background(), k.object("all", "far", config.IDKey(1)), `{"far":{"id":1,"action":"drop","from_the_future":true}}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := tm.m.Status()
		if st.State == StateFailing && strings.Contains(st.Error, "unreadable object") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a member given an unreadable object: %+v, want failing", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := fars(tm.gw); got[1] != "drop" {
		t.Errorf("the gateway's FARs with an unreadable object: %v, want FAR 1 kept", got)
	}
	// Readable again: converged.
	rev, err = f.apply(nil, farOp("update", 1, "pass"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitCommitted(rev, "gw1")
	if got := fars(tm.gw); got[1] != "pass" {
		t.Errorf("after the object was rewritten: %v, want FAR 1 pass", got)
	}
}
