// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
)

// prefixFleet is a controller and members under a prefix of their own in
// a shared etcd cluster.
type prefixFleet struct {
	f       *testFleet
	prefix  string
	ctl     *Controller
	members []*testMember
	names   []string
}

func (f *testFleet) underPrefix(prefix string, n int) *prefixFleet {
	f.t.Helper()
	ctl, err := NewController(context.Background(), f.client(), prefix, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	p := &prefixFleet{f: f, prefix: prefix, ctl: ctl}
	for i := range n {
		tm := &testMember{gw: fleetlab.NewNoDataplane()}
		name := fmt.Sprintf("gw%d", i+1)
		// The default TTL (5 s): a lease lapsing on a loaded machine
		// would be a write of its own (a new alive key).
		tm.m = NewMember(f.client(), tm.gw, MemberOptions{Name: name, Prefix: prefix})
		f.run(tm)
		p.members, p.names = append(p.members, tm), append(p.names, name)
	}
	return p
}

// apply applies ops for all through the controller and waits until
// every member has committed them (seen in the process, not in etcd).
func (p *prefixFleet) apply(ops ...*pb.Operation) int64 {
	p.f.t.Helper()
	cops, err := api.Ops(ops)
	if err != nil {
		p.f.t.Fatal(err)
	}
	rev, err := p.ctl.ApplyTo(nil, cops, false)
	if err != nil {
		p.f.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i, tm := range p.members {
		for st, _ := tm.m.Status(); uint64(st.Committed) < rev; st, _ = tm.m.Status() {
			if time.Now().After(deadline) {
				p.f.t.Fatalf("%s did not commit revision %d within 10s: %+v", p.names[i], rev, st)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return int64(rev)
}

// writes returns the keys written under the prefix from revision from
// to to, both included, as etcd's history holds them.
func (p *prefixFleet) writes(from, to int64) []string {
	p.f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	wc := p.f.client().Watch(ctx, p.prefix+"/v1/", clientv3.WithPrefix(), clientv3.WithRev(from))
	for resp := range wc {
		if err := resp.Err(); err != nil {
			p.f.t.Fatal(err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > to {
				return out
			}
			out = append(out, strings.TrimPrefix(string(ev.Kv.Key), p.prefix+"/v1/"))
		}
		if resp.Header.Revision >= to {
			return out
		}
	}
	p.f.t.Fatalf("history from %d to %d not read: %v", from, to, ctx.Err())
	return nil
}

// now returns etcd's revision.
func (p *prefixFleet) now() int64 {
	p.f.t.Helper()
	r, err := p.f.client().Get(context.Background(), "/nothing")
	if err != nil {
		p.f.t.Fatal(err)
	}
	return r.Header.Revision
}

// TestFleetWritesPerApply: the etcd writes an Apply costs, counted in
// etcd's history from the Apply until every member has committed it,
// are the transaction's three (the object, the scope mark, the revision
// key) at 2 members and at 12: members do not write how far they got
// at each commit. A listing afterwards asks, and each member answers
// with one status write, listed converged.
func TestFleetWritesPerApply(t *testing.T) {
	f := newTestFleet(t)
	const applies = 6
	perApply := map[int]float64{}
	for _, n := range []int{2, 12} {
		p := f.underPrefix(fmt.Sprintf("/writes%d", n), n)
		waitListed(t, p.ctl, 0, p.names...)
		var first, last int64
		for i := range applies {
			op := farOp("create", 7, "drop")
			if i%2 == 1 {
				op = &pb.Operation{Op: &pb.Operation_Delete{Delete: &pb.Ref{Kind: pb.Kind_KIND_FAR, Id: 7}}}
			}
			last = p.apply(op)
			if i == 0 {
				first = last
			}
		}
		end := p.now()
		w := p.writes(first, end)
		t.Logf("%d members: %d Applies, %d writes from revision %d to %d: %v", n, applies, len(w), first, end, w)
		perApply[n] = float64(len(w)) / applies
		for _, key := range w {
			if strings.HasPrefix(key, "gateways/") {
				t.Errorf("%d members: %s written while nobody asked", n, key)
			}
		}
		if perApply[n] != 3 {
			t.Errorf("%d members: %.2f etcd writes per Apply, want 3 (the transaction's)", n, perApply[n])
		}

		// Listed: the controller asks once, each member answers once.
		gws, err := p.ctl.Gateways(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gws {
			if !g.Reachable || g.State != StateConverged || g.Drift || g.CommittedRevision < uint64(last) {
				t.Errorf("%d members: %s listed %s, reachable %v, drift %v, committed %d; want converged at %d",
					n, g.Name, g.State, g.Reachable, g.Drift, g.CommittedRevision, last)
			}
		}
		asked := p.writes(end+1, p.now())
		statuses := 0
		for _, key := range asked {
			if strings.HasSuffix(key, "/status") {
				statuses++
			}
		}
		if len(asked) != n+1 || statuses != n {
			t.Errorf("%d members: a listing wrote %v, want the ask and one status per member", n, asked)
		}
	}
	if perApply[2] != perApply[12] {
		t.Errorf("etcd writes per Apply: %.2f at 2 members, %.2f at 12; want them equal", perApply[2], perApply[12])
	}
}

// TestFleetControllerRestart: a controller started again (its epoch
// moved on, every member's position with it) lists every member
// converged at the new position, and its Applies reach them.
func TestFleetControllerRestart(t *testing.T) {
	f := newTestFleet(t)
	for _, n := range []string{"gw1", "gw2", "gw3"} {
		f.join(n, map[string]string{"site": "a"}, "")
	}
	rev, err := f.apply(nil, farOp("create", 1, "drop"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitListed(f.ctl, rev, "gw1", "gw2", "gw3")
	// The old one stops (it holds nothing but its client); a new one
	// starts on a client of its own.
	ctl, err := NewController(context.Background(), f.client(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.ctl = ctl
	epoch := ctl.position()
	f.waitListed(ctl, uint64(epoch.Rev), "gw1", "gw2", "gw3")
	if rev, err = f.apply(nil, farOp("create", 2, "pass")); err != nil {
		t.Fatal(err)
	}
	f.waitListed(ctl, rev, "gw1", "gw2", "gw3")
	for n, tm := range f.members {
		if got := fars(tm.gw); got[1] != "drop" || got[2] != "pass" {
			t.Errorf("%s after the controller's restart: FARs %v, want 1 drop and 2 pass", n, got)
		}
	}
}

// TestFleetControllerThatDoesNotAsk: under a controller from before
// controllers asked for statuses (its revision key has no asks), a
// member writes its status at every commit, so that such a controller
// lists it converged without asking.
func TestFleetControllerThatDoesNotAsk(t *testing.T) {
	f := newTestFleet(t)
	tm := f.join("gw1", nil, "")
	rev, err := f.apply(nil, farOp("create", 1, "drop"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitListed(f.ctl, rev, "gw1")
	// What such a controller's Apply writes: an object and the revision
	// key, chained to the last, without asks.
	k := newKeys(DefaultPrefix)
	cli := f.client()
	ctx := context.Background()
	cur, err := cli.Get(ctx, k.revision())
	if err != nil {
		t.Fatal(err)
	}
	was := parseRevision(cur.Kvs[0].Value)
	next, _ := json.Marshal(map[string]any{"cluster": was.Cluster, "epoch": was.Epoch, "id": newID(),
		"prev": Position{Rev: cur.Kvs[0].ModRevision, ID: was.ID}})
	tx, err := cli.Txn(ctx).Then(clientv3.OpPut(k.object("all", "far", config.IDKey(2)), `{"far":{"id":2,"action":"drop"}}`),
		clientv3.OpPut(k.revision(), string(next))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	old := tx.Header.Revision
	// Read from etcd, as such a controller does, nobody asking.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := cli.Get(ctx, k.status("gw1"))
		if err != nil {
			t.Fatal(err)
		}
		var st Status
		if len(r.Kvs) > 0 {
			_ = json.Unmarshal(r.Kvs[0].Value, &st)
		}
		if st.Committed >= old && st.State == StateConverged {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("under a controller that does not ask, gw1's status in etcd is %+v, want converged at %d", st, old)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := fars(tm.gw); got[2] != "drop" {
		t.Errorf("FARs %v, want FAR 2 from the controller that does not ask", got)
	}
}
