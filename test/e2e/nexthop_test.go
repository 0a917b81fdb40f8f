// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// TestNextHopFollowsNeighbourChange: flows cache their next hop's MAC in
// the flow entry. When host B's MAC changes and the gateway learns it, the
// agent sees the neighbour change over netlink and bumps the FIB epoch, so
// the same (cached) flow reaches B at its new MAC. Without the bump the
// gateway would keep sending to the old MAC and B would drop every frame.
func TestNextHopFollowsNeighbourChange(t *testing.T) {
	g := newGateway(t, forwardConfig)
	g.start()
	g.warmUp()

	// One flow, A -> B, cached with B's current MAC.
	if got := ping(g.A, lab.AddrB, 5, "0.1"); got != 5 {
		t.Fatalf("ping before the change: %d of 5", got)
	}
	before := g.stats()

	g.moveB("02:00:00:00:bb:01")
	if got := ping(g.A, lab.AddrB, 10, "0.1"); got != 10 {
		t.Fatalf("ping after B's MAC changed: %d of 10 replies (cached next hop not invalidated?)", got)
	}
	after := g.stats()
	// The replies came through XDP, not around it.
	if d := after.pdr(20).Packets - before.pdr(20).Packets; d < 10 {
		t.Errorf("PDR 20 counted %d echo requests after the change, want >= 10", d)
	}
	if !strings.Contains(g.log(), "agent ready") {
		t.Fatal("agent log lost")
	}
}

// moveB gives host B a new MAC and the gateway a neighbour entry for it.
func (g *gateway) moveB(mac string) {
	g.t.Helper()
	for _, c := range [][]string{
		{g.B, "ip", "link", "set", "eth0", "address", mac},
		// What the gateway would learn from B's next ARP reply, applied
		// at once so the test does not wait for ARP timers.
		{g.GW, "ip", "neigh", "replace", lab.AddrB, "lladdr", mac, "dev", lab.WanName, "nud", "reachable"},
	} {
		if out, err := nsRun(c[0], c[1:]...); err != nil {
			g.t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
}
