// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// Steering groups: each group's members and table (the agent keeps
// setting the table and the usable members in the live slot: SetSteer),
// and a redundant group's broadcast devmap and de-duplication windows.

// steerTab is a steering group's table and usable members, for the
// member FARs it was made for.
type steerTab struct {
	n     uint32
	far   [bpf.SteerMembers]uint32
	ok    uint32
	table [bpf.SteerTable]uint8
}

// evenTable spreads a table's entries over n members in turn.
func evenTable(n uint32) (t [bpf.SteerTable]uint8) {
	for i := range t {
		t[i] = uint8(uint32(i) % max(n, 1))
	}
	return t
}

// writeSteers makes slot t's steering groups those of g: a group keeps
// the table the agent set while its members stay; a new one, or one whose
// members changed, starts even over all its members, every one usable.
func (w *Writer) writeSteers(t uint32, g *Generation) error {
	o := w.o
	cur := w.slots[t]
	for i := uint32(0); i < bpf.MaxSteer; i++ {
		want, ok := g.Steers[i]
		if ok {
			tab, known := w.steerTabs[i]
			if !known || tab.n != want.N || tab.far != want.Far {
				tab = steerTab{n: want.N, far: want.Far, ok: 1<<want.N - 1, table: evenTable(want.N)}
				if err := o.EdgeSteerOk.Put(i, tab.ok); err != nil {
					return fmt.Errorf("write steering group %d's usable members: %w", i, err)
				}
				w.steerTabs[i] = tab
			}
			want.Table = tab.table
		}
		if cur.steers[i] == want {
			continue
		}
		if err := o.EdgeSteer.Put(t*bpf.MaxSteer+i, want); err != nil {
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
func (w *Writer) SetSteer(idx uint32, n int, ok uint32, table [bpf.SteerTable]uint8) (bool, error) {
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
		if err := w.o.EdgeSteer.Put(uint32(t)*bpf.MaxSteer+idx, cur); err != nil {
			return true, fmt.Errorf("write steering group %d: %w", idx, err)
		}
		w.slots[t].steers[idx] = cur
	}
	if err := w.o.EdgeSteerOk.Put(idx, ok); err != nil {
		return true, fmt.Errorf("write steering group %d's usable members: %w", idx, err)
	}
	tab.ok, tab.table = ok, table
	w.steerTabs[idx] = tab
	return true, nil
}

// SteerMembers returns steering group idx's member FAR indexes in the
// live generation (nil: no such group).
func (w *Writer) SteerMembers(idx uint32) []uint32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.o.State()
	if err != nil || st.Gen == 0 {
		return nil
	}
	s, ok := w.slots[st.Gen&1].steers[idx]
	if !ok {
		return nil
	}
	return slices.Clone(s.Far[:s.N])
}

// writeRedundant gives g's redundant groups (slot t) what their packets
// need beyond the group: a devmap of their members' interfaces to be
// broadcast to, and at the receiving end each member path's
// de-duplication window (the group's). A devmap goes once neither slot
// has the group.
func (w *Writer) writeRedundant(t uint32, g *Generation) error {
	o := w.o
	cur := w.slots[t]
	dedup := map[uint32]uint32{}
	for i, s := range g.Steers {
		if s.Flags&bpf.SteerRedundant == 0 {
			continue
		}
		var ifs []uint32
		for _, fi := range s.Far[:min(s.N, bpf.SteerMembers)] {
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
		if s, ok := g.Steers[i]; ok && s.Flags&bpf.SteerRedundant != 0 {
			continue
		}
		if s, ok := w.slots[t^1].steers[i]; ok && s.Flags&bpf.SteerRedundant != 0 {
			continue // the live slot still broadcasts through it
		}
		if err := o.EdgeDupTx.Delete(i); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove redundant group %d's devmap: %w", i, err)
		}
		delete(w.dupTx, i)
	}
	for i := range uint32(bpf.MaxPaths) {
		if dedup[i] == cur.dedup[i] {
			continue
		}
		if err := o.EdgePathDedup.Put(t*bpf.MaxPaths+i, dedup[i]); err != nil {
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
func (w *Writer) RedundantInterfaces() map[uint32][]uint32 {
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
func (w *Writer) putDupTx(i uint32, ifs []uint32) error {
	o := w.o
	prog, err := w.dupProgram()
	if err != nil {
		return err
	}
	inner := o.Spec.Maps["edge_dup_tx"].InnerMap.Copy()
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
	if err := o.EdgeDupTx.Put(i, m); err != nil {
		return fmt.Errorf("install redundant group %d's devmap: %w", i, err)
	}
	w.dupTx[i] = ifs
	return nil
}
