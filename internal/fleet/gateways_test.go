// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"maps"
	"slices"
	"testing"
)

// TestControllerGatewaysBetweenReads: the gateways a controller checks
// a batch against, which it no longer reads in full at every Apply, are
// at each step those a full read finds: after gateways joined, after
// one left as another joined (the same count of keys), after one of a
// gateway's keys went (it is still there by the other), after a gateway
// left and came back, and after etcd lost what it had.
func TestControllerGatewaysBetweenReads(t *testing.T) {
	f := newTestFleet(t)
	cli, ctl, ctx := f.client(), f.ctl, context.Background()
	put := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, err := cli.Put(ctx, k, "x"); err != nil {
				t.Fatal(err)
			}
		}
	}
	del := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, err := cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	k := ctl.k
	check := func(step string, want ...string) {
		t.Helper()
		ctl.mu.Lock()
		err := ctl.readGateways(ctx)
		got := slices.Sorted(maps.Keys(ctl.gateways))
		ctl.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: gateways %v, want %v", step, got, want)
		}
	}
	check("none")
	put(k.alive("g1"), k.status("g1"), k.alive("g2"))
	check("joined", "g1", "g2")
	put(k.status("g2"), k.status("g1")) // a status written again is no change
	check("statuses written", "g1", "g2")
	del(k.alive("g1"), k.status("g1"))
	put(k.alive("g3"), k.status("g3"))
	check("g1 left as g3 joined", "g2", "g3")
	del(k.status("g2"))
	check("g2's status gone, its alive key still there", "g2", "g3")
	del(k.alive("g3"))
	put(k.alive("g3"))
	check("g3 left and came back", "g2", "g3")
	put(k.alive("g4"))
	del(k.alive("g4"))
	check("g4 came and went between two reads", "g2", "g3")
	if err := f.etcd.Wipe(); err != nil {
		t.Fatal(err)
	}
	put(k.alive("g5"))
	check("etcd wiped, g5 there", "g5")
}
