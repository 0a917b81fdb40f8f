// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// ifAddrs reads the first IPv4 and the first global IPv6 address of each
// configured interface: XDP answers ICMP errors (packet too big) from the
// address of the interface the packet came in on.
func ifAddrs(ifaces []config.Interface) map[uint32]bpf.IfAddr {
	out := map[uint32]bpf.IfAddr{}
	for _, itf := range ifaces {
		nif, err := net.InterfaceByName(itf.Name)
		if err != nil {
			continue
		}
		addrs, _ := nif.Addrs()
		var a bpf.IfAddr
		for _, ad := range addrs {
			ipn, ok := ad.(*net.IPNet)
			if !ok {
				continue
			}
			ip, _ := netip.AddrFromSlice(ipn.IP)
			ip = ip.Unmap()
			switch {
			case ip.Is4() && a.V4 == 0:
				b := ip.As4()
				a.V4 = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
			case ip.Is6() && ip.IsGlobalUnicast() && a.HasV6 == 0:
				a.V6 = ip.As16()
				a.HasV6 = 1
			}
		}
		out[uint32(nif.Index)] = a
	}
	return out
}

// keepPathNeighbours keeps the next hop of every GRE path resolved. Encap
// cannot hand a packet to the kernel to resolve a neighbour (the kernel
// would send it unencapsulated), so it drops while the next hop is
// unknown; this loop makes the kernel resolve it first: a datagram to the
// discard port of the path's remote end, sent from the path's local address
// out of its interface, starts ARP.
func (a *Agent) keepPathNeighbours(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		for _, p := range a.Config().Paths {
			if err := ensureNeighbour(p); err != nil {
				log.Debug("path next hop not resolved yet", "path", p.ID, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tickFlows advances the flow table's clock (edge_state.tick) once a second:
// packets mark each flow's last use in its ticks, and a new flow may take
// the place of one that went unused for bpf.FTIdle of them. Stopped (the
// agent restarting), the clock stands still and no flow ages: new flows
// then take only the places of flows that had a single packet.
func tickFlows(ctx context.Context, dp *bpf.Dataplane, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := dp.Tick()
		if err != nil && !failing {
			log.Error("flow table clock", "error", err)
		}
		failing = err != nil
	}
}

func ensureNeighbour(p config.Path) error {
	remote := net.IP(p.Remote.A.AsSlice())
	routes, err := netlink.RouteGet(remote)
	if err != nil || len(routes) == 0 {
		return err
	}
	nh := remote
	if routes[0].Gw != nil {
		nh = routes[0].Gw
	}
	neighs, err := netlink.NeighList(routes[0].LinkIndex, unix.AF_INET)
	if err != nil {
		return err
	}
	for _, n := range neighs {
		if n.IP.Equal(nh) && n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0 {
			return nil
		}
	}
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.IP(p.Local.A.AsSlice())}}
	conn, err := d.Dial("udp4", net.JoinHostPort(remote.String(), "9"))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte("edgeplane: resolving path next hop"))
	return err
}
