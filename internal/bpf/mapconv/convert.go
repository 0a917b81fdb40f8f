// SPDX-License-Identifier: Apache-2.0

package mapconv

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cilium/ebpf/btf"
)

// A Conversion turns a map key or value of one build's layout into
// another's, member by member name, from the BTF both builds' maps
// carry: a member of the same name and size is copied, a struct member
// of another size is converted member by member in turn, a new member is
// zero and a member the new layout lacks (or one whose size changed) is
// dropped. So a build whose structs grew, shrank or were reordered takes
// over the entries of an older build's maps without a converter written
// for the release.
type Conversion struct {
	FromSize, ToSize uint32
	// Dropped names the old layout's members the new one has no place
	// for; Added the new layout's members that start at zero.
	Dropped, Added []string
	// Same: the layouts are one (every member at its place): entries
	// are copied as they are, and a map of this layout can be reused.
	Same bool

	spans []span // bytes copied, merged where contiguous
	ints  []span // integer members, for counters' deltas
	to    btf.Type
}

// span copies size bytes at from in the old layout to to in the new one.
type span struct{ from, to, size uint32 }

// NewConversion plans the Conversion of values of type from into type to.
func NewConversion(from, to btf.Type) (*Conversion, error) {
	fs, err := btf.Sizeof(from)
	if err != nil {
		return nil, fmt.Errorf("size of %s: %w", from, err)
	}
	ts, err := btf.Sizeof(to)
	if err != nil {
		return nil, fmt.Errorf("size of %s: %w", to, err)
	}
	c := &Conversion{FromSize: uint32(fs), ToSize: uint32(ts), to: to}
	if err := c.walk(from, to, 0, 0, ""); err != nil {
		return nil, err
	}
	c.Same = c.FromSize == c.ToSize && len(c.Dropped) == 0 && len(c.Added) == 0
	for _, s := range c.spans {
		c.Same = c.Same && s.from == s.to
	}
	slices.SortFunc(c.spans, func(a, b span) int { return int(a.from) - int(b.from) })
	var merged []span
	for _, s := range c.spans {
		if n := len(merged); n > 0 {
			p := &merged[n-1]
			if p.from+p.size == s.from && p.to+p.size == s.to {
				p.size += s.size
				continue
			}
		}
		merged = append(merged, s)
	}
	c.spans = merged
	return c, nil
}

// walk plans from (at offset fo of the old value) into to (at offset tof
// of the new one); path names the member for the logs.
func (c *Conversion) walk(from, to btf.Type, fo, tof uint32, path string) error {
	from, to = btf.UnderlyingType(from), btf.UnderlyingType(to)
	fs, err := btf.Sizeof(from)
	if err != nil {
		return fmt.Errorf("size of %s: %w", orTop(path), err)
	}
	ts, err := btf.Sizeof(to)
	if err != nil {
		return fmt.Errorf("size of %s: %w", orTop(path), err)
	}
	switch f := from.(type) {
	case *btf.Struct:
		if t, ok := to.(*btf.Struct); ok {
			return c.members(f.Members, t.Members, fo, tof, path)
		}
	case *btf.Array:
		// Arrays of structs are converted element by element: their
		// members may have moved even where the sizes did not change.
		t, ok := to.(*btf.Array)
		if !ok {
			break
		}
		_, fStruct := btf.UnderlyingType(f.Type).(*btf.Struct)
		_, tStruct := btf.UnderlyingType(t.Type).(*btf.Struct)
		if fStruct && tStruct && f.Nelems == t.Nelems && f.Nelems > 0 {
			fe, te := uint32(fs)/f.Nelems, uint32(ts)/t.Nelems
			for i := range f.Nelems {
				if err := c.walk(f.Type, t.Type, fo+i*fe, tof+i*te, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if fs != ts {
		c.Dropped = append(c.Dropped, fmt.Sprintf("%s (%d bytes, now %d)", orTop(path), fs, ts))
		c.Added = append(c.Added, orTop(path))
		return nil
	}
	s := span{fo, tof, uint32(fs)}
	c.spans = append(c.spans, s)
	switch from.(type) {
	case *btf.Int, *btf.Enum:
		if s.size == 1 || s.size == 2 || s.size == 4 || s.size == 8 {
			c.ints = append(c.ints, s)
		}
	}
	return nil
}

// members pairs the members of two structs by name.
func (c *Conversion) members(from, to []btf.Member, fo, tof uint32, path string) error {
	old := map[string]btf.Member{}
	for _, m := range from {
		if m.Name == "" {
			return fmt.Errorf("%s: an anonymous member cannot be matched by name", orTop(path))
		}
		if m.BitfieldSize != 0 {
			return fmt.Errorf("%s.%s: bitfields are not converted", path, m.Name)
		}
		old[m.Name] = m
	}
	for _, m := range to {
		if m.Name == "" {
			return fmt.Errorf("%s: an anonymous member cannot be matched by name", orTop(path))
		}
		if m.BitfieldSize != 0 {
			return fmt.Errorf("%s.%s: bitfields are not converted", path, m.Name)
		}
		p := path + "." + m.Name
		o, ok := old[m.Name]
		if !ok {
			c.Added = append(c.Added, p[1:])
			continue
		}
		delete(old, m.Name)
		if err := c.walk(o.Type, m.Type, fo+uint32(o.Offset/8), tof+uint32(m.Offset/8), p); err != nil {
			return err
		}
	}
	for _, m := range from {
		if _, gone := old[m.Name]; gone {
			c.Dropped = append(c.Dropped, (path + "." + m.Name)[1:])
		}
	}
	return nil
}

// orTop names the whole value for the logs when path is empty.
func orTop(path string) string {
	if path == "" {
		return "value"
	}
	if path[0] == '.' {
		return path[1:]
	}
	return path
}

// convert writes src (old layout) into dst (new layout) and zeroes what
// src has no value for.
func (c *Conversion) Convert(dst, src []byte) {
	if c.Same {
		copy(dst, src)
		return
	}
	clear(dst)
	for _, s := range c.spans {
		copy(dst[s.to:s.to+s.size], src[s.from:s.from+s.size])
	}
}

// addDelta adds to dst (new layout), integer member by member, what the
// old layout's value went up by from then to now: what a counter counted
// after it was copied.
func (c *Conversion) AddDelta(dst, now, then []byte) bool {
	changed := false
	for _, s := range c.ints {
		d := UintAt(now[s.from:], s.size) - UintAt(then[s.from:], s.size)
		if d != 0 {
			PutUint(dst[s.to:], s.size, UintAt(dst[s.to:], s.size)+d)
			changed = true
		}
	}
	return changed
}

// field returns the offset and size of a top-level member of the new
// layout.
func (c *Conversion) field(name string) (off, size uint32, ok bool) {
	st, isStruct := btf.UnderlyingType(c.to).(*btf.Struct)
	if !isStruct {
		return 0, 0, false
	}
	for _, m := range st.Members {
		if m.Name == name {
			sz, err := btf.Sizeof(m.Type)
			if err != nil {
				return 0, 0, false
			}
			return uint32(m.Offset / 8), uint32(sz), true
		}
	}
	return 0, 0, false
}

func UintAt(b []byte, size uint32) uint64 {
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.NativeEndian.Uint16(b))
	case 4:
		return uint64(binary.NativeEndian.Uint32(b))
	default:
		return binary.NativeEndian.Uint64(b)
	}
}

func PutUint(b []byte, size uint32, v uint64) {
	switch size {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.NativeEndian.PutUint16(b, uint16(v))
	case 4:
		binary.NativeEndian.PutUint32(b, uint32(v))
	default:
		binary.NativeEndian.PutUint64(b, v)
	}
}
