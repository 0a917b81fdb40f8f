// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
)

// heldGateway is a NoDataplane whose commits can be held: a member that
// reads everything again stays in the middle of it for as long as the
// test likes, to see what the controller says of it meanwhile.
type heldGateway struct {
	*fleetlab.NoDataplane
	mu   sync.Mutex
	held chan struct{}
}

func (g *heldGateway) Apply(ops []config.Op, dryRun bool, rec []byte) (uint32, error) {
	g.mu.Lock()
	h := g.held
	g.mu.Unlock()
	if h != nil {
		<-h
	}
	return g.NoDataplane.Apply(ops, dryRun, rec)
}

func (g *heldGateway) hold() {
	g.mu.Lock()
	g.held = make(chan struct{})
	g.mu.Unlock()
}

// release lets the held commit, if any, through.
func (g *heldGateway) release() {
	g.mu.Lock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
	g.mu.Unlock()
}

// joinHeld starts gateway name's member on a heldGateway.
func (f *testFleet) joinHeld(name string, labels map[string]string) *heldGateway {
	f.labels[name] = labels
	if _, err := f.ctl.SetLabels(context.Background(), f.labels); err != nil {
		f.t.Fatal(err)
	}
	hg := &heldGateway{NoDataplane: fleetlab.NewNoDataplane()}
	tm := &testMember{gw: hg.NoDataplane}
	tm.m = NewMember(f.client(), hg, MemberOptions{Name: name, TTL: 2 * time.Second, Check: time.Second})
	f.run(tm)
	// Cleanups run last first: this one, before the member is stopped,
	// so that a test failing while the gateway is held ends instead of
	// waiting forever for a member stuck in its commit.
	f.t.Cleanup(hg.release)
	f.members[name] = tm
	return hg
}

// listed returns the controller's view of gateway name.
func (f *testFleet) listed(ctl *Controller, name string) *pb.GatewayStatus {
	f.t.Helper()
	gws, err := ctl.Gateways(nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, g := range gws {
		if g.Name == name {
			return g
		}
	}
	f.t.Fatalf("%s not listed: %v", name, gws)
	return nil
}

// waitListed waits until the controller lists every gateway named
// converged at rev or later.
func (f *testFleet) waitListed(ctl *Controller, rev uint64, names ...string) {
	f.t.Helper()
	waitListed(f.t, ctl, rev, names...)
}

// waitListed waits until ctl lists every gateway named converged at rev
// or later (the members write their statuses after they commit).
func waitListed(t *testing.T, ctl *Controller, rev uint64, names ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		gws, err := ctl.Gateways(nil)
		if err != nil {
			t.Fatal(err)
		}
		ok := map[string]bool{}
		for _, g := range gws {
			ok[g.Name] = g.Reachable && g.State == StateConverged && !g.Drift && g.CommittedRevision >= rev
		}
		done := true
		for _, n := range names {
			done = done && ok[n]
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v not all listed converged at %d within 15s: %v", names, rev, gws)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// staysBehind checks, for d and until gateway name's member says it is
// behind because etcd was restored (within 15 s), that the controller
// never lists it converged.
func (f *testFleet) staysBehind(ctl *Controller, name string, d time.Duration) {
	f.t.Helper()
	sawWhy := false
	start := time.Now()
	for ; time.Since(start) < d || !sawWhy; time.Sleep(50 * time.Millisecond) {
		g := f.listed(ctl, name)
		if g.State == StateConverged {
			f.t.Fatalf("%s listed converged while it still serves the state etcd lost: %v", name, g)
		}
		st, _ := f.members[name].m.Status()
		sawWhy = sawWhy || st.State == StateBehind && strings.Contains(st.Error, "restored")
		if time.Since(start) > 15*time.Second {
			f.t.Fatalf("%s's member does not say it is behind because etcd was restored: %+v", name, st)
		}
	}
}

// waitState waits until gateway name's member is in state (15 s).
func (f *testFleet) waitState(name string, state string) {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, _ := f.members[name].m.Status()
		if st.State == state {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s's member not %s within 15s: %+v", name, state, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFleetRestoredEtcd restores etcd under a running fleet to an older
// revision, first from a backup of its members' data while the
// controller runs, then by wiping it and putting back keys exported
// earlier, with a controller started afterwards (the members read the
// wiped etcd before the keys are back). Each time every member
// notices, reads everything again and serves what etcd now holds (the
// FARs applied after the backup are gone); a member held in the middle
// of it is listed behind, never converged, until it has committed; and
// Applies after the restore reach every member, none of them missed.
func TestFleetRestoredEtcd(t *testing.T) {
	f := newTestFleet(t)
	gw1 := f.joinHeld("gw1", map[string]string{"site": "a"})
	gw2 := f.joinHeld("gw2", map[string]string{"site": "a"})
	all := []string{"gw1", "gw2"}
	rev, err := f.apply(nil, farOp("create", 1, "drop"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitListed(f.ctl, rev, all...)

	backup := filepath.Join(t.TempDir(), "backup")
	if err := f.etcd.Backup(backup); err != nil {
		t.Fatal(err)
	}
	for id := uint32(2); id <= 4; id++ {
		if rev, err = f.apply(nil, farOp("create", id, "drop")); err != nil {
			t.Fatal(err)
		}
	}
	f.waitListed(f.ctl, rev, all...)

	// Restored from the backup while the controller runs: gw1 is held
	// in its re-read.
	gw1.hold()
	t0 := time.Now()
	if err := f.etcd.Restore(backup); err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd restored in %s", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	for {
		if st, _ := f.members["gw2"].m.Status(); st.State == StateConverged && len(fars(gw2.NoDataplane)) == 1 {
			break
		}
		if time.Since(t0) > 15*time.Second {
			t.Fatalf("gw2 did not read etcd again within 15s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("gw2 read everything again %s after etcd was back", time.Since(t0).Round(time.Millisecond))
	f.staysBehind(f.ctl, "gw1", 3*time.Second)
	if got := fars(gw1.NoDataplane); len(got) != 4 {
		t.Fatalf("gw1 held: FARs %v, want the 4 it had", got)
	}
	gw1.release()
	rev, err = f.apply(nil, farOp("create", 5, "pass"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitListed(f.ctl, rev, all...)
	for name, gw := range map[string]*heldGateway{"gw1": gw1, "gw2": gw2} {
		if got := fars(gw.NoDataplane); len(got) != 2 || got[1] != "drop" || got[5] != "pass" {
			t.Errorf("%s after the restore: FARs %v, want 1 and 5 (2-4 went with the restore)", name, got)
		}
	}

	// Exported, changed, wiped, put back at a lower revision; a new
	// controller. gw2 is held this time.
	cli := f.client()
	dump, err := cli.Get(context.Background(), DefaultPrefix+"/v1/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if rev, err = f.apply(nil, farOp("create", 6, "drop")); err != nil {
		t.Fatal(err)
	}
	f.waitListed(f.ctl, rev, all...)
	gw2.hold()
	if err := f.etcd.Wipe(); err != nil {
		t.Fatal(err)
	}
	// gw2 reads the wiped etcd before the keys are back, as members do
	// while an operator restores: it must still take what comes back
	// for a restore, though the read in between found nothing.
	f.waitState("gw2", StateWaiting)
	// In one transaction, as a restore is: a member must not read half
	// of it.
	k := newKeys(DefaultPrefix)
	var puts []clientv3.Op
	for _, kv := range dump.Kvs {
		if !strings.HasPrefix(string(kv.Key), k.gateways()) { // leases are not exported
			puts = append(puts, clientv3.OpPut(string(kv.Key), string(kv.Value)))
		}
	}
	if _, err := cli.Txn(context.Background()).Then(puts...).Commit(); err != nil {
		t.Fatal(err)
	}
	ctl, err := NewController(context.Background(), f.client(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.ctl = ctl
	f.staysBehind(ctl, "gw2", 3*time.Second)
	gw2.release()
	rev, err = f.apply(nil, farOp("create", 7, "pass"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitListed(ctl, rev, all...)
	for name, gw := range map[string]*heldGateway{"gw1": gw1, "gw2": gw2} {
		if got := fars(gw.NoDataplane); len(got) != 3 || got[6] != "" || got[7] != "pass" {
			t.Errorf("%s after the wipe: FARs %v, want 1, 5 and 7 (6 went with the wipe)", name, got)
		}
	}
}
