// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"bytes"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// TestRoutingByDestination: in a namespace as it starts (its default rules,
// plain routes, a gateway route in another table) routing is by
// destination alone; each rule beyond the defaults, and each route that
// spreads over next hops, goes through a nexthop object, matches a TOS or
// a source prefix, in any table, makes it depend on more, named in the
// reason; removing it restores the verdict.
func TestRoutingByDestination(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NetNS(t, testutil.UniqueName("eprt"))
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"-n", ns.Name}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	check := func(when string, wantOK bool, wantWhy string) {
		t.Helper()
		var ok bool
		var why string
		if err := ns.Do(func() (err error) {
			ok, why, err = loader.RoutingByDestination()
			return err
		}); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if ok != wantOK || !strings.Contains(why, wantWhy) {
			t.Errorf("%s: by destination %v (%q), want %v (%q)", when, ok, why, wantOK, wantWhy)
		}
	}
	ip("link", "add", "va", "type", "veth", "peer", "name", "vb")
	ip("link", "set", "va", "up")
	ip("link", "set", "vb", "up")
	ip("addr", "add", "192.0.2.1/24", "dev", "va")
	ip("-6", "addr", "add", "2001:db8::1/64", "dev", "va", "nodad")
	ip("route", "add", "198.51.100.0/24", "via", "192.0.2.2")
	ip("route", "add", "default", "via", "192.0.2.3", "table", "100")
	ip("-6", "route", "add", "2001:db8:5::/64", "via", "2001:db8::2")
	check("a new namespace", true, "")

	for _, c := range []struct {
		add, del []string
		why      string
	}{
		{[]string{"rule", "add", "from", "10.0.0.0/8", "lookup", "100", "pref", "100"}, []string{"rule", "del", "pref", "100"}, "ip rule 100 (family 2, table 100)"},
		{[]string{"-6", "rule", "add", "fwmark", "1", "lookup", "100", "pref", "200"}, []string{"-6", "rule", "del", "pref", "200"}, "ip rule 200 (family 10"},
		{[]string{"rule", "add", "iif", "va", "lookup", "main", "pref", "300"}, []string{"rule", "del", "pref", "300"}, "ip rule 300"},
		{[]string{"route", "add", "198.51.101.0/24", "nexthop", "via", "192.0.2.2", "nexthop", "via", "192.0.2.3"},
			[]string{"route", "del", "198.51.101.0/24"}, "route 198.51.101.0/24 (table 254) has several next hops"},
		{[]string{"route", "add", "198.51.102.0/24", "table", "100", "nexthop", "via", "192.0.2.2", "nexthop", "via", "192.0.2.3"},
			[]string{"route", "del", "198.51.102.0/24", "table", "100"}, "route 198.51.102.0/24 (table 100) has several next hops"},
		{[]string{"route", "add", "198.51.103.0/24", "tos", "0x10", "via", "192.0.2.2"},
			[]string{"route", "del", "198.51.103.0/24", "tos", "0x10"}, "matches TOS 0x10"},
		{[]string{"-6", "route", "add", "2001:db8:1::/64", "from", "2001:db8:2::/64", "via", "2001:db8::2"},
			[]string{"-6", "route", "del", "2001:db8:1::/64", "from", "2001:db8:2::/64"}, "route 2001:db8:1::/64 (table 254) matches a /64 source prefix"},
		{[]string{"nexthop", "add", "id", "7", "via", "192.0.2.2", "dev", "va"}, nil, ""},
		{[]string{"route", "add", "198.51.104.0/24", "nhid", "7"}, []string{"route", "del", "198.51.104.0/24"}, "goes through a nexthop object"},
	} {
		ip(c.add...)
		when := "after ip " + strings.Join(c.add, " ")
		check(when, c.why == "", c.why)
		if c.del != nil {
			ip(c.del...)
			check("after ip "+strings.Join(c.del, " "), true, "")
		}
	}
}

// TestNextHopSharedByDestination: while routing is by destination alone a
// new flow takes the next hop an earlier flow to its destination
// resolved, without asking the FIB; seen here by moving the neighbour
// without telling the dataplane (no new FIB epoch): the second flow to
// the same destination still goes to the MAC the first one was given,
// while a flow to another destination, and every flow once sharing is
// off, gets the FIB's new answer. Turning sharing on or off starts a new
// epoch: no flow takes a next hop shared before it.
func TestNextHopSharedByDestination(t *testing.T) {
	h := newHarness(t, tableConfig)
	h.pin = 1 // shared next hops are per CPU
	moved := net.HardwareAddr{0x02, 0, 0, 0, 0x99, 0x01}
	moveNeigh := func(mac net.HardwareAddr) {
		t.Helper()
		for _, ip := range []string{topo.AddrWanNeigh, "fd02::2"} {
			if err := h.ns.SetNeigh("wan0", ip, mac); err != nil {
				t.Fatal(err)
			}
		}
	}
	sport := uint16(2000)
	// send sends a new flow's first packet to dst and returns the MAC it
	// was redirected to.
	send := func(dst string) net.HardwareAddr {
		t.Helper()
		sport++
		mk := v4(dst, udpU(sport, 5000))
		if strings.Contains(dst, ":") {
			mk = v6(dst, udpU(sport, 5000))
		}
		ret, out := h.run(serialize(t, mk()), "lan0")
		if ret != bpf.XDPRedirect || len(out) < 6 {
			t.Fatalf("flow to %s: verdict %s, want redirect", dst, verdictName(ret))
		}
		return net.HardwareAddr(out[:6])
	}
	want := func(what string, got, mac net.HardwareAddr) {
		t.Helper()
		if !bytes.Equal(got, mac) {
			t.Errorf("%s: to %s, want %s", what, got, mac)
		}
	}
	setShared := func(on bool) {
		t.Helper()
		if _, err := h.dp.SetFIBByDst(on, nil); err != nil {
			t.Fatal(err)
		}
		if s := h.snapshot(); s.NextHopsByDst != on {
			t.Fatalf("snapshot says shared %v after setting %v", s.NextHopsByDst, on)
		}
	}

	for _, dst := range []string{dst4, dst6} {
		other := "10.3.1.2"
		if dst == dst6 {
			other = "fd03::2"
		}
		moveNeigh(macWanNeigh)
		setShared(true)
		want(dst+", first flow", send(dst), macWanNeigh)
		moveNeigh(moved)
		want(dst+", second flow, shared", send(dst), macWanNeigh)
		want(other+", another destination", send(other), moved)

		setShared(false)
		want(dst+", sharing off", send(dst), moved)
		moveNeigh(macWanNeigh)
		want(dst+", sharing off, neighbour back", send(dst), macWanNeigh)

		setShared(true)
		moveNeigh(moved)
		want(dst+", first flow after sharing is back", send(dst), moved)
	}
}
