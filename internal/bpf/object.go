// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// Maps are the object's maps, one field each (generated from
// bpf/edge_maps.h).
type Maps = edgeMaps

// Object is the dataplane's object with its maps, created or adopted
// from pins: the maps, the spec the object's programs load from (map
// sizes, load-time constants and the hash secret applied) and the limits
// that sized them. It is what the rule writer, the readers and the
// loader share; it loads no program of its own.
type Object struct {
	Maps
	Spec   *ebpf.CollectionSpec
	Limits Limits
	// Secret keys the flows' hashes: the programs' (set into Spec) and
	// Go's mirror of them (FTHash, FOPlace).
	Secret HashSecret
}

// LoadObject creates spec's maps (l applied to spec already), or adopts
// those opts names (pins, replacements), and takes the hash secret kept
// in edge_secret, drawing one into a map just created, as the key of
// every program loaded from spec.
func LoadObject(spec *ebpf.CollectionSpec, l Limits, opts *ebpf.CollectionOptions) (*Object, error) {
	o := &Object{Spec: spec, Limits: l.WithDefaults()}
	if err := spec.LoadAndAssign(&o.Maps, opts); err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("%w: %w", ErrIncompatible, err)
		}
		return nil, fmt.Errorf("load maps: %w", err)
	}
	s, _, err := ensureSecret(o.EdgeSecret)
	if err == nil {
		o.Secret = s
		err = applySecret(spec, s)
	}
	if err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// ApplyTo sets o's map sizes, load-time constants and hash secret on
// spec, an object built from the same headers (the benchmark wrappers)
// to be loaded against o's maps: it places flows where o's programs do.
func (o *Object) ApplyTo(spec *ebpf.CollectionSpec) error {
	if err := ApplyLimits(spec, o.Limits); err != nil {
		return err
	}
	return applySecret(spec, o.Secret)
}

// LoadApart loads into to (a struct of tagged programs, as
// LoadAndAssign takes) programs of o's object against o's maps: the XDP
// program, and those an agent loads apart from it (it may adopt the XDP
// program from its pin instead). what names them in the error, with the
// verifier's log if it refused them.
func (o *Object) LoadApart(to any, what string) error {
	opts := &ebpf.CollectionOptions{MapReplacements: o.MapReplacements()}
	if err := o.Spec.LoadAndAssign(to, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("load %s: %+v", what, ve)
		}
		return fmt.Errorf("load %s: %w", what, err)
	}
	return nil
}

// privateMaps are the maps a program loaded apart from the XDP program
// (the redundant copies', relief's CPU program, the probe sender, the
// benchmark wrappers) gets its own of: per-CPU scratch and caches no
// other program reads. Every other map of the object is shared.
var privateMaps = map[string]bool{
	edgeMapEdgeCtx:        true,
	edgeMapEdgeIcmpBucket: true,
	edgeMapEdgeDstNh:      true,
}

// MapReplacements returns o's maps by name, for loading other programs
// (benchmark wrappers) against them: every map of the object but the
// private ones, so a map a stage adds to bpf/edge_maps.h is shared
// without a line here.
func (o *Object) MapReplacements() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(&o.Maps).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("ebpf")
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && name != "" && !privateMaps[name] {
			out[name] = m
		}
	}
	return out
}

// Unpin removes the maps' pins; the maps live on while something holds them.
func (o *Object) Unpin() error {
	var errs []error
	for name, m := range o.MapReplacements() {
		if err := m.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Close releases the maps' file descriptors; pinned maps stay in the
// kernel.
func (o *Object) Close() error { return o.Maps.Close() }

// LoadSpec returns the embedded object's spec as compiled: no limits or
// secret applied (what its maps' layouts are).
func LoadSpec() (*ebpf.CollectionSpec, error) {
	spec, err := loadEdge()
	if err != nil {
		return nil, fmt.Errorf("load embedded object: %w", err)
	}
	return spec, nil
}

// State reads the live global state.
func (o *Object) State() (State, error) {
	var st State
	if err := o.EdgeGlobal.Lookup(uint32(0), &st); err != nil {
		return st, fmt.Errorf("read state: %w", err)
	}
	return st, nil
}

// SumCtr sums over the CPUs the counter at index idx of m, a per-CPU
// map of struct edge_ctr.
func SumCtr(m *ebpf.Map, idx uint32) (dataplane.Counter, error) {
	var per []Ctr
	var c dataplane.Counter
	if err := m.Lookup(idx, &per); err != nil {
		return c, err
	}
	for _, v := range per {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
	}
	return c, nil
}
