// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"fmt"
	"net"

	"github.com/vishvananda/netns"
)

// PacketNS is one namespace shaped like a gateway, for running the XDP
// program through BPF_PROG_TEST_RUN with real routes and neighbours, so
// bpf_fib_lookup answers as on a gateway:
//
//	lan0 10.1.0.1/24 fd01::1/64  (peer lan0p)
//	wan0 10.2.0.1/24 fd02::1/64  (peer wan0p); neighbours 10.2.0.2, fd02::2
//	  routes 10.3.0.0/16 and fd03::/48 via that neighbour
//	wan1 10.4.0.1/24             (peer wan1p); neighbour 10.4.0.2
//	  10.5.0.0/16 via 10.4.0.9 (no neighbour entry), 10.6.0.0/16 via 10.4.0.2
type PacketNS struct {
	Name    string
	Handle  netns.NsHandle
	Ifindex map[string]uint32
}

// MACs of the PacketNS topology.
var (
	MACLan0      = net.HardwareAddr{0x02, 0, 0, 0, 0x01, 0x01}
	MACHostA     = net.HardwareAddr{0x02, 0, 0, 0, 0x01, 0x02}
	MACWan0      = net.HardwareAddr{0x02, 0, 0, 0, 0x02, 0x01}
	MACWanNeigh  = net.HardwareAddr{0x02, 0, 0, 0, 0x02, 0x02}
	MACWan1      = net.HardwareAddr{0x02, 0, 0, 0, 0x04, 0x01}
	MACWan1Neigh = net.HardwareAddr{0x02, 0, 0, 0, 0x04, 0x02}
)

// NewPacketNS creates the namespace; Close removes it.
func NewPacketNS(name string) (*PacketNS, error) {
	if err := sh("ip", "netns", "add", name); err != nil {
		return nil, err
	}
	p := &PacketNS{Name: name, Ifindex: map[string]uint32{}}
	steps := [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"},
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"ip", "link", "add", "lan0", "address", MACLan0.String(), "type", "veth", "peer", "name", "lan0p"},
		{"ip", "link", "add", "wan0", "address", MACWan0.String(), "type", "veth", "peer", "name", "wan0p"},
		{"ip", "link", "add", "wan1", "address", MACWan1.String(), "type", "veth", "peer", "name", "wan1p"},
		{"ip", "link", "set", "lan0", "up"}, {"ip", "link", "set", "lan0p", "up"},
		{"ip", "link", "set", "wan0", "up"}, {"ip", "link", "set", "wan0p", "up"},
		{"ip", "link", "set", "wan1", "up"}, {"ip", "link", "set", "wan1p", "up"},
		{"ip", "addr", "add", "10.1.0.1/24", "dev", "lan0"},
		{"ip", "addr", "add", "fd01::1/64", "dev", "lan0", "nodad"},
		{"ip", "addr", "add", "10.2.0.1/24", "dev", "wan0"},
		{"ip", "addr", "add", "fd02::1/64", "dev", "wan0", "nodad"},
		{"ip", "addr", "add", "10.4.0.1/24", "dev", "wan1"},
		{"ip", "neigh", "replace", "10.2.0.2", "lladdr", MACWanNeigh.String(), "dev", "wan0", "nud", "permanent"},
		{"ip", "neigh", "replace", "fd02::2", "lladdr", MACWanNeigh.String(), "dev", "wan0", "nud", "permanent"},
		{"ip", "neigh", "replace", "10.4.0.2", "lladdr", MACWan1Neigh.String(), "dev", "wan1", "nud", "permanent"},
		{"ip", "route", "add", "10.3.0.0/16", "via", "10.2.0.2", "dev", "wan0"},
		{"ip", "-6", "route", "add", "fd03::/48", "via", "fd02::2", "dev", "wan0"},
		{"ip", "route", "add", "10.5.0.0/16", "via", "10.4.0.9", "dev", "wan1"},
		{"ip", "route", "add", "10.6.0.0/16", "via", "10.4.0.2", "dev", "wan1"},
	}
	for _, s := range steps {
		if err := NS(name, s[0], s[1:]...); err != nil {
			p.Close()
			return nil, err
		}
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	p.Handle = h
	err = p.Do(func() error {
		for _, n := range []string{"lan0", "wan0", "wan1"} {
			itf, err := net.InterfaceByName(n)
			if err != nil {
				return err
			}
			p.Ifindex[n] = uint32(itf.Index)
		}
		return nil
	})
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Resolve is a rules.Resolver for the namespace's interfaces.
func (p *PacketNS) Resolve(name string) (uint32, error) {
	if i, ok := p.Ifindex[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("no interface %q", name)
}

// Do runs fn on an OS thread inside the namespace. The thread is never
// handed back to the Go scheduler, so no other goroutine inherits it.
func (p *PacketNS) Do(fn func() error) error {
	return InNetNS(p.Handle, p.Name, fn)
}

// Close deletes the namespace.
func (p *PacketNS) Close() error {
	if p.Handle.IsOpen() {
		p.Handle.Close()
	}
	return sh("ip", "netns", "del", p.Name)
}
