// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/rtloop"
)

// A backend is probed as its service's health settings say; after Fall
// failures in a row it leaves the service's Maglev table (no new
// connections; established ones stay pinned, as when drained), after Rise
// successes in a row it comes back. A backend starts up: an agent start
// or a new backend does not take traffic away before the first probes.

// healthKey names one backend of one service.
type healthKey struct{ svc, far uint32 }

// healthTarget is what to probe for a backend.
type healthTarget struct {
	key  healthKey
	addr string // host:port
	h    config.Health
}

type healthState struct {
	h        config.Health // as of the last probe started
	up       bool
	ok, bad  uint32 // consecutive results
	inflight bool
	next     time.Time
	last     string // the last failure, for the log
}

type healthResult struct {
	key healthKey
	err error
}

// healthTargets lists the backends of every service with health checks;
// a.mu held. It reads the services and looks their members up, so a tick
// costs what the checked services have, not the config.
func (a *Agent) healthTargets() []healthTarget {
	var out []healthTarget
	for _, sv := range a.store.Services() {
		if sv.Health == nil {
			continue
		}
		h := sv.Health.Effective()
		l, _ := a.store.LBR(sv.LBR)
		for _, m := range l.Members {
			f, _ := a.store.FAR(m.FAR)
			var host netip.Addr
			port := h.Port
			switch f.Action {
			case config.ActionNAT:
				host = f.Address.A
				if port == 0 {
					port = f.Port
				}
			case config.ActionEncap:
				p, _ := a.store.Path(f.Path)
				host = p.Remote.A
				if port == 0 {
					port = sv.Port
				}
			default:
				continue
			}
			out = append(out, healthTarget{key: healthKey{sv.ID, m.FAR}, addr: netip.AddrPortFrom(host, port).String(), h: h})
		}
	}
	return out
}

// probe runs one health check.
func probe(ctx context.Context, t healthTarget) error {
	ctx, cancel := context.WithTimeout(ctx, t.h.Timeout.D)
	defer cancel()
	if t.h.Type != config.HealthHTTP {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", t.addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.addr+t.h.Path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "edgeplane-health")
	// A fresh transport: no connection reuse, each probe dials as a
	// client would.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	return nil
}

// healthLoop probes the backends of services with health checks until ctx
// ends, and takes them out of and back into their tables. Its ticks run
// on a protected thread (internal/rtloop), so load on the gateway does not
// delay taking a failed backend out; the checks' own connections are
// the kernel's and the runtime's.
func (a *Agent) healthLoop(ctx context.Context, up *prometheus.GaugeVec) {
	states := map[healthKey]*healthState{}
	results := make(chan healthResult, 64)
	label := func(k healthKey) []string {
		return []string{strconv.FormatUint(uint64(k.svc), 10), strconv.FormatUint(uint64(k.far), 10)}
	}
	rtloop.Run(ctx, a.log, "health checks", 50*time.Millisecond, func(now time.Time) {
		// The results that came since the last tick.
		for done := false; !done; {
			select {
			case r := <-results:
				if st := states[r.key]; st != nil { // else no longer checked
					st.inflight = false
					a.healthResult(r, st, up.WithLabelValues(label(r.key)...))
				}
			default:
				done = true
			}
		}
		seen := map[healthKey]bool{}
		a.mu.Lock()
		targets := a.healthTargets()
		a.mu.Unlock()
		for _, t := range targets {
			seen[t.key] = true
			st := states[t.key]
			if st == nil {
				st = &healthState{up: true, next: now}
				states[t.key] = st
				up.WithLabelValues(label(t.key)...).Set(1)
			}
			if st.inflight || now.Before(st.next) {
				continue
			}
			st.h = t.h
			st.inflight = true
			st.next = now.Add(t.h.Interval.D)
			go func(t healthTarget) {
				r := healthResult{key: t.key, err: probe(ctx, t)}
				select { // the loop may be gone (shutdown)
				case results <- r:
				case <-ctx.Done():
				}
			}(t)
		}
		for k, st := range states {
			if seen[k] {
				continue
			}
			// No longer checked: a backend left down comes back, so
			// it is not out of its table for good.
			if !st.up {
				a.setBackendUp(k, true, "health checks removed")
			}
			delete(states, k)
			up.DeleteLabelValues(label(k)...)
		}
	})
}

// healthResult counts a probe's result and acts on a change of state.
func (a *Agent) healthResult(r healthResult, st *healthState, gauge prometheus.Gauge) {
	h := st.h
	if r.err == nil {
		st.ok, st.bad = st.ok+1, 0
		if !st.up && st.ok >= h.Rise {
			if a.setBackendUp(r.key, true, fmt.Sprintf("%d checks passed", st.ok)) {
				st.up = true
				gauge.Set(1)
			}
		}
		return
	}
	st.ok, st.bad, st.last = 0, st.bad+1, r.err.Error()
	if st.up && st.bad >= h.Fall {
		if a.setBackendUp(r.key, false, fmt.Sprintf("%d checks failed, last: %s", st.bad, st.last)) {
			st.up = false
			gauge.Set(0)
		}
	}
}

// setBackendUp rebuilds the backend's service table with it in (up) or
// out and commits that; it reports whether the change is live.
func (a *Agent) setBackendUp(k healthKey, isUp bool, why string) bool {
	a.commitMu.Lock()
	defer a.commitMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	undo, err := a.comp.SetBackendUp(k.svc, k.far, isUp)
	if err == nil {
		err = a.commitCompiled(undo)
	}
	if err == nil {
		if isUp {
			delete(a.down, k)
		} else {
			a.down[k] = true
		}
	}
	state := "down"
	if isUp {
		state = "up"
	}
	if err != nil {
		a.log.Error("health check: could not change backend state", "service", k.svc, "far", k.far, "state", state, "error", err)
		return false
	}
	a.log.Warn("health check: backend "+state, "service", k.svc, "far", k.far, "why", why, "generation", a.gen)
	return true
}
