// SPDX-License-Identifier: Apache-2.0

// Package mapconv reads and writes maps of any build as bytes, and
// converts their entries from one build's layout to another's by the
// BTF the kernel keeps with each map: what an upgrade carries over, and
// what tells whether another build's pins can be adopted or read.
package mapconv

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Map reads and writes a map's entries as bytes, whatever its layout:
// an upgrade handles maps of another build, whose Go types this build
// does not have.
type Map struct {
	*ebpf.Map
	Name               string
	PerCPU             bool
	KeyType, ValueType btf.Type // nil when the map carries no BTF
}

// Entry is one key and its value (one per possible CPU in a per-CPU map).
type Entry struct {
	Key  []byte
	Vals [][]byte
}

// kernelMapInfo is the head of the kernel's struct bpf_map_info, up to the
// BTF type ids of key and value, which cilium/ebpf's MapInfo does not
// expose.
type kernelMapInfo struct {
	Type, ID, KeySize, ValueSize, MaxEntries, MapFlags uint32
	Name                                               [16]byte
	Ifindex, BtfVmlinuxValueTypeID                     uint32
	NetnsDev, NetnsIno                                 uint64
	BtfID, BtfKeyTypeID, BtfValueTypeID                uint32
}

// BTFCache holds the BTF of the maps an upgrade looks at, by BTF object id
// (every map of one collection shares one).
type BTFCache map[uint32]*btf.Spec

// Open describes m, with its key and value types from the BTF the kernel
// keeps with it.
func (bc BTFCache) Open(m *ebpf.Map, name string) (*Map, error) {
	info := new(kernelMapInfo) // on the heap: the kernel writes it through a pointer
	attr := struct {
		fd, len uint32
		info    uint64
	}{uint32(m.FD()), uint32(unsafe.Sizeof(*info)), uint64(uintptr(unsafe.Pointer(info)))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_OBJ_GET_INFO_BY_FD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(info)
	if errno != 0 {
		return nil, fmt.Errorf("map %s info: %w", name, errno)
	}
	r := &Map{Map: m, Name: name}
	switch r.Type() {
	case ebpf.PerCPUArray, ebpf.PerCPUHash, ebpf.LRUCPUHash:
		r.PerCPU = true
	}
	if info.BtfID == 0 || info.BtfValueTypeID == 0 {
		return r, nil
	}
	spec := bc[info.BtfID]
	if spec == nil {
		h, err := btf.NewHandleFromID(btf.ID(info.BtfID))
		if err != nil {
			return nil, fmt.Errorf("map %s btf: %w", name, err)
		}
		spec, err = h.Spec(nil)
		h.Close()
		if err != nil {
			return nil, fmt.Errorf("map %s btf: %w", name, err)
		}
		bc[info.BtfID] = spec
	}
	var err error
	if r.ValueType, err = spec.TypeByID(btf.TypeID(info.BtfValueTypeID)); err != nil {
		return nil, fmt.Errorf("map %s value type: %w", name, err)
	}
	if info.BtfKeyTypeID != 0 {
		if r.KeyType, err = spec.TypeByID(btf.TypeID(info.BtfKeyTypeID)); err != nil {
			return nil, fmt.Errorf("map %s key type: %w", name, err)
		}
	}
	return r, nil
}

// IsLRU: the kernel takes an LRU map's free entries from the inserting
// CPU's share (all of them per CPU with BPF_F_NO_COMMON_LRU), so entries
// copied from one CPU would fill only that share and evict the rest.
func (r *Map) IsLRU() bool { return r.Type() == ebpf.LRUHash || r.Type() == ebpf.LRUCPUHash }

// rawSlice views buf as n elements of size bytes, the slices the batch
// calls take.
func rawSlice(buf []byte, n, size int) any {
	elem := reflect.ArrayOf(size, reflect.TypeFor[byte]())
	return reflect.NewAt(reflect.ArrayOf(n, elem), unsafe.Pointer(unsafe.SliceData(buf))).Elem().Slice(0, n).Interface()
}

// batchSize is the entries a batch call reads or writes.
const batchSize = 4096

// ReadAll reads every entry of r.
func (r *Map) ReadAll() ([]Entry, error) {
	out, err := r.readBatches()
	if errors.Is(err, ebpf.ErrNotSupported) {
		return r.readIterate()
	}
	return out, err
}

func (r *Map) readBatches() ([]Entry, error) {
	ks, vs := int(r.KeySize()), int(r.ValueSize())
	ncpu := 1
	if r.PerCPU {
		ncpu = ebpf.MustPossibleCPU()
	}
	keys := make([]byte, batchSize*ks)
	var flat []byte
	var perCPU [][]byte
	var values any
	if r.PerCPU {
		perCPU = make([][]byte, batchSize*ncpu)
		values = perCPU
	} else {
		flat = make([]byte, batchSize*vs)
		values = rawSlice(flat, batchSize, vs)
	}
	var out []Entry
	var cursor ebpf.MapBatchCursor
	for {
		n, err := r.Map.BatchLookup(&cursor, rawSlice(keys, batchSize, ks), values, nil)
		for i := range n {
			e := Entry{Key: append([]byte(nil), keys[i*ks:(i+1)*ks]...)}
			if r.PerCPU {
				for c := range ncpu {
					e.Vals = append(e.Vals, append([]byte(nil), perCPU[i*ncpu+c]...))
				}
			} else {
				e.Vals = [][]byte{append([]byte(nil), flat[i*vs:(i+1)*vs]...)}
			}
			out = append(out, e)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read map %s: %w", r.Name, err)
		}
	}
}

func (r *Map) readIterate() ([]Entry, error) {
	var out []Entry
	var k []byte
	it := r.Map.Iterate()
	if r.PerCPU {
		var vals [][]byte
		for it.Next(&k, &vals) {
			out = append(out, Entry{Key: k, Vals: vals})
			k, vals = nil, nil
		}
	} else {
		var v []byte
		for it.Next(&k, &v) {
			out = append(out, Entry{Key: k, Vals: [][]byte{v}})
			k, v = nil, nil
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read map %s: %w", r.Name, err)
	}
	return out, nil
}

// Write puts entries into r: all of them, with flags ebpf.UpdateAny, in
// batches; with ebpf.UpdateNoExist one by one, leaving the keys r has.
// Entries of an LRU map are spread over the CPUs.
func (r *Map) Write(es []Entry, flags ebpf.MapUpdateFlags) error {
	if len(es) == 0 {
		return nil
	}
	if !r.IsLRU() {
		return r.writeOn(es, flags)
	}
	return onEachCPU(func(k, of int) error {
		var part []Entry
		for i := k; i < len(es); i += of {
			part = append(part, es[i])
		}
		return r.writeOn(part, flags)
	})
}

func (r *Map) writeOn(es []Entry, flags ebpf.MapUpdateFlags) error {
	if flags == ebpf.UpdateNoExist {
		for _, e := range es {
			var err error
			if r.PerCPU {
				err = r.Map.Update(e.Key, e.Vals, flags)
			} else {
				err = r.Map.Update(e.Key, e.Vals[0], flags)
			}
			if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
				return fmt.Errorf("write map %s: %w", r.Name, err)
			}
		}
		return nil
	}
	ks, vs := int(r.KeySize()), int(r.ValueSize())
	for len(es) > 0 {
		n := min(len(es), batchSize)
		keys := make([]byte, 0, n*ks)
		var values any
		if r.PerCPU {
			var vals [][]byte
			for _, e := range es[:n] {
				vals = append(vals, e.Vals...)
			}
			values = vals
		} else {
			flat := make([]byte, 0, n*vs)
			for _, e := range es[:n] {
				flat = append(flat, e.Vals[0]...)
			}
			values = rawSlice(flat, n, vs)
		}
		for _, e := range es[:n] {
			keys = append(keys, e.Key...)
		}
		if _, err := r.Map.BatchUpdate(rawSlice(keys, n, ks), values, &ebpf.BatchOptions{ElemFlags: uint64(flags)}); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("write %d entries to map %s: %w", n, r.Name, err)
			}
			for _, e := range es[:n] {
				if err := r.Put(e); err != nil {
					return err
				}
			}
		}
		es = es[n:]
	}
	return nil
}

func (r *Map) Put(e Entry) error {
	var err error
	if r.PerCPU {
		err = r.Map.Put(e.Key, e.Vals)
	} else {
		err = r.Map.Put(e.Key, e.Vals[0])
	}
	if err != nil {
		return fmt.Errorf("write map %s: %w", r.Name, err)
	}
	return nil
}

// onEachCPU runs fn(k, of) for k in [0, of), each on a thread bound to the
// k-th CPU this process may run on (of is how many it may), one after the
// other.
func onEachCPU(fn func(k, of int) error) error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() < 2 {
		return fn(0, 1)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count() && c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	for k, cpu := range cpus {
		done := make(chan error, 1)
		go func() {
			// The thread keeps its new affinity: it is not unlocked,
			// so it ends with this goroutine.
			runtime.LockOSThread()
			var one unix.CPUSet
			one.Set(cpu)
			_ = unix.SchedSetaffinity(0, &one)
			done <- fn(k, len(cpus))
		}()
		if err := <-done; err != nil {
			return err
		}
	}
	return nil
}

// ReadArray copies every value of array m, in index order.
func ReadArray(m *ebpf.Map) ([]byte, error) {
	vs, n := int(m.ValueSize()), int(m.MaxEntries())
	out := make([]byte, vs*n)
	keys := make([]uint32, batchSize)
	vals := make([]byte, batchSize*vs)
	var cursor ebpf.MapBatchCursor
	for {
		c, err := m.BatchLookup(&cursor, keys, rawSlice(vals, batchSize, vs), nil)
		for i := range c {
			if int(keys[i]) < n {
				copy(out[int(keys[i])*vs:], vals[i*vs:(i+1)*vs])
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read array: %w", err)
		}
	}
}
