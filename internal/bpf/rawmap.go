// SPDX-License-Identifier: Apache-2.0

package bpf

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

// rawMap reads and writes a map's entries as bytes, whatever its layout:
// an upgrade handles maps of another build, whose Go types this build
// does not have.
type rawMap struct {
	m                   *ebpf.Map
	name                string
	typ                 ebpf.MapType
	keySize, valueSize  uint32
	maxEntries          uint32
	perCPU              bool
	keyType, valueType  btf.Type // nil when the map carries no BTF
	btfID, keyID, valID uint32
}

// entry is one key and its value (one per possible CPU in a per-CPU map).
type entry struct {
	key  []byte
	vals [][]byte
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

// btfCache holds the BTF of the maps an upgrade looks at, by BTF object id
// (every map of one collection shares one).
type btfCache map[uint32]*btf.Spec

// open describes m, with its key and value types from the BTF the kernel
// keeps with it.
func (bc btfCache) open(m *ebpf.Map, name string) (*rawMap, error) {
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
	r := &rawMap{m: m, name: name, typ: m.Type(), keySize: m.KeySize(), valueSize: m.ValueSize(), maxEntries: m.MaxEntries(),
		btfID: info.BtfID, keyID: info.BtfKeyTypeID, valID: info.BtfValueTypeID}
	switch r.typ {
	case ebpf.PerCPUArray, ebpf.PerCPUHash, ebpf.LRUCPUHash:
		r.perCPU = true
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
	if r.valueType, err = spec.TypeByID(btf.TypeID(info.BtfValueTypeID)); err != nil {
		return nil, fmt.Errorf("map %s value type: %w", name, err)
	}
	if info.BtfKeyTypeID != 0 {
		if r.keyType, err = spec.TypeByID(btf.TypeID(info.BtfKeyTypeID)); err != nil {
			return nil, fmt.Errorf("map %s key type: %w", name, err)
		}
	}
	return r, nil
}

// isLRU: the kernel takes an LRU map's free entries from the inserting
// CPU's share (all of them per CPU with BPF_F_NO_COMMON_LRU), so entries
// copied from one CPU would fill only that share and evict the rest.
func (r *rawMap) isLRU() bool { return r.typ == ebpf.LRUHash || r.typ == ebpf.LRUCPUHash }

// rawSlice views buf as n elements of size bytes, the slices the batch
// calls take.
func rawSlice(buf []byte, n, size int) any {
	elem := reflect.ArrayOf(size, reflect.TypeFor[byte]())
	return reflect.NewAt(reflect.ArrayOf(n, elem), unsafe.Pointer(unsafe.SliceData(buf))).Elem().Slice(0, n).Interface()
}

// batchSize is the entries a batch call reads or writes.
const batchSize = 4096

// readAll reads every entry of r.
func (r *rawMap) readAll() ([]entry, error) {
	out, err := r.readBatches()
	if errors.Is(err, ebpf.ErrNotSupported) {
		return r.readIterate()
	}
	return out, err
}

func (r *rawMap) readBatches() ([]entry, error) {
	ks, vs := int(r.keySize), int(r.valueSize)
	ncpu := 1
	if r.perCPU {
		ncpu = ebpf.MustPossibleCPU()
	}
	keys := make([]byte, batchSize*ks)
	var flat []byte
	var perCPU [][]byte
	var values any
	if r.perCPU {
		perCPU = make([][]byte, batchSize*ncpu)
		values = perCPU
	} else {
		flat = make([]byte, batchSize*vs)
		values = rawSlice(flat, batchSize, vs)
	}
	var out []entry
	var cursor ebpf.MapBatchCursor
	for {
		n, err := r.m.BatchLookup(&cursor, rawSlice(keys, batchSize, ks), values, nil)
		for i := range n {
			e := entry{key: append([]byte(nil), keys[i*ks:(i+1)*ks]...)}
			if r.perCPU {
				for c := range ncpu {
					e.vals = append(e.vals, append([]byte(nil), perCPU[i*ncpu+c]...))
				}
			} else {
				e.vals = [][]byte{append([]byte(nil), flat[i*vs:(i+1)*vs]...)}
			}
			out = append(out, e)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read map %s: %w", r.name, err)
		}
	}
}

func (r *rawMap) readIterate() ([]entry, error) {
	var out []entry
	var k []byte
	it := r.m.Iterate()
	if r.perCPU {
		var vals [][]byte
		for it.Next(&k, &vals) {
			out = append(out, entry{key: k, vals: vals})
			k, vals = nil, nil
		}
	} else {
		var v []byte
		for it.Next(&k, &v) {
			out = append(out, entry{key: k, vals: [][]byte{v}})
			k, v = nil, nil
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read map %s: %w", r.name, err)
	}
	return out, nil
}

// write puts entries into r: all of them, with flags ebpf.UpdateAny, in
// batches; with ebpf.UpdateNoExist one by one, leaving the keys r has.
// Entries of an LRU map are spread over the CPUs.
func (r *rawMap) write(es []entry, flags ebpf.MapUpdateFlags) error {
	if len(es) == 0 {
		return nil
	}
	if !r.isLRU() {
		return r.writeOn(es, flags)
	}
	return onEachCPU(func(k, of int) error {
		var part []entry
		for i := k; i < len(es); i += of {
			part = append(part, es[i])
		}
		return r.writeOn(part, flags)
	})
}

func (r *rawMap) writeOn(es []entry, flags ebpf.MapUpdateFlags) error {
	if flags == ebpf.UpdateNoExist {
		for _, e := range es {
			var err error
			if r.perCPU {
				err = r.m.Update(e.key, e.vals, flags)
			} else {
				err = r.m.Update(e.key, e.vals[0], flags)
			}
			if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
				return fmt.Errorf("write map %s: %w", r.name, err)
			}
		}
		return nil
	}
	ks, vs := int(r.keySize), int(r.valueSize)
	for len(es) > 0 {
		n := min(len(es), batchSize)
		keys := make([]byte, 0, n*ks)
		var values any
		if r.perCPU {
			var vals [][]byte
			for _, e := range es[:n] {
				vals = append(vals, e.vals...)
			}
			values = vals
		} else {
			flat := make([]byte, 0, n*vs)
			for _, e := range es[:n] {
				flat = append(flat, e.vals[0]...)
			}
			values = rawSlice(flat, n, vs)
		}
		for _, e := range es[:n] {
			keys = append(keys, e.key...)
		}
		if _, err := r.m.BatchUpdate(rawSlice(keys, n, ks), values, &ebpf.BatchOptions{ElemFlags: uint64(flags)}); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("write %d entries to map %s: %w", n, r.name, err)
			}
			for _, e := range es[:n] {
				if err := r.put(e); err != nil {
					return err
				}
			}
		}
		es = es[n:]
	}
	return nil
}

func (r *rawMap) put(e entry) error {
	var err error
	if r.perCPU {
		err = r.m.Put(e.key, e.vals)
	} else {
		err = r.m.Put(e.key, e.vals[0])
	}
	if err != nil {
		return fmt.Errorf("write map %s: %w", r.name, err)
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
