// SPDX-License-Identifier: Apache-2.0

package topo

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// End is one end of a veth pair.
type End struct {
	NS   *NS
	Name string
	MAC  net.HardwareAddr // nil: the kernel picks one
	// Addrs are CIDRs ("10.1.0.1/24", "fd01::1/64"), added as AddAddr does.
	Addrs []string
	// MTU is the end's MTU; 0 leaves the default (for b: a's MTU).
	MTU int
	// Queues is the end's TX and RX queues; 0 leaves the kernel's one
	// (for b: a's). A veth steers a frame to the peer queue of the CPU
	// or TX queue that sent it, so queues let both ends' NAPI run on
	// several CPUs at once.
	Queues int
}

// AddVeth creates a veth pair from a to b (b.NS nil: a's namespace), each
// end with its name, MAC and MTU, adds each end's addresses and sets both
// up.
func AddVeth(a, b End) error {
	if b.NS == nil {
		b.NS = a.NS
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.HardwareAddr, attrs.MTU = a.Name, a.MAC, a.MTU
	attrs.NumTxQueues, attrs.NumRxQueues = a.Queues, a.Queues
	veth := netlink.NewVeth(attrs)
	veth.PeerName, veth.PeerHardwareAddr, veth.PeerMTU = b.Name, b.MAC, uint32(b.MTU)
	veth.PeerNumTxQueues, veth.PeerNumRxQueues = uint32(b.Queues), uint32(b.Queues)
	if b.NS != a.NS {
		veth.PeerNamespace = netlink.NsFd(b.NS.handle)
	}
	if err := a.NS.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s in %s, peer %s in %s: %w", a.Name, a.NS.Name, b.Name, b.NS.Name, err)
	}
	for _, e := range []End{a, b} {
		if err := e.NS.AddAddr(e.Name, e.Addrs...); err != nil {
			return err
		}
		if err := e.NS.Up(e.Name); err != nil {
			return err
		}
	}
	return nil
}

// Link returns the interface name of the namespace.
func (n *NS) Link(name string) (netlink.Link, error) {
	l, err := n.nl.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", name, n.Name, err)
	}
	return l, nil
}

// Ifindex returns the index of interface name.
func (n *NS) Ifindex(name string) (uint32, error) {
	l, err := n.Link(name)
	if err != nil {
		return 0, err
	}
	return uint32(l.Attrs().Index), nil
}

// Up sets the interfaces up.
func (n *NS) Up(names ...string) error {
	for _, name := range names {
		l, err := n.Link(name)
		if err != nil {
			return err
		}
		if err := n.nl.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up in %s: %w", name, n.Name, err)
		}
	}
	return nil
}

// SetMTU sets the MTU of interface name.
func (n *NS) SetMTU(name string, mtu int) error {
	l, err := n.Link(name)
	if err != nil {
		return err
	}
	if err := n.nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("set mtu %d on %s in %s: %w", mtu, name, n.Name, err)
	}
	return nil
}

// AddAddr adds addresses (CIDRs) to interface dev as `ip addr add` does:
// no broadcast address on IPv4 ones, and IPv6 ones without duplicate
// address detection (nodad), so they are usable at once rather than
// tentative for a second or more.
func (n *NS) AddAddr(dev string, cidrs ...string) error {
	if len(cidrs) == 0 {
		return nil
	}
	l, err := n.Link(dev)
	if err != nil {
		return err
	}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("address %q for %s: %w", c, dev, err)
		}
		a := &netlink.Addr{IPNet: prefixNet(p)}
		if p.Addr().Is4() {
			a.Broadcast = net.IPv4zero // none: the library would compute one
		} else {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := n.nl.AddrAdd(l, a); err != nil {
			return fmt.Errorf("add address %s to %s in %s: %w", c, dev, n.Name, err)
		}
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// AddRoute adds a route to dst (a CIDR, or "default") through gateway via,
// out of interface dev ("": the kernel picks it by the gateway).
func (n *NS) AddRoute(dst, via, dev string) error {
	gw, err := netip.ParseAddr(via)
	if err != nil {
		return fmt.Errorf("route to %s: gateway %q: %w", dst, via, err)
	}
	r := &netlink.Route{Gw: gw.AsSlice()}
	if dst != "default" {
		p, err := netip.ParsePrefix(dst)
		if err != nil {
			return fmt.Errorf("route to %q: %w", dst, err)
		}
		r.Dst = prefixNet(p)
	}
	if dev != "" {
		l, err := n.Link(dev)
		if err != nil {
			return err
		}
		r.LinkIndex = l.Attrs().Index
	}
	if err := n.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("add route %s via %s in %s: %w", dst, via, n.Name, err)
	}
	return nil
}

// SetNeigh adds or replaces a permanent neighbour entry: ip at mac on dev.
// Nothing resolves such an entry, so it serves hosts that answer no ARP or
// neighbour solicitation (an XDP sink that drops everything) and links
// where resolving would add traffic or delay the test does not want.
func (n *NS) SetNeigh(dev, ip string, mac net.HardwareAddr) error {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return fmt.Errorf("neighbour %q: %w", ip, err)
	}
	l, err := n.Link(dev)
	if err != nil {
		return err
	}
	nb := &netlink.Neigh{LinkIndex: l.Attrs().Index, State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: mac}
	if err := n.nl.NeighSet(nb); err != nil {
		return fmt.Errorf("set neighbour %s lladdr %s on %s in %s: %w", ip, mac, dev, n.Name, err)
	}
	return nil
}

// Sysctl sets kernel parameters of the namespace, each "key=value" with
// the key as sysctl(8) spells it ("net.ipv4.ip_forward=1"). The
// net.* parameters under /proc/sys belong to the namespace of the thread
// that opens them.
func (n *NS) Sysctl(settings ...string) error {
	return n.Do(func() error {
		for _, s := range settings {
			key, val, ok := strings.Cut(s, "=")
			if !ok {
				return fmt.Errorf("sysctl %q: want key=value", s)
			}
			path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
			if err := os.WriteFile(path, []byte(val), 0); err != nil {
				return fmt.Errorf("sysctl %s in %s: %w", s, n.Name, err)
			}
		}
		return nil
	})
}
