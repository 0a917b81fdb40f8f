// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf/mapconv"
)

// OpenSpec is Open of spec, a build of the dataplane's object other than
// the embedded one (a test's), with no pins.
func OpenSpec(spec *ebpf.CollectionSpec, l Limits) (*Dataplane, error) {
	if err := ApplyLimits(spec, l); err != nil {
		return nil, err
	}
	return open(spec, l, "")
}

// ClangFlags are the flags go:generate compiles the dataplane with.
var ClangFlags = clangFlags

// FlowWays returns a copy of every entry of dp's flow table, with
// whether it had a packet after its first.
func (dp *Dataplane) FlowWays() ([]FTWay, []bool, error) {
	t, err := dp.flowTable()
	if err != nil {
		return nil, nil, err
	}
	defer t.unmap()
	var ws []FTWay
	var hot []bool
	t.each(func(w *FTWay, h bool) bool {
		ws = append(ws, *w)
		hot = append(hot, h)
		return true
	})
	return ws, hot, nil
}

// usedWays calls fn with each used way of dp's flow table (its bucket's
// line, the way's index and the way, all in the mapped table) until fn
// returns an error.
func (dp *Dataplane) usedWays(fn func(b uint32, m *FTBucket, i uint32, w *FTWay) error) error {
	t, err := dp.flowTable()
	if err != nil {
		return err
	}
	defer t.unmap()
	for b := range t.buckets {
		m := t.bucket(b)
		for i := range uint32(FTWays) {
			if m.Tag[i] == 0 {
				continue
			}
			if err := fn(b, m, i, t.way(b, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ClearFlows empties the ways of dp's flow table whose entry drop
// chooses, as eviction would, and returns how many.
func (dp *Dataplane) ClearFlows(drop func(*FTWay) bool) (int, error) {
	n := 0
	err := dp.usedWays(func(_ uint32, m *FTBucket, i uint32, w *FTWay) error {
		if drop(w) {
			m.Tag[i] = 0
			*w = FTWay{}
			n++
		}
		return nil
	})
	return n, err
}

// FTBucket is the flow-table bucket dp's hash places key k in.
func (dp *Dataplane) FTBucket(k FlowKey) uint32 {
	return uint32(FTHash(dp.secret, &k)) & (dp.EdgeFtMeta.MaxEntries() - 1)
}

// CheckFlowPlaces fails unless every entry of dp's flow table sits in
// the bucket FTHash gives its key, under its tag: the agent's mirror of
// the dataplane's hash places what an upgrade carries where packets
// look.
func (dp *Dataplane) CheckFlowPlaces() (int, error) {
	n := 0
	err := dp.usedWays(func(b uint32, m *FTBucket, i uint32, w *FTWay) error {
		h := FTHash(dp.secret, &w.K)
		if uint32(h)&(dp.EdgeFtMeta.MaxEntries()-1) != b || uint32(h>>32)|1 != m.Tag[i] {
			return fmt.Errorf("flow %+v in bucket %d under tag %#x; FTHash places it under %#x", w.K, b, m.Tag[i], uint32(h>>32)|1)
		}
		n++
		return nil
	})
	return n, err
}

// CarryLegacyConns places the connections of a legacy connection table
// (edge_conns of the builds before the flow table) in dp's flow table,
// as an upgrade from such a build does.
func (dp *Dataplane) CarryLegacyConns(conns *ebpf.Map) (int, int, error) {
	c, err := conns.Clone()
	if err != nil {
		return 0, 0, err
	}
	r, err := mapconv.BTFCache{}.Open(c, legacyConns)
	if err != nil {
		c.Close()
		return 0, 0, err
	}
	defer c.Close()
	t, err := dp.flowTable()
	if err != nil {
		return 0, 0, err
	}
	defer t.unmap()
	return carryConns(r, t, farGeometry{}, 0)
}
