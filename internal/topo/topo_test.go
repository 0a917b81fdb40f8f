// SPDX-License-Identifier: Apache-2.0

package topo_test

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// TestTwoHosts builds x eth0 10.77.0.1/24 fd77::1/64 == eth0 y (.2, ::2)
// with every setting topo offers, reads each back from the kernel and
// sends TCP across over both families.
func TestTwoHosts(t *testing.T) {
	testutil.RequireRoot(t)
	self, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	x := testutil.NetNS(t, testutil.UniqueName("tpx"))
	y := testutil.NetNS(t, testutil.UniqueName("tpy"))
	macX := net.HardwareAddr{0x02, 0x77, 0, 0, 0, 1}
	macY := net.HardwareAddr{0x02, 0x77, 0, 0, 0, 2}
	if err := x.Sysctl("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
		t.Fatal(err)
	}
	if err := topo.AddVeth(
		topo.End{NS: x, Name: "eth0", MAC: macX, Addrs: []string{"10.77.0.1/24", "fd77::1/64"}, MTU: 1400},
		topo.End{NS: y, Name: "eth0", MAC: macY, Addrs: []string{"10.77.0.2/24", "fd77::2/64"}},
	); err != nil {
		t.Fatal(err)
	}
	for _, c := range []error{
		y.AddRoute("default", "10.77.0.1", ""),
		y.AddRoute("fd78::/48", "fd77::1", "eth0"),
		x.SetNeigh("eth0", "10.77.0.2", macY),
		x.SetTxChecksum("eth0", false),
		x.SetGRO("eth0", true),
		y.SetMTU("eth0", 1300),
	} {
		if c != nil {
			t.Fatal(c)
		}
	}

	// What the kernel holds now.
	lx, err := x.Link("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if a := lx.Attrs(); a.HardwareAddr.String() != macX.String() || a.MTU != 1400 || a.Flags&net.FlagUp == 0 {
		t.Errorf("x eth0: mac %s mtu %d flags %v, want %s 1400 up", a.HardwareAddr, a.MTU, a.Flags, macX)
	}
	ly, err := y.Link("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if a := ly.Attrs(); a.HardwareAddr.String() != macY.String() || a.MTU != 1300 {
		t.Errorf("y eth0: mac %s mtu %d, want %s 1300", a.HardwareAddr, a.MTU, macY)
	}
	if idx, err := x.Ifindex("eth0"); err != nil || int(idx) != lx.Attrs().Index {
		t.Errorf("ifindex %d %v, want %d", idx, err, lx.Attrs().Index)
	}
	if _, err := x.Link("nothere"); err == nil {
		t.Error("a missing interface was found")
	}
	nlx, nly := netlinkIn(t, x), netlinkIn(t, y)
	addrs, err := nlx.AddrList(lx, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() {
			continue
		}
		got = append(got, a.IPNet.String())
		if a.IP.To4() != nil && a.Broadcast != nil {
			t.Errorf("%s has broadcast %s: ip addr add sets none", a.IPNet, a.Broadcast)
		}
		if a.IP.To4() == nil && a.Flags&unix.IFA_F_NODAD == 0 {
			t.Errorf("%s without nodad", a.IPNet)
		}
	}
	if strings.Join(got, " ") != "10.77.0.1/24 fd77::1/64" {
		t.Errorf("x eth0 addresses %v", got)
	}
	routes, err := nly.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var def, six bool
	for _, r := range routes {
		if r.Protocol != unix.RTPROT_BOOT || r.Gw == nil {
			continue
		}
		def = def || (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.String() == "10.77.0.1"
		six = six || r.Dst != nil && r.Dst.String() == "fd78::/48" && r.Gw.String() == "fd77::1" && r.LinkIndex == ly.Attrs().Index
	}
	if !def || !six {
		t.Errorf("y routes %v: want default via 10.77.0.1 and fd78::/48 via fd77::1 dev eth0, proto boot as ip adds them", routes)
	}
	neighs, err := nlx.NeighList(lx.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if len(neighs) != 1 || neighs[0].State != netlink.NUD_PERMANENT || neighs[0].HardwareAddr.String() != macY.String() {
		t.Errorf("x neighbours %+v, want 10.77.0.2 permanent at %s", neighs, macY)
	}
	if on, err := x.TxChecksum("eth0"); err != nil || on {
		t.Errorf("tx checksum on: %v %v", on, err)
	}
	if on, err := y.TxChecksum("eth0"); err != nil || !on {
		t.Errorf("y tx checksum off (%v), the veth default is on: %v", on, err)
	}
	if on, err := x.GRO("eth0"); err != nil || !on {
		t.Errorf("gro off: %v %v", on, err)
	}
	for ns, want := range map[*topo.NS]string{x: "1", y: "0"} {
		var v []byte
		if err := ns.Do(func() (err error) {
			v, err = os.ReadFile("/proc/sys/net/ipv4/ip_forward")
			return err
		}); err != nil || strings.TrimSpace(string(v)) != want {
			t.Errorf("%s ip_forward %q %v, want %s", ns.Name, v, err, want)
		}
	}
	// Do left this goroutine's thread where it was.
	if cur, err := netns.Get(); err != nil || !cur.Equal(self) {
		t.Errorf("caller's namespace changed")
	} else {
		cur.Close()
	}

	// TCP from y to x over both families; the listener is made in x.
	for _, addr := range []string{"10.77.0.1:7000", "[fd77::1]:7000"} {
		var ln net.Listener
		if err := topo.Do(x.Name, func() (err error) {
			ln, err = net.Listen("tcp", addr)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, _ = io.WriteString(c, "hi")
				c.Close()
			}
		}()
		var reply []byte
		err := y.Do(func() error {
			c, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			reply, err = io.ReadAll(c)
			return err
		})
		ln.Close()
		if err != nil || string(reply) != "hi" {
			t.Errorf("tcp to %s: %q %v", addr, reply, err)
		}
	}
	out, err := topo.Output(context.Background(), y.Name, "cat", "/proc/sys/net/ipv4/ip_forward")
	if err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("output: %q %v", out, err)
	}
	if _, err := topo.Output(context.Background(), y.Name, "false"); err == nil {
		t.Error("a failing program reported no error")
	}
}

// TestLifecycle checks that a namespace is there while it lives, a
// second one of the name is refused, Delete removes it and Close and
// Delete give back every descriptor.
func TestLifecycle(t *testing.T) {
	testutil.RequireRoot(t)
	fds := countFDs(t)
	name := testutil.UniqueName("tpl")
	n, err := topo.NewNS(name)
	if err != nil {
		t.Fatal(err)
	}
	if !topo.NSExists(name) {
		t.Errorf("%s missing after NewNS", name)
	}
	if lo, err := n.Link("lo"); err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("lo not up: %v", err)
	}
	if _, err := topo.NewNS(name); err == nil {
		t.Errorf("a second %s was created", name)
	}
	o, err := topo.OpenNS(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil || !topo.NSExists(name) {
		t.Errorf("close of an opened namespace: %v, exists %v", err, topo.NSExists(name))
	}
	if err := n.Delete(); err != nil {
		t.Fatal(err)
	}
	if topo.NSExists(name) {
		t.Errorf("%s left after Delete", name)
	}
	if err := topo.DeleteNS(name); err != nil {
		t.Errorf("delete of a missing namespace: %v", err)
	}
	if _, err := topo.OpenNS(name); err == nil {
		t.Errorf("opened a deleted namespace")
	}
	if got := countFDs(t); got != fds {
		t.Errorf("%d descriptors open after, %d before", got, fds)
	}
}

// TestPacketNS checks the gateway-shaped namespace: interfaces, and the
// FIB answering through the static neighbour.
func TestPacketNS(t *testing.T) {
	testutil.RequireRoot(t)
	p, err := topo.NewPacketNS(testutil.UniqueName("tpp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, itf := range []string{"lan0", "wan0", "wan1"} {
		if i, err := p.Resolve(itf); err != nil || i == 0 {
			t.Errorf("resolve %s: %d %v", itf, i, err)
		}
	}
	if _, err := p.Resolve("eth9"); err == nil {
		t.Error("resolved an interface that does not exist")
	}
	h := netlinkIn(t, p.NS)
	for dst, dev := range map[string]string{"10.3.1.1": "wan0", "fd03::1": "wan0", "10.6.0.1": "wan1", "10.1.0.2": "lan0"} {
		rs, err := h.RouteGet(net.ParseIP(dst))
		if err != nil || len(rs) == 0 || rs[0].LinkIndex != int(p.Ifindex[dev]) {
			t.Errorf("route to %s: %v %v, want out of %s", dst, rs, err, dev)
		}
	}
}

// netlinkIn returns a netlink handle of its own in n, to read back what
// topo set; it is closed in t.Cleanup.
func netlinkIn(t *testing.T, n *topo.NS) *netlink.Handle {
	t.Helper()
	var h *netlink.Handle
	if err := n.Do(func() (err error) {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
