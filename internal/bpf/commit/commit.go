// SPDX-License-Identifier: Apache-2.0

// Package commit is the rule writer: a generation (Generation) is written
// into the slot of the double-buffered maps no packet reads, object
// family by family (pdr.go, far.go, services.go, paths.go, steer.go,
// qos.go), and made live by one flip of the generation number (flip).
// What the agent sets between commits under the same lock (the global
// state's fields, the interfaces, steering tables, QoS rounds) is here
// too (state.go).
package commit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/rcu"
)

// Generation is one complete set of rule tables: what a packet classifies
// against between two flips. Rules, FARs and paths sit at stable places
// (group tags, FAR and path indexes that stay with their object), so a
// generation that differs from the previous one in a few objects differs
// in a few map entries, and Dirty can say which.
type Generation struct {
	// Groups in search order (ascending MinPrio); Group.Tag (below
	// MaxGroups, unique) is what RuleKey.Group holds for its rules.
	Groups []bpf.Group
	// Rules keyed by masked key and group tag.
	Rules map[bpf.RuleKey]bpf.Rule
	// FARs by index; Rule.Far points here.
	FARs map[uint32]bpf.Far
	// NoMatch and Malformed are XDP verdicts (XDPPass or XDPDrop).
	NoMatch, Malformed uint32
	// ResetStats lists PDR statistics indexes to zero before the flip:
	// indexes given to a PDR for the first time.
	ResetStats []uint32
	// Paths by index (below MaxPaths); Far.Path points here.
	Paths map[uint32]bpf.Path
	// Decaps says which path a received GRE packet belongs to
	// (DecapKey.Slot is set by Commit).
	Decaps map[bpf.DecapKey]bpf.Decap
	// ProbeSecrets holds the probe secret of each path of Paths that
	// has one, by the same index; a path without one is insecure.
	ProbeSecrets map[uint32]bpf.ProbeSecret
	// ResetPathStats lists path statistics indexes given out for the
	// first time: their counters and sequence numbers start at zero.
	ResetPathStats []uint32
	// Services by VIP, port and protocol (SvcKey.Slot is set by Commit).
	Services map[bpf.SvcKey]bpf.Svc
	// NATBackends holds, by backend address, port and protocol (in a
	// SvcKey; Slot is set by Commit), the NAT services each backend
	// serves, for its replies.
	NATBackends map[bpf.SvcKey]bpf.NATBackend
	// Tables holds each service tag's Maglev table (at most
	// Limits.MaglevSize entries); a tag no service uses may keep its old
	// table.
	Tables map[uint32]*bpf.LBTable
	// ResetLBStats lists edge_lb_stats indexes given out for the first
	// time.
	ResetLBStats []uint32
	// Members names what each edge_lb_stats index counts.
	Members map[uint32]bpf.MemberRef
	// Steers holds each steering group's members by its index (below
	// MaxSteer); the tables are the agent's (SetSteer).
	Steers map[uint32]bpf.Steer
	// QoS holds the QoS classes by index (below MaxQoS; an index stays
	// with its class while it lives), QoSDSCP the class index + 1 of
	// each DSCP code point (0: none). FlowOpt is the modules that are on
	// (FOProbe, FOFair, FORelief), FlowOptK16 the probe's congestion
	// factor in 1/16.
	QoS        map[uint32]bpf.QoSClassEntry
	QoSDSCP    [64]uint32
	FlowOpt    uint32
	FlowOptK16 uint32
	// Dirty, when set, lists every rule key and FAR index whose entry
	// may differ from the generation committed before this one; the rest
	// are known equal. Nil means anything may differ. Groups, paths and
	// decaps are few and always compared whole.
	Dirty *Dirty
}

// Dirty lists map entries a generation changed.
type Dirty struct {
	Rules  map[bpf.RuleKey]struct{}
	FARs   map[uint32]struct{}
	Tables map[uint32]struct{} // service tags
}

// union returns the entries of a and b, or nil (unknown) if either is.
func (a *Dirty) union(b *Dirty) *Dirty {
	if a == nil || b == nil {
		return nil
	}
	u := &Dirty{Rules: make(map[bpf.RuleKey]struct{}, len(a.Rules)+len(b.Rules)), FARs: make(map[uint32]struct{}, len(a.FARs)+len(b.FARs)), Tables: map[uint32]struct{}{}}
	for _, d := range []*Dirty{a, b} {
		maps.Copy(u.Rules, d.Rules)
		maps.Copy(u.FARs, d.FARs)
		maps.Copy(u.Tables, d.Tables)
	}
	return u
}

// ErrCapacity is returned when a generation does not fit the maps.
var ErrCapacity = errors.New("generation exceeds map capacity")

// Writer commits generations: it fills the slot no packet uses, flips the
// generation number once, and makes sure a grace period has passed since
// that flip before it touches the old slot again. The grace period is
// awaited in the background right after the flip (synchronize_rcu takes
// 5-20 ms here), so a commit waits only for what is left of it.
//
// The slot a commit fills holds the generation before last: it gets the
// entries the last commit changed (pending) and those this one changes,
// so a small change costs a few map writes whatever the size of the
// tables.
type Writer struct {
	mu      sync.Mutex
	o       *bpf.Object
	barrier *rcu.Barrier
	// dupProg is the program the kernel runs on each copy of a
	// redundant group's packet as it leaves (see dupProgram).
	dupProg *ebpf.Program
	slots   [2]*slot
	// pending lists the entries the last commit changed, which the slot
	// it did not write still lacks; nil when unknown.
	pending *Dirty
	// members is what edge_lb_members holds (one table for both slots:
	// an index changes meaning only when its backend is long gone).
	members map[uint32]bpf.MemberRef
	// steerTabs is each steering group's table and usable members as
	// last set (SetSteer, or by a commit for a new group), for the
	// members they were set for.
	steerTabs map[uint32]steerTab
	// dupTx is the interfaces each redundant group's devmap in edge_dup_tx
	// holds, as this writer built it (a restarted agent builds them again).
	dupTx map[uint32][]uint32
	// qosRounds is the round the agent last set for each class index.
	qosRounds map[uint32]qosRound
	// blockKeys and blocks hold the Maglev blocks a commit writes, kept
	// for the next one (writeTables).
	blockKeys []uint32
	blocks    []bpf.MaglevBlk
	dirty     bool // a flip happened and no grace period was started after it
	// grace, when set, delivers the result of the grace period started
	// after the last flip.
	grace chan error
}

// NewWriter learns what each slot of o's maps (created, or adopted from
// pins) holds, so commits write differences; it waits for grace
// periods with b.
func NewWriter(o *bpf.Object, b *rcu.Barrier) (*Writer, error) {
	w := &Writer{o: o, barrier: b, steerTabs: map[uint32]steerTab{}, dupTx: map[uint32][]uint32{}, qosRounds: map[uint32]qosRound{}}
	st, err := w.o.State()
	if err != nil {
		return nil, err
	}
	for t := range w.slots {
		if w.slots[t], err = w.readSlot(uint32(t), st.Ngroups[t]); err != nil {
			return nil, err
		}
	}
	if w.members, err = bpf.ReadMembers(w.o.EdgeLbMembers); err != nil {
		return nil, err
	}
	// The live slot's steering groups keep the tables and usable sets
	// they have (an agent restarting goes on steering as before).
	for i, s := range w.slots[st.Gen&1].steers {
		tab := steerTab{n: s.N, far: s.Far, table: s.Table}
		if err := w.o.EdgeSteerOk.Lookup(i, &tab.ok); err != nil {
			return nil, fmt.Errorf("read steering group %d's usable members: %w", i, err)
		}
		w.steerTabs[i] = tab
	}
	w.dirty = true
	return w, nil
}

// Close waits for the grace period the last commit started and closes
// the program the writer loaded; the maps are the Object's.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.grace != nil {
		<-w.grace
		w.grace = nil
	}
	if w.dupProg != nil {
		return w.dupProg.Close()
	}
	return nil
}

// awaitGrace waits for the grace period started after the last flip, or
// for a new one if none was started. Called with w.mu held.
func (w *Writer) awaitGrace() error {
	if w.grace != nil {
		err := <-w.grace
		w.grace = nil
		if err != nil {
			return err
		}
	}
	if w.dirty {
		if err := w.barrier.Sync(); err != nil {
			return err
		}
		w.dirty = false
	}
	return nil
}

// Commit writes g beside the live generation and makes it live with one
// write of the generation number (flip). It returns the new generation
// number.
func (w *Writer) Commit(g *Generation) (uint32, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.fits(g); err != nil {
		return 0, err
	}
	st, err := w.o.State()
	if err != nil {
		return 0, err
	}
	next := st.Gen + 1
	if next == 0 { // 0 means "nothing written yet" to the dataplane
		next = 1
	}
	t := next & 1
	if w.slots[t] == nil { // an earlier failure left it unknown
		s, err := w.readSlot(t, st.Ngroups[t])
		if err != nil {
			return 0, fmt.Errorf("read back slot %d: %w", t, err)
		}
		w.slots[t] = s
	}
	// Packets that read the previous generation number may still be
	// walking slot t: wait them out before overwriting it.
	if err := w.awaitGrace(); err != nil {
		return 0, err
	}
	if err := w.resetCounters(g); err != nil {
		return 0, err
	}
	if err := w.writeSlot(t, g, w.pending.union(g.Dirty)); err != nil {
		// What the slot holds is no longer known: read it back (now,
		// or at the next commit), and compare whole next time.
		w.pending = nil
		s, rerr := w.readSlot(t, uint32(len(w.slots[t].groups)))
		if rerr != nil {
			s = nil
		}
		w.slots[t] = s
		return 0, err
	}
	// Slot t now holds g. Should g not go live, the next commit fills
	// t again from a generation that lacks g's changes, which pending
	// does not list: compare whole then.
	if g.Members != nil {
		if err := w.writeMembers(g); err != nil {
			w.pending = nil
			return 0, err
		}
	}
	if err := w.flip(st, t, next, g); err != nil {
		w.pending = nil
		return 0, err
	}
	// The other slot still holds the previous generation: it lacks what
	// this one changed.
	w.pending = g.Dirty
	// Start waiting out the readers of the old slot now, so the next
	// commit finds the wait done or under way.
	grace := make(chan error, 1)
	go func() { grace <- w.barrier.Sync() }()
	w.grace = grace
	return next, nil
}

// fits checks that g fits the maps: its mask groups, classifier entries,
// FARs (the places this generation changed, all of a whole one: the rest
// were checked when they were written), services, Maglev tables and
// paths.
func (w *Writer) fits(g *Generation) error {
	l := w.o.Limits
	if len(g.Groups) > bpf.MaxGroups {
		return fmt.Errorf("%w: %d mask groups, at most %d", ErrCapacity, len(g.Groups), bpf.MaxGroups)
	}
	if uint32(len(g.Rules)) > l.Rules || uint32(len(g.FARs)) > l.FARStride() {
		return fmt.Errorf("%w: %d classifier entries and %d fars, limits %d and %d", ErrCapacity, len(g.Rules), len(g.FARs), l.Rules, l.FARStride())
	}
	checkFAR := func(i uint32, f bpf.Far) error {
		if i >= l.FARStride() {
			return fmt.Errorf("%w: far %d at index %d, limit %d", ErrCapacity, f.Id, i, l.FARStride())
		}
		return nil
	}
	if g.Dirty == nil {
		for i, f := range g.FARs {
			if err := checkFAR(i, f); err != nil {
				return err
			}
		}
	} else {
		for i := range g.Dirty.FARs {
			if err := checkFAR(i, g.FARs[i]); err != nil {
				return err
			}
		}
	}
	if len(g.Services) > bpf.MaxServices {
		return fmt.Errorf("%w: %d services, at most %d", ErrCapacity, len(g.Services), bpf.MaxServices)
	}
	for tag, tbl := range g.Tables {
		if tag >= bpf.MaxServices || uint32(len(tbl.Members)) > l.MaglevSize {
			return fmt.Errorf("%w: maglev table of tag %d has %d entries, at most %d", ErrCapacity, tag, len(tbl.Members), l.MaglevSize)
		}
	}
	for i, p := range g.Paths {
		if i >= bpf.MaxPaths {
			return fmt.Errorf("%w: path %d at index %d, at most %d", ErrCapacity, p.Id, i, bpf.MaxPaths)
		}
	}
	return nil
}

// resetCounters zeroes the counters of the statistics indexes g gives
// out for the first time (PDRs', paths', service backends').
func (w *Writer) resetCounters(g *Generation) error {
	for _, idx := range g.ResetStats {
		if err := w.ResetPDRStats(idx); err != nil {
			return err
		}
	}
	for _, idx := range g.ResetPathStats {
		if err := w.resetPath(idx); err != nil {
			return err
		}
	}
	for _, idx := range g.ResetLBStats {
		if err := w.resetLB(idx); err != nil {
			return err
		}
	}
	return nil
}

// flip makes slot t, which holds g, live as generation next: the one
// place the generation changes. Two writes of the global state (st as
// read before the commit): the slot's group and service counts, the
// verdicts and the FlowOpt switches first (when they change), then the
// generation number, so no packet sees the new generation with the old
// counts.
func (w *Writer) flip(st bpf.State, t, next uint32, g *Generation) error {
	want := st
	want.Ngroups[t] = uint32(len(g.Groups))
	want.Nservices[t] = uint32(len(g.Services))
	want.Nnat[t], want.StatelessVips[t] = 0, 0
	for k, s := range g.Services {
		if s.Unnat != bpf.NoFAR {
			want.Nnat[t]++
		}
		if s.Flags&bpf.SvcStateless != 0 {
			want.StatelessVips[t] |= 1 << bpf.StatelessBit(k)
		}
	}
	if want.FibEpoch == 0 {
		want.FibEpoch = 1 // 0 would match flows that never cached a next hop
	}
	want.NomatchVerdict = g.NoMatch
	want.MalformedVerdict = g.Malformed
	want.FoFlags[t], want.FoK16[t] = g.FlowOpt, g.FlowOptK16
	want.Ncpus = bpf.ReliefCPUs()
	if want != st {
		if err := w.o.EdgeGlobal.Put(uint32(0), want); err != nil {
			return fmt.Errorf("write state: %w", err)
		}
		st = want
	}
	st.Gen = next
	if err := w.o.EdgeGlobal.Put(uint32(0), st); err != nil {
		return fmt.Errorf("flip generation: %w", err)
	}
	return nil
}

// writeSlot makes slot t hold exactly g, object family by family. keys,
// when set, lists the only rule keys and FAR indexes that may differ
// from what the slot holds; otherwise every entry is compared.
func (w *Writer) writeSlot(t uint32, g *Generation, keys *Dirty) error {
	for _, write := range []func() error{
		func() error { return w.writeRules(t, g, keys) },
		func() error { return w.writeFARs(t, g, keys) },
		func() error { return w.writeGroups(t, g) },
		func() error { return w.writeTables(t, g, keys) },
		func() error { return w.writeServices(t, g) },
		func() error { return w.writeSteers(t, g) },
		func() error { return w.writeQoS(t, g) },
		func() error { return w.writePaths(t, g) },
		func() error { return w.writeRedundant(t, g) },
	} {
		if err := write(); err != nil {
			return err
		}
	}
	return nil
}

// ActiveRules returns the rules of the live generation (group-relative keys).
func (w *Writer) ActiveRules() (map[bpf.RuleKey]bpf.Rule, uint32, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.o.State()
	if err != nil {
		return nil, 0, err
	}
	if st.Gen == 0 {
		return map[bpf.RuleKey]bpf.Rule{}, 0, nil
	}
	return maps.Clone(w.slots[st.Gen&1].rules), st.Gen, nil
}

// ActiveFARs returns the FARs of the live generation by index, and its
// services: a restarted agent keeps their places, so connections pinned
// to a FAR index keep their backend.
func (w *Writer) ActiveFARs() (map[uint32]bpf.Far, map[bpf.SvcKey]bpf.Svc, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.o.State()
	if err != nil || st.Gen == 0 {
		return nil, nil, err
	}
	s := w.slots[st.Gen&1]
	return maps.Clone(s.fars), maps.Clone(s.services), nil
}

// ActiveMembers returns what the balancer's counters count, by
// edge_lb_stats index.
func (w *Writer) ActiveMembers() map[uint32]bpf.MemberRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.members)
}

// ActivePaths returns the paths of the live generation.
func (w *Writer) ActivePaths() ([]bpf.Path, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.o.State()
	if err != nil || st.Gen == 0 {
		return nil, err
	}
	return slices.Collect(maps.Values(w.slots[st.Gen&1].paths)), nil
}

// dupProgram loads (once) the program the kernel runs on each copy of a
// redundant group's packet as it leaves (edge_xdp_dup), against the
// object's maps. It is loaded apart from the XDP program, which an agent
// may adopt from its pin instead of loading; each redundant group's
// devmap holds a reference to it.
func (w *Writer) dupProgram() (*ebpf.Program, error) {
	if w.dupProg != nil {
		return w.dupProg, nil
	}
	var p struct {
		Prog *ebpf.Program `ebpf:"edge_xdp_dup"`
	}
	if err := w.o.LoadApart(&p, "redundant copies' program"); err != nil {
		return nil, err
	}
	w.dupProg = p.Prog
	return p.Prog, nil
}
