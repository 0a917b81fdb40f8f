// SPDX-License-Identifier: Apache-2.0

// Package fibwatch keeps the dataplane's cached next hops in step with
// the kernel's routing.
package fibwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf/loader"
)

// New subscribes to the kernel's changes and scans its routing once;
// Run follows them until ctx ends.
func New(dp *loader.Dataplane, log *slog.Logger, onAddr func()) (*Watch, error) {
	w := &Watch{dp: dp, log: log, onAddr: onAddr, kick: make(chan struct{}, 1)}
	s, err := w.subscribe()
	if err != nil {
		return nil, err
	}
	// Next hops, and how the kernel routes, may have changed while no
	// agent was watching.
	if _, err := dp.SetFIBByDst(false, nil); err != nil {
		s.stop()
		return nil, err
	}
	w.rescan()
	w.first = s
	return w, nil
}

// Run follows the subscriptions and runs the scans until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	scans := make(chan struct{})
	go func() { w.scans(ctx); close(scans) }()
	w.follows(ctx, w.first)
	<-scans
}

// scanDelay is how long route and rule changes must pause before the
// watcher reads every rule and route again to see whether flows may
// share next hops by destination: a routing daemon's burst costs one
// scan, not one per route.
const scanDelay = 200 * time.Millisecond

// netlinkRcvBuf is each subscription's receive buffer: 4 MiB holds a few
// thousand events (SO_RCVBUFFORCE, so rmem_max does not cap it), enough
// for the bursts of an interface going down; larger storms end in
// ENOBUFS and a resubscribe.
const netlinkRcvBuf = 4 << 20

// Watch bumps the dataplane's FIB epoch whenever a route, address, link
// or neighbour changes in the agent's namespace, so flows stop using the
// next hop they cached and ask bpf_fib_lookup again. Neighbour events that
// only refresh reachability (same link-layer address) are ignored: they
// come every few seconds per neighbour and change nothing XDP uses.
// onAddr runs on address changes (XDP's ICMP errors use the addresses).
//
// Route and rule changes also stop flows from sharing next hops by
// destination (bpf.SetFIBByDst) until a scan of every rule and route
// (loader.RoutingByDestination), made once the changes have paused for
// scanDelay, finds the kernel routing by destination alone again.
//
// A netlink subscription ends on any receive error, and a storm of
// changes (a routing daemon loading a table, a flapping link) overflows
// the socket's buffer: the kernel drops what does not fit and the next
// read fails with ENOBUFS. The events lost are unknown, so the watcher
// then resubscribes to all five, marks every cached next hop stale (bumps
// the epoch once the new subscriptions listen) and goes on; it ends only
// with ctx. Each failure is logged once.
type Watch struct {
	dp     *loader.Dataplane
	log    *slog.Logger
	onAddr func()

	changes atomic.Uint64 // route and rule changes seen (and losses of events)
	kick    chan struct{} // a scan is due (buffered, 1)
	first   *subscription // New's, which Run follows first
	shared  bool          // what the last scan that counted found
	why     string        // and why not, as logged
}

// routingChanged stops flows from sharing next hops by destination and
// marks every cached next hop stale, then has the routing scanned again.
func (w *Watch) routingChanged(why string) {
	w.changes.Add(1)
	if _, err := w.dp.SetFIBByDst(false, nil); err != nil {
		w.log.Error("bump fib epoch", "error", err)
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	w.log.Debug("next hops invalidated", "cause", why)
}

// scans runs a scan after each pause in routing changes until ctx ends.
func (w *Watch) scans(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		for pending := true; pending; {
			select {
			case <-ctx.Done():
				return
			case <-w.kick:
			case <-time.After(scanDelay):
				pending = false
			}
		}
		w.rescan()
	}
}

// rescan reads every rule and route and lets flows share next hops by
// destination when the kernel routes by it alone, unless routing changed
// meanwhile (the change has its own scan coming). Each change of what
// it finds is logged once.
func (w *Watch) rescan() {
	seen := w.changes.Load()
	ok, why, err := loader.RoutingByDestination()
	if err != nil {
		ok, why = false, err.Error()
	}
	if ok {
		wrote, err := w.dp.SetFIBByDst(true, func() bool { return w.changes.Load() == seen })
		if err != nil {
			w.log.Error("share next hops by destination", "error", err)
			return
		}
		if !wrote {
			return
		}
	}
	if ok == w.shared && why == w.why {
		return
	}
	w.shared, w.why = ok, why
	if ok {
		w.log.Info("routing is by destination alone: new flows share next hops by destination")
	} else {
		w.log.Info("routing may depend on more than the destination: every new flow asks the FIB", "why", why)
	}
}

// subscription is one set of the five netlink subscriptions.
type subscription struct {
	done   chan struct{}
	routes chan netlink.RouteUpdate
	neighs chan netlink.NeighUpdate
	links  chan netlink.LinkUpdate
	addrs  chan netlink.AddrUpdate
	rules  chan struct{}

	mu      sync.Mutex
	stopped bool
	cause   error // the last error netlink reported: the one it ended on
}

// failed records the error a subscription's reader ended on (it then
// closes its channel); errors after stop are the close's own.
func (s *subscription) failed(what string) func(error) {
	return func(err error) {
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			return // only with ListExisting, which is not used
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.stopped {
			s.cause = fmt.Errorf("%s: %w", what, err)
		}
	}
}

func (s *subscription) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// stop closes the sockets and drains the channels until their readers
// end, so no reader stays blocked on a send nobody receives.
func (s *subscription) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	close(s.done)
	go func() {
		for range s.routes {
		}
	}()
	go func() {
		for range s.neighs {
		}
	}()
	go func() {
		for range s.links {
		}
	}()
	go func() {
		for range s.addrs {
		}
	}()
	go func() {
		for range s.rules {
		}
	}()
}

// subscribeRules follows changes of either family's rules, which the
// netlink package has no subscription for: a value on ch for each batch
// of messages. ch closes when the socket fails (failed is told why) or
// done closes.
func subscribeRules(ch chan<- struct{}, done <-chan struct{}, failed func(error)) error {
	sock, err := nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_RULE, unix.RTNLGRP_IPV6_RULE)
	if err != nil {
		return err
	}
	go func() {
		<-done
		sock.Close()
	}()
	go func() {
		defer close(ch)
		for {
			if _, _, err := sock.Receive(); err != nil {
				failed(err)
				return
			}
			select {
			case ch <- struct{}{}:
			case <-done:
				return
			}
		}
	}()
	return nil
}

func (w *Watch) subscribe() (*subscription, error) {
	s := &subscription{
		done:   make(chan struct{}),
		routes: make(chan netlink.RouteUpdate, 256),
		neighs: make(chan netlink.NeighUpdate, 256),
		links:  make(chan netlink.LinkUpdate, 256),
		addrs:  make(chan netlink.AddrUpdate, 256),
		rules:  make(chan struct{}, 16),
	}
	// A subscription that failed to start never closes its channel:
	// give the drain in stop a closed one.
	fail := func(err error, unstarted ...func()) (*subscription, error) {
		for _, f := range unstarted {
			f()
		}
		s.stop()
		return nil, err
	}
	closeRoutes := func() { close(s.routes) }
	closeNeighs := func() { close(s.neighs) }
	closeLinks := func() { close(s.links) }
	closeAddrs := func() { close(s.addrs) }
	closeRules := func() { close(s.rules) }
	if err := netlink.RouteSubscribeWithOptions(s.routes, s.done, netlink.RouteSubscribeOptions{
		ErrorCallback: s.failed("routes"), ReceiveBufferSize: netlinkRcvBuf, ReceiveBufferForceSize: true,
	}); err != nil {
		return fail(fmt.Errorf("subscribe to routes: %w", err), closeRoutes, closeNeighs, closeLinks, closeAddrs, closeRules)
	}
	if err := netlink.NeighSubscribeWithOptions(s.neighs, s.done, netlink.NeighSubscribeOptions{
		ErrorCallback: s.failed("neighbours"), ReceiveBufferSize: netlinkRcvBuf, ReceiveBufferForceSize: true,
	}); err != nil {
		return fail(fmt.Errorf("subscribe to neighbours: %w", err), closeNeighs, closeLinks, closeAddrs, closeRules)
	}
	if err := netlink.LinkSubscribeWithOptions(s.links, s.done, netlink.LinkSubscribeOptions{
		ErrorCallback: s.failed("links"), ReceiveBufferSize: netlinkRcvBuf, ReceiveBufferForceSize: true,
	}); err != nil {
		return fail(fmt.Errorf("subscribe to links: %w", err), closeLinks, closeAddrs, closeRules)
	}
	if err := netlink.AddrSubscribeWithOptions(s.addrs, s.done, netlink.AddrSubscribeOptions{
		ErrorCallback: s.failed("addresses"), ReceiveBufferSize: netlinkRcvBuf, ReceiveBufferForceSize: true,
	}); err != nil {
		return fail(fmt.Errorf("subscribe to addresses: %w", err), closeAddrs, closeRules)
	}
	if err := subscribeRules(s.rules, s.done, s.failed("rules")); err != nil {
		return fail(fmt.Errorf("subscribe to rules: %w", err), closeRules)
	}
	return s, nil
}

// follows follows s until ctx ends, resubscribing after every failure.
func (w *Watch) follows(ctx context.Context, s *subscription) {
	for {
		which := w.follow(ctx, s)
		s.stop()
		if ctx.Err() != nil {
			return
		}
		cause := s.err()
		if cause == nil {
			cause = errors.New("closed by the kernel")
		}
		w.log.Error("netlink "+which+" watch failed; resubscribing and marking cached next hops stale", "error", cause)
		if s = w.resubscribe(ctx); s == nil {
			return
		}
		// Whatever changed while no socket listened is unknown: every
		// flow looks its next hop up again, and routing is scanned.
		w.routingChanged("netlink events lost")
		w.log.Info("netlink watch resubscribed; cached next hops marked stale")
	}
}

// resubscribe retries, with a backoff up to 5 s, until it has the five
// subscriptions again or ctx ends (nil). Repeated failures of the same
// kind are logged once.
func (w *Watch) resubscribe(ctx context.Context) *subscription {
	wait := 10 * time.Millisecond
	var last string
	for {
		s, err := w.subscribe()
		if err == nil {
			return s
		}
		if err.Error() != last {
			last = err.Error()
			w.log.Error("netlink resubscribe failed; retrying, cached next hops go stale meanwhile", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// follow bumps the epoch for each event of s until ctx ends ("") or one
// of s's subscriptions does (its name).
func (w *Watch) follow(ctx context.Context, s *subscription) string {
	type neighKey struct {
		ifindex int
		ip      string
	}
	known := map[neighKey]string{}
	for {
		var why string
		select {
		case <-ctx.Done():
			return ""
		case u, ok := <-s.routes:
			if !ok {
				return "route"
			}
			w.routingChanged("route " + u.Dst.String())
			continue
		case u, ok := <-s.neighs:
			if !ok {
				return "neighbour"
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
		case u, ok := <-s.links:
			if !ok {
				return "link"
			}
			why = "link " + u.Attrs().Name
		case _, ok := <-s.rules:
			if !ok {
				return "rule"
			}
			w.routingChanged("rule")
			continue
		case u, ok := <-s.addrs:
			if !ok {
				return "address"
			}
			why = "address " + u.LinkAddress.String()
			w.onAddr()
		}
		if err := w.dp.BumpFIBEpoch(); err != nil {
			w.log.Error("bump fib epoch", "error", err)
			continue
		}
		w.log.Debug("next hops invalidated", "cause", why)
	}
}
