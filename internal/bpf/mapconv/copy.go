// SPDX-License-Identifier: Apache-2.0

package mapconv

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// Copy copies one map's entries into the map that replaces it.
type Copy struct {
	Name     string
	from, to *Map
	// Key and Value convert the old layout's keys and values.
	Key, Value *Conversion
	// RemapKey, when set, moves a converted key where the new map holds
	// it (what holds a FAR's place moves with the rules limit); false
	// leaves the entry out.
	RemapKey func(k []byte) bool
}

// NewCopy plans the copy of from's entries into to, named name in
// errors and logs.
func NewCopy(name string, from, to *Map) (*Copy, error) {
	mc := &Copy{Name: name, from: from, to: to}
	var err error
	if mc.Key, err = ConvFor(from, to, from.KeyType, to.KeyType, from.KeySize(), to.KeySize()); err != nil {
		return nil, fmt.Errorf("map %s key: %w", name, err)
	}
	if mc.Value, err = ConvFor(from, to, from.ValueType, to.ValueType, from.ValueSize(), to.ValueSize()); err != nil {
		return nil, fmt.Errorf("map %s value: %w", name, err)
	}
	return mc, nil
}

// ConvFor plans a key's or value's Conversion; without BTF on either side
// only the same size is taken, as it is.
func ConvFor(from, to *Map, ft, tt btf.Type, fs, ts uint32) (*Conversion, error) {
	if from.ValueType == nil || to.ValueType == nil || ft == nil || tt == nil {
		if fs != ts {
			return nil, fmt.Errorf("%d bytes, now %d, and no BTF to convert by", fs, ts)
		}
		return &Conversion{FromSize: fs, ToSize: ts, Same: true}, nil
	}
	return NewConversion(ft, tt)
}

// Convert turns old entries into new ones, leaving out those the new map
// has no place for.
func (mc *Copy) Convert(es []Entry) []Entry {
	out := make([]Entry, 0, len(es))
	for _, e := range es {
		k := make([]byte, mc.to.KeySize())
		mc.Key.Convert(k, e.Key)
		if mc.RemapKey != nil && !mc.RemapKey(k) {
			continue
		}
		if mc.to.IsArray() && UintAt(k, 4) >= uint64(mc.to.MaxEntries()) {
			continue
		}
		ne := Entry{Key: k}
		for _, v := range e.Vals {
			nv := make([]byte, mc.to.ValueSize())
			mc.Value.Convert(nv, v)
			ne.Vals = append(ne.Vals, nv)
		}
		out = append(out, ne)
	}
	return out
}

// IsArray tells whether r is an array (of one value or one per CPU):
// its keys are indexes below its size.
func (r *Map) IsArray() bool {
	return r.Type() == ebpf.Array || r.Type() == ebpf.PerCPUArray
}

// CopyMissing copies the old entries the new map lacks (those the old
// program added since the last copy), keeping those it has: the new
// program may have updated them since.
func (mc *Copy) CopyMissing() (int, error) {
	es, err := mc.from.ReadAll()
	if err != nil {
		return 0, err
	}
	have, err := mc.to.ReadAll()
	if err != nil {
		return 0, err
	}
	known := make(map[string]bool, len(have))
	for _, e := range have {
		known[string(e.Key)] = true
	}
	var add []Entry
	for _, e := range mc.Convert(es) {
		if !known[string(e.Key)] {
			add = append(add, e)
		}
	}
	return len(add), mc.to.Write(add, ebpf.UpdateNoExist)
}

// AddDeltas adds to the new counters what the old ones counted since then
// (their first copy). The new program counts into them meanwhile, per
// CPU and without atomics, so a packet it counts on that CPU between this
// read and write is lost: a few at most, in the microseconds each
// entry's update takes.
func (mc *Copy) AddDeltas(then map[string]Entry) error {
	now, err := mc.from.ReadAll()
	if err != nil {
		return err
	}
	for _, e := range now {
		t, ok := then[string(e.Key)]
		if ok && slices.EqualFunc(e.Vals, t.Vals, bytes.Equal) {
			continue
		}
		if !ok {
			t = Entry{Key: e.Key}
			for range e.Vals {
				t.Vals = append(t.Vals, make([]byte, mc.from.ValueSize()))
			}
		}
		k := mc.Convert([]Entry{{Key: e.Key, Vals: nil}})
		if len(k) == 0 {
			continue
		}
		cur := Entry{Key: k[0].Key}
		if mc.to.PerCPU {
			err = mc.to.Map.Lookup(cur.Key, &cur.Vals)
		} else {
			var v []byte
			err = mc.to.Map.Lookup(cur.Key, &v)
			cur.Vals = [][]byte{v}
		}
		if err != nil {
			return fmt.Errorf("read map %s: %w", mc.Name, err)
		}
		changed := false
		for c := range min(len(cur.Vals), len(e.Vals)) {
			if mc.Value.AddDelta(cur.Vals[c], e.Vals[c], t.Vals[c]) {
				changed = true
			}
		}
		if changed {
			if err := mc.to.Put(cur); err != nil {
				return err
			}
		}
	}
	return nil
}
