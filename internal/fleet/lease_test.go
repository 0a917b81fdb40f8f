// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
)

// TestFleetLeaseHeldThenLapsed: renewed half the TTL apart on a stream
// it keeps open, a member's lease holds over several TTLs, through the
// loss of an etcd member; once the gateway dies without revoking it (a
// crash), the controller lists it disconnected within the TTL (and
// etcd's check of expired leases, every 500 ms).
func TestFleetLeaseHeldThenLapsed(t *testing.T) {
	f := newTestFleet(t)
	const ttl = 2 * time.Second
	f.labels["gw1"] = map[string]string{"site": "a"}
	if _, err := f.ctl.SetLabels(context.Background(), f.labels); err != nil {
		t.Fatal(err)
	}
	cli := f.client()
	tm := &testMember{gw: fleetlab.NewNoDataplane(), done: make(chan struct{})}
	tm.m = NewMember(cli, tm.gw, MemberOptions{Name: "gw1", TTL: ttl})
	f.run(tm)
	f.members["gw1"] = tm

	obs := f.client()
	alive := newKeys(DefaultPrefix).alive("gw1")
	lease := func() clientv3.LeaseID {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := obs.Get(ctx, alive)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) == 0 {
			return 0
		}
		return clientv3.LeaseID(r.Kvs[0].Lease)
	}
	var first clientv3.LeaseID
	for deadline := time.Now().Add(10 * time.Second); first == 0; time.Sleep(20 * time.Millisecond) {
		if first = lease(); first == 0 && time.Now().After(deadline) {
			t.Fatal("gw1 wrote no alive key within 10 s")
		}
	}
	// Three TTLs, one etcd member stopped for the middle one (the
	// renewal stream may be on it): the same lease throughout.
	hold := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if l := lease(); l != first {
				t.Fatalf("gw1's alive key is under lease %x, not %x: its lease lapsed while it ran", l, first)
			}
		}
	}
	hold(ttl)
	f.etcd.Stop(1)
	hold(ttl)
	if err := f.etcd.Restart(1); err != nil {
		t.Fatal(err)
	}
	hold(ttl)

	// A crash: the client goes first, so the member cannot revoke.
	left, err := obs.TimeToLive(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	t0 := time.Now()
	tm.stop()
	for {
		gws, err := f.ctl.Gateways(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(gws) == 1 && !gws[0].Reachable && gws[0].State == StateDisconnected {
			break
		}
		// The TTL after the last renewal, which was at most the gap
		// between renewals before; etcd checks expiry every 500 ms;
		// and two seconds for a loaded machine.
		if took := time.Since(t0); took > ttl+2500*time.Millisecond {
			t.Fatalf("gw1 dead for %s and still listed %v", took.Round(time.Millisecond), gws)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("gw1 listed disconnected %s after it died, its lease's TTL left then %d s", time.Since(t0).Round(time.Millisecond), left.TTL)
}
