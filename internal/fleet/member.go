// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	pb3 "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Gateway is what a member drives: the agent (its serving config, and
// Apply with the same atomic generation flip and journal as an API
// batch), or, for the fleet bench, a store that writes no dataplane.
type Gateway interface {
	Config() *config.Config
	Apply(ops []config.Op, dryRun bool, rec []byte) (uint32, error)
}

// Health is what a member reports of its gateway besides the rules.
type Health struct {
	DataplaneOK        bool
	PathsUp, PathsDown uint32
}

// MemberOptions configure a Member.
type MemberOptions struct {
	// Name is the gateway's; its labels are the ones controllers give
	// it in etcd (v1/labels/NAME), never its own.
	Name   string
	Prefix string
	// StateFile keeps the revision last committed across restarts
	// ("": not kept).
	StateFile string
	// TTL is the lease's: a gateway that has not renewed it for this
	// long is unreachable (default 5 s).
	TTL time.Duration
	// Check is how long the member's watch may be quiet (no change to
	// the fleet's revision key, whose chain it checks) before it checks
	// that etcd still holds the history it follows (default 5 s, each
	// wait drawn ±20 %; also at once when it reaches etcd again).
	Check time.Duration
	// Health is asked at each heartbeat (nil: dataplane OK, no paths).
	Health func() Health
	Log    *slog.Logger
}

// Member keeps one gateway in step with its desired state in etcd.
type Member struct {
	o   MemberOptions
	cli *clientv3.Client
	gw  Gateway
	k   keys
	// mine is the key of the gateway's labels.
	mine string

	// cache holds every object of the fleet at rev, by etcd key, and
	// labels the gateway's; pos is the revision key at rev, and cluster
	// and epoch its value's; ready: the layout is there. Only Run's
	// goroutine touches them.
	cache   map[string]*object
	labels  map[string]string
	rev     int64
	pos     Position
	cluster string
	epoch   int64
	ready   bool
	// targets are the scopes seen, parsed (nil: not a scope).
	targets map[string]*pb.Target
	// served is the objects the last commit left the gateway holding
	// (nil: not known; the next commit asks the gateway).
	served map[objKey]*object
	// behind says why the gateway is behind (etcd restored, replaced)
	// from the moment the member notices until it has committed what
	// etcd holds then. It outlives the reads in between: one of a wiped
	// etcd finds no layout, and the read of the keys put back after it
	// is an ordinary one, yet the gateway still serves the lost state.
	behind string
	// recheck asks Run's goroutine to check etcd's history at once (the
	// heartbeat reached etcd again).
	recheck chan struct{}
	// renewed is when etcd last renewed the lease, ka the stream it
	// renews it on (nil: none open; the heartbeat's goroutine alone
	// touches them).
	renewed  time.Time
	ka       pb3.Lease_LeaseKeepAliveClient
	kaCancel context.CancelFunc

	mu        sync.Mutex
	st        Status
	connected bool
	wrote     Status // the status etcd holds, as last written (Written 0)
	changed   chan struct{}
	// asks: the fleet's revision key says its controllers ask for
	// statuses (v1/poll), so a commit that changes nothing but how far
	// the gateway got waits to be asked before it is written; asked: a
	// controller has asked since the status was last written.
	asks, asked bool
}

// NewMember returns a member keeping gw in step through cli.
func NewMember(cli *clientv3.Client, gw Gateway, o MemberOptions) *Member {
	o.TTL = cmp.Or(o.TTL, 5*time.Second)
	o.Check = cmp.Or(o.Check, 5*time.Second)
	o.Prefix = cmp.Or(o.Prefix, DefaultPrefix)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	k := newKeys(o.Prefix)
	m := &Member{o: o, cli: cli, gw: gw, k: k, mine: k.label(o.Name), changed: make(chan struct{}, 1), recheck: make(chan struct{}, 1),
		targets: map[string]*pb.Target{}}
	// Behind until the first read: it serves what it last committed.
	m.st = Status{State: StateBehind}
	if c, err := readState(o.StateFile); err == nil {
		m.st.Committed = c
	} else if !errors.Is(err, os.ErrNotExist) {
		o.Log.Error("fleet state file unreadable; starting from a full read", "file", o.StateFile, "error", err)
	}
	return m
}

// memberState is the state file.
type memberState struct {
	Committed int64 `json:"committed_revision"`
}

func readState(path string) (int64, error) {
	if path == "" {
		return 0, os.ErrNotExist
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var s memberState
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return s.Committed, nil
}

// Status returns the member's status now, and whether it reaches etcd.
func (m *Member) Status() (Status, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st, m.connected
}

// set changes the status under m.mu and wakes the status writer.
func (m *Member) set(fn func(*Status)) {
	m.mu.Lock()
	was := m.st
	fn(&m.st)
	// How far it got, and nobody asking: nothing to write (see beat), so
	// the writer is not woken at every commit.
	quiet := m.asks && !m.asked && m.st.sameState(was)
	m.mu.Unlock()
	if quiet {
		return
	}
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Run keeps the gateway in step until ctx ends: it reads the objects,
// commits those meant for the gateway, and follows the changes with a
// watch, resuming after a disconnect from the revision it has (a full
// read when etcd has compacted it away, or no longer holds the history
// it followed). Meanwhile it heartbeats and writes the status.
func (m *Member) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { m.heartbeat(ctx) })
	defer wg.Wait()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := m.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue // read everything again: follow from there
		}
		m.o.Log.Warn("fleet: lost the watch; serving the last committed state", "revision", m.rev, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// follow reads (when it has nothing, or etcd compacted what it has, or
// lost the history it followed) and watches until the watch fails (an
// error) or the member has read everything again (nil: watch from the
// new revision).
func (m *Member) follow(ctx context.Context) error {
	if m.cache == nil {
		if err := m.read(ctx); err != nil {
			return err
		}
	} else if again, err := m.verify(ctx); err != nil || again {
		return err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The member's range alone: the gateways' statuses change all the
	// time and are none of a member's business.
	from, end := m.k.memberRange()
	wc := m.cli.Watch(wctx, from, clientv3.WithRange(end), clientv3.WithRev(m.rev+1))
	check := time.NewTimer(m.checkAfter())
	defer check.Stop()
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wc:
		case <-check.C:
			if again, err := m.verify(ctx); err != nil || again {
				return err
			}
			check.Reset(m.checkAfter())
			continue
		case <-m.recheck:
			if again, err := m.verify(ctx); err != nil || again {
				return err
			}
			continue
		}
		if !ok {
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("watch closed (etcd lost its leader or is unreachable)")
		}
		if resp.CompactRevision > 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			m.o.Log.Info("fleet: etcd compacted the revisions after ours; reading everything again", "revision", m.rev, "compacted", resp.CompactRevision)
			return m.reread(ctx, "")
		}
		if err := resp.Err(); err != nil {
			return err
		}
		pos := m.pos
		again, why, changed, asked := m.apply(resp.Events)
		if again {
			return m.reread(ctx, why)
		}
		if m.pos != pos {
			// The chain checked out: etcd holds the history followed,
			// so the check waits until the watch is quiet again.
			check.Reset(m.checkAfter())
		}
		if rev := resp.Header.Revision; rev > m.rev && len(resp.Events) > 0 {
			m.rev = rev
			// An ask alone changes nothing to commit: the status keeps
			// the revision of the last change.
			if m.ready && changed {
				m.commit()
			}
		}
		if asked {
			// After the commit: the answer says how far it got.
			m.set(func(*Status) { m.asked = true })
		}
	}
}

// apply takes a watch response's events into the cache, or says the
// member must read everything again instead (again), and why when that
// is not the ordinary course (the layout written at last). changed: an
// event other than a controller's ask (asked).
func (m *Member) apply(events []*clientv3.Event) (again bool, why string, changed, asked bool) {
	for _, ev := range events {
		key := string(ev.Kv.Key)
		del := ev.Type == mvccpb.DELETE
		if key == m.k.poll() {
			asked = asked || !del
			continue
		}
		changed = true
		switch {
		case key == m.k.revision():
			if del {
				return true, "the fleet's revision key was deleted", changed, asked
			}
			v := parseRevision(ev.Kv.Value)
			if v.Prev != nil && *v.Prev != m.pos {
				// A change this member did not see: etcd holds another
				// history than the one it followed.
				return true, fmt.Sprintf("the fleet's revision key at %d follows %d/%s, not %d/%s as this gateway saw it: etcd was restored or replaced",
					ev.Kv.ModRevision, v.Prev.Rev, v.Prev.ID, m.pos.Rev, m.pos.ID), changed, asked
			}
			if m.cluster != "" && v.Cluster != m.cluster {
				return true, fmt.Sprintf("the fleet's cluster id is %s, not %s: another fleet's etcd", v.Cluster, m.cluster), changed, asked
			}
			if v.Epoch != m.epoch && m.epoch != 0 {
				m.o.Log.Info("fleet: the epoch moved on", "epoch", v.Epoch, "was", m.epoch)
			}
			m.pos, m.cluster, m.epoch = Position{Rev: ev.Kv.ModRevision, ID: v.ID}, v.Cluster, v.Epoch
			m.setAsks(v.Asks)
		case key == m.k.layout():
			switch {
			case !m.ready:
				return true, "", changed, asked // written at last: read what it lays out
			case del || string(ev.Kv.Value) != LayoutVersion:
				return true, "the layout key changed", changed, asked
			}
		case key == m.mine:
			m.labels = nil
			if !del {
				if err := json.Unmarshal(ev.Kv.Value, &m.labels); err != nil {
					m.labels = map[string]string{"": "unreadable: " + err.Error()}
				}
			}
		case strings.HasPrefix(key, m.k.objects()):
			if del {
				delete(m.cache, key)
				continue
			}
			m.cache[key] = m.decode(ev.Kv)
		}
	}
	return false, "", changed, asked
}

// setAsks records whether the fleet's controllers ask for statuses.
func (m *Member) setAsks(asks bool) {
	m.mu.Lock()
	m.asks = asks
	m.mu.Unlock()
}

// verify checks that etcd holds the history the member follows: the
// revision key it saw at its revision is still there, and etcd is not
// before that revision. If not (restored from a backup, wiped and filled
// again, another etcd at the same endpoints), the gateway is behind and
// the member reads everything again (again: it did).
func (m *Member) verify(ctx context.Context) (again bool, err error) {
	// First as whichever etcd member answers has it (serializable), with
	// no round to the leader: a thousand members checking every few
	// seconds were as many ReadIndex rounds. A follower a little behind
	// the one the watch is on looks like an older etcd for a moment, so
	// what this read suspects is read again linearizably before the
	// member acts on it.
	why, err := m.history(ctx, clientv3.WithSerializable())
	if err != nil || why == "" {
		return false, err
	}
	if why, err = m.history(ctx); err != nil || why == "" {
		return false, err
	}
	return true, m.reread(ctx, why)
}

// history reads the revision key with opts and says why etcd does not
// hold the history the member follows ("": it does).
func (m *Member) history(ctx context.Context, opts ...clientv3.OpOption) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, m.o.TTL/2)
	defer cancel()
	r, err := m.cli.Get(rctx, m.k.revision(), opts...)
	if err != nil {
		return "", err
	}
	cur, v := Position{}, revisionValue{}
	if len(r.Kvs) > 0 {
		v = parseRevision(r.Kvs[0].Value)
		cur = Position{Rev: r.Kvs[0].ModRevision, ID: v.ID}
	}
	switch {
	case r.Header.Revision < m.rev:
		return fmt.Sprintf("etcd is at revision %d, before the %d this gateway followed: restored from an older state", r.Header.Revision, m.rev), nil
	case cur.Rev <= m.rev && cur != m.pos:
		return fmt.Sprintf("the fleet's revision key is %d/%s where this gateway followed %d/%s: etcd was restored or replaced", cur.Rev, cur.ID, m.pos.Rev, m.pos.ID), nil
	case m.cluster != "" && v.Cluster != "" && v.Cluster != m.cluster:
		return fmt.Sprintf("the fleet's cluster id is %s, not %s: another fleet's etcd", v.Cluster, m.cluster), nil
	}
	return "", nil
}

// checkAfter is how long the watch may be quiet before the next check
// of etcd's history: Check, drawn ±20 % each time, so that the
// members, whose checks an Apply to all of them resets at once, do not
// all check in the same instant.
func (m *Member) checkAfter() time.Duration {
	d := m.o.Check
	return d - d/5 + rand.N(2*d/5)
}

// reread reads everything again; with why, the gateway is shown behind
// (and why) until it has committed what it read.
func (m *Member) reread(ctx context.Context, why string) error {
	if why != "" {
		m.o.Log.Warn("fleet: reading everything again; behind until committed", "reason", why, "revision", m.rev)
		m.behind = why
		m.set(func(s *Status) { s.State, s.Error = StateBehind, why })
	}
	m.cache = nil
	return m.read(ctx)
}

// decode reads an object of the watch or a read. One that does not
// decode is kept as such (err set): a state without it is not the
// desired one, and committing it would delete what the gateway serves
// under that key.
func (m *Member) decode(kv *mvccpb.KeyValue) *object {
	scope, kind, err := m.k.parseObject(string(kv.Key))
	if err != nil {
		return &object{err: err}
	}
	o, err := decodeObject(scope, kv.Value, kv.CreateRevision)
	if err != nil {
		m.o.Log.Error("fleet: unreadable object", "key", string(kv.Key), "error", err)
		return &object{scope: scope, objKey: objKey{kind: kind}, err: fmt.Errorf("%s: %w", kv.Key, err)}
	}
	return o
}

// read reads the member's range (its labels, the layout, the objects and
// the revision key) at one revision and commits what is meant for the
// gateway.
func (m *Member) read(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	from, end := m.k.memberRange()
	resp, err := m.cli.Get(rctx, from, clientv3.WithRange(end))
	if err != nil {
		return err
	}
	m.rev = resp.Header.Revision
	m.cache, m.labels, m.pos, m.cluster, m.epoch = map[string]*object{}, nil, Position{}, "", 0
	m.served, m.targets = nil, map[string]*pb.Target{}
	var layout []byte
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case key == m.k.layout():
			layout = kv.Value
		case key == m.k.revision():
			v := parseRevision(kv.Value)
			m.pos, m.cluster, m.epoch = Position{Rev: kv.ModRevision, ID: v.ID}, v.Cluster, v.Epoch
			m.setAsks(v.Asks)
		case key == m.mine:
			if err := json.Unmarshal(kv.Value, &m.labels); err != nil {
				m.labels = map[string]string{"": "unreadable: " + err.Error()}
			}
		case strings.HasPrefix(key, m.k.objects()):
			m.cache[key] = m.decode(kv)
		}
	}
	m.ready = string(layout) == LayoutVersion
	if !m.ready {
		got := "nothing"
		if layout != nil {
			got = fmt.Sprintf("%q", layout)
		}
		m.set(func(s *Status) {
			s.State = StateWaiting
			s.Error = fmt.Sprintf("%s holds %s, want %q: no controller has set this fleet up; serving the last committed state", m.k.layout(), got, LayoutVersion)
		})
		return nil
	}
	if why := m.behind; why != "" {
		// The layout is back (a restore put it back after a wipe): the
		// gateway is behind for the reason it was, not waiting any
		// more, until the commit below is done.
		m.set(func(s *Status) { s.State, s.Error = StateBehind, why })
	}
	m.commit()
	return nil
}

// desired returns the objects meant for the gateway, or an error naming
// an object two of its targets both give.
func (m *Member) desired() (map[objKey]*object, error) {
	want := map[objKey]*object{}
	var clash []string
	for _, o := range m.cache {
		t, ok := m.targets[o.scope]
		if !ok {
			var err error
			if t, err = ParseScope(o.scope); err != nil {
				t = nil
			}
			m.targets[o.scope] = t
		}
		if t == nil || !Targets(t, m.o.Name, m.labels) {
			continue
		}
		if o.err != nil {
			clash = append(clash, "unreadable object "+o.err.Error())
			continue
		}
		if prev, ok := want[o.objKey]; ok {
			a, b := prev.scope, o.scope
			if a > b {
				a, b = b, a
			}
			clash = append(clash, fmt.Sprintf("%s is given by both %s and %s", o.objKey, a, b))
			continue
		}
		want[o.objKey] = o
	}
	if len(clash) > 0 {
		slices.Sort(clash)
		return nil, errors.New(strings.Join(clash, "; "))
	}
	return want, nil
}

// commit commits the desired state at m.rev, as one generation.
func (m *Member) commit() {
	want, err := m.desired()
	if err != nil {
		m.fail(err)
		return
	}
	// What the gateway holds: what this member committed last, or, when
	// it does not know (its first commit, a read of everything, a failed
	// one), what the gateway says. A thousand members in one process
	// spent most of their time listing and comparing the gateway's every
	// object on every commit.
	var have held
	if m.served != nil {
		have = heldOf(m.served)
	} else {
		have = carried(m.gw.Config())
	}
	ops := diffOps(have, want, m.served)
	gen := uint32(0)
	if len(ops) > 0 {
		req := &pb.ApplyRequest{Operations: ops}
		rec, err := proto.Marshal(req)
		if err != nil {
			m.fail(err)
			return
		}
		cops, err := api.Ops(ops)
		if err != nil {
			m.fail(err)
			return
		}
		if gen, err = m.gw.Apply(cops, false, rec); err != nil {
			m.served = nil
			m.fail(err)
			return
		}
		m.o.Log.Info("fleet: committed", "revision", m.rev, "generation", gen, "operations", len(ops))
	}
	m.served = want
	m.behind = ""
	if err := m.saveState(); err != nil {
		m.o.Log.Error("fleet: keep the committed revision", "file", m.o.StateFile, "error", err)
	}
	m.set(func(s *Status) {
		s.Committed, s.Position, s.State, s.Error, s.Objects = m.rev, m.pos, StateConverged, "", uint32(len(want))
		if gen != 0 {
			s.Generation = gen
		}
	})
}

func (m *Member) fail(err error) {
	m.o.Log.Error("fleet: the desired state does not commit; serving the last committed state", "revision", m.rev, "error", err)
	m.set(func(s *Status) { s.State, s.Error = StateFailing, err.Error() })
}

func (m *Member) saveState() error {
	if m.o.StateFile == "" {
		return nil
	}
	b, _ := json.Marshal(memberState{Committed: m.rev})
	return atomicfile.Replace(m.o.StateFile, b, 0o600, true)
}

// heartbeat keeps the member's lease and alive key, and writes the
// status whenever it changes (and the health with each beat).
func (m *Member) heartbeat(ctx context.Context) {
	var lease clientv3.LeaseID
	tick := m.nextBeat(nil)
	renew := true
	for {
		err := m.beat(ctx, &lease, renew)
		m.mu.Lock()
		was := m.connected
		m.connected = err == nil
		m.mu.Unlock()
		if was && err != nil {
			m.o.Log.Warn("fleet: etcd unreachable; serving the last committed state", "error", err)
		} else if !was && err == nil {
			m.o.Log.Info("fleet: reached etcd", "lease", fmt.Sprintf("%x", lease))
			// Back after a time away: etcd may have been restored
			// meanwhile, with an older status of ours. Check its
			// history now and write the status again.
			m.wrote = Status{}
			select {
			case m.recheck <- struct{}{}:
			default:
			}
		}
		if err != nil {
			// Sooner, while the lease may still be alive (the status
			// alone failing too: its change is still to write).
			tick, renew = m.nextBeat(err), true
		}
		select {
		case <-ctx.Done():
			m.dropKeepAlive()
			if lease != 0 {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, _ = m.cli.Revoke(rctx, lease)
				cancel()
			}
			return
		case <-tick:
			tick, renew = m.nextBeat(nil), true
		case <-m.changed:
			// A commit to report: the status at once, without waiting
			// for a lease renewal the ticker does anyway.
			renew = false
		}
	}
}

// nextBeat says when to renew the lease next, after a beat that failed
// with err or did not (nil). Renewals are half the TTL apart: at 1,000
// gateways every renewal a second is one etcd serves (two in three
// forwarded by a follower to its leader), and a third of the TTL apart
// they were most of etcd's work on a quiet fleet. A dead gateway is
// listed disconnected when its lease lapses, the TTL after its last
// renewal, however often it renewed. What a longer gap could cost, a
// lease lapsing on one lost renewal, it does not: a failed beat is
// tried again a tenth of the TTL later, as long as the lease may still
// be alive (after that, at the usual gap, so that a thousand gateways
// cut off do not all knock at once when etcd is back). Each gap is
// drawn ±10 %: members started together (a fleet after a power cut,
// the bench's thousand) drift apart instead of renewing in one burst.
func (m *Member) nextBeat(err error) <-chan time.Time {
	if err != nil && time.Since(m.renewed) < m.o.TTL {
		return time.After(m.o.TTL / 10)
	}
	d := m.o.TTL / 2
	return time.After(d - d/10 + rand.N(d/5))
}

// beat renews the lease when asked (granting one, with the alive key,
// when there is none or it expired) and writes the status if it changed.
func (m *Member) beat(ctx context.Context, lease *clientv3.LeaseID, renew bool) error {
	if renew || *lease == 0 {
		if err := m.renew(ctx, lease); err != nil {
			return err
		}
		m.renewed = time.Now()
	}
	return m.writeStatus(ctx, *lease)
}

// renew renews the lease (granting one, with the alive key, when there
// is none or it expired).
func (m *Member) renew(ctx context.Context, lease *clientv3.LeaseID) error {
	rctx, cancel := context.WithTimeout(ctx, m.o.TTL/3)
	defer cancel()
	if *lease != 0 {
		if err := m.keepAlive(rctx, *lease); err != nil {
			if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return err
			}
			*lease = 0 // expired while we were away: a new one
		}
	}
	if *lease == 0 {
		g, err := m.cli.Grant(rctx, int64(m.o.TTL/time.Second))
		if err != nil {
			return err
		}
		if _, err := m.cli.Put(rctx, m.k.alive(m.o.Name), fmt.Sprintf("%x", g.ID), clientv3.WithLease(g.ID)); err != nil {
			return err
		}
		m.wrote = Status{} // the status went with the old lease
		*lease = g.ID
	}
	return nil
}

// keepAlive renews lease once, on a keep-alive stream the member keeps
// open from one renewal to the next (the heartbeat's goroutine alone
// uses it). The client's KeepAliveOnce opens a stream for every
// renewal, which etcd's member serves with goroutines of their own; at
// 1,000 gateways, hundreds a second. Any error, or no answer within
// ctx, drops the stream: the next renewal opens another, at whichever
// etcd member the client picks then.
func (m *Member) keepAlive(ctx context.Context, lease clientv3.LeaseID) error {
	if m.ka == nil {
		// Off the heartbeat's context: the stream outlives this
		// renewal, and ends with the member (m.dropKeepAlive).
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
		s, err := pb3.NewLeaseClient(m.cli.ActiveConnection()).LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			return fmt.Errorf("lease keep-alive stream: %w", rpctypes.Error(err))
		}
		m.ka, m.kaCancel = s, cancel
	}
	// Past ctx's deadline, the stream goes: a Recv has no deadline of
	// its own, and an answer that comes late must not be read as the
	// next renewal's.
	stop := context.AfterFunc(ctx, m.kaCancel)
	err := m.ka.Send(&pb3.LeaseKeepAliveRequest{ID: int64(lease)})
	var resp *pb3.LeaseKeepAliveResponse
	if err == nil {
		resp, err = m.ka.Recv()
	}
	if !stop() || err != nil {
		m.dropKeepAlive()
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("lease keep-alive: %w", rpctypes.Error(err))
	}
	if resp.TTL <= 0 {
		return rpctypes.ErrLeaseNotFound
	}
	return nil
}

// dropKeepAlive closes the keep-alive stream, if any.
func (m *Member) dropKeepAlive() {
	if m.ka != nil {
		m.kaCancel()
		m.ka, m.kaCancel = nil, nil
	}
}

// writeStatus writes the status under lease if it changed in a way to
// write now.
func (m *Member) writeStatus(ctx context.Context, lease clientv3.LeaseID) error {
	h := Health{DataplaneOK: true}
	if m.o.Health != nil {
		h = m.o.Health()
	}
	m.mu.Lock()
	m.st.DataplaneOK, m.st.PathsUp, m.st.PathsDown = h.DataplaneOK, h.PathsUp, h.PathsDown
	st := m.st
	asks, asked := m.asks, m.asked
	m.asked = false
	m.mu.Unlock()
	st.Written = 0
	if st == m.wrote {
		return nil
	}
	if asks && !asked && st.sameState(m.wrote) {
		// How far it got, and nothing else: a thousand gateways writing
		// each commit are a thousand etcd writes per Apply. Written when
		// a controller asks (one listing the gateways), at once on any
		// other change.
		return nil
	}
	st.Written = time.Now().UnixMilli()
	b, _ := json.Marshal(st)
	rctx, cancel := context.WithTimeout(ctx, m.o.TTL/3)
	defer cancel()
	// Under the lease: a status lives no longer than the gateway's
	// heartbeat, and a controller ignores one that is not under it.
	if _, err := m.cli.Put(rctx, m.k.status(m.o.Name), string(b), clientv3.WithLease(lease)); err != nil {
		m.mu.Lock()
		m.asked = m.asked || asked // still to answer
		m.mu.Unlock()
		return err
	}
	m.wrote, m.wrote.Written = st, 0
	return nil
}

// sameState reports whether s and o say the same but for how far the
// gateway got (committed revision, position, generation, objects) and
// when they were written.
func (s Status) sameState(o Status) bool {
	return s.State == o.State && s.Error == o.Error && s.DataplaneOK == o.DataplaneOK && s.PathsUp == o.PathsUp && s.PathsDown == o.PathsDown
}
