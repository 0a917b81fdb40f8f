// SPDX-License-Identifier: Apache-2.0

package topo

import (
	"errors"
	"fmt"
	"net"
)

// PacketNS is one namespace shaped like a gateway, for running an XDP
// program through BPF_PROG_TEST_RUN with real routes and neighbours, so
// bpf_fib_lookup answers as on a gateway:
//
//	lan0 10.1.0.1/24 fd01::1/64  (peer lan0p)
//	wan0 10.2.0.1/24 fd02::1/64  (peer wan0p); neighbours 10.2.0.2, fd02::2
//	  routes 10.3.0.0/16 and fd03::/48 via that neighbour
//	wan1 10.4.0.1/24             (peer wan1p); neighbour 10.4.0.2
//	  10.5.0.0/16 via 10.4.0.9 (no neighbour entry), 10.6.0.0/16 via 10.4.0.2
//
// Host A (AddrHostA, MACHostA) would sit on lan0's link; it has no
// neighbour entry until a test adds one.
type PacketNS struct {
	*NS
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

// IPv4 addresses of the PacketNS topology (the lab's one-gateway topology
// uses the same plan: host A, the gateway's lan0 and wan0, host B).
const (
	AddrHostA    = "10.1.0.2"
	AddrLan0     = "10.1.0.1"
	AddrWan0     = "10.2.0.1"
	AddrWanNeigh = "10.2.0.2"
)

// NewPacketNS creates the namespace name and its topology; Close removes
// it.
func NewPacketNS(name string) (*PacketNS, error) {
	n, err := NewNS(name)
	if err != nil {
		return nil, err
	}
	p := &PacketNS{NS: n, Ifindex: map[string]uint32{}}
	if err := p.build(); err != nil {
		return nil, errors.Join(fmt.Errorf("build packet netns %s: %w", name, err), p.Close())
	}
	return p, nil
}

func (p *PacketNS) build() error {
	if err := p.Sysctl("net.ipv4.conf.all.forwarding=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
		return err
	}
	for _, v := range []struct {
		name  string
		mac   net.HardwareAddr
		addrs []string
	}{
		{"lan0", MACLan0, []string{AddrLan0 + "/24", "fd01::1/64"}},
		{"wan0", MACWan0, []string{AddrWan0 + "/24", "fd02::1/64"}},
		{"wan1", MACWan1, []string{"10.4.0.1/24"}},
	} {
		if err := AddVeth(End{NS: p.NS, Name: v.name, MAC: v.mac, Addrs: v.addrs}, End{Name: v.name + "p"}); err != nil {
			return err
		}
		idx, err := p.NS.Ifindex(v.name)
		if err != nil {
			return err
		}
		p.Ifindex[v.name] = idx
	}
	for _, nb := range []struct {
		dev, ip string
		mac     net.HardwareAddr
	}{
		{"wan0", AddrWanNeigh, MACWanNeigh},
		{"wan0", "fd02::2", MACWanNeigh},
		{"wan1", "10.4.0.2", MACWan1Neigh},
	} {
		if err := p.SetNeigh(nb.dev, nb.ip, nb.mac); err != nil {
			return err
		}
	}
	for _, r := range []struct{ dst, via, dev string }{
		{"10.3.0.0/16", AddrWanNeigh, "wan0"},
		{"fd03::/48", "fd02::2", "wan0"},
		{"10.5.0.0/16", "10.4.0.9", "wan1"},
		{"10.6.0.0/16", "10.4.0.2", "wan1"},
	} {
		if err := p.AddRoute(r.dst, r.via, r.dev); err != nil {
			return err
		}
	}
	return nil
}

// Resolve is a rules.Resolver for the namespace's interfaces.
func (p *PacketNS) Resolve(name string) (uint32, error) {
	if i, ok := p.Ifindex[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("no interface %q", name)
}

// Close removes the namespace.
func (p *PacketNS) Close() error {
	return p.Delete()
}
