// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"bytes"
	"errors"
	"fmt"
	"maps"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// Services and their balancing: each service tag's Maglev table (the
// member of each entry, each member's FAR), the services and NAT
// backends by key, the service index, and what each balancer counter
// counts.

// writeTables brings slot t's Maglev tables to g's: those of the tags in
// keys, or all of g's. Only what differs from what the slot holds is
// written: the members' FAR indexes, then the blocks of entries, each
// in one batch.
func (w *Writer) writeTables(t uint32, g *Generation, keys *Dirty) error {
	o := w.o
	cur := w.slots[t]
	tags := maps.Keys(g.Tables)
	if keys != nil {
		tags = maps.Keys(keys.Tables)
	}
	var fks, fvs []uint32
	var written []uint32
	// A backend taken out or reweighted moves entries in every block:
	// the blocks to write go into the writer's buffer, room for a whole
	// table, kept from one commit to the next. Made anew each time (68
	// KiB for 65,537 entries), it was half of what a backend change
	// allocated, paid for in page faults and in the collector's work. A
	// commit that writes many tables (the first after a restart) grows
	// a buffer of its own, let go after it.
	one := int(o.Limits.MaglevBlocks())
	if cap(w.blocks) < one {
		w.blockKeys, w.blocks = make([]uint32, 0, one), make([]bpf.MaglevBlk, 0, one)
	}
	ks, vs := w.blockKeys[:0], w.blocks[:0]
	for tag := range tags {
		want, ok := g.Tables[tag]
		if !ok || tag >= bpf.MaxServices {
			continue
		}
		have := cur.tables[tag]
		if have != nil && len(have.Members) != len(want.Members) {
			have = nil
		}
		base := w.tableBase(t, tag)
		for b, lo := uint32(0), 0; lo < len(want.Members); b, lo = b+1, lo+bpf.MaglevBlock {
			hi := min(len(want.Members), lo+bpf.MaglevBlock)
			if have != nil && bytes.Equal(have.Members[lo:hi], want.Members[lo:hi]) {
				continue
			}
			ks, vs = append(ks, base+b), append(vs, bpf.MaglevBlk{})
			copy(vs[len(vs)-1].M[:], want.Members[lo:hi])
		}
		fbase := (t*bpf.MaxServices + tag) * bpf.MaxMembers
		for m, f := range want.Far {
			if have == nil || have.Far[m] != f {
				fks, fvs = append(fks, fbase+uint32(m)), append(fvs, f)
			}
		}
		written = append(written, tag)
	}
	// The members' FARs first: an entry never names a member whose FAR is
	// not written (the slot is idle, but a failed commit leaves it so).
	if len(fks) > 0 {
		if _, err := o.EdgeLbFar.BatchUpdate(fks, fvs, nil); err != nil {
			return fmt.Errorf("write %d backend FAR indexes: %w", len(fks), err)
		}
	}
	if len(ks) > 0 {
		if n, err := updateBlocks(o.EdgeMaglev, ks, vs); err != nil {
			return fmt.Errorf("write %d maglev blocks (%d written): %w", len(ks), n, err)
		}
	}
	for _, tag := range written {
		cur.tables[tag] = g.Tables[tag]
	}
	return nil
}

// updateBlocks writes Maglev blocks in one BPF_MAP_UPDATE_BATCH and
// returns how many it wrote. The kernel writes a batch element by
// element and stops at the first that fails: tests replace it with one
// that fails part way through (export_test.go), to show the slot half
// written never goes live.
var updateBlocks = func(m *ebpf.Map, keys []uint32, blocks []bpf.MaglevBlk) (int, error) {
	return m.BatchUpdate(keys, blocks, nil)
}

// tableBase is the edge_maglev index of the block of entry 0 of tag's
// table in slot t.
func (w *Writer) tableBase(t, tag uint32) uint32 {
	return (t*bpf.MaxServices + tag) * w.o.Limits.MaglevBlocks()
}

// writeServices makes slot t's services those of g. New and changed
// services are written after their tables (writeTables ran first), so a
// service never points at a table of another.
func (w *Writer) writeServices(t uint32, g *Generation) error {
	changed, err := syncSlot(w.o.EdgeServices, t, w.slots[t].services, g.Services, "service")
	if err != nil {
		return err
	}
	if _, err := syncSlot(w.o.EdgeNatBackends, t, w.slots[t].backends, g.NATBackends, "nat backend"); err != nil {
		return err
	}
	if !changed && w.slots[t].index != nil {
		// The index is made from the services alone: those it was
		// made from are still the slot's. Remaking it (256 buckets)
		// was a commit's cost even when no service changed.
		return nil
	}
	return w.writeSvcIndex(t)
}

// syncSlot makes slot t's entries of m, which cur holds, those of want
// (keys without the slot): what is gone is deleted, what is new or
// changed written, the rest left alone. changed says whether any
// entry was.
func syncSlot[V comparable](m *ebpf.Map, t uint32, cur map[bpf.SvcKey]V, want map[bpf.SvcKey]V, what string) (changed bool, err error) {
	slotted := make(map[bpf.SvcKey]V, len(want))
	for k, v := range want {
		k.Slot = t
		slotted[k] = v
	}
	for k := range cur {
		if _, ok := slotted[k]; !ok {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return true, fmt.Errorf("delete %s: %w", what, err)
			}
			delete(cur, k)
			changed = true
		}
	}
	for k, v := range slotted {
		if old, ok := cur[k]; ok && old == v {
			continue
		}
		if err := m.Put(k, v); err != nil {
			return true, fmt.Errorf("write %s: %w", what, err)
		}
		cur[k] = v
		changed = true
	}
	return changed, nil
}

// writeSvcIndex brings slot t's service index to its services (the
// buckets that differ).
func (w *Writer) writeSvcIndex(t uint32) error {
	s := w.slots[t]
	want, _ := bpf.SvcIndex(s.services)
	for b := range want {
		if s.index != nil && s.index[b] == want[b] {
			continue
		}
		if err := w.o.EdgeSvcIndex.Put(t*bpf.SvcIndexSize+uint32(b), want[b]); err != nil {
			s.index = nil // partly written: not known
			return fmt.Errorf("write service index: %w", err)
		}
	}
	s.index = &want
	return nil
}

// writeMembers makes edge_lb_members say what g's counters count.
func (w *Writer) writeMembers(g *Generation) error {
	for idx := range w.members {
		if _, ok := g.Members[idx]; !ok {
			if err := w.o.EdgeLbMembers.Put(idx, bpf.Member{}); err != nil {
				return fmt.Errorf("clear balancer member %d: %w", idx, err)
			}
			delete(w.members, idx)
		}
	}
	for idx, ref := range g.Members {
		if old, ok := w.members[idx]; ok && old == ref {
			continue
		}
		if err := w.o.EdgeLbMembers.Put(idx, bpf.Member{Svc: ref.Service, Far: ref.FAR}); err != nil {
			return fmt.Errorf("write balancer member %d: %w", idx, err)
		}
		w.members[idx] = ref
	}
	return nil
}

// resetLB zeroes a service backend's counters.
func (w *Writer) resetLB(idx uint32) error {
	if err := w.o.EdgeLbStats.Put(idx, make([]bpf.Ctr, ebpf.MustPossibleCPU())); err != nil {
		return fmt.Errorf("reset lb stats %d: %w", idx, err)
	}
	if err := w.o.EdgeLbNew.Put(idx, make([]uint64, ebpf.MustPossibleCPU())); err != nil {
		return fmt.Errorf("reset lb new flows %d: %w", idx, err)
	}
	return nil
}
