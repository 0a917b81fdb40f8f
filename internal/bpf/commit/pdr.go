// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// PDRs as the classifier holds them: rule entries by masked key in
// their mask group, the groups in search order, and the counters of
// each statistics index.

// writeRules brings slot t's classifier entries to g's (see writeSlot).
func (w *Writer) writeRules(t uint32, g *Generation, keys *Dirty) error {
	o := w.o
	cur := w.slots[t].rules
	base := t * bpf.MaxGroups
	var delKeys, putKeys []bpf.RuleKey
	var putVals []bpf.Rule
	change := func(k bpf.RuleKey) {
		v, want := g.Rules[k]
		old, has := cur[k]
		mk := k
		mk.Group += base
		switch {
		case !want && has:
			delKeys = append(delKeys, mk)
		case want && (!has || old != v):
			putKeys, putVals = append(putKeys, mk), append(putVals, v)
		}
	}
	if keys != nil {
		for k := range keys.Rules {
			change(k)
		}
	} else {
		for k := range cur {
			if _, ok := g.Rules[k]; !ok {
				change(k)
			}
		}
		for k := range g.Rules {
			change(k)
		}
	}
	if len(delKeys) > 0 {
		if _, err := o.EdgeRules.BatchDelete(delKeys, nil); err != nil {
			// Fall back to one by one: a key may already be gone.
			for _, k := range delKeys {
				if err := o.EdgeRules.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("delete rule: %w", err)
				}
			}
		}
	}
	for _, k := range delKeys {
		k.Group -= base
		delete(cur, k)
	}
	if len(putKeys) > 0 {
		if _, err := o.EdgeRules.BatchUpdate(putKeys, putVals, nil); err != nil {
			return fmt.Errorf("write %d rules: %w", len(putKeys), err)
		}
	}
	for i, k := range putKeys {
		k.Group -= base
		cur[k] = putVals[i]
	}
	return nil
}

// writeGroups makes slot t's mask groups g's, in search order.
func (w *Writer) writeGroups(t uint32, g *Generation) error {
	cur := w.slots[t]
	for i, grp := range g.Groups {
		if i < len(cur.groups) && cur.groups[i] == grp {
			continue
		}
		if err := w.o.EdgeGroups.Put(t*bpf.MaxGroups+uint32(i), grp); err != nil {
			return fmt.Errorf("write group %d: %w", i, err)
		}
	}
	cur.groups = slices.Clone(g.Groups)
	return nil
}

// ResetPDRStats zeroes the per-CPU counters at stats index idx, before the
// index is given to a new PDR.
func (w *Writer) ResetPDRStats(idx uint32) error {
	zero := make([]bpf.Ctr, ebpf.MustPossibleCPU())
	if err := w.o.EdgePdrStats.Put(idx, zero); err != nil {
		return fmt.Errorf("reset pdr stats %d: %w", idx, err)
	}
	return nil
}
