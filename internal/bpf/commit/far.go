// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"fmt"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// writeFARs brings slot t's FARs to g's: changed ones written, removed
// ones zeroed (those keys lists, or all).
func (w *Writer) writeFARs(t uint32, g *Generation, keys *Dirty) error {
	cur := w.slots[t]
	fbase := t * w.o.Limits.FARStride()
	var fk []uint32
	var fv []bpf.Far
	change := func(i uint32) {
		f, ok := g.FARs[i]
		if old, had := cur.fars[i]; ok == had && old == f {
			return
		}
		fk, fv = append(fk, fbase+i), append(fv, f)
	}
	if keys != nil {
		for i := range keys.FARs {
			change(i)
		}
	} else {
		for i := range cur.fars {
			change(i)
		}
		for i := range g.FARs {
			if _, had := cur.fars[i]; !had {
				change(i)
			}
		}
	}
	if len(fk) > 0 {
		if _, err := w.o.EdgeFars.BatchUpdate(fk, fv, nil); err != nil {
			return fmt.Errorf("write %d fars: %w", len(fk), err)
		}
	}
	for j, k := range fk {
		if i := k - fbase; fv[j] == (bpf.Far{}) {
			delete(cur.fars, i)
		} else {
			cur.fars[i] = fv[j]
		}
	}
	return nil
}
