// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// Sessions writes the user plane's PFCP sessions into the dataplane
// (bpf/lib/gtpu.h): each session in a slot with two records, the one
// packets read named by edge_sess_live[slot]. A change writes the other
// record and flips the live word: one 4-byte write makes a PFCP
// message's whole effect visible, and no other session's entries are
// touched. The keys that lead packets to the slot (TEIDs, UE addresses)
// are added before the flip and the ones the session no longer has
// removed after it.
//
// A record is written again only after a grace period since the flip
// that retired it (packets that read it before the flip are done), and
// a slot freed by a deletion is given out again only after one: sessions
// changed twice within a grace period, and slots reused at once, wait
// for a barrier (~0.1 ms, expedited), others do not.
type Sessions struct {
	mu sync.Mutex
	o  *bpf.Object
	w  *Writer
	// live is each slot's live record (0 or 1); gen the barrier count
	// when it last flipped (a record retired then is free once a
	// barrier after it completes).
	live map[uint32]uint32
	gen  map[uint32]uint64
	keys map[uint32]SessionKeys
	// free are slots no session holds whose deletion a barrier has
	// followed, freed those still waiting for one (with the barrier
	// count at their deletion).
	free  []uint32
	freed map[uint32]uint64
	next  uint32 // slots below it were given out
	max   uint32
	// barriers counts completed barriers; a barrier started after
	// count c completes as c+1.
	barriers uint64
	// ueBits counts the UEs of each bit of edge_ue_bits; words mirrors
	// the map's words as written.
	ueBits map[uint32]int
	words  map[uint32]uint64
	// dm is the UE each entry of edge_ue_dm names a slot for (by bit),
	// with the slot: one UE per bit, the first to take it.
	dm   map[uint32]dmEntry
	dmOf map[uint32]uint32 // slot -> the bit it owns
}

// dmEntry is a UE that owns its bit's entry of edge_ue_dm, and its slot.
type dmEntry struct {
	ue   netip.Addr
	slot uint32
}

// UEBits mirrors EDGE_UE_BITS.
const UEBits = 1 << 20

// UEBit is the bit of edge_ue_bits for UE address a, as XDP's ue_bit
// computes it.
func UEBit(a netip.Addr) uint32 {
	var k uint64
	if a.Is6() {
		// ue6_key of its /64 prefix.
		x := UE6Key(a)
		k = uint64(uint32(x^x>>32) ^ 0x5bd1e995)
	} else {
		k = uint64(bpf.Addr4(a))
	}
	return uint32((k*0x9e3779b97f4a7c15)>>44) & (UEBits - 1)
}

// UE6Key is edge_ue6's key for IPv6 address a: its /64 prefix, the 8
// bytes as they are.
func UE6Key(a netip.Addr) uint64 {
	b := a.As16()
	return binary.NativeEndian.Uint64(b[:8])
}

// putUE makes UE address a (IPv4, or IPv6: its /64 prefix) lead to
// slot.
func (s *Sessions) putUE(a netip.Addr, slot uint32) error {
	if a.Is6() {
		return s.o.EdgeUe6.Put(UE6Key(a), slot)
	}
	return s.o.EdgeUe4.Put(bpf.Addr4(a), slot)
}

// dropUE takes UE address a away if it leads to slot.
func (s *Sessions) dropUE(a netip.Addr, slot uint32) {
	var v uint32
	if a.Is6() {
		if s.o.EdgeUe6.Lookup(UE6Key(a), &v) == nil && v == slot {
			_ = s.o.EdgeUe6.Delete(UE6Key(a))
		}
		return
	}
	if s.o.EdgeUe4.Lookup(bpf.Addr4(a), &v) == nil && v == slot {
		_ = s.o.EdgeUe4.Delete(bpf.Addr4(a))
	}
}

// setBit sets or clears bit b of edge_ue_bits. Called with s.mu held.
func (s *Sessions) setBit(b uint32, on bool) error {
	w := b >> 6
	v := s.words[w]
	if on {
		v |= 1 << (b & 63)
	} else {
		v &^= 1 << (b & 63)
	}
	if v == s.words[w] {
		return nil
	}
	if err := s.o.EdgeUeBits.Put(w, v); err != nil {
		return fmt.Errorf("UE bitmap: %w", err)
	}
	s.words[w] = v
	return nil
}

// SessionKeys are what leads packets to a session: the TEIDs of its
// uplink PDRs and its UEs' IPv4 addresses.
type SessionKeys struct {
	TEIDs []uint32
	UEs   []netip.Addr
	// Meters are the session's maximum bit rate meters its record's
	// entries name (edge_sess_pdr.meter).
	Meters []Meter
	// Reset are counters (edge_sess_pdr.cnt) of an existing session
	// that PDRs take over from PDRs gone: zeroed before the flip, so a
	// PDR does not start with another's counts.
	Reset []uint8
}

// Meter is a maximum bit rate meter of a session: its index (1-based,
// as a record entry names it) and rate in bytes a second.
type Meter struct {
	Index uint8
	Rate  uint64
}

// meterBurst is how long a meter's rate its bucket holds: a burst the
// policer lets through at once, and what TCP through it can keep in
// flight before a drop.
const meterBurst = 20 * time.Millisecond

// minBurst is the smallest bucket: two full-sized frames.
const minBurst = 3000

// setMeters writes the meters of keys that old (what slot's session had
// before) did not have at that rate, with a full bucket. Called with
// s.mu held, before the record naming them is flipped in.
func (s *Sessions) setMeters(slot uint32, old, keys SessionKeys) error {
	for _, m := range keys.Meters {
		if slices.Contains(old.Meters, m) {
			continue
		}
		burst := max(m.Rate*uint64(meterBurst)/uint64(time.Second), minBurst) * uint64(time.Second)
		v := bpf.MBR{Rate: m.Rate, Burst: burst, Tokens: burst}
		if err := s.o.EdgeSessMbr.Put(slot*bpf.SessPDRs+uint32(m.Index-1)%bpf.SessPDRs, &v); err != nil {
			return fmt.Errorf("write meter %d: %w", m.Index, err)
		}
	}
	return nil
}

// ErrSessionsFull is returned when every slot holds a session.
var ErrSessionsFull = errors.New("the user plane holds as many sessions as limits.sessions allows")

// Sessions returns the session writer of w's dataplane. A restarted
// agent gives it every session it kept, each in the slot it had
// (Restore), then calls Settle: packets go on reading the records the
// last run wrote until each is replaced, and keys no kept session has
// are removed.
func (w *Writer) Sessions() (*Sessions, error) {
	s := &Sessions{o: w.o, w: w, live: map[uint32]uint32{}, gen: map[uint32]uint64{}, keys: map[uint32]SessionKeys{},
		freed: map[uint32]uint64{}, max: w.o.Limits.WithDefaults().Sessions, ueBits: map[uint32]int{}, words: map[uint32]uint64{},
		dm: map[uint32]dmEntry{}, dmOf: map[uint32]uint32{}}
	var k uint32
	var v uint64
	it := w.o.EdgeUeBits.Iterate()
	for it.Next(&k, &v) {
		if v != 0 {
			s.words[k] = v
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the UE bitmap: %w", err)
	}
	// Whatever the last run flipped is past a grace period after this.
	if err := s.barrier(); err != nil {
		return nil, err
	}
	return s, nil
}

// Restore puts a session kept across a restart back into its slot. Its
// record is written beside the one packets may be reading (the last
// run's), and flipped to.
func (s *Sessions) Restore(slot uint32, rec *bpf.Sess, keys SessionKeys) error {
	if slot >= s.max {
		return fmt.Errorf("session slot %d out of range (limits.sessions %d)", slot, s.max)
	}
	s.mu.Lock()
	if _, dup := s.live[slot]; dup {
		s.mu.Unlock()
		return fmt.Errorf("session slot %d given twice", slot)
	}
	var live uint32
	var old bpf.Sess
	if s.o.EdgeSessLive.Lookup(slot, &live) == nil && s.o.EdgeSessions.Lookup(slot*2+live&1, &old) == nil && old.Id == slot+1 {
		s.live[slot], s.gen[slot] = live&1, 0
	}
	if slot >= s.next {
		s.next = slot + 1
	}
	s.mu.Unlock()
	return s.Put(slot, rec, keys)
}

// Settle ends a restart's Restores: slots below the highest restored one
// that no session holds are free, TEIDs and UEs that lead to no kept
// session's slot are removed, and XDP's count of sessions is set.
func (s *Sessions) Settle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free = s.free[:0]
	for slot := uint32(0); slot < s.next; slot++ {
		if _, ok := s.live[slot]; !ok {
			s.free = append(s.free, slot)
		}
	}
	var k, v uint32
	for _, m := range []struct {
		name string
		kept func(k, slot uint32) bool
	}{
		{"edge_teid", func(k, slot uint32) bool { return contains(s.keys[slot].TEIDs, bpf.BE32(k)) }},
		{"edge_ue4", func(k, slot uint32) bool {
			var b [4]byte
			binary.NativeEndian.PutUint32(b[:], k)
			return contains(s.keys[slot].UEs, netip.AddrFrom4(b))
		}},
	} {
		mp := s.o.EdgeTeid
		if m.name == "edge_ue4" {
			mp = s.o.EdgeUe4
		}
		var stale []uint32
		it := mp.Iterate()
		for it.Next(&k, &v) {
			if !m.kept(k, v) {
				stale = append(stale, k)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("read %s: %w", m.name, err)
		}
		for _, k := range stale {
			if err := mp.Delete(k); err != nil {
				return fmt.Errorf("remove a stale key of %s: %w", m.name, err)
			}
		}
	}
	// IPv6 prefixes that lead to no kept session's slot.
	var k6 uint64
	var stale6 []uint64
	it6 := s.o.EdgeUe6.Iterate()
	for it6.Next(&k6, &v) {
		if !slices.ContainsFunc(s.keys[v].UEs, func(a netip.Addr) bool { return a.Is6() && UE6Key(a) == k6 }) {
			stale6 = append(stale6, k6)
		}
	}
	if err := it6.Err(); err != nil {
		return fmt.Errorf("read edge_ue6: %w", err)
	}
	for _, k := range stale6 {
		if err := s.o.EdgeUe6.Delete(k); err != nil {
			return fmt.Errorf("remove a stale key of edge_ue6: %w", err)
		}
	}
	// Direct entries the last run left for UEs no kept session owns.
	for w, v := range s.words {
		for i := uint32(0); i < 64; i++ {
			b := w<<6 | i
			if v>>i&1 == 0 {
				continue
			}
			if _, owned := s.dm[b]; !owned {
				if err := s.o.EdgeUeDm.Put(b, uint32(0)); err != nil {
					return fmt.Errorf("UE direct entry: %w", err)
				}
			}
		}
	}
	// The bitmap as the kept UEs need it: bits of UEs gone with the
	// last run cleared.
	want := map[uint32]uint64{}
	for b := range s.ueBits {
		want[b>>6] |= 1 << (b & 63)
	}
	for w, v := range s.words {
		if want[w] != v {
			if err := s.o.EdgeUeBits.Put(w, want[w]); err != nil {
				return fmt.Errorf("UE bitmap: %w", err)
			}
			if want[w] == 0 {
				delete(s.words, w)
			} else {
				s.words[w] = want[w]
			}
		}
	}
	return s.setCount()
}

// Slot gives out a free slot for a new session.
func (s *Sessions) Slot() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) == 0 && s.next < s.max {
		s.next++
		return s.next - 1, nil
	}
	if len(s.free) == 0 && len(s.freed) > 0 {
		if err := s.barrier(); err != nil {
			return 0, err
		}
	}
	if len(s.free) == 0 {
		return 0, ErrSessionsFull
	}
	slot := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	return slot, nil
}

// Unreserve gives back a slot Slot gave out that was never Put.
func (s *Sessions) Unreserve(slot uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, used := s.live[slot]; !used && slot < s.next {
		s.free = append(s.free, slot)
	}
}

// Mask is the slot bits of a TEID that names a slot (bpf.Limits.SessMask).
func (s *Sessions) Mask() uint32 { return s.o.Limits.SessMask() }

// barrier waits for a grace period and frees what it retires. Called
// with s.mu held.
func (s *Sessions) barrier() error {
	if err := s.w.barrier.Sync(); err != nil {
		return err
	}
	s.barriers++
	for slot, at := range s.freed {
		if at < s.barriers {
			s.free = append(s.free, slot)
			delete(s.freed, slot)
		}
	}
	return nil
}

// Barrier returns once every packet that read a record before the call
// is done with it (a grace period): what follows is ordered after every
// packet the last flips retired.
func (s *Sessions) Barrier() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.barrier()
}

// Put makes rec the rules of the session in slot (rec.Id is set), led
// to by keys.
func (s *Sessions) Put(slot uint32, rec *bpf.Sess, keys SessionKeys) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot >= s.max {
		return fmt.Errorf("session slot %d out of range", slot)
	}
	live, had := s.live[slot]
	if had && s.gen[slot] >= s.barriers {
		// The record to write was live until the last flip, and no
		// barrier has completed since.
		if err := s.barrier(); err != nil {
			return err
		}
	}
	next := uint32(0)
	if had {
		next = live ^ 1
	}
	rec.Id = slot + 1
	// The first of its UEs whose bit's direct entry is free (or its
	// own already) is the record's own: found without the hash.
	rec.OwnUe = 0
	var claim *dmEntry
	for _, a := range keys.UEs {
		if !a.Is4() {
			continue // direct entries are IPv4's
		}
		e, taken := s.dm[UEBit(a)]
		if !taken || e.slot == slot && e.ue == a {
			rec.OwnUe, claim = bpf.Addr4(a), &dmEntry{a, slot}
			break
		}
	}
	old := s.keys[slot]
	if err := s.setMeters(slot, old, keys); err != nil {
		return err
	}
	if err := s.o.EdgeSessions.Put(slot*2+next, rec); err != nil {
		return fmt.Errorf("write session record: %w", err)
	}
	for _, t := range keys.TEIDs {
		if err := s.o.EdgeTeid.Put(bpf.BE32(t), slot); err != nil {
			return fmt.Errorf("add TEID %#x: %w", t, err)
		}
	}
	for _, a := range keys.UEs {
		if !contains(old.UEs, a) {
			b := UEBit(a)
			if s.ueBits[b]++; s.ueBits[b] == 1 {
				if err := s.setBit(b, true); err != nil {
					return err
				}
			}
		}
		if err := s.putUE(a, slot); err != nil {
			return fmt.Errorf("add UE %s: %w", a, err)
		}
	}
	if had && len(keys.Reset) > 0 {
		zero := make([]bpf.Ctr, s.ncpu())
		for _, c := range keys.Reset {
			if err := s.o.EdgeSessStats.Put(slot*bpf.SessPDRs+uint32(c)%bpf.SessPDRs, zero); err != nil {
				return fmt.Errorf("reset a PDR's counters: %w", err)
			}
		}
	}
	if !had {
		// A new session's counters start at zero.
		zero := make([]bpf.Ctr, s.ncpu())
		for i := range uint32(bpf.SessPDRs) {
			if err := s.o.EdgeSessStats.Put(slot*bpf.SessPDRs+i, zero); err != nil {
				return fmt.Errorf("reset session counters: %w", err)
			}
		}
	}
	if err := s.o.EdgeSessLive.Put(slot, next); err != nil {
		return fmt.Errorf("flip session record: %w", err)
	}
	s.live[slot], s.gen[slot], s.keys[slot] = next, s.barriers, keys
	// The direct entry after the flip: it leads to a record that owns
	// it. An entry the session owned for another UE goes.
	if b, ok := s.dmOf[slot]; ok && (claim == nil || s.dm[b].ue != claim.ue) {
		s.unclaim(slot)
	}
	if claim != nil {
		// It names the copy just made live (+ 1): the downlink reads
		// no live word. Until it moves, packets may read the copy the
		// flip retired, which the next Put's barrier waits for.
		b := UEBit(claim.ue)
		if err := s.o.EdgeUeDm.Put(b, slot*2+next+1); err != nil {
			return fmt.Errorf("UE direct entry: %w", err)
		}
		s.dm[b], s.dmOf[slot] = *claim, b
	}
	s.drop(old, keys, slot)
	if !had {
		return s.setCount()
	}
	return nil
}

// ncpu is the CPUs a per-CPU map holds a value for.
func (s *Sessions) ncpu() int {
	n, err := ebpf.PossibleCPU()
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// unclaim clears the direct entry slot owns, if any. Called with s.mu
// held.
func (s *Sessions) unclaim(slot uint32) {
	b, ok := s.dmOf[slot]
	if !ok {
		return
	}
	_ = s.o.EdgeUeDm.Put(b, uint32(0))
	delete(s.dm, b)
	delete(s.dmOf, slot)
}

// drop removes the keys of old that keep does not have, unless another
// slot took them meanwhile.
func (s *Sessions) drop(old, keep SessionKeys, slot uint32) {
	for _, t := range old.TEIDs {
		if !contains(keep.TEIDs, t) {
			var v uint32
			if s.o.EdgeTeid.Lookup(bpf.BE32(t), &v) == nil && v == slot {
				_ = s.o.EdgeTeid.Delete(bpf.BE32(t))
			}
		}
	}
	for _, a := range old.UEs {
		if !contains(keep.UEs, a) {
			s.dropUE(a, slot)
			b := UEBit(a)
			if s.ueBits[b]--; s.ueBits[b] <= 0 {
				delete(s.ueBits, b)
				_ = s.setBit(b, false)
			}
		}
	}
}

func contains[T comparable](l []T, v T) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

// Delete takes the session in slot out of the dataplane; the slot is
// given out again after a grace period.
func (s *Sessions) Delete(slot uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live[slot]; !ok {
		return nil
	}
	// Its keys go; its records stay as they are until the slot is
	// given out again, after a grace period: a packet that found the
	// slot before reads a whole record.
	s.unclaim(slot)
	s.drop(s.keys[slot], SessionKeys{}, slot)
	delete(s.live, slot)
	delete(s.gen, slot)
	delete(s.keys, slot)
	s.freed[slot] = s.barriers
	return s.setCount()
}

// setCount tells XDP how many sessions the user plane holds
// (edge_state.nsess: 0 spares every other packet the UE lookup).
// Called with s.mu held.
func (s *Sessions) setCount() error {
	n := uint32(len(s.live))
	return s.w.updateState("count the sessions", func(st *bpf.State) { st.Nsess = n })
}

// Counters returns the packets and bytes each of slot's PDR counters
// counted, summed over CPUs.
func (s *Sessions) Counters(slot uint32) ([bpf.SessPDRs]bpf.Ctr, error) {
	var out [bpf.SessPDRs]bpf.Ctr
	for i := range out {
		var per []bpf.Ctr
		if err := s.o.EdgeSessStats.Lookup(slot*bpf.SessPDRs+uint32(i), &per); err != nil {
			return out, err
		}
		for _, c := range per {
			out[i].Packets += c.Packets
			out[i].Bytes += c.Bytes
		}
	}
	return out, nil
}

// countersBatch is how many PDR counters a batch lookup reads at once.
const countersBatch = 4096

// AllCounters returns the packets and bytes each PDR counter of every
// slot given out so far counted, summed over CPUs, indexed by
// slot*bpf.SessPDRs + counter: a batch read per countersBatch counters
// rather than a lookup each, for readers of many sessions.
func (s *Sessions) AllCounters() ([]bpf.Ctr, error) {
	s.mu.Lock()
	n := int(s.next) * bpf.SessPDRs
	s.mu.Unlock()
	ncpu := s.ncpu()
	out := make([]bpf.Ctr, 0, n)
	keys := make([]uint32, countersBatch)
	vals := make([]bpf.Ctr, countersBatch*ncpu)
	var cur ebpf.MapBatchCursor
	for len(out) < n {
		got, err := s.o.EdgeSessStats.BatchLookup(&cur, keys, vals, nil)
		done := errors.Is(err, ebpf.ErrKeyNotExist)
		if err != nil && !done {
			return nil, fmt.Errorf("read session counters: %w", err)
		}
		for i := range min(got, n-len(out)) {
			if int(keys[i]) != len(out) {
				return nil, fmt.Errorf("read session counters: key %d at %d", keys[i], len(out))
			}
			var c bpf.Ctr
			for _, v := range vals[i*ncpu : (i+1)*ncpu] {
				c.Packets += v.Packets
				c.Bytes += v.Bytes
			}
			out = append(out, c)
		}
		if done || got == 0 {
			break
		}
	}
	return out, nil
}
