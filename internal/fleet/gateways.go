// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
)

const (
	// askWait bounds how long a listing waits for the gateways it asked
	// to answer, and askIdle how long it waits with no answer coming:
	// one that has not answered by then is listed as its last status
	// says (behind, when it had not followed the last change). A gateway
	// cut off from etcd, whose lease has not lapsed yet, costs a listing
	// askIdle, not askWait.
	askWait = 2 * time.Second
	askIdle = 300 * time.Millisecond
	// askEvery is the least time between two asks of one controller, so
	// that listings at once (several clients, a dashboard) ask once.
	askEvery = 100 * time.Millisecond
	// renewalLookups bounds the lease lookups a listing runs at once.
	renewalLookups = 16
)

// Gateways implements api.Fleet. A member writes how far it got only
// when asked (see the layout's v1/poll): when a gateway its last status
// lists converged has not said it followed the fleet's last change, the
// controller asks and waits, up to askWait, for each such gateway to
// answer, so that a listing right after an Apply shows who committed it.
func (c *Controller) Gateways(selector map[string]string) ([]*pb.GatewayStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second+askWait)
	defer cancel()
	kvs, rev, err := c.statuses(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(ctx); err != nil {
		return nil, err
	}
	gws := c.list(ctx, kvs, rev)
	c.gateways = map[string]map[string]string{}
	var out []*pb.GatewayStatus
	for _, g := range gws {
		c.gateways[g.Name] = g.Labels
		if Targets(&pb.Target{Selector: selector}, g.Name, g.Labels) {
			out = append(out, g)
		}
	}
	return out, nil
}

// Ask asks every member whose status changed since it last wrote it to
// write it now (a member commits without writing how far it got, under
// controllers that ask) and returns the revision of the ask.
func (c *Controller) Ask(ctx context.Context) (int64, error) {
	c.mu.Lock()
	c.asked = time.Now()
	c.mu.Unlock()
	r, err := c.cli.Put(ctx, c.k.poll(), newID())
	if err != nil {
		return 0, fmt.Errorf("etcd: %w", err)
	}
	return r.Header.Revision, nil
}

// statuses reads the keys under gateways/ and returns them by key, with
// the revision read; when some gateway has not said it followed the
// fleet's last change, it asks and takes in the answers that come
// within askWait.
func (c *Controller) statuses(ctx context.Context) (map[string]*mvccpb.KeyValue, int64, error) {
	c.mu.Lock()
	err := c.refresh(ctx)
	pos, asked := c.position(), c.asked
	c.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	r, err := c.cli.Get(ctx, c.k.gateways(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: %w", err)
	}
	kvs := make(map[string]*mvccpb.KeyValue, len(r.Kvs))
	for _, kv := range r.Kvs {
		kvs[string(kv.Key)] = kv
	}
	rev := r.Header.Revision
	waiting := map[string]bool{}
	for name, st := range c.readStatuses(kvs).live {
		if st.State == StateConverged && st.Position != pos {
			waiting[name] = true
		}
	}
	if len(waiting) == 0 {
		return kvs, rev, nil
	}
	wctx, cancel := context.WithTimeout(ctx, askWait)
	defer cancel()
	// From the revision read: nothing written since is missed.
	wc := c.cli.Watch(wctx, c.k.gateways(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	if time.Since(asked) >= askEvery {
		if _, err := c.Ask(wctx); err != nil {
			return nil, 0, err
		}
	}
	idle := time.NewTimer(askIdle)
	defer idle.Stop()
	for len(waiting) > 0 {
		var resp clientv3.WatchResponse
		ok := false
		select {
		case resp, ok = <-wc:
		case <-idle.C:
		}
		if !ok || resp.Err() != nil {
			break // the rest are listed as they are
		}
		idle.Reset(askIdle)
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			if ev.Type == mvccpb.DELETE {
				delete(kvs, key)
			} else {
				kvs[key] = ev.Kv
			}
			if name, _, ok := c.k.parseGateway(key); ok {
				delete(waiting, name)
			}
		}
		rev = max(rev, resp.Header.Revision)
	}
	return kvs, rev, nil
}

// gatewayKeys are the keys under gateways/, by gateway: the lease of its
// alive key (0: none, or one written without a lease), its status key,
// and its status when under that lease (live).
type gatewayKeys struct {
	leases   map[string]clientv3.LeaseID
	statuses map[string]*mvccpb.KeyValue
	live     map[string]*Status
	// unread says why a status is not in live though it is there.
	unread map[string]string
}

func (c *Controller) readStatuses(kvs map[string]*mvccpb.KeyValue) gatewayKeys {
	g := gatewayKeys{leases: map[string]clientv3.LeaseID{}, statuses: map[string]*mvccpb.KeyValue{},
		live: map[string]*Status{}, unread: map[string]string{}}
	for key, kv := range kvs {
		name, leaf, ok := c.k.parseGateway(key)
		switch {
		case !ok:
		case leaf == "alive":
			g.leases[name] = clientv3.LeaseID(kv.Lease)
		case leaf == "status":
			g.statuses[name] = kv
		}
	}
	for name, kv := range g.statuses {
		// A status counts only under the gateway's live lease: one its
		// lease took with it, or one written without it, is no word
		// from the gateway.
		if kv.Lease == 0 || clientv3.LeaseID(kv.Lease) != g.leases[name] {
			g.unread[name] = "its status is not under its live lease: ignored"
			continue
		}
		st := &Status{}
		if err := json.Unmarshal(kv.Value, st); err != nil {
			g.unread[name] = "unreadable status: " + err.Error()
			continue
		}
		g.live[name] = st
	}
	return g
}

// renewals returns when each lease was last renewed (Unix ms): its TTL
// minus what is left of it, one request per lease, a few at once.
func (c *Controller) renewals(ctx context.Context, leases map[string]clientv3.LeaseID) map[string]int64 {
	out := map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, renewalLookups)
	for name, id := range leases {
		if id == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if ttl, err := c.cli.TimeToLive(ctx, id); err == nil && ttl.TTL > 0 {
				last := time.Now().Add(-time.Duration(ttl.GrantedTTL-ttl.TTL) * time.Second).UnixMilli()
				mu.Lock()
				out[name] = last
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// list lists every gateway from the keys under gateways/ read at read
// (with its last lease renewal); c.mu held, objects and labels fresh.
//
// A gateway is converged only when its member says so and its position
// is etcd's revision key: one that followed revisions etcd has lost
// (restored from a backup, or wiped and filled again) is behind until it
// has read everything again, and so is one that has not yet said it
// followed the last change.
func (c *Controller) list(ctx context.Context, kvs map[string]*mvccpb.KeyValue, read int64) []*pb.GatewayStatus {
	keys := c.readStatuses(kvs)
	byName := map[string]*pb.GatewayStatus{}
	gw := func(name string) *pb.GatewayStatus {
		g := byName[name]
		if g == nil {
			g = &pb.GatewayStatus{Name: name, State: StateDisconnected, Labels: c.labels[name]}
			byName[name] = g
		}
		return g
	}
	for name := range c.labels {
		gw(name)
	}
	for name, id := range keys.leases {
		// Only under a lease: an alive key written without one would
		// outlive the gateway.
		gw(name).Reachable = id != 0
	}
	for name := range keys.statuses {
		gw(name).Error = keys.unread[name]
	}
	heard := map[string]clientv3.LeaseID{}
	for name := range keys.live {
		heard[name] = keys.leases[name]
	}
	renewed := c.renewals(ctx, heard)
	pos := c.position()
	for name, g := range byName {
		st := keys.live[name]
		committed := int64(0)
		if st != nil {
			committed = st.Committed
			g.CommittedRevision, g.Generation = uint64(st.Committed), st.Generation
			g.State, g.Error, g.DataplaneOk = st.State, st.Error, st.DataplaneOK
			g.PathsUp, g.PathsDown, g.Objects = st.PathsUp, st.PathsDown, st.Objects
			g.HeartbeatUnixMs = max(st.Written, renewed[name])
		}
		if !g.Reachable {
			g.State = StateDisconnected
		} else if st == nil {
			g.State = StateBehind
		}
		// In drift: a change to one of its targets, or to its labels,
		// after what it committed; or a state from a history etcd no
		// longer has.
		for s, rev := range c.scopeRev {
			if t, err := ParseScope(s); err == nil && Targets(t, name, g.Labels) && rev > committed {
				g.Drift = true
			}
		}
		if rev, ok := c.labelRev[name]; ok && rev > committed {
			g.Drift = true
		}
		if st != nil && (st.Position.Rev > pos.Rev || st.Position.Rev == pos.Rev && st.Position.ID != pos.ID || st.Committed > read) {
			g.Drift = true
			if g.Error == "" {
				g.Error = fmt.Sprintf("its state follows revisions etcd no longer has (position %d/%s, etcd's %d/%s: restored or replaced); it reads everything again",
					st.Position.Rev, st.Position.ID, pos.Rev, pos.ID)
			}
		}
		if g.State == StateConverged && (g.Drift || st.Position != pos) {
			g.State = StateBehind
		}
	}
	return slices.SortedFunc(maps.Values(byName), func(a, b *pb.GatewayStatus) int {
		return strings.Compare(a.Name, b.Name)
	})
}
