// SPDX-License-Identifier: Apache-2.0

package pathmon

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config"
)

// KeepNeighbours keeps the next hop of every GRE path resolved. Encap
// cannot hand a packet to the kernel to resolve a neighbour (the kernel
// would send it unencapsulated), so it drops while the next hop is
// unknown; this loop makes the kernel resolve it first: a datagram to the
// discard port of the path's remote end, sent from the path's local address
// out of its interface, starts ARP. It runs until ctx ends.
func KeepNeighbours(ctx context.Context, log *slog.Logger, cfg func() *config.Config) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		for _, p := range cfg().Paths {
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

// ensureNeighbour asks the kernel to resolve path p's next hop unless
// it knows it.
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
