// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// slot is what one half of the double-buffered maps holds, as the writer
// last wrote it.
type slot struct {
	rules    map[bpf.RuleKey]bpf.Rule // bpf.RuleKey.Group without the slot base
	fars     map[uint32]bpf.Far
	groups   []bpf.Group
	paths    map[uint32]bpf.Path
	secrets  map[uint32]bpf.ProbeSecret // edge_path_auth by path index (none left out)
	decaps   map[bpf.DecapKey]bpf.Decap
	services map[bpf.SvcKey]bpf.Svc
	backends map[bpf.SvcKey]bpf.NATBackend  // NATBackends
	index    *[bpf.SvcIndexSize]bpf.SvcSlot // nil: not known
	tables   [bpf.MaxServices]*bpf.LBTable  // nil: not known
	steers   map[uint32]bpf.Steer           // by steering group index
	dedup    map[uint32]uint32              // edge_path_dedup by path index (0s left out)
	// qos and qosDSCP are edge_qos's and edge_qos_dscp's entries of the
	// slot, once qosKnown (written by this writer).
	qos      [bpf.MaxQoS]bpf.QoSClassEntry
	qosDSCP  [64]uint32
	qosKnown bool
}

// readSlot reads what slot t of the maps holds.
func (w *Writer) readSlot(t, ngroups uint32) (*slot, error) {
	s := &slot{rules: map[bpf.RuleKey]bpf.Rule{}, fars: map[uint32]bpf.Far{}, paths: map[uint32]bpf.Path{}, secrets: map[uint32]bpf.ProbeSecret{}, decaps: map[bpf.DecapKey]bpf.Decap{},
		services: map[bpf.SvcKey]bpf.Svc{}, backends: map[bpf.SvcKey]bpf.NATBackend{}, steers: map[uint32]bpf.Steer{},
		dedup: map[uint32]uint32{}}
	for i := uint32(0); i < bpf.MaxPaths; i++ {
		var win uint32
		if err := w.o.EdgePathDedup.Lookup(t*bpf.MaxPaths+i, &win); err != nil {
			return nil, fmt.Errorf("read path %d's de-duplication window: %w", i, err)
		}
		if win != 0 {
			s.dedup[i] = win
		}
	}
	for i := uint32(0); i < bpf.MaxSteer; i++ {
		var st bpf.Steer
		if err := w.o.EdgeSteer.Lookup(t*bpf.MaxSteer+i, &st); err != nil {
			return nil, fmt.Errorf("read steering group %d: %w", i, err)
		}
		if st.N != 0 {
			s.steers[i] = st
		}
	}
	stride := w.o.Limits.FARStride()
	var k bpf.RuleKey
	var v bpf.Rule
	it := w.o.EdgeRules.Iterate()
	for it.Next(&k, &v) {
		if k.Group/bpf.MaxGroups == t {
			k.Group %= bpf.MaxGroups
			s.rules[k] = v
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	// FARs: the array holds both slots (FARStride each); read it in
	// batches, not one lookup per index.
	fk, fv := make([]uint32, 4096), make([]bpf.Far, 4096)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := w.o.EdgeFars.BatchLookup(&cursor, fk, fv, nil)
		for i := range n {
			if fk[i]/stride == t && fv[i] != (bpf.Far{}) {
				s.fars[fk[i]%stride] = fv[i]
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read fars: %w", err)
		}
	}
	for i := uint32(0); i < min(ngroups, bpf.MaxGroups); i++ {
		var g bpf.Group
		if err := w.o.EdgeGroups.Lookup(t*bpf.MaxGroups+i, &g); err != nil {
			return nil, fmt.Errorf("read group %d: %w", i, err)
		}
		s.groups = append(s.groups, g)
	}
	for i := uint32(0); i < bpf.MaxPaths; i++ {
		var p bpf.Path
		if err := w.o.EdgePaths.Lookup(t*bpf.MaxPaths+i, &p); err != nil {
			return nil, fmt.Errorf("read path %d: %w", i, err)
		}
		if p.Id != 0 {
			s.paths[i] = p
		}
		var a bpf.ProbeSecret
		if err := w.o.EdgePathAuth.Lookup(t*bpf.MaxPaths+i, &a); err != nil {
			return nil, fmt.Errorf("read path %d's probe secret: %w", i, err)
		}
		if a != (bpf.ProbeSecret{}) {
			s.secrets[i] = a
		}
	}
	var dk bpf.DecapKey
	var dv bpf.Decap
	dit := w.o.EdgeDecaps.Iterate()
	for dit.Next(&dk, &dv) {
		if dk.Slot == t {
			s.decaps[dk] = dv
		}
	}
	if err := dit.Err(); err != nil {
		return nil, fmt.Errorf("read decaps: %w", err)
	}
	var sk bpf.SvcKey
	var sv bpf.Svc
	sit := w.o.EdgeServices.Iterate()
	for sit.Next(&sk, &sv) {
		if sk.Slot != t {
			continue
		}
		// Its table is left unknown (nil): the first commit writes it
		// whole, which costs less than reading it back.
		s.services[sk] = sv
	}
	if err := sit.Err(); err != nil {
		return nil, fmt.Errorf("read services: %w", err)
	}
	var bv bpf.NATBackend
	bit := w.o.EdgeNatBackends.Iterate()
	for bit.Next(&sk, &bv) {
		if sk.Slot == t {
			s.backends[sk] = bv
		}
	}
	if err := bit.Err(); err != nil {
		return nil, fmt.Errorf("read nat backends: %w", err)
	}
	return s, nil
}
