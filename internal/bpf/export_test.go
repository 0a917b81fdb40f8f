// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"fmt"
)

// ClangFlags are the flags go:generate compiles the dataplane with.
var ClangFlags = clangFlags

// FlowWays returns a copy of every entry of o's flow table, with
// whether it had a packet after its first.
func (o *Object) FlowWays() ([]FTWay, []bool, error) {
	t, err := o.FlowTable()
	if err != nil {
		return nil, nil, err
	}
	defer t.Unmap()
	var ws []FTWay
	var hot []bool
	t.Each(func(w *FTWay, h bool) bool {
		ws = append(ws, *w)
		hot = append(hot, h)
		return true
	})
	return ws, hot, nil
}

// usedWays calls fn with each used way of o's flow table (its bucket's
// line, the way's index and the way, all in the mapped table) until fn
// returns an error.
func (o *Object) usedWays(fn func(b uint32, m *FTBucket, i uint32, w *FTWay) error) error {
	t, err := o.FlowTable()
	if err != nil {
		return err
	}
	defer t.Unmap()
	for b := range t.Buckets {
		m := t.Bucket(b)
		for i := range uint32(FTWays) {
			if m.Tag[i] == 0 {
				continue
			}
			if err := fn(b, m, i, t.Way(b, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ClearFlows empties the ways of o's flow table whose entry drop
// chooses, as eviction would, and returns how many.
func (o *Object) ClearFlows(drop func(*FTWay) bool) (int, error) {
	n := 0
	err := o.usedWays(func(_ uint32, m *FTBucket, i uint32, w *FTWay) error {
		if drop(w) {
			m.Tag[i] = 0
			*w = FTWay{}
			n++
		}
		return nil
	})
	return n, err
}

// FTBucket is the flow-table bucket o's hash places key k in.
func (o *Object) FTBucket(k FlowKey) uint32 {
	return uint32(FTHash(o.Secret, &k)) & (o.EdgeFtMeta.MaxEntries() - 1)
}

// CheckFlowPlaces fails unless every entry of o's flow table sits in
// the bucket FTHash gives its key, under its tag: the agent's mirror of
// the dataplane's hash places what an upgrade carries where packets
// look.
func (o *Object) CheckFlowPlaces() (int, error) {
	n := 0
	err := o.usedWays(func(b uint32, m *FTBucket, i uint32, w *FTWay) error {
		h := FTHash(o.Secret, &w.K)
		if uint32(h)&(o.EdgeFtMeta.MaxEntries()-1) != b || uint32(h>>32)|1 != m.Tag[i] {
			return fmt.Errorf("flow %+v in bucket %d under tag %#x; FTHash places it under %#x", w.K, b, m.Tag[i], uint32(h>>32)|1)
		}
		n++
		return nil
	})
	return n, err
}
