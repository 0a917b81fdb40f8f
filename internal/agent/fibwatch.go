// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// watchFIB bumps the dataplane's FIB epoch whenever a route, address, link
// or neighbour changes in the agent's namespace, so flows stop using the
// next hop they cached and ask bpf_fib_lookup again. Neighbour events that
// only refresh reachability (same link-layer address) are ignored: they
// come every few seconds per neighbour and change nothing XDP uses.
// onAddr runs on address changes (XDP's ICMP errors use the addresses).
func watchFIB(ctx context.Context, dp *bpf.Dataplane, log *slog.Logger, onAddr func()) error {
	done := make(chan struct{})
	routes := make(chan netlink.RouteUpdate, 256)
	neighs := make(chan netlink.NeighUpdate, 256)
	links := make(chan netlink.LinkUpdate, 256)
	addrs := make(chan netlink.AddrUpdate, 256)
	if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{ListExisting: false}); err != nil {
		return fmt.Errorf("subscribe to routes: %w", err)
	}
	if err := netlink.NeighSubscribe(neighs, done); err != nil {
		close(done)
		return fmt.Errorf("subscribe to neighbours: %w", err)
	}
	if err := netlink.LinkSubscribe(links, done); err != nil {
		close(done)
		return fmt.Errorf("subscribe to links: %w", err)
	}
	if err := netlink.AddrSubscribe(addrs, done); err != nil {
		close(done)
		return fmt.Errorf("subscribe to addresses: %w", err)
	}
	// Next hops may have changed while no agent was watching.
	if err := dp.BumpFIBEpoch(); err != nil {
		close(done)
		return err
	}
	type neighKey struct {
		ifindex int
		ip      string
	}
	known := map[neighKey]string{}
	go func() {
		defer close(done)
		for {
			var why string
			select {
			case <-ctx.Done():
				return
			case u, ok := <-routes:
				if !ok {
					log.Error("route watch ended; cached next hops may go stale")
					return
				}
				why = "route " + u.Dst.String()
			case u, ok := <-neighs:
				if !ok {
					log.Error("neighbour watch ended; cached next hops may go stale")
					return
				}
				k := neighKey{u.LinkIndex, u.IP.String()}
				mac := net.HardwareAddr(u.HardwareAddr).String()
				usable := u.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0
				if u.Type == unix.RTM_NEWNEIGH && usable {
					if known[k] == mac {
						continue
					}
					known[k] = mac
				} else {
					delete(known, k)
				}
				why = "neighbour " + k.ip
			case u, ok := <-links:
				if !ok {
					return
				}
				why = "link " + u.Attrs().Name
			case u, ok := <-addrs:
				if !ok {
					return
				}
				why = "address " + u.LinkAddress.String()
				onAddr()
			}
			if err := dp.BumpFIBEpoch(); err != nil {
				log.Error("bump fib epoch", "error", err)
				continue
			}
			log.Debug("next hops invalidated", "cause", why)
		}
	}()
	return nil
}
