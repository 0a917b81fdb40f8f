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
	// free is at most the lowest free index: Get searches from there.
	free int
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
	for i := a.free; i < len(a.used); i++ {
		if !a.used[i] {
			a.used[i] = true
			a.byID[id] = uint32(i)
			a.free = i + 1
			return uint32(i), true, nil
		}
	}
	a.free = len(a.used)
	return 0, false, fmt.Errorf("%w (%d in use)", ErrStatsFull, len(a.used))
}

// Free releases the index of PDR id, if it has one.
func (a *StatsAlloc) Free(id uint32) {
	if idx, ok := a.byID[id]; ok {
		delete(a.byID, id)
		a.used[idx] = false
		a.free = min(a.free, int(idx))
	}
}

// put gives id the index idx again (undoing a Free).
func (a *StatsAlloc) put(id, idx uint32) {
	a.byID[id] = idx
	a.used[idx] = true
}

// Retain frees the indexes of every PDR not in live.
func (a *StatsAlloc) Retain(live map[uint32]bool) {
	for id := range a.byID {
		if !live[id] {
			a.Free(id)
		}
	}
}

func (a *StatsAlloc) clone() *StatsAlloc {
	c := &StatsAlloc{byID: make(map[uint32]uint32, len(a.byID)), used: append([]bool(nil), a.used...), free: a.free}
	for id, idx := range a.byID {
		c.byID[id] = idx
	}
	return c
}

// Allocs are the stable indexes of one dataplane: statistics per PDR and
// per path (a path's index is also its place in the path table), and the
// FAR table's places.
type Allocs struct {
	PDR, Path, FAR *StatsAlloc
	// Service gives each service its place (tag) among bpf.MaxServices.
	Service *StatsAlloc
	// Members seeds each service's backend counter indexes (service id ->
	// FAR id -> index below bpf.ReplyMember), as a restarted agent found
	// them; read when a service is first compiled.
	Members map[uint32]map[uint32]uint32
}

// NewAllocs returns allocators sized for l, seeded with the live
// assignments (id -> index) of PDRs and paths.
func NewAllocs(rules uint32, pdrSeed, pathSeed map[uint32]uint32) Allocs {
	return Allocs{PDR: NewStatsAlloc(rules, pdrSeed), Path: NewStatsAlloc(bpf.MaxPaths, pathSeed), FAR: NewStatsAlloc(rules, nil),
		Service: NewStatsAlloc(bpf.MaxServices, nil)}
}

func (a Allocs) clone() Allocs {
	return Allocs{PDR: a.PDR.clone(), Path: a.Path.clone(), FAR: a.FAR.clone(), Service: a.Service.clone(), Members: a.Members}
}
