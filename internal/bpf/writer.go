// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
)

// Generation is one complete set of rule tables: what a packet classifies
// against between two flips. Rules, FARs and paths sit at stable places
// (group tags, FAR and path indexes that stay with their object), so a
// generation that differs from the previous one in a few objects differs
// in a few map entries, and Dirty can say which.
type Generation struct {
	// Groups in search order (ascending MinPrio); Group.Tag (below
	// MaxGroups, unique) is what RuleKey.Group holds for its rules.
	Groups []Group
	// Rules keyed by masked key and group tag.
	Rules map[RuleKey]Rule
	// FARs by index; Rule.Far points here.
	FARs map[uint32]Far
	// NoMatch and Malformed are XDP verdicts (XDPPass or XDPDrop).
	NoMatch, Malformed uint32
	// ResetStats lists PDR statistics indexes to zero before the flip:
	// indexes given to a PDR for the first time.
	ResetStats []uint32
	// Paths by index (below MaxPaths); Far.Path points here.
	Paths map[uint32]Path
	// Decaps says which path a received GRE packet belongs to
	// (DecapKey.Slot is set by Commit).
	Decaps map[DecapKey]Decap
	// ProbeSecrets holds the probe secret of each path of Paths that
	// has one, by the same index; a path without one is insecure.
	ProbeSecrets map[uint32]ProbeSecret
	// ResetPathStats lists path statistics indexes given out for the
	// first time: their counters and sequence numbers start at zero.
	ResetPathStats []uint32
	// Services by VIP, port and protocol (SvcKey.Slot is set by Commit).
	Services map[SvcKey]Svc
	// NATBackends holds, by backend address, port and protocol (in a
	// SvcKey; Slot is set by Commit), the NAT services each backend
	// serves, for its replies.
	NATBackends map[SvcKey]NATBackend
	// Tables holds each service tag's Maglev table (Limits.MaglevSize
	// entries); a tag no service uses may keep its old table.
	Tables map[uint32][]LBSlot
	// ResetLBStats lists edge_lb_stats indexes given out for the first
	// time.
	ResetLBStats []uint32
	// Members names what each edge_lb_stats index counts.
	Members map[uint32]MemberRef
	// Steers holds each steering group's members by its index (below
	// MaxSteer); the tables are the agent's (SetSteer).
	Steers map[uint32]Steer
	// QoS holds the QoS classes by index (below MaxQoS; an index stays
	// with its class while it lives), QoSDSCP the class index + 1 of
	// each DSCP code point (0: none). FlowOpt is the modules that are on
	// (FOProbe, FOFair, FORelief), FlowOptK16 the probe's congestion
	// factor in 1/16.
	QoS        map[uint32]QoSClassEntry
	QoSDSCP    [64]uint32
	FlowOpt    uint32
	FlowOptK16 uint32
	// Dirty, when set, lists every rule key and FAR index whose entry
	// may differ from the generation committed before this one; the rest
	// are known equal. Nil means anything may differ. Groups, paths and
	// decaps are few and always compared whole.
	Dirty *Dirty
}

// MemberRef is the service and backend FAR (0: the service's replies) an
// edge_lb_stats index counts.
type MemberRef struct {
	Service, FAR uint32
}

// Dirty lists map entries a generation changed.
type Dirty struct {
	Rules  map[RuleKey]struct{}
	FARs   map[uint32]struct{}
	Tables map[uint32]struct{} // service tags
}

// union returns the entries of a and b, or nil (unknown) if either is.
func (a *Dirty) union(b *Dirty) *Dirty {
	if a == nil || b == nil {
		return nil
	}
	u := &Dirty{Rules: make(map[RuleKey]struct{}, len(a.Rules)+len(b.Rules)), FARs: make(map[uint32]struct{}, len(a.FARs)+len(b.FARs)), Tables: map[uint32]struct{}{}}
	for _, d := range []*Dirty{a, b} {
		maps.Copy(u.Rules, d.Rules)
		maps.Copy(u.FARs, d.FARs)
		maps.Copy(u.Tables, d.Tables)
	}
	return u
}

// ErrCapacity is returned when a generation does not fit the maps.
var ErrCapacity = errors.New("generation exceeds map capacity")

// slot is what one half of the double-buffered maps holds, as the writer
// last wrote it.
type slot struct {
	rules    map[RuleKey]Rule // RuleKey.Group without the slot base
	fars     map[uint32]Far
	groups   []Group
	paths    map[uint32]Path
	secrets  map[uint32]ProbeSecret // edge_path_auth by path index (none left out)
	decaps   map[DecapKey]Decap
	services map[SvcKey]Svc
	backends map[SvcKey]NATBackend  // NATBackends
	index    *[SvcIndexSize]SvcSlot // nil: not known
	tables   [MaxServices][]LBSlot  // nil: not known
	lbFar    [MaxServices]*[MaxMembers]uint32
	steers   map[uint32]Steer  // by steering group index
	dedup    map[uint32]uint32 // edge_path_dedup by path index (0s left out)
	// qos and qosDSCP are edge_qos's and edge_qos_dscp's entries of the
	// slot, once qosKnown (written by this writer).
	qos      [MaxQoS]QoSClassEntry
	qosDSCP  [64]uint32
	qosKnown bool
}

// writer commits generations: it fills the slot no packet uses, flips the
// generation number once, and makes sure a grace period has passed since
// that flip before it touches the old slot again. The grace period is
// awaited in the background right after the flip (synchronize_rcu takes
// 5-20 ms here), so a commit waits only for what is left of it.
//
// The slot a commit fills holds the generation before last: it gets the
// entries the last commit changed (pending) and those this one changes,
// so a small change costs a few map writes whatever the size of the
// tables.
type writer struct {
	mu    sync.Mutex
	dp    *Dataplane
	slots [2]*slot
	// pending lists the entries the last commit changed, which the slot
	// it did not write still lacks; nil when unknown.
	pending *Dirty
	// members is what edge_lb_members holds (one table for both slots:
	// an index changes meaning only when its backend is long gone).
	members map[uint32]MemberRef
	// steerTabs is each steering group's table and usable members as
	// last set (SetSteer, or by a commit for a new group), for the
	// members they were set for.
	steerTabs map[uint32]steerTab
	// dupTx is the interfaces each redundant group's devmap in edge_dup_tx
	// holds, as this writer built it (a restarted agent builds them again).
	dupTx map[uint32][]uint32
	// qosRounds is the round the agent last set for each class index.
	qosRounds map[uint32]qosRound
	dirty     bool // a flip happened and no grace period was started after it
	// grace, when set, delivers the result of the grace period started
	// after the last flip.
	grace chan error
}

// awaitGrace waits for the grace period started after the last flip, or
// for a new one if none was started. Called with w.mu held.
func (w *writer) awaitGrace() error {
	if w.grace != nil {
		err := <-w.grace
		w.grace = nil
		if err != nil {
			return err
		}
	}
	if w.dirty {
		if err := w.dp.barrier.Sync(); err != nil {
			return err
		}
		w.dirty = false
	}
	return nil
}

// newWriter learns what each slot of the (possibly adopted) maps holds,
// so commits write differences.
func newWriter(dp *Dataplane) (*writer, error) {
	w := &writer{dp: dp, steerTabs: map[uint32]steerTab{}, dupTx: map[uint32][]uint32{}, qosRounds: map[uint32]qosRound{}}
	st, err := dp.State()
	if err != nil {
		return nil, err
	}
	for t := range w.slots {
		if w.slots[t], err = dp.readSlot(uint32(t), st.Ngroups[t]); err != nil {
			return nil, err
		}
	}
	if w.members, err = readMembers(dp.EdgeLbMembers); err != nil {
		return nil, err
	}
	// The live slot's steering groups keep the tables and usable sets
	// they have (an agent restarting goes on steering as before).
	for i, s := range w.slots[st.Gen&1].steers {
		tab := steerTab{n: s.N, far: s.Far, table: s.Table}
		if err := dp.EdgeSteerOk.Lookup(i, &tab.ok); err != nil {
			return nil, fmt.Errorf("read steering group %d's usable members: %w", i, err)
		}
		w.steerTabs[i] = tab
	}
	w.dirty = true
	return w, nil
}

// readMembers reads edge_lb_members.
func readMembers(m *ebpf.Map) (map[uint32]MemberRef, error) {
	out := map[uint32]MemberRef{}
	var k uint32
	var v Member
	it := m.Iterate()
	for it.Next(&k, &v) {
		if v.Svc != 0 {
			out[k] = MemberRef{Service: v.Svc, FAR: v.Far}
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read balancer members: %w", err)
	}
	return out, nil
}

// writeMembers makes edge_lb_members say what g's counters count.
func (w *writer) writeMembers(g *Generation) error {
	for idx := range w.members {
		if _, ok := g.Members[idx]; !ok {
			if err := w.dp.EdgeLbMembers.Put(idx, Member{}); err != nil {
				return fmt.Errorf("clear balancer member %d: %w", idx, err)
			}
			delete(w.members, idx)
		}
	}
	for idx, ref := range g.Members {
		if old, ok := w.members[idx]; ok && old == ref {
			continue
		}
		if err := w.dp.EdgeLbMembers.Put(idx, Member{Svc: ref.Service, Far: ref.FAR}); err != nil {
			return fmt.Errorf("write balancer member %d: %w", idx, err)
		}
		w.members[idx] = ref
	}
	return nil
}

// readSlot reads what slot t of the maps holds.
func (dp *Dataplane) readSlot(t, ngroups uint32) (*slot, error) {
	s := &slot{rules: map[RuleKey]Rule{}, fars: map[uint32]Far{}, paths: map[uint32]Path{}, secrets: map[uint32]ProbeSecret{}, decaps: map[DecapKey]Decap{},
		services: map[SvcKey]Svc{}, backends: map[SvcKey]NATBackend{}, steers: map[uint32]Steer{},
		dedup: map[uint32]uint32{}}
	for i := uint32(0); i < MaxPaths; i++ {
		var win uint32
		if err := dp.EdgePathDedup.Lookup(t*MaxPaths+i, &win); err != nil {
			return nil, fmt.Errorf("read path %d's de-duplication window: %w", i, err)
		}
		if win != 0 {
			s.dedup[i] = win
		}
	}
	for i := uint32(0); i < MaxSteer; i++ {
		var st Steer
		if err := dp.EdgeSteer.Lookup(t*MaxSteer+i, &st); err != nil {
			return nil, fmt.Errorf("read steering group %d: %w", i, err)
		}
		if st.N != 0 {
			s.steers[i] = st
		}
	}
	stride := dp.Limits.FARStride()
	var k RuleKey
	var v Rule
	it := dp.EdgeRules.Iterate()
	for it.Next(&k, &v) {
		if k.Group/MaxGroups == t {
			k.Group %= MaxGroups
			s.rules[k] = v
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	// FARs: the array holds both slots (FARStride each); read it in
	// batches, not one lookup per index.
	fk, fv := make([]uint32, 4096), make([]Far, 4096)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := dp.EdgeFars.BatchLookup(&cursor, fk, fv, nil)
		for i := range n {
			if fk[i]/stride == t && fv[i] != (Far{}) {
				s.fars[fk[i]%stride] = fv[i]
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read fars: %w", err)
		}
	}
	for i := uint32(0); i < min(ngroups, MaxGroups); i++ {
		var g Group
		if err := dp.EdgeGroups.Lookup(t*MaxGroups+i, &g); err != nil {
			return nil, fmt.Errorf("read group %d: %w", i, err)
		}
		s.groups = append(s.groups, g)
	}
	for i := uint32(0); i < MaxPaths; i++ {
		var p Path
		if err := dp.EdgePaths.Lookup(t*MaxPaths+i, &p); err != nil {
			return nil, fmt.Errorf("read path %d: %w", i, err)
		}
		if p.Id != 0 {
			s.paths[i] = p
		}
		var a ProbeSecret
		if err := dp.EdgePathAuth.Lookup(t*MaxPaths+i, &a); err != nil {
			return nil, fmt.Errorf("read path %d's probe secret: %w", i, err)
		}
		if a != (ProbeSecret{}) {
			s.secrets[i] = a
		}
	}
	var dk DecapKey
	var dv Decap
	dit := dp.EdgeDecaps.Iterate()
	for dit.Next(&dk, &dv) {
		if dk.Slot == t {
			s.decaps[dk] = dv
		}
	}
	if err := dit.Err(); err != nil {
		return nil, fmt.Errorf("read decaps: %w", err)
	}
	var sk SvcKey
	var sv Svc
	sit := dp.EdgeServices.Iterate()
	for sit.Next(&sk, &sv) {
		if sk.Slot != t {
			continue
		}
		// Its table is left unknown (nil): the first commit writes it
		// whole, which costs less than reading it back.
		s.services[sk] = sv
	}
	if err := sit.Err(); err != nil {
		return nil, fmt.Errorf("read services: %w", err)
	}
	var bv NATBackend
	bit := dp.EdgeNatBackends.Iterate()
	for bit.Next(&sk, &bv) {
		if sk.Slot == t {
			s.backends[sk] = bv
		}
	}
	if err := bit.Err(); err != nil {
		return nil, fmt.Errorf("read nat backends: %w", err)
	}
	return s, nil
}

// tableBase is the edge_maglev index of the block of entry 0 of tag's
// table in slot t.
func (dp *Dataplane) tableBase(t, tag uint32) uint32 {
	return (t*MaxServices + tag) * dp.Limits.MaglevBlocks()
}

// MaglevKernel is a Maglev table as the kernel holds it: the member index
// of each entry in blocks, and each member's FAR index (NoFAR: none).
// Entries without a backend are ReplyMember.
func MaglevKernel(tag uint32, table []LBSlot) (blocks []MaglevBlk, far [MaxMembers]uint32) {
	for i := range far {
		far[i] = NoFAR
	}
	blocks = make([]MaglevBlk, (len(table)+MaglevBlock-1)/MaglevBlock)
	for i, e := range table {
		m := uint32(ReplyMember)
		if e.Far != NoFAR {
			m = e.Stats - tag*MaxMembers
			far[m] = e.Far
		}
		blocks[i/MaglevBlock].M[i%MaglevBlock] = uint8(m)
	}
	return blocks, far
}

// State reads the live global state.
func (dp *Dataplane) State() (State, error) {
	var st State
	if err := dp.EdgeGlobal.Lookup(uint32(0), &st); err != nil {
		return st, fmt.Errorf("read state: %w", err)
	}
	return st, nil
}

// ActiveRules returns the rules of the live generation (group-relative keys).
func (dp *Dataplane) ActiveRules() (map[RuleKey]Rule, uint32, error) {
	dp.writer.mu.Lock()
	defer dp.writer.mu.Unlock()
	st, err := dp.State()
	if err != nil {
		return nil, 0, err
	}
	if st.Gen == 0 {
		return map[RuleKey]Rule{}, 0, nil
	}
	return maps.Clone(dp.writer.slots[st.Gen&1].rules), st.Gen, nil
}

// ActiveFARs returns the FARs of the live generation by index, and its
// services: a restarted agent keeps their places, so connections pinned
// to a FAR index keep their backend.
func (dp *Dataplane) ActiveFARs() (map[uint32]Far, map[SvcKey]Svc, error) {
	dp.writer.mu.Lock()
	defer dp.writer.mu.Unlock()
	st, err := dp.State()
	if err != nil || st.Gen == 0 {
		return nil, nil, err
	}
	s := dp.writer.slots[st.Gen&1]
	return maps.Clone(s.fars), maps.Clone(s.services), nil
}

// ActiveMembers returns what the balancer's counters count, by
// edge_lb_stats index.
func (dp *Dataplane) ActiveMembers() map[uint32]MemberRef {
	dp.writer.mu.Lock()
	defer dp.writer.mu.Unlock()
	return maps.Clone(dp.writer.members)
}

// ActivePaths returns the paths of the live generation.
func (dp *Dataplane) ActivePaths() ([]Path, error) {
	dp.writer.mu.Lock()
	defer dp.writer.mu.Unlock()
	st, err := dp.State()
	if err != nil || st.Gen == 0 {
		return nil, err
	}
	return slices.Collect(maps.Values(dp.writer.slots[st.Gen&1].paths)), nil
}

// Commit writes g beside the live generation and makes it live with one
// write of the generation number. It returns the new generation number.
func (dp *Dataplane) Commit(g *Generation) (uint32, error) {
	w := dp.writer
	w.mu.Lock()
	defer w.mu.Unlock()

	if len(g.Groups) > MaxGroups {
		return 0, fmt.Errorf("%w: %d mask groups, at most %d", ErrCapacity, len(g.Groups), MaxGroups)
	}
	if uint32(len(g.Rules)) > dp.Limits.Rules || uint32(len(g.FARs)) > dp.Limits.FARStride() {
		return 0, fmt.Errorf("%w: %d classifier entries and %d fars, limits %d and %d", ErrCapacity, len(g.Rules), len(g.FARs), dp.Limits.Rules, dp.Limits.FARStride())
	}
	// FAR indexes: those this generation changed (all of a whole one);
	// the rest were checked when they were written.
	checkFAR := func(i uint32, f Far) error {
		if i >= dp.Limits.FARStride() {
			return fmt.Errorf("%w: far %d at index %d, limit %d", ErrCapacity, f.Id, i, dp.Limits.FARStride())
		}
		return nil
	}
	if g.Dirty == nil {
		for i, f := range g.FARs {
			if err := checkFAR(i, f); err != nil {
				return 0, err
			}
		}
	} else {
		for i := range g.Dirty.FARs {
			if err := checkFAR(i, g.FARs[i]); err != nil {
				return 0, err
			}
		}
	}
	if len(g.Services) > MaxServices {
		return 0, fmt.Errorf("%w: %d services, at most %d", ErrCapacity, len(g.Services), MaxServices)
	}
	for tag, tbl := range g.Tables {
		if tag >= MaxServices || uint32(len(tbl)) > dp.Limits.MaglevSize {
			return 0, fmt.Errorf("%w: maglev table of tag %d has %d entries, at most %d", ErrCapacity, tag, len(tbl), dp.Limits.MaglevSize)
		}
	}
	for i, p := range g.Paths {
		if i >= MaxPaths {
			return 0, fmt.Errorf("%w: path %d at index %d, at most %d", ErrCapacity, p.Id, i, MaxPaths)
		}
	}
	st, err := dp.State()
	if err != nil {
		return 0, err
	}
	next := st.Gen + 1
	if next == 0 { // 0 means "nothing written yet" to the dataplane
		next = 1
	}
	t := next & 1
	if w.slots[t] == nil { // an earlier failure left it unknown
		s, err := dp.readSlot(t, st.Ngroups[t])
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
	for _, idx := range g.ResetStats {
		if err := dp.ResetPDRStats(idx); err != nil {
			return 0, err
		}
	}
	for _, idx := range g.ResetPathStats {
		if err := dp.resetPath(idx); err != nil {
			return 0, err
		}
	}
	for _, idx := range g.ResetLBStats {
		if err := dp.resetLB(idx); err != nil {
			return 0, err
		}
	}

	if err := w.writeSlot(t, g, w.pending.union(g.Dirty)); err != nil {
		// What the slot holds is no longer known: read it back (now,
		// or at the next commit), and compare whole next time.
		w.pending = nil
		s, rerr := dp.readSlot(t, uint32(len(w.slots[t].groups)))
		if rerr != nil {
			s = nil
		}
		w.slots[t] = s
		return 0, err
	}
	// Slot t now holds g. Should g not go live, the next commit fills
	// t again from a generation that lacks g's changes, which pending
	// does not list: compare whole then.
	notLive := func(err error) (uint32, error) {
		w.pending = nil
		return 0, err
	}

	if g.Members != nil {
		if err := w.writeMembers(g); err != nil {
			return notLive(err)
		}
	}

	// Two writes: the new slot's group count and defaults first (when
	// they change), then the generation number, so no packet sees the
	// new generation with the old count.
	want := st
	want.Ngroups[t] = uint32(len(g.Groups))
	want.Nservices[t] = uint32(len(g.Services))
	want.Nnat[t], want.StatelessVips[t] = 0, 0
	for k, s := range g.Services {
		if s.Unnat != NoFAR {
			want.Nnat[t]++
		}
		if s.Flags&SvcStateless != 0 {
			want.StatelessVips[t] |= 1 << StatelessBit(k)
		}
	}
	if want.FibEpoch == 0 {
		want.FibEpoch = 1 // 0 would match flows that never cached a next hop
	}
	want.NomatchVerdict = g.NoMatch
	want.MalformedVerdict = g.Malformed
	want.FoFlags[t], want.FoK16[t] = g.FlowOpt, g.FlowOptK16
	want.Ncpus = ReliefCPUs()
	if want != st {
		if err := dp.EdgeGlobal.Put(uint32(0), want); err != nil {
			return notLive(fmt.Errorf("write state: %w", err))
		}
		st = want
	}
	st.Gen = next
	if err := dp.EdgeGlobal.Put(uint32(0), st); err != nil {
		return notLive(fmt.Errorf("flip generation: %w", err))
	}
	// The other slot still holds the previous generation: it lacks what
	// this one changed.
	w.pending = g.Dirty
	// Start waiting out the readers of the old slot now, so the next
	// commit finds the wait done or under way.
	grace := make(chan error, 1)
	go func() { grace <- dp.barrier.Sync() }()
	w.grace = grace
	return next, nil
}

// writeSlot makes slot t hold exactly g. keys, when set, lists the only
// rule keys and FAR indexes that may differ from what the slot holds;
// otherwise every entry is compared.
func (w *writer) writeSlot(t uint32, g *Generation, keys *Dirty) error {
	dp := w.dp
	cur := w.slots[t]
	if err := w.writeRules(t, g, keys); err != nil {
		return err
	}

	// FARs: changed ones written, removed ones zeroed.
	fbase := t * dp.Limits.FARStride()
	var fk []uint32
	var fv []Far
	change := func(i uint32) {
		f, ok := g.FARs[i]
		if old, had := cur.fars[i]; ok == had && old == f {
			return
		}
		fk, fv = append(fk, fbase+i), append(fv, f)
	}
	if keys != nil {
		for i := range keys.FARs {
			change(i)
		}
	} else {
		for i := range cur.fars {
			change(i)
		}
		for i := range g.FARs {
			if _, had := cur.fars[i]; !had {
				change(i)
			}
		}
	}
	if len(fk) > 0 {
		if _, err := dp.EdgeFars.BatchUpdate(fk, fv, nil); err != nil {
			return fmt.Errorf("write %d fars: %w", len(fk), err)
		}
	}
	for j, k := range fk {
		if i := k - fbase; fv[j] == (Far{}) {
			delete(cur.fars, i)
		} else {
			cur.fars[i] = fv[j]
		}
	}

	for i, grp := range g.Groups {
		if i < len(cur.groups) && cur.groups[i] == grp {
			continue
		}
		if err := dp.EdgeGroups.Put(t*MaxGroups+uint32(i), grp); err != nil {
			return fmt.Errorf("write group %d: %w", i, err)
		}
	}
	cur.groups = slices.Clone(g.Groups)
	if err := w.writeTables(t, g, keys); err != nil {
		return err
	}
	if err := w.writeServices(t, g); err != nil {
		return err
	}
	if err := w.writeSteers(t, g); err != nil {
		return err
	}
	if err := w.writeQoS(t, g); err != nil {
		return err
	}
	if err := w.writePaths(t, g); err != nil {
		return err
	}
	return w.writeRedundant(t, g)
}

// writeRedundant gives g's redundant groups (slot t) what their packets
// need beyond the group: a devmap of their members' interfaces to be
// broadcast to, and at the receiving end each member path's
// de-duplication window (the group's). A devmap goes once neither slot
// has the group.
func (w *writer) writeRedundant(t uint32, g *Generation) error {
	dp := w.dp
	cur := w.slots[t]
	dedup := map[uint32]uint32{}
	for i, s := range g.Steers {
		if s.Flags&SteerRedundant == 0 {
			continue
		}
		var ifs []uint32
		for _, fi := range s.Far[:min(s.N, SteerMembers)] {
			far := g.FARs[fi]
			dedup[far.Path] = i + 1
			if p, ok := g.Paths[far.Path]; ok && p.Ifindex != 0 && !slices.Contains(ifs, p.Ifindex) {
				ifs = append(ifs, p.Ifindex)
			}
		}
		slices.Sort(ifs)
		if slices.Equal(w.dupTx[i], ifs) {
			continue
		}
		if err := w.putDupTx(i, ifs); err != nil {
			return err
		}
	}
	for i := range w.dupTx {
		if s, ok := g.Steers[i]; ok && s.Flags&SteerRedundant != 0 {
			continue
		}
		if s, ok := w.slots[t^1].steers[i]; ok && s.Flags&SteerRedundant != 0 {
			continue // the live slot still broadcasts through it
		}
		if err := dp.EdgeDupTx.Delete(i); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove redundant group %d's devmap: %w", i, err)
		}
		delete(w.dupTx, i)
	}
	for i := range uint32(MaxPaths) {
		if dedup[i] == cur.dedup[i] {
			continue
		}
		if err := dp.EdgePathDedup.Put(t*MaxPaths+i, dedup[i]); err != nil {
			return fmt.Errorf("write path %d's de-duplication window: %w", i, err)
		}
		if dedup[i] == 0 {
			delete(cur.dedup, i)
		} else {
			cur.dedup[i] = dedup[i]
		}
	}
	return nil
}

// RedundantInterfaces returns the interfaces each redundant group's
// broadcast devmap holds, by the group's index.
func (dp *Dataplane) RedundantInterfaces() map[uint32][]uint32 {
	w := dp.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[uint32][]uint32, len(w.dupTx))
	for g, ifs := range w.dupTx {
		out[g] = slices.Clone(ifs)
	}
	return out
}

// devmapVal mirrors struct bpf_devmap_val: an interface and the program
// run on frames as they leave by it.
type devmapVal struct {
	Ifindex uint32
	ProgFD  int32
}

// putDupTx makes redundant group i's broadcast devmap one of interfaces
// ifs, each running the copies' program.
func (w *writer) putDupTx(i uint32, ifs []uint32) error {
	dp := w.dp
	prog, err := dp.dupProgram()
	if err != nil {
		return err
	}
	inner := dp.spec.Maps[edgeMapEdgeDupTx].InnerMap.Copy()
	m, err := ebpf.NewMap(inner)
	if err != nil {
		return fmt.Errorf("create redundant group %d's devmap: %w", i, err)
	}
	defer m.Close()
	for _, ifi := range ifs {
		if err := m.Put(ifi, devmapVal{Ifindex: ifi, ProgFD: int32(prog.FD())}); err != nil {
			return fmt.Errorf("redundant group %d: add interface %d to its devmap: %w", i, ifi, err)
		}
	}
	if err := dp.EdgeDupTx.Put(i, m); err != nil {
		return fmt.Errorf("install redundant group %d's devmap: %w", i, err)
	}
	w.dupTx[i] = ifs
	return nil
}

// writeTables brings slot t's Maglev tables to g's: those of the tags in
// keys, or all of g's; only entries that differ are written.
func (w *writer) writeTables(t uint32, g *Generation, keys *Dirty) error {
	dp := w.dp
	cur := w.slots[t]
	tags := maps.Keys(g.Tables)
	if keys != nil {
		tags = maps.Keys(keys.Tables)
	}
	var ks, fks, fvs []uint32
	var vs []MaglevBlk
	farWritten := map[uint32]*[MaxMembers]uint32{}
	for tag := range tags {
		want, ok := g.Tables[tag]
		if !ok || tag >= MaxServices {
			continue
		}
		have := cur.tables[tag]
		blocks, far := MaglevKernel(tag, want)
		base := dp.tableBase(t, tag)
		for b := range blocks {
			changed := false
			for i := b * MaglevBlock; i < min(len(want), (b+1)*MaglevBlock) && !changed; i++ {
				changed = i >= len(have) || have[i] != want[i]
			}
			if changed {
				ks, vs = append(ks, base+uint32(b)), append(vs, blocks[b])
			}
		}
		fbase := (t*MaxServices + tag) * MaxMembers
		for m, f := range far {
			if old := cur.lbFar[tag]; old == nil || old[m] != f {
				fks, fvs = append(fks, fbase+uint32(m)), append(fvs, f)
			}
		}
		farWritten[tag] = &far
	}
	// The members' FARs first: an entry never names a member whose FAR is
	// not written (the slot is idle, but a failed commit leaves it so).
	if len(fks) > 0 {
		if _, err := dp.EdgeLbFar.BatchUpdate(fks, fvs, nil); err != nil {
			return fmt.Errorf("write %d backend FAR indexes: %w", len(fks), err)
		}
	}
	for tag, far := range farWritten {
		cur.lbFar[tag] = far
	}
	if len(ks) > 0 {
		if _, err := dp.EdgeMaglev.BatchUpdate(ks, vs, nil); err != nil {
			return fmt.Errorf("write %d maglev blocks: %w", len(ks), err)
		}
	}
	for tag, want := range g.Tables {
		if keys == nil || hasKey(keys.Tables, tag) {
			cur.tables[tag%MaxServices] = slices.Clone(want)
		}
	}
	return nil
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// writeServices makes slot t's services those of g. New and changed
// services are written after their tables (writeTables ran first), so a
// service never points at a table of another.
func (w *writer) writeServices(t uint32, g *Generation) error {
	if err := syncSlot(w.dp.EdgeServices, t, w.slots[t].services, g.Services, "service"); err != nil {
		return err
	}
	if err := syncSlot(w.dp.EdgeNatBackends, t, w.slots[t].backends, g.NATBackends, "nat backend"); err != nil {
		return err
	}
	return w.writeSvcIndex(t)
}

// syncSlot makes slot t's entries of m, which cur holds, those of want
// (keys without the slot): what is gone is deleted, what is new or
// changed written, the rest left alone.
func syncSlot[V comparable](m *ebpf.Map, t uint32, cur map[SvcKey]V, want map[SvcKey]V, what string) error {
	slotted := make(map[SvcKey]V, len(want))
	for k, v := range want {
		k.Slot = t
		slotted[k] = v
	}
	for k := range cur {
		if _, ok := slotted[k]; !ok {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete %s: %w", what, err)
			}
			delete(cur, k)
		}
	}
	for k, v := range slotted {
		if old, ok := cur[k]; ok && old == v {
			continue
		}
		if err := m.Put(k, v); err != nil {
			return fmt.Errorf("write %s: %w", what, err)
		}
		cur[k] = v
	}
	return nil
}

// writeSvcIndex brings slot t's service index to its services (the
// buckets that differ).
func (w *writer) writeSvcIndex(t uint32) error {
	s := w.slots[t]
	want, _ := SvcIndex(s.services)
	for b := range want {
		if s.index != nil && s.index[b] == want[b] {
			continue
		}
		if err := w.dp.EdgeSvcIndex.Put(t*SvcIndexSize+uint32(b), want[b]); err != nil {
			s.index = nil // partly written: not known
			return fmt.Errorf("write service index: %w", err)
		}
	}
	s.index = &want
	return nil
}

// writeRules brings slot t's classifier entries to g's (see writeSlot).
func (w *writer) writeRules(t uint32, g *Generation, keys *Dirty) error {
	dp := w.dp
	cur := w.slots[t].rules
	base := t * MaxGroups
	var delKeys, putKeys []RuleKey
	var putVals []Rule
	change := func(k RuleKey) {
		v, want := g.Rules[k]
		old, has := cur[k]
		mk := k
		mk.Group += base
		switch {
		case !want && has:
			delKeys = append(delKeys, mk)
		case want && (!has || old != v):
			putKeys, putVals = append(putKeys, mk), append(putVals, v)
		}
	}
	if keys != nil {
		for k := range keys.Rules {
			change(k)
		}
	} else {
		for k := range cur {
			if _, ok := g.Rules[k]; !ok {
				change(k)
			}
		}
		for k := range g.Rules {
			change(k)
		}
	}
	if len(delKeys) > 0 {
		if _, err := dp.EdgeRules.BatchDelete(delKeys, nil); err != nil {
			// Fall back to one by one: a key may already be gone.
			for _, k := range delKeys {
				if err := dp.EdgeRules.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("delete rule: %w", err)
				}
			}
		}
	}
	for _, k := range delKeys {
		k.Group -= base
		delete(cur, k)
	}
	if len(putKeys) > 0 {
		if _, err := dp.EdgeRules.BatchUpdate(putKeys, putVals, nil); err != nil {
			return fmt.Errorf("write %d rules: %w", len(putKeys), err)
		}
	}
	for i, k := range putKeys {
		k.Group -= base
		cur[k] = putVals[i]
	}
	return nil
}

// writePaths makes slot t's paths and decap entries those of g.
func (w *writer) writePaths(t uint32, g *Generation) error {
	dp := w.dp
	cur := w.slots[t]
	// Removed paths are zeroed (a zero id is an empty place for the
	// writer's own reload).
	for i := range cur.paths {
		if _, ok := g.Paths[i]; !ok {
			if err := dp.EdgePaths.Put(t*MaxPaths+i, Path{}); err != nil {
				return fmt.Errorf("clear path %d: %w", i, err)
			}
			delete(cur.paths, i)
		}
	}
	for i, p := range g.Paths {
		if old, ok := cur.paths[i]; ok && old == p {
			continue
		}
		if err := dp.EdgePaths.Put(t*MaxPaths+i, p); err != nil {
			return fmt.Errorf("write path %d: %w", i, err)
		}
		cur.paths[i] = p
	}

	// Secrets go with their paths, into the same slot; a path without
	// one (insecure) has its place zeroed.
	for i := range cur.secrets {
		if _, ok := g.ProbeSecrets[i]; !ok {
			if err := dp.EdgePathAuth.Put(t*MaxPaths+i, ProbeSecret{}); err != nil {
				return fmt.Errorf("clear path %d's probe secret: %w", i, err)
			}
			delete(cur.secrets, i)
		}
	}
	for i, a := range g.ProbeSecrets {
		if old, ok := cur.secrets[i]; ok && old == a {
			continue
		}
		if err := dp.EdgePathAuth.Put(t*MaxPaths+i, a); err != nil {
			return fmt.Errorf("write path %d's probe secret: %w", i, err)
		}
		cur.secrets[i] = a
	}

	want := make(map[DecapKey]Decap, len(g.Decaps))
	for k, v := range g.Decaps {
		k.Slot = t
		want[k] = v
	}
	for k := range cur.decaps {
		if _, ok := want[k]; !ok {
			if err := dp.EdgeDecaps.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete decap entry: %w", err)
			}
			delete(cur.decaps, k)
		}
	}
	for k, v := range want {
		if old, ok := cur.decaps[k]; ok && old == v {
			continue
		}
		if err := dp.EdgeDecaps.Put(k, v); err != nil {
			return fmt.Errorf("write decap entry: %w", err)
		}
		cur.decaps[k] = v
	}
	return nil
}

// resetLB zeroes a service backend's counters.
func (dp *Dataplane) resetLB(idx uint32) error {
	if err := dp.EdgeLbStats.Put(idx, make([]Ctr, ebpf.MustPossibleCPU())); err != nil {
		return fmt.Errorf("reset lb stats %d: %w", idx, err)
	}
	if err := dp.EdgeLbNew.Put(idx, make([]uint64, ebpf.MustPossibleCPU())); err != nil {
		return fmt.Errorf("reset lb new flows %d: %w", idx, err)
	}
	return nil
}

// resetPath zeroes a path statistics index's counters and sequence number.
func (dp *Dataplane) resetPath(idx uint32) error {
	zero := make([]Ctr, ebpf.MustPossibleCPU())
	for _, k := range []uint32{2 * idx, 2*idx + 1} {
		if err := dp.EdgePathStats.Put(k, zero); err != nil {
			return fmt.Errorf("reset path stats %d: %w", idx, err)
		}
	}
	if err := dp.EdgePathSeq.Put(idx, uint32(0)); err != nil {
		return fmt.Errorf("reset path sequence %d: %w", idx, err)
	}
	return nil
}

// SetIfAddrs makes addrs (by ifindex) the interface addresses XDP answers
// ICMP errors from.
func (dp *Dataplane) SetIfAddrs(addrs map[uint32]IfAddr) error {
	for i, a := range addrs {
		if err := dp.EdgeIfaddrs.Put(i, a); err != nil {
			return fmt.Errorf("set addresses of interface %d: %w", i, err)
		}
	}
	var k uint32
	var v IfAddr
	var stale []uint32
	it := dp.EdgeIfaddrs.Iterate()
	for it.Next(&k, &v) {
		if _, ok := addrs[k]; !ok {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		_ = dp.EdgeIfaddrs.Delete(k)
	}
	return it.Err()
}

// BumpFIBEpoch makes every flow look its next hop up again: the agent
// calls it when routes, neighbours, addresses or links change.
func (dp *Dataplane) BumpFIBEpoch() error {
	return dp.updateState("bump fib epoch", func(st *State) {
		st.FibEpoch++
		if st.FibEpoch == 0 {
			st.FibEpoch = 1
		}
	})
}

// updateState changes the live global state with change, under the
// writer's lock (commits write it too): one field's change leaves the
// others as they are.
func (dp *Dataplane) updateState(what string, change func(*State)) error {
	w := dp.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := dp.State()
	if err != nil {
		return err
	}
	change(&st)
	if err := dp.EdgeGlobal.Put(uint32(0), st); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// SetTx makes ifindexes the set of redirect targets.
func (dp *Dataplane) SetTx(ifindexes []uint32) error {
	want := map[uint32]bool{}
	for _, i := range ifindexes {
		want[i] = true
		if err := dp.EdgeTx.Put(i, i); err != nil {
			return fmt.Errorf("add tx interface %d: %w", i, err)
		}
	}
	var k, v uint32
	var stale []uint32
	it := dp.EdgeTx.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		if err := dp.EdgeTx.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove tx interface %d: %w", k, err)
		}
	}
	return it.Err()
}

// ResetPDRStats zeroes the per-CPU counters at stats index idx, before the
// index is given to a new PDR.
func (dp *Dataplane) ResetPDRStats(idx uint32) error {
	zero := make([]Ctr, ebpf.MustPossibleCPU())
	if err := dp.EdgePdrStats.Put(idx, zero); err != nil {
		return fmt.Errorf("reset pdr stats %d: %w", idx, err)
	}
	return nil
}

// SetFIBByDst tells XDP whether the kernel routes by destination alone
// (RoutingByDestination), so flows to one destination may share its next
// hop, and marks every cached next hop stale with it. The flag is set
// only while still() holds, checked under the writer's lock (nil: always):
// a watcher that saw routing change since its scan began passes a check
// that fails, so a scan older than the change never turns sharing back
// on. It returns whether the flag was written.
func (dp *Dataplane) SetFIBByDst(on bool, still func() bool) (bool, error) {
	wrote := false
	err := dp.updateState("set fib by destination", func(st *State) {
		if on && still != nil && !still() {
			return
		}
		wrote = true
		if on {
			st.FibFlags |= fibByDst
		} else {
			st.FibFlags &^= fibByDst
		}
		st.FibEpoch++
		if st.FibEpoch == 0 {
			st.FibEpoch = 1
		}
	})
	return wrote, err
}

// steerTab is a steering group's table and usable members, for the
// member FARs it was made for.
type steerTab struct {
	n     uint32
	far   [SteerMembers]uint32
	ok    uint32
	table [SteerTable]uint8
}

// evenTable spreads a table's entries over n members in turn.
func evenTable(n uint32) (t [SteerTable]uint8) {
	for i := range t {
		t[i] = uint8(uint32(i) % max(n, 1))
	}
	return t
}

// writeSteers makes slot t's steering groups those of g: a group keeps
// the table the agent set while its members stay; a new one, or one whose
// members changed, starts even over all its members, every one usable.
func (w *writer) writeSteers(t uint32, g *Generation) error {
	dp := w.dp
	cur := w.slots[t]
	for i := uint32(0); i < MaxSteer; i++ {
		want, ok := g.Steers[i]
		if ok {
			tab, known := w.steerTabs[i]
			if !known || tab.n != want.N || tab.far != want.Far {
				tab = steerTab{n: want.N, far: want.Far, ok: 1<<want.N - 1, table: evenTable(want.N)}
				if err := dp.EdgeSteerOk.Put(i, tab.ok); err != nil {
					return fmt.Errorf("write steering group %d's usable members: %w", i, err)
				}
				w.steerTabs[i] = tab
			}
			want.Table = tab.table
		}
		if cur.steers[i] == want {
			continue
		}
		if err := dp.EdgeSteer.Put(t*MaxSteer+i, want); err != nil {
			return fmt.Errorf("write steering group %d: %w", i, err)
		}
		if ok {
			cur.steers[i] = want
		} else {
			delete(cur.steers, i)
		}
	}
	return nil
}

// SetSteer gives steering group idx the table (member per entry) and the
// members flows may stay on (bit i: member i), in both slots where the
// group has the members it has now. The table goes first, so no flow is
// sent back to a member just taken out. n is how many members the plan
// was made for: it reports false, writing nothing, when the group has
// another number (a commit changed it; the caller plans again).
func (dp *Dataplane) SetSteer(idx uint32, n int, ok uint32, table [SteerTable]uint8) (bool, error) {
	w := dp.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	tab, known := w.steerTabs[idx]
	if !known || tab.n != uint32(n) {
		return false, nil
	}
	if tab.ok == ok && tab.table == table {
		return true, nil // as it is
	}
	for t := range w.slots {
		cur, have := w.slots[t].steers[idx]
		if !have || cur.N != tab.n || cur.Far != tab.far || cur.Table == table {
			continue
		}
		cur.Table = table
		if err := dp.EdgeSteer.Put(uint32(t)*MaxSteer+idx, cur); err != nil {
			return true, fmt.Errorf("write steering group %d: %w", idx, err)
		}
		w.slots[t].steers[idx] = cur
	}
	if err := dp.EdgeSteerOk.Put(idx, ok); err != nil {
		return true, fmt.Errorf("write steering group %d's usable members: %w", idx, err)
	}
	tab.ok, tab.table = ok, table
	w.steerTabs[idx] = tab
	return true, nil
}

// SteerMembers returns steering group idx's member FAR indexes in the
// live generation (nil: no such group).
func (dp *Dataplane) SteerMembers(idx uint32) []uint32 {
	w := dp.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := dp.State()
	if err != nil || st.Gen == 0 {
		return nil
	}
	s, ok := w.slots[st.Gen&1].steers[idx]
	if !ok {
		return nil
	}
	return slices.Clone(s.Far[:s.N])
}
