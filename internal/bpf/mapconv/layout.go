// SPDX-License-Identifier: Apache-2.0

package mapconv

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// Differs says why a map pinned by another build cannot serve as ms
// ("" when it can): another type, size or flags, or a key or value whose
// members are not where this build has them.
func (bc BTFCache) Differs(ms *ebpf.MapSpec, r *Map) (string, error) {
	if err := ms.Compatible(r.Map); err != nil {
		return strings.TrimSuffix(err.Error(), ": "+ebpf.ErrMapIncompatible.Error()), nil
	}
	return bc.LayoutDiff(ms, r)
}

// LayoutDiff says why the entries of a pinned map are not laid out as
// ms's ("" when they are), whatever the map's size.
func (bc BTFCache) LayoutDiff(ms *ebpf.MapSpec, r *Map) (string, error) {
	if r.KeySize() != ms.KeySize || r.ValueSize() != ms.ValueSize {
		return fmt.Sprintf("key and value of %d and %d bytes, this build's %d and %d", r.KeySize(), r.ValueSize(), ms.KeySize, ms.ValueSize), nil
	}
	if r.ValueType == nil || ms.Value == nil {
		return "", nil // no BTF to compare: the sizes decide
	}
	for _, kv := range []struct {
		what     string
		old, new btf.Type
	}{{"key", r.KeyType, ms.Key}, {"value", r.ValueType, ms.Value}} {
		if kv.old == nil || kv.new == nil {
			continue
		}
		c, err := NewConversion(kv.old, kv.new)
		if err != nil {
			return "", fmt.Errorf("map %s %s: %w", r.Name, kv.what, err)
		}
		if !c.Same {
			return fmt.Sprintf("%s layout differs (added %v, dropped %v)", kv.what, c.Added, c.Dropped), nil
		}
	}
	return "", nil
}
