// SPDX-License-Identifier: Apache-2.0

package api

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What the TCP API refuses, by reason (edgeplane_api_refused_total).
const (
	// RefusedUnauthenticated is a call without a valid token, answered
	// (after Limits.AuthFailureDelay).
	RefusedUnauthenticated = "unauthenticated"
	// RefusedSourceLimit is a source past its budget of refused calls:
	// its call's connection is closed unanswered, and its new
	// connections are closed as they arrive until the budget refills.
	RefusedSourceLimit = "source_limit"
	// RefusedSourceConns is a connection beyond what one source may
	// hold open (Limits.MaxConnsPerSource), closed as it arrives.
	RefusedSourceConns = "source_conns"
	// RefusedConns is a connection beyond what a listener holds
	// (Limits.MaxConns), closed as it arrives.
	RefusedConns = "conns"
	// RefusedGoAway is a gRPC connection the server sent GOAWAY
	// ENHANCE_YOUR_CALM (a PING flood) and stopped reading (calmConn);
	// it spends one of its source's budget.
	RefusedGoAway = "goaway"
)

// NewRefusedCounter returns edgeplane_api_refused_total, its series
// present from the start at 0, for Options.Refused.
func NewRefusedCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgeplane_api_refused_total",
		Help: "Calls and connections the TCP API refused, by listener (grpc, rest) and reason: unauthenticated (answered), source_limit (a source past its budget of refused calls, cut off), source_conns (past its connections), conns (past the listener's), goaway (a gRPC connection sent GOAWAY ENHANCE_YOUR_CALM for flooding PINGs, closed).",
	}, []string{"listener", "reason"})
	for _, l := range []string{"grpc", "rest"} {
		for _, r := range []string{RefusedUnauthenticated, RefusedSourceLimit, RefusedSourceConns, RefusedConns} {
			c.WithLabelValues(l, r)
		}
	}
	c.WithLabelValues("grpc", RefusedGoAway)
	return c
}

// maxSources bounds how many sources are tracked at once. Past it, the
// sources that cost nothing now (no connection, a full budget) are
// forgotten; a source that still cannot be tracked is let through, held
// only by the listener's own limits.
const maxSources = 65536

// sources keeps what each client source costs the TCP API: a token
// bucket of refused calls (Limits.RefusedBurst, refilled at
// Limits.RefusedRate a second) and its open connections. A source that
// sends calls without a valid token, from as many connections as it
// likes, spends its own budget and its own share of connections, never
// another source's: its calls past the budget close their connection
// unanswered, and its new connections are closed on arrival while the
// budget is empty.
type sources struct {
	lim     Limits
	refused *prometheus.CounterVec
	now     func() time.Time

	mu sync.Mutex
	m  map[netip.Addr]*source
	// conns are the open connections by connKey, to cut one off from
	// the call it carries.
	conns map[string]net.Conn
}

type source struct {
	tokens float64
	at     time.Time // of the last refill
	conns  int
}

func newSources(lim Limits, refused *prometheus.CounterVec) *sources {
	return &sources{lim: lim, refused: refused, now: time.Now, m: map[netip.Addr]*source{}, conns: map[string]net.Conn{}}
}

// sourceOf is what an address's connections are counted under: the
// IPv4 address, or the /64 of an IPv6 one (a host picks its addresses
// from a whole /64). ok is false for an address without an IP.
func sourceOf(a net.Addr) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		ip = p.Addr()
	}
	return ip, true
}

func connKey(local, remote string) string { return local + " " + remote }

// get returns ip's source with its budget refilled to now; s.mu held.
// nil: not tracked (too many sources).
func (s *sources) get(ip netip.Addr) *source {
	now := s.now()
	src := s.m[ip]
	if src == nil {
		if len(s.m) >= maxSources {
			s.sweep(now)
			if len(s.m) >= maxSources {
				return nil
			}
		}
		src = &source{tokens: float64(s.lim.RefusedBurst), at: now}
		s.m[ip] = src
		return src
	}
	src.tokens = min(float64(s.lim.RefusedBurst), src.tokens+now.Sub(src.at).Seconds()*s.lim.RefusedRate)
	src.at = now
	return src
}

// sweep forgets the sources that cost nothing now; s.mu held.
func (s *sources) sweep(now time.Time) {
	for ip, src := range s.m {
		full := src.tokens+now.Sub(src.at).Seconds()*s.lim.RefusedRate >= float64(s.lim.RefusedBurst)
		if src.conns == 0 && full {
			delete(s.m, ip)
		}
	}
}

// admit counts a new connection of c's source, or refuses it (the reason
// counted): its budget is empty, or it holds as many connections as it
// may. release undoes it when the connection closes.
func (s *sources) admit(listener string, c net.Conn) (release func(), ok bool) {
	ip, tracked := sourceOf(c.RemoteAddr())
	key := connKey(c.LocalAddr().String(), c.RemoteAddr().String())
	s.mu.Lock()
	defer s.mu.Unlock()
	var src *source
	if tracked {
		src = s.get(ip)
	}
	if src != nil {
		switch {
		case src.tokens < 1:
			s.refused.WithLabelValues(listener, RefusedSourceLimit).Inc()
			return nil, false
		case src.conns >= s.lim.MaxConnsPerSource:
			s.refused.WithLabelValues(listener, RefusedSourceConns).Inc()
			return nil, false
		}
		src.conns++
	}
	s.conns[key] = c
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.conns, key)
		if src != nil {
			src.conns--
		}
	}, true
}

// refuse spends one of the budget of the source of the connection
// local-remote on a call it refused. It reports whether the call is to
// be answered; if not, the budget is spent and the connection has been
// closed, so the source's calls cost nothing more until it refills.
func (s *sources) refuse(listener, local, remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		s.refused.WithLabelValues(listener, RefusedUnauthenticated).Inc()
		return true
	}
	ip, _ := sourceOf(net.TCPAddrFromAddrPort(ap))
	s.mu.Lock()
	src := s.get(ip)
	if src == nil || src.tokens >= 1 {
		if src != nil {
			src.tokens--
		}
		s.mu.Unlock()
		s.refused.WithLabelValues(listener, RefusedUnauthenticated).Inc()
		return true
	}
	c := s.conns[connKey(local, remote)]
	s.mu.Unlock()
	s.refused.WithLabelValues(listener, RefusedSourceLimit).Inc()
	if c != nil {
		c.Close()
	}
	return false
}

// calmed counts a connection the server sent GOAWAY ENHANCE_YOUR_CALM
// and spends one of its source's budget: a source that floods PINGs
// from connection after connection is cut off like one that floods bad
// tokens.
func (s *sources) calmed(listener string, c net.Conn) {
	s.refused.WithLabelValues(listener, RefusedGoAway).Inc()
	ip, ok := sourceOf(c.RemoteAddr())
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if src := s.get(ip); src != nil && src.tokens >= 1 {
		src.tokens--
	}
}
