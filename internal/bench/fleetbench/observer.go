// SPDX-License-Identifier: Apache-2.0

package fleetbench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/edgeplane/edgeplane/internal/fleet"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// fleetObserver follows a fleet's keys through the bench's own watches:
// the members' statuses (when each was seen to commit what) and every
// key write under v1/ (what an Apply cost).
type fleetObserver struct {
	base string // PREFIX/v1/

	mu sync.Mutex
	// wake is closed, and replaced, whenever something is seen.
	wake chan struct{}
	// status is each member's statuses as seen, in order.
	status map[string][]statusSeen
	// events are the key writes under v1/, in revision order; seenRev
	// the last one's revision.
	events  []fleetEvent
	seenRev int64
	err     error
}

type statusSeen struct {
	committed, rev int64
	state, error   string
	at             time.Time
}

type fleetEvent struct {
	rev int64
	key string
}

func newFleetObserver(prefix string) *fleetObserver {
	return &fleetObserver{base: strings.TrimRight(prefix, "/") + "/v1/", wake: make(chan struct{}), status: map[string][]statusSeen{}}
}

// start watches v1/gateways/ and v1/ from rev until ctx ends.
func (ob *fleetObserver) start(ctx context.Context, cli, cliAll *clientv3.Client, rev int64, wg *sync.WaitGroup) {
	gw := cli.Watch(ctx, ob.base+"gateways/", clientv3.WithPrefix(), clientv3.WithRev(rev))
	all := cliAll.Watch(ctx, ob.base, clientv3.WithPrefix(), clientv3.WithRev(rev))
	wg.Go(func() { ob.follow(ctx, "v1/gateways/", gw, ob.statuses) })
	wg.Go(func() { ob.follow(ctx, "v1/", all, ob.writes) })
}

// follow hands each response of wc to fn, time-stamped on arrival.
func (ob *fleetObserver) follow(ctx context.Context, what string, wc clientv3.WatchChan, fn func(clientv3.WatchResponse, time.Time)) {
	for resp := range wc {
		if err := resp.Err(); err != nil {
			ob.fail(fmt.Errorf("watch of %s: %w", what, err))
			return
		}
		at := time.Now()
		ob.mu.Lock()
		fn(resp, at)
		close(ob.wake)
		ob.wake = make(chan struct{})
		ob.mu.Unlock()
	}
	if ctx.Err() == nil {
		ob.fail(fmt.Errorf("watch of %s closed", what))
	}
}

func (ob *fleetObserver) fail(err error) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.err == nil {
		ob.err = err
	}
	close(ob.wake)
	ob.wake = make(chan struct{})
}

// statuses records the members' statuses of resp; ob.mu held.
func (ob *fleetObserver) statuses(resp clientv3.WatchResponse, at time.Time) {
	for _, ev := range resp.Events {
		name, ok := ob.statusOf(string(ev.Kv.Key))
		if !ok || ev.Type != mvccpb.PUT {
			continue
		}
		var st fleet.Status
		if err := json.Unmarshal(ev.Kv.Value, &st); err != nil {
			continue
		}
		ob.status[name] = append(ob.status[name], statusSeen{committed: st.Committed, rev: ev.Kv.ModRevision, state: st.State, error: st.Error, at: at})
	}
}

// writes records the key writes of resp; ob.mu held.
func (ob *fleetObserver) writes(resp clientv3.WatchResponse, _ time.Time) {
	for _, ev := range resp.Events {
		// A delete event's key-value carries the delete's revision.
		ob.events = append(ob.events, fleetEvent{rev: ev.Kv.ModRevision, key: string(ev.Kv.Key)})
		ob.seenRev = max(ob.seenRev, ev.Kv.ModRevision)
	}
}

// statusOf returns the member whose status key is key.
func (ob *fleetObserver) statusOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, ob.base+"gateways/")
	if !ok {
		return "", false
	}
	esc, ok := strings.CutSuffix(rest, "/status")
	if !ok || strings.Contains(esc, "/") {
		return "", false
	}
	name, err := url.PathUnescape(esc)
	return name, err == nil
}

func (ob *fleetObserver) isStatus(key string) bool {
	_, ok := ob.statusOf(key)
	return ok
}

// committed returns, of the statuses seen of a member, the first to
// carry rev or later; ob.mu held. A member's committed revision only
// grows while it runs, so the search walks back from the last.
func (ob *fleetObserver) committed(name string, rev int64) (statusSeen, bool) {
	h := ob.status[name]
	i := len(h)
	for i > 0 && h[i-1].committed >= rev {
		i--
	}
	if i == len(h) {
		return statusSeen{}, false
	}
	return h[i], true
}

// waitCommitted waits until every member named was seen to commit rev
// and returns when the last of them was seen to and the revision of
// that status write. Each wake looks again only at the members still
// missing, and names them without describing them: at 1,000 members a
// pass over all of them, with a Sprintf each, on every status seen was
// the bench's own quadratic cost.
func (ob *fleetObserver) waitCommitted(ctx context.Context, names []string, rev int64, timeout time.Duration) (time.Time, int64, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	missing := slices.Clone(names)
	var last time.Time
	var lastRev int64
	for {
		ob.mu.Lock()
		still := missing[:0]
		for _, n := range missing {
			s, ok := ob.committed(n, rev)
			if !ok {
				still = append(still, n)
				continue
			}
			if s.at.After(last) {
				last = s.at
			}
			lastRev = max(lastRev, s.rev)
		}
		missing = still
		err, wake := ob.err, ob.wake
		ob.mu.Unlock()
		switch {
		case err != nil:
			return time.Time{}, 0, err
		case len(missing) == 0:
			return last, lastRev, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return time.Time{}, 0, ctx.Err()
		case <-deadline.C:
			return time.Time{}, 0, fmt.Errorf("not committed by every member within %s: %s", timeout, ob.describeAll(missing))
		}
	}
}

// describe says what was last seen of a member; ob.mu held.
func (ob *fleetObserver) describe(name string) string {
	h := ob.status[name]
	if len(h) == 0 {
		return name + ": no status seen"
	}
	s := h[len(h)-1]
	out := fmt.Sprintf("%s: %s at revision %d", name, s.state, s.committed)
	if s.error != "" {
		out += " (" + s.error + ")"
	}
	return out
}

// describeAll describes the first five members named and counts the
// rest.
func (ob *fleetObserver) describeAll(names []string) string {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var out []string
	for i, n := range names {
		if i == 5 {
			out = append(out, fmt.Sprintf("and %d more", len(names)-5))
			break
		}
		out = append(out, ob.describe(n))
	}
	return strings.Join(out, "; ")
}

// waitReady waits until every member named has joined and committed
// rev, converged; alive, if given, fails the wait early.
func (ob *fleetObserver) waitReady(ctx context.Context, names []string, rev int64, alive func() error) error {
	deadline := time.Now().Add(fleetReadyTimeout)
	for {
		ob.mu.Lock()
		var missing []string
		for _, n := range names {
			h := ob.status[n]
			if len(h) == 0 || h[len(h)-1].committed < rev || h[len(h)-1].state != fleet.StateConverged {
				missing = append(missing, n)
			}
		}
		err := ob.err
		ob.mu.Unlock()
		switch {
		case err != nil:
			return err
		case len(missing) == 0:
			return nil
		}
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("members not joined within %s: %s", fleetReadyTimeout, ob.describeAll(missing))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitRev waits until the watch of v1/ has seen revision rev.
func (ob *fleetObserver) waitRev(ctx context.Context, rev int64, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ob.mu.Lock()
		seen, err, wake := ob.seenRev, ob.err, ob.wake
		ob.mu.Unlock()
		switch {
		case err != nil:
			return err
		case seen >= rev:
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the watch of v1/ saw revision %d, not %d, within %s", seen, rev, timeout)
		}
	}
}

// eventsIn returns the key writes seen from revision lo to hi.
func (ob *fleetObserver) eventsIn(lo, hi int64) []fleetEvent {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var out []fleetEvent
	for _, ev := range ob.events {
		if ev.rev >= lo && ev.rev <= hi {
			out = append(out, ev)
		}
	}
	return out
}
