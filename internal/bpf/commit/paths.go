// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// writePaths makes slot t's paths and decap entries those of g.
func (w *Writer) writePaths(t uint32, g *Generation) error {
	o := w.o
	cur := w.slots[t]
	// Removed paths are zeroed (a zero id is an empty place for the
	// writer's own reload).
	for i := range cur.paths {
		if _, ok := g.Paths[i]; !ok {
			if err := o.EdgePaths.Put(t*bpf.MaxPaths+i, bpf.Path{}); err != nil {
				return fmt.Errorf("clear path %d: %w", i, err)
			}
			delete(cur.paths, i)
		}
	}
	for i, p := range g.Paths {
		if old, ok := cur.paths[i]; ok && old == p {
			continue
		}
		if err := o.EdgePaths.Put(t*bpf.MaxPaths+i, p); err != nil {
			return fmt.Errorf("write path %d: %w", i, err)
		}
		cur.paths[i] = p
	}

	// Secrets go with their paths, into the same slot; a path without
	// one (insecure) has its place zeroed.
	for i := range cur.secrets {
		if _, ok := g.ProbeSecrets[i]; !ok {
			if err := o.EdgePathAuth.Put(t*bpf.MaxPaths+i, bpf.ProbeSecret{}); err != nil {
				return fmt.Errorf("clear path %d's probe secret: %w", i, err)
			}
			delete(cur.secrets, i)
		}
	}
	for i, a := range g.ProbeSecrets {
		if old, ok := cur.secrets[i]; ok && old == a {
			continue
		}
		if err := o.EdgePathAuth.Put(t*bpf.MaxPaths+i, a); err != nil {
			return fmt.Errorf("write path %d's probe secret: %w", i, err)
		}
		cur.secrets[i] = a
	}

	want := make(map[bpf.DecapKey]bpf.Decap, len(g.Decaps))
	for k, v := range g.Decaps {
		k.Slot = t
		want[k] = v
	}
	for k := range cur.decaps {
		if _, ok := want[k]; !ok {
			if err := o.EdgeDecaps.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete decap entry: %w", err)
			}
			delete(cur.decaps, k)
		}
	}
	for k, v := range want {
		if old, ok := cur.decaps[k]; ok && old == v {
			continue
		}
		if err := o.EdgeDecaps.Put(k, v); err != nil {
			return fmt.Errorf("write decap entry: %w", err)
		}
		cur.decaps[k] = v
	}
	return nil
}

// resetPath zeroes a path statistics index's counters and sequence number.
func (w *Writer) resetPath(idx uint32) error {
	zero := make([]bpf.Ctr, ebpf.MustPossibleCPU())
	for _, k := range []uint32{2 * idx, 2*idx + 1} {
		if err := w.o.EdgePathStats.Put(k, zero); err != nil {
			return fmt.Errorf("reset path stats %d: %w", idx, err)
		}
	}
	if err := w.o.EdgePathSeq.Put(idx, uint32(0)); err != nil {
		return fmt.Errorf("reset path sequence %d: %w", idx, err)
	}
	return nil
}
