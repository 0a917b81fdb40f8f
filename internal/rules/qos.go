// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"maps"
	"slices"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// QoS classes and FlowOpt modules (issue 16). A class keeps its index
// (its edge_qos entry, the class byte of its flows, its counters) while
// it lives; a new one takes the lowest free index.

// putQoS records class q, giving a new one its index.
func (c *Compiler) putQoS(at string, q *config.QoSClass) {
	if _, ok := c.qosIdx[q.ID]; !ok {
		used := map[uint32]bool{}
		for _, i := range c.qosIdx {
			used[i] = true
		}
		idx := uint32(0)
		for idx < bpf.MaxQoS && used[idx] {
			idx++
		}
		if idx == bpf.MaxQoS {
			c.fail(at, fmt.Sprintf("more than %d qos classes", bpf.MaxQoS), config.CodeCapacity)
			return
		}
		setMap(c, c.qosIdx, q.ID, idx, true)
	}
	setMap(c, c.qos, q.ID, *q, true)
}

// removeQoS forgets class id and frees its index.
func (c *Compiler) removeQoS(id uint32) {
	setMap(c, c.qos, id, config.QoSClass{}, false)
	setMap(c, c.qosIdx, id, 0, false)
}

// qosOf is the class index + 1 of a PDR's rule for class id (0: none).
func (c *Compiler) qosOf(id uint32) uint32 {
	if idx, ok := c.qosIdx[id]; ok && id != 0 {
		return idx + 1
	}
	return 0
}

// QoSIndex returns class id's index, false when it has none.
func (c *Compiler) QoSIndex(id uint32) (uint32, bool) {
	idx, ok := c.qosIdx[id]
	return idx, ok
}

// InitialRound is the round a class with rate starts with before the
// agent has counted its flows: as if it had one, which earns the whole
// rate (0: no rate, no limit).
func InitialRound(q config.QoSClass) uint64 {
	e := q.Effective()
	if e.Rate.BPS == 0 || e.Type == config.QoSURLLC {
		return 0
	}
	return max(uint64(e.Quantum)*8e9/e.Rate.BPS, 1)
}

// rebuildQoS recomputes the generation's classes, DSCP classes and
// FlowOpt switches after a batch, undoably.
func (c *Compiler) rebuildQoS() {
	g := c.gen
	oldQ, oldD, oldF, oldK := g.QoS, g.QoSDSCP, g.FlowOpt, g.FlowOptK16
	c.onUndo(func() { g.QoS, g.QoSDSCP, g.FlowOpt, g.FlowOptK16 = oldQ, oldD, oldF, oldK })
	g.QoS, g.QoSDSCP = map[uint32]bpf.QoSClassEntry{}, [64]uint32{}
	for _, id := range slices.Sorted(maps.Keys(c.qos)) {
		q, idx := c.qos[id].Effective(), c.qosIdx[id]
		e := bpf.QoSClassEntry{Id: id, Quantum: q.Quantum, Depth: q.Burst, RoundNs: InitialRound(q)}
		if q.Type != config.QoSURLLC {
			e.Rate = q.Rate.BPS / 8
		}
		if q.Type == config.QoSURLLC {
			e.Flags |= bpf.QoSFlagURLLC
		}
		if q.Over == config.OverDrop {
			e.Flags |= bpf.QoSFlagDrop
		}
		if e.Depth == 0 {
			e.Depth = config.DefaultBurstQuantums * max(q.Quantum, config.DefaultQuantum)
		}
		g.QoS[idx] = e
		for d := range 64 {
			if q.DSCP.Has(uint8(d)) {
				g.QoSDSCP[d] = idx + 1
			}
		}
	}
	g.FlowOpt, g.FlowOptK16 = 0, 0
	for name, m := range c.flowopt {
		if m.Off {
			continue
		}
		switch name {
		case config.ModuleProbe:
			g.FlowOpt |= bpf.FOProbe
			g.FlowOptK16 = uint32(m.Effective().RTTFactor.V*16 + 0.5)
		case config.ModuleFairness:
			g.FlowOpt |= bpf.FOFair
		case config.ModuleRelief:
			g.FlowOpt |= bpf.FORelief
		}
	}
}
