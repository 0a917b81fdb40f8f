// SPDX-License-Identifier: Apache-2.0

package mapconv

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

var (
	tU8  = &btf.Int{Name: "__u8", Size: 1}
	tU16 = &btf.Int{Name: "__u16", Size: 2}
	tU32 = &btf.Int{Name: "__u32", Size: 4}
	tU64 = &btf.Int{Name: "__u64", Size: 8}
)

// member lays out a struct member at byte offset off.
func member(name string, t btf.Type, off uint32) btf.Member {
	return btf.Member{Name: name, Type: t, Offset: btf.Bits(off * 8)}
}

// Two builds' layouts of one value: the new one moves every member,
// drops "gone", adds "added", grows the nested struct (whose members are
// reordered too) and the array of it, all without a converter.
var (
	innerOld = &btf.Struct{Name: "inner", Size: 8, Members: []btf.Member{member("x", tU32, 0), member("y", tU32, 4)}}
	innerNew = &btf.Struct{Name: "inner", Size: 16, Members: []btf.Member{
		member("y", tU32, 0), member("z", tU32, 4), member("x", tU32, 8), member("pad", tU32, 12)}}
	valOld = &btf.Struct{Name: "val", Size: 48, Members: []btf.Member{
		member("a", tU32, 0), member("gone", tU16, 4), member("pad", tU16, 6), member("b", tU64, 8),
		member("in", innerOld, 16), member("arr", &btf.Array{Index: tU32, Type: innerOld, Nelems: 2}, 24),
		member("bytes", &btf.Array{Index: tU32, Type: tU8, Nelems: 4}, 40), member("pad2", tU32, 44)}}
	valNew = &btf.Struct{Name: "val", Size: 72, Members: []btf.Member{
		member("bytes", &btf.Array{Index: tU32, Type: tU8, Nelems: 4}, 0), member("a", tU32, 4), member("b", tU64, 8),
		member("added", tU64, 16), member("in", innerNew, 24), member("arr", &btf.Array{Index: tU32, Type: innerNew, Nelems: 2}, 40)}}
	// Keys: the same members, reordered within the same size.
	keyOld = &btf.Struct{Name: "key", Size: 8, Members: []btf.Member{member("p", tU16, 0), member("q", tU16, 2), member("r", tU32, 4)}}
	keyNew = &btf.Struct{Name: "key", Size: 8, Members: []btf.Member{member("r", tU32, 0), member("q", tU16, 4), member("p", tU16, 6)}}
	// Counters: a member added in the middle.
	ctrOld = &btf.Struct{Name: "ctr", Size: 16, Members: []btf.Member{member("packets", tU64, 0), member("bytes", tU64, 8)}}
	ctrNew = &btf.Struct{Name: "ctr", Size: 24, Members: []btf.Member{member("bytes", tU64, 0), member("drops", tU64, 8), member("packets", tU64, 16)}}
)

func oldVal(i uint32) []byte {
	b := make([]byte, 48)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], i)               // a
	ne.PutUint16(b[4:], 0xdead)          // gone
	ne.PutUint64(b[8:], uint64(i)<<40|7) // b
	ne.PutUint32(b[16:], i+1)            // in.x
	ne.PutUint32(b[20:], i+2)            // in.y
	ne.PutUint32(b[24:], i+3)            // arr[0].x
	ne.PutUint32(b[28:], i+4)            // arr[0].y
	ne.PutUint32(b[32:], i+5)            // arr[1].x
	ne.PutUint32(b[36:], i+6)            // arr[1].y
	copy(b[40:], []byte{1, 2, 3, byte(i)})
	return b
}

func wantNewVal(i uint32) []byte {
	b := make([]byte, 72)
	ne := binary.NativeEndian
	copy(b[0:], []byte{1, 2, 3, byte(i)})
	ne.PutUint32(b[4:], i)
	ne.PutUint64(b[8:], uint64(i)<<40|7)
	// added (16) stays zero
	ne.PutUint32(b[24:], i+2) // in.y
	ne.PutUint32(b[32:], i+1) // in.x
	ne.PutUint32(b[40:], i+4) // arr[0].y
	ne.PutUint32(b[48:], i+3) // arr[0].x
	ne.PutUint32(b[56:], i+6) // arr[1].y
	ne.PutUint32(b[64:], i+5) // arr[1].x
	return b
}

func oldKey(i uint32) []byte {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint16(b[0:], uint16(i))    // p
	binary.NativeEndian.PutUint16(b[2:], uint16(i>>8)) // q
	binary.NativeEndian.PutUint32(b[4:], i*7)          // r
	return b
}

func newKey(i uint32) []byte {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint32(b[0:], i*7)
	binary.NativeEndian.PutUint16(b[4:], uint16(i>>8))
	binary.NativeEndian.PutUint16(b[6:], uint16(i))
	return b
}

func TestConversionPlan(t *testing.T) {
	c, err := NewConversion(valOld, valNew)
	if err != nil {
		t.Fatal(err)
	}
	if c.Same {
		t.Fatal("different layouts planned as the same")
	}
	if want := []string{"gone", "pad", "pad2"}; !slices.Equal(c.Dropped, want) {
		t.Errorf("dropped %v, want %v", c.Dropped, want)
	}
	if want := []string{"added", "in.z", "in.pad", "arr[0].z", "arr[0].pad", "arr[1].z", "arr[1].pad"}; !slices.Equal(c.Added, want) {
		t.Errorf("added %v, want %v", c.Added, want)
	}
	same, err := NewConversion(valNew, valNew)
	if err != nil || !same.Same {
		t.Errorf("a layout against itself: same %v, %v", same != nil && same.Same, err)
	}
	// Reordered members of the same size are not the same layout.
	if k, err := NewConversion(keyOld, keyNew); err != nil || k.Same {
		t.Errorf("reordered key planned as the same (%v)", err)
	}
	// A member whose size changed is dropped and comes back zero.
	wider := &btf.Struct{Name: "ctr", Size: 16, Members: []btf.Member{member("packets", tU32, 0), member("bytes", tU64, 8)}}
	w, err := NewConversion(ctrOld, wider)
	if err != nil || len(w.Dropped) != 1 || len(w.Added) != 1 {
		t.Errorf("packets 8 -> 4 bytes: dropped %v, added %v (%v)", w.Dropped, w.Added, err)
	}
	// Bitfields are refused rather than copied wrong.
	bf := &btf.Struct{Name: "bf", Size: 4, Members: []btf.Member{{Name: "f", Type: tU32, BitfieldSize: 3}}}
	if _, err := NewConversion(bf, ctrNew); err == nil {
		t.Error("bitfield converted")
	}
}

// TestCopyByMemberName copies real maps, created with the BTF of one
// layout, into maps of another: a hash whose keys and values were
// reordered, grown and shrunk; an LRU hash full to its capacity (the
// copy must not evict: the kernel fills an LRU from the inserting CPU's
// share); per-CPU counters that gained a member, with what was counted
// after the first copy added after.
func TestCopyByMemberName(t *testing.T) {
	testutil.RequireRoot(t)
	bc := BTFCache{}
	mk := func(name string, typ ebpf.MapType, k, v btf.Type, n, flags uint32) *Map {
		t.Helper()
		ks, _ := btf.Sizeof(k)
		vs, _ := btf.Sizeof(v)
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: typ, KeySize: uint32(ks), ValueSize: uint32(vs), MaxEntries: n, Flags: flags, Key: k, Value: v})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		r, err := bc.Open(m, name)
		if err != nil {
			t.Fatal(err)
		}
		if r.ValueType == nil || r.KeyType == nil {
			t.Fatalf("map %s: no BTF types from the kernel", name)
		}
		return r
	}

	t.Run("hash", func(t *testing.T) {
		from := mk("conv_from", ebpf.Hash, keyOld, valOld, 256, 0)
		to := mk("conv_to", ebpf.Hash, keyNew, valNew, 256, 0)
		for i := range uint32(200) {
			if err := from.Map.Put(oldKey(i), oldVal(i)); err != nil {
				t.Fatal(err)
			}
		}
		mc, err := NewCopy("conv", from, to)
		if err != nil {
			t.Fatal(err)
		}
		es, err := from.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if err := to.Write(mc.Convert(es), ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		for i := range uint32(200) {
			var got []byte
			if err := to.Map.Lookup(newKey(i), &got); err != nil {
				t.Fatalf("entry %d not under its converted key: %v", i, err)
			}
			if want := wantNewVal(i); !slices.Equal(got, want) {
				t.Fatalf("entry %d:\n got %x\nwant %x", i, got, want)
			}
		}
		// Entries added after the first copy: only those are copied,
		// what the new map holds stays.
		for i := uint32(200); i < 210; i++ {
			if err := from.Map.Put(oldKey(i), oldVal(i)); err != nil {
				t.Fatal(err)
			}
		}
		mark := wantNewVal(0)
		mark[16] = 0xaa // "added", as the new program would set it
		if err := to.Map.Put(newKey(0), mark); err != nil {
			t.Fatal(err)
		}
		n, err := mc.CopyMissing()
		if err != nil || n != 10 {
			t.Fatalf("copied %d missing entries (%v), want 10", n, err)
		}
		var got []byte
		if err := to.Map.Lookup(newKey(0), &got); err != nil || got[16] != 0xaa {
			t.Errorf("an entry the new map had was overwritten: %x (%v)", got, err)
		}
		if err := to.Map.Lookup(newKey(205), &got); err != nil || !slices.Equal(got, wantNewVal(205)) {
			t.Errorf("entry 205: %x (%v)", got, err)
		}
	})

	t.Run("lru", func(t *testing.T) {
		const n = 2048
		from := mk("lru_from", ebpf.LRUHash, keyOld, valOld, n, unix.BPF_F_NO_COMMON_LRU)
		to := mk("lru_to", ebpf.LRUHash, keyNew, valNew, n, unix.BPF_F_NO_COMMON_LRU)
		// Fill the old map from every CPU, as packets would.
		if err := onEachCPU(func(k, of int) error {
			for i := uint32(k); i < n; i += uint32(of) {
				if err := from.Map.Put(oldKey(i), oldVal(i)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		es, err := from.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		mc, err := NewCopy("lru", from, to)
		if err != nil {
			t.Fatal(err)
		}
		if err := to.Write(mc.Convert(es), ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		got, err := to.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("old LRU held %d of %d, the copy %d", len(es), n, len(got))
		if len(got) != len(es) {
			t.Errorf("the copy holds %d entries of %d: the copy evicted", len(got), len(es))
		}
	})

	t.Run("percpu-counters", func(t *testing.T) {
		from := mk("ctr_from", ebpf.PerCPUArray, tU32, ctrOld, 8, 0)
		to := mk("ctr_to", ebpf.PerCPUArray, tU32, ctrNew, 8, 0)
		ncpu := ebpf.MustPossibleCPU()
		put := func(m *Map, i uint32, vals func(cpu int) []byte) {
			t.Helper()
			var vs [][]byte
			for c := range ncpu {
				vs = append(vs, vals(c))
			}
			if err := m.Map.Put(i, vs); err != nil {
				t.Fatal(err)
			}
		}
		ctr := func(p, b uint64) []byte {
			v := make([]byte, 16)
			binary.NativeEndian.PutUint64(v[0:], p)
			binary.NativeEndian.PutUint64(v[8:], b)
			return v
		}
		for i := range uint32(8) {
			put(from, i, func(c int) []byte { return ctr(uint64(i*10+uint32(c)), uint64(i*1000+uint32(c))) })
		}
		mc, err := NewCopy("ctr", from, to)
		if err != nil {
			t.Fatal(err)
		}
		es, err := from.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		then := map[string]Entry{}
		for _, e := range es {
			then[string(e.Key)] = e
		}
		if err := to.Write(mc.Convert(es), ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		// The new program counts 1 packet of 100 bytes on every CPU of
		// index 3; the old one 5 packets of 50 bytes more on index 3 and
		// 2 of 20 on index 5 before it stops.
		cur := map[uint32][][]byte{}
		for _, i := range []uint32{3, 5} {
			var vs [][]byte
			if err := to.Map.Lookup(i, &vs); err != nil {
				t.Fatal(err)
			}
			cur[i] = vs
		}
		for c := range ncpu {
			v := cur[3][c]
			binary.NativeEndian.PutUint64(v[16:], binary.NativeEndian.Uint64(v[16:])+1)
			binary.NativeEndian.PutUint64(v[0:], binary.NativeEndian.Uint64(v[0:])+100)
		}
		if err := to.Map.Put(uint32(3), cur[3]); err != nil {
			t.Fatal(err)
		}
		put(from, 3, func(c int) []byte { return ctr(uint64(30+c+5), uint64(3000+c+50)) })
		put(from, 5, func(c int) []byte { return ctr(uint64(50+c+2), uint64(5000+c+20)) })
		if err := mc.AddDeltas(then); err != nil {
			t.Fatal(err)
		}
		for i := range uint32(8) {
			var vs [][]byte
			if err := to.Map.Lookup(i, &vs); err != nil {
				t.Fatal(err)
			}
			for c, v := range vs {
				p, b := uint64(i*10)+uint64(c), uint64(i*1000)+uint64(c)
				switch i {
				case 3:
					p, b = p+5+1, b+50+100
				case 5:
					p, b = p+2, b+20
				}
				gotP, gotB := binary.NativeEndian.Uint64(v[16:]), binary.NativeEndian.Uint64(v[0:])
				if gotP != p || gotB != b || binary.NativeEndian.Uint64(v[8:]) != 0 {
					t.Errorf("index %d cpu %d: packets %d bytes %d drops %d, want %d %d 0", i, c, gotP, gotB, binary.NativeEndian.Uint64(v[8:]), p, b)
				}
			}
		}
	})
}
