// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"errors"
	"fmt"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// ErrStatsFull is returned when every statistics index is in use.
var ErrStatsFull = errors.New("no free statistics index")

// StatsAlloc hands out per-PDR statistics indexes that stay with a PDR id
// across generations and agent restarts, so its counters continue.
type StatsAlloc struct {
	byID map[uint32]uint32
	used []bool
}

// NewStatsAlloc returns an allocator over [0, capacity), seeded with the
// assignments found in the live dataplane (PDR id -> index).
func NewStatsAlloc(capacity uint32, seed map[uint32]uint32) *StatsAlloc {
	a := &StatsAlloc{byID: map[uint32]uint32{}, used: make([]bool, capacity)}
	for id, idx := range seed {
		if idx < capacity {
			a.byID[id] = idx
			a.used[idx] = true
		}
	}
	return a
}

// Get returns the index of PDR id, allocating one if it has none.
func (a *StatsAlloc) Get(id uint32) (idx uint32, isNew bool, err error) {
	if idx, ok := a.byID[id]; ok {
		return idx, false, nil
	}
	for i, u := range a.used {
		if !u {
			a.used[i] = true
			a.byID[id] = uint32(i)
			return uint32(i), true, nil
		}
	}
	return 0, false, fmt.Errorf("%w (%d in use)", ErrStatsFull, len(a.used))
}

// Retain frees the indexes of every PDR not in live.
func (a *StatsAlloc) Retain(live map[uint32]bool) {
	for id, idx := range a.byID {
		if !live[id] {
			delete(a.byID, id)
			a.used[idx] = false
		}
	}
}

func (a *StatsAlloc) clone() *StatsAlloc {
	c := &StatsAlloc{byID: make(map[uint32]uint32, len(a.byID)), used: append([]bool(nil), a.used...)}
	for id, idx := range a.byID {
		c.byID[id] = idx
	}
	return c
}

// Allocs are the stable statistics indexes of one dataplane: per PDR and
// per path.
type Allocs struct {
	PDR, Path *StatsAlloc
}

// NewAllocs returns allocators sized for l, seeded with the live
// assignments (id -> index) of PDRs and paths.
func NewAllocs(rules uint32, pdrSeed, pathSeed map[uint32]uint32) Allocs {
	return Allocs{PDR: NewStatsAlloc(rules, pdrSeed), Path: NewStatsAlloc(bpf.MaxPaths, pathSeed)}
}

func (a Allocs) clone() Allocs {
	return Allocs{PDR: a.PDR.clone(), Path: a.Path.clone()}
}
