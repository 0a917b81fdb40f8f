// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"maps"
	"slices"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Steering groups: every LBR of a steering algorithm that a steer FAR
// names gets an index (below bpf.MaxSteer, kept while some steer FAR
// names it), its members' FAR indexes go into gen.Steers at that index,
// and each steer FAR holds the index (Far.Path). Groups are few: they
// are rebuilt whole after every batch, as paths are compared whole.

// rebuildSteering recomputes the steering groups and the steer FARs'
// indexes after a batch, undoably.
func (c *Compiler) rebuildSteering() {
	b := &c.lb
	want := map[uint32]bool{}
	for _, f := range b.fars {
		if f.Action == config.ActionSteer {
			want[f.LBR] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.steerIdx)) {
		if !want[id] {
			setMap(c, c.steerIdx, id, 0, false)
		}
	}
	used := map[uint32]bool{}
	for _, idx := range c.steerIdx {
		used[idx] = true
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if _, ok := c.steerIdx[id]; ok {
			continue
		}
		idx := uint32(0)
		for idx < bpf.MaxSteer && used[idx] {
			idx++
		}
		if idx == bpf.MaxSteer {
			c.fail("lbrs", fmt.Sprintf("more than %d steering groups in use", bpf.MaxSteer), config.CodeCapacity)
			return
		}
		used[idx] = true
		setMap(c, c.steerIdx, id, idx, true)
	}
	steers := map[uint32]bpf.Steer{}
	for id, idx := range c.steerIdx {
		l, ok := b.lbrs[id]
		if !ok || !config.Steering(l.Algorithm) {
			continue // the config's checks refuse it first
		}
		s := bpf.Steer{N: uint32(min(len(l.Members), bpf.SteerMembers))}
		if l.PerPacket || l.Algorithm == config.AlgorithmWRR || l.Algorithm == config.AlgorithmCMon {
			s.Flags |= bpf.SteerPerPacket
		}
		for i, m := range l.Members[:s.N] {
			s.Far[i] = c.fars[m.FAR]
		}
		if l.Algorithm == config.AlgorithmRedundant {
			s.Flags |= bpf.SteerRedundant
			if !c.checkRedundant(id, l, s) {
				continue
			}
		}
		steers[idx] = s
	}
	old := c.gen.Steers
	c.gen.Steers = steers
	c.onUndo(func() { c.gen.Steers = old })
	for fid, f := range b.fars {
		if f.Action != config.ActionSteer {
			continue
		}
		idx, ok := c.fars[fid]
		if !ok {
			continue
		}
		far := c.gen.FARs[idx]
		if g := c.steerIdx[f.LBR]; far.Path != g {
			far.Path = g
			c.setFAR(idx, far, true)
		}
	}
}

// checkRedundant tells whether redundant group l (compiled into s) can
// send: its copies are made by a devmap broadcast, one per interface, and
// rewritten for each member's path, so every member's path must leave by
// an interface of its own and carry a key if another does (the GRE
// header keeps its length); and none numbers its own packets (seq), as
// the group's numbers are what the receiving end de-duplicates by.
func (c *Compiler) checkRedundant(id uint32, l config.LBR, s bpf.Steer) bool {
	at := c.lb.lbrAt[id]
	if at == "" {
		at = "lbrs"
	}
	ifs := map[uint32]int{}
	keyed := -1
	ok := true
	for i := range s.N {
		mp := fmt.Sprintf("%s.members[%d].far", at, i)
		far, have := c.gen.FARs[s.Far[i]]
		p, havePath := c.gen.Paths[far.Path]
		if !have || !havePath {
			ok = false // the FAR's or path's own errors say why
			continue
		}
		if first, dup := ifs[p.Ifindex]; dup {
			c.fail(mp, fmt.Sprintf("path %d leaves by the interface of members[%d]'s path; a redundant group sends one copy per interface", p.Id, first), config.CodeInvalid)
			ok = false
		} else {
			ifs[p.Ifindex] = int(i)
		}
		if p.Flags&bpf.PathFlagSeq != 0 {
			c.fail(mp, fmt.Sprintf("path %d numbers its own packets (seq); a redundant group's paths carry the group's numbers, which the receiving gateway de-duplicates by", p.Id), config.CodeInvalid)
			ok = false
		}
		k := int(p.Flags & bpf.PathFlagKey)
		if keyed >= 0 && k != keyed {
			has := map[bool]string{true: "a key and members[0]'s path has none", false: "no key and members[0]'s path has one"}[k != 0]
			c.fail(mp, fmt.Sprintf("path %d has %s; a redundant group's paths all have one or none", p.Id, has), config.CodeInvalid)
			ok = false
		}
		if keyed < 0 {
			keyed = k
		}
	}
	return ok
}

// SteerGroups returns the index of every steering group in use, by its
// LBR's id.
func (c *Compiler) SteerGroups() map[uint32]uint32 { return maps.Clone(c.steerIdx) }
