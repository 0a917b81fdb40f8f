// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// pyRA sends one router advertisement out of argv[1] (from its link-local
// address, hop limit 255 as RFC 4861 6.1.2 requires) with a prefix
// information option for argv[2]/64, on-link and autonomous.
const pyRA = `import socket, struct, sys
ifname, prefix = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
ra = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0)
pio = struct.pack("!BBBBIII", 3, 4, 64, 0xC0, 86400, 14400, 0) + socket.inet_pton(socket.AF_INET6, prefix)
s.sendto(ra + pio, ("ff02::1", 0, 0, socket.if_nametoindex(ifname)))
`

// TestForwardingKeepsRouterAdvertisements: a WAN that takes its address
// by SLAAC (accept_ra=1, the default) still takes router advertisements
// after the agent turns forwarding on: a real RA sent afterwards gives it
// its address. With accept_ra left at 1 a forwarding interface ignores
// RAs (ip-sysctl.rst). An operator's accept_ra=0 stays.
func TestForwardingKeepsRouterAdvertisements(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "python3")
	gw := testutil.NetNS(t, testutil.UniqueName("agtra"))
	rt := testutil.NetNS(t, testutil.UniqueName("agtrt"))
	// No duplicate address detection: the router's link-local address
	// is usable at once.
	for _, n := range []*topo.NS{gw, rt} {
		if err := n.Sysctl("net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.forwarding=0"); err != nil {
			t.Fatal(err)
		}
	}
	if err := topo.AddVeth(topo.End{NS: gw, Name: "wan0"}, topo.End{NS: rt, Name: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if err := topo.AddVeth(topo.End{NS: gw, Name: "lan0"}, topo.End{NS: rt, Name: "eth1"}); err != nil {
		t.Fatal(err)
	}
	if err := gw.Sysctl("net.ipv6.conf.lan0.accept_ra=0"); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := gw.Do(func() error {
		return enableForwarding([]config.Interface{{Name: "wan0"}, {Name: "lan0"}}, log)
	})
	if err != nil {
		t.Fatal(err)
	}
	read := func(key string) string {
		var v string
		_ = gw.Do(func() error {
			b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + key)
			v = strings.TrimSpace(string(b))
			return err
		})
		return v
	}
	for key, want := range map[string]string{"wan0/forwarding": "1", "wan0/accept_ra": "2", "lan0/forwarding": "1", "lan0/accept_ra": "0"} {
		if got := read(key); got != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
	// The RA itself, and the SLAAC address it gives.
	var have string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		// Unreachable until the link is up and has its link-local
		// address.
		if out, err := topo.Output(context.Background(), rt.Name, "python3", "-c", pyRA, "eth0", "fd77::"); err != nil && !strings.Contains(out, "unreachable") {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		have, _ = topo.Output(context.Background(), gw.Name, "ip", "-6", "addr", "show", "dev", "wan0")
		if strings.Contains(have, "inet6 fd77::") {
			return
		}
	}
	t.Errorf("wan0 took no SLAAC address from the router advertisement while forwarding:\n%s", have)
}
