// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strings"
	"testing"
	"time"

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

// TestNextHopFollowsPolicyRule: new flows share a destination's next hop
// only while the kernel routes by destination alone. A rule that sends
// A's packets to a table where B is unreachable must reach A's next new
// flow though B's shared next hop is warm: the agent follows rules over
// netlink, stops the sharing and says so in its metrics and log. When the
// rule goes, a scan of the rules and routes lets flows share again.
func TestNextHopFollowsPolicyRule(t *testing.T) {
	g := newGateway(t, forwardConfig)
	gw := func(args ...string) {
		t.Helper()
		if out, err := nsRun(g.GW, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	// A table no rule reads yet: routing stays by destination alone.
	gw("ip", "route", "add", "unreachable", lab.AddrB+"/32", "table", "100")
	g.start()
	g.warmUp()
	shared := func(want float64) {
		t.Helper()
		if !waitFor(5*time.Second, func() bool {
			v, ok := metricValue(g.scrape(), "edgeplane_next_hops_shared_by_destination", nil)
			return ok && v == want
		}) {
			t.Fatalf("edgeplane_next_hops_shared_by_destination never became %v\n%s", want, g.log())
		}
	}
	shared(1)
	// The routes of link-local addresses leaving DAD would have the
	// routing scanned again, after the rule below: let them come first,
	// so only the rule's own event can stop the sharing.
	if !waitFor(10*time.Second, func() bool {
		out, err := nsRun(g.GW, "ip", "-6", "addr", "show", "tentative")
		return err == nil && strings.TrimSpace(out) == ""
	}) {
		t.Fatal("the gateway's IPv6 addresses stay tentative")
	}
	time.Sleep(time.Second)
	shared(1)
	// Each ping is a new flow (a new echo identifier) to B.
	if got := ping(g.A, lab.AddrB, 3, "0.1"); got != 3 {
		t.Fatalf("ping before the rule: %d of 3", got)
	}

	gw("ip", "rule", "add", "from", lab.AddrA, "to", lab.AddrB, "lookup", "100", "pref", "100")
	time.Sleep(100 * time.Millisecond) // the agent reads the event
	if got := ping(g.A, lab.AddrB, 3, "0.1"); got != 0 {
		t.Fatalf("ping under a rule making B unreachable from A: %d of 3 replies (a shared next hop outlived the rule)", got)
	}
	shared(0)
	if !strings.Contains(g.log(), "ip rule 100") {
		t.Errorf("agent log does not name the rule that stopped the sharing:\n%s", g.log())
	}

	gw("ip", "rule", "del", "pref", "100")
	shared(1)
	if got := ping(g.A, lab.AddrB, 3, "0.1"); got != 3 {
		t.Fatalf("ping after the rule went: %d of 3", got)
	}
}
