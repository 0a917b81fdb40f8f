// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// Generation is one complete set of rule tables: what a packet classifies
// against between two flips.
type Generation struct {
	// Groups in search order (ascending MinPrio).
	Groups []Group
	// Rules keyed by masked key; RuleKey.Group is the index into Groups.
	Rules map[RuleKey]Rule
	// FARs by index; Rule.Far points here.
	FARs []Far
	// NoMatch and Malformed are XDP verdicts (XDPPass or XDPDrop).
	NoMatch, Malformed uint32
	// ResetStats lists PDR statistics indexes to zero before the flip:
	// indexes given to a PDR for the first time.
	ResetStats []uint32
	// Paths by index; Far.Path points here.
	Paths []Path
	// Decaps says which path a received GRE packet belongs to
	// (DecapKey.Slot is set by Commit).
	Decaps map[DecapKey]Decap
	// ResetPathStats lists path statistics indexes given out for the
	// first time: their counters and sequence numbers start at zero.
	ResetPathStats []uint32
}

// ErrCapacity is returned when a generation does not fit the maps.
var ErrCapacity = errors.New("generation exceeds map capacity")

// writer commits generations: it fills the slot no packet uses, flips the
// generation number once, and makes sure a grace period has passed since
// that flip before it touches the old slot again. The grace period is
// awaited in the background right after the flip (synchronize_rcu takes
// 5-20 ms here), so a commit waits only for what is left of it.
type writer struct {
	mu     sync.Mutex
	dp     *Dataplane
	slots  [2]map[RuleKey]Rule   // what each slot of edge_rules holds, group relative
	decaps [2]map[DecapKey]Decap // what each slot of edge_decaps holds
	paths  [2][]Path             // what each slot of edge_paths holds
	dirty  bool                  // a flip happened and no grace period was started after it
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

func newWriter(dp *Dataplane) (*writer, error) {
	w := &writer{dp: dp}
	for t := range w.slots {
		w.slots[t] = map[RuleKey]Rule{}
		w.decaps[t] = map[DecapKey]Decap{}
	}
	var dk DecapKey
	var dv Decap
	dit := dp.EdgeDecaps.Iterate()
	for dit.Next(&dk, &dv) {
		if dk.Slot <= 1 {
			w.decaps[dk.Slot][dk] = dv
		}
	}
	if err := dit.Err(); err != nil {
		return nil, fmt.Errorf("read decaps: %w", err)
	}
	for t := uint32(0); t < 2; t++ {
		for i := uint32(0); i < MaxPaths; i++ {
			var p Path
			if err := dp.EdgePaths.Lookup(t*MaxPaths+i, &p); err != nil || p.Id == 0 {
				break
			}
			w.paths[t] = append(w.paths[t], p)
		}
	}
	// Adopted maps: learn what each slot holds so commits write diffs.
	var k RuleKey
	var v Rule
	it := dp.EdgeRules.Iterate()
	for it.Next(&k, &v) {
		slot := k.Group / MaxGroups
		if slot > 1 {
			continue
		}
		rk := k
		rk.Group = k.Group % MaxGroups
		w.slots[slot][rk] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	w.dirty = true
	return w, nil
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
	out := make(map[RuleKey]Rule, len(dp.writer.slots[st.Gen&1]))
	for k, v := range dp.writer.slots[st.Gen&1] {
		out[k] = v
	}
	return out, st.Gen, nil
}

// ActivePaths returns the paths of the live generation.
func (dp *Dataplane) ActivePaths() ([]Path, error) {
	dp.writer.mu.Lock()
	defer dp.writer.mu.Unlock()
	st, err := dp.State()
	if err != nil || st.Gen == 0 {
		return nil, err
	}
	return append([]Path(nil), dp.writer.paths[st.Gen&1]...), nil
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
	if uint32(len(g.Rules)) > dp.Limits.Rules || uint32(len(g.FARs)) > dp.Limits.Rules {
		return 0, fmt.Errorf("%w: %d classifier entries and %d fars, limit %d", ErrCapacity, len(g.Rules), len(g.FARs), dp.Limits.Rules)
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

	if err := w.writeSlot(t, g); err != nil {
		return 0, err
	}

	// Two writes: the new slot's group count and defaults first, then the
	// generation number, so no packet sees the new generation with the
	// old count.
	st.Ngroups[t] = uint32(len(g.Groups))
	if st.FibEpoch == 0 {
		st.FibEpoch = 1 // 0 would match flows that never cached a next hop
	}
	st.NomatchVerdict = g.NoMatch
	st.MalformedVerdict = g.Malformed
	if err := dp.EdgeGlobal.Put(uint32(0), st); err != nil {
		return 0, fmt.Errorf("write state: %w", err)
	}
	st.Gen = next
	if err := dp.EdgeGlobal.Put(uint32(0), st); err != nil {
		return 0, fmt.Errorf("flip generation: %w", err)
	}
	// Start waiting out the readers of the old slot now, so the next
	// commit finds the wait done or under way.
	grace := make(chan error, 1)
	go func() { grace <- dp.barrier.Sync() }()
	w.grace = grace
	return next, nil
}

// writeSlot makes slot t hold exactly g, writing only the differences.
func (w *writer) writeSlot(t uint32, g *Generation) error {
	dp := w.dp
	cur := w.slots[t]
	base := t * MaxGroups

	var delKeys []RuleKey
	for k := range cur {
		if _, ok := g.Rules[k]; !ok {
			dk := k
			dk.Group += base
			delKeys = append(delKeys, dk)
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

	var putKeys []RuleKey
	var putVals []Rule
	for k, v := range g.Rules {
		if old, ok := cur[k]; ok && old == v {
			continue
		}
		pk := k
		pk.Group += base
		putKeys = append(putKeys, pk)
		putVals = append(putVals, v)
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

	for i, grp := range g.Groups {
		if err := dp.EdgeGroups.Put(base+uint32(i), grp); err != nil {
			return fmt.Errorf("write group %d: %w", i, err)
		}
	}
	if err := w.writePaths(t, g); err != nil {
		return err
	}
	fbase := t * dp.Limits.Rules
	if n := len(g.FARs); n > 0 {
		keys := make([]uint32, n)
		for i := range keys {
			keys[i] = fbase + uint32(i)
		}
		if _, err := dp.EdgeFars.BatchUpdate(keys, g.FARs, nil); err != nil {
			return fmt.Errorf("write fars: %w", err)
		}
	}
	return nil
}

// writePaths makes slot t's paths and decap entries those of g.
func (w *writer) writePaths(t uint32, g *Generation) error {
	dp := w.dp
	if len(g.Paths) > MaxPaths {
		return fmt.Errorf("%w: %d paths, at most %d", ErrCapacity, len(g.Paths), MaxPaths)
	}
	// Paths: write the new ones, clear what the slot held beyond them
	// (a zero id ends the list for the writer's own reload).
	for i := 0; i < max(len(g.Paths), len(w.paths[t])); i++ {
		var p Path
		if i < len(g.Paths) {
			p = g.Paths[i]
		}
		if err := dp.EdgePaths.Put(t*MaxPaths+uint32(i), p); err != nil {
			return fmt.Errorf("write path %d: %w", i, err)
		}
	}
	w.paths[t] = append([]Path(nil), g.Paths...)

	cur := w.decaps[t]
	want := make(map[DecapKey]Decap, len(g.Decaps))
	for k, v := range g.Decaps {
		k.Slot = t
		want[k] = v
	}
	for k := range cur {
		if _, ok := want[k]; !ok {
			if err := dp.EdgeDecaps.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete decap entry: %w", err)
			}
			delete(cur, k)
		}
	}
	for k, v := range want {
		if old, ok := cur[k]; ok && old == v {
			continue
		}
		if err := dp.EdgeDecaps.Put(k, v); err != nil {
			return fmt.Errorf("write decap entry: %w", err)
		}
		cur[k] = v
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
	w := dp.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := dp.State()
	if err != nil {
		return err
	}
	st.FibEpoch++
	if st.FibEpoch == 0 {
		st.FibEpoch = 1
	}
	if err := dp.EdgeGlobal.Put(uint32(0), st); err != nil {
		return fmt.Errorf("bump fib epoch: %w", err)
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
