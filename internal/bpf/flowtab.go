// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf/mapconv"
)

// The flow table (bpf/lib/flowtab.h): edge_ft holds FTWays ways per
// bucket, edge_ft_meta a line per bucket with each way's tag, last use
// and standing, and the bucket's lock. The agent maps both (they are
// BPF_F_MMAPABLE): it reads flows and connections from memory, and when
// it writes (an upgrade's copy) it takes a bucket's lock as packets do.

// FTWays and FTIdle mirror EDGE_FT_WAYS and EDGE_FT_IDLE; the flow flags
// mirror EDGE_FF_*.
const (
	FTWays = 8
	FTIdle = 8

	FlowConn   = 0x01
	FlowReply  = 0x02
	FlowClosed = 0x04

	NATUsers = 8
)

// FTEntries is the flow table's ways for l: flows, or connections if
// more are asked for (a connection is a flow's entry; the table holds
// both), rounded up to a power of two.
func (l Limits) FTEntries() uint32 {
	l = l.WithDefaults()
	n := uint64(max(l.Flows, l.Conns))
	if n < 64 {
		n = 64
	}
	if n > 1<<30 {
		n = 1 << 30
	}
	return uint32(1) << bits.Len64(n-1)
}

// FTHash is ft_hash of flow key k under secret s: the bucket is its low
// bits (masked by the bucket count), the tag its high 32 bits with the
// low bit set.
func FTHash(s HashSecret, k *FlowKey) uint64 {
	pg := uint32(k.Sport) | uint32(k.Dport)<<16 | k.GreKey
	return sipTuple(s, le64(k.Src[:8]), le64(k.Src[8:]), le64(k.Dst[:8]), le64(k.Dst[8:]), pg, k.Proto, k.Family)
}

// FlowTable is a mapping of a dataplane's edge_ft and edge_ft_meta.
type FlowTable struct {
	ways, meta []byte
	// Buckets is the table's bucket count (a power of two).
	Buckets uint32
	copied  bool // a copy (read-only maps): Insert has nowhere to write
	// secret places flows (Find, Insert); nil for a table only walked
	// (Each).
	secret *HashSecret
}

// FTWaySize and FTBucketSize are this build's sizes of a way and a
// bucket's line.
const (
	FTWaySize    = uint32(unsafe.Sizeof(FTWay{}))
	FTBucketSize = uint32(unsafe.Sizeof(FTBucket{}))
)

// MapFlowTable maps the flow table's two maps into memory, placed by
// secret (nil: only walked); Unmap releases it.
func MapFlowTable(ways, meta *ebpf.Map, secret *HashSecret) (*FlowTable, error) {
	if ways == nil || meta == nil {
		return nil, fmt.Errorf("no flow table")
	}
	if ways.ValueSize() != FTWaySize || meta.ValueSize() != FTBucketSize {
		return nil, fmt.Errorf("flow table of %d- and %d-byte elements, this build's %d and %d",
			ways.ValueSize(), meta.ValueSize(), FTWaySize, FTBucketSize)
	}
	if ways.MaxEntries() != meta.MaxEntries()*FTWays {
		return nil, fmt.Errorf("flow table of %d ways in %d buckets", ways.MaxEntries(), meta.MaxEntries())
	}
	t := &FlowTable{Buckets: meta.MaxEntries(), secret: secret}
	var err error
	if t.ways, err = mmapArray(ways); err == nil {
		if t.meta, err = mmapArray(meta); err == nil {
			return t, nil
		}
	}
	// Opened read-only (the counters of a pin dir, without an agent): a
	// copy, read through the map's batch calls.
	t.Unmap()
	t.copied = true
	if t.ways, err = mapconv.ReadArray(ways); err != nil {
		return nil, fmt.Errorf("read a flow-table map: %w", err)
	}
	if t.meta, err = mapconv.ReadArray(meta); err != nil {
		return nil, fmt.Errorf("read a flow-table map: %w", err)
	}
	return t, nil
}

func mmapArray(m *ebpf.Map) ([]byte, error) {
	size := int(m.ValueSize()) * int(m.MaxEntries())
	page := unix.Getpagesize()
	size = (size + page - 1) / page * page
	b, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes of a flow-table map: %w", size, err)
	}
	return b, nil
}

// Unmap releases the table's memory.
func (t *FlowTable) Unmap() {
	if !t.copied {
		for _, b := range [][]byte{t.ways, t.meta} {
			if b != nil {
				_ = unix.Munmap(b)
			}
		}
	}
	t.ways, t.meta = nil, nil
}

// Bucket is bucket b's line, in the mapped table.
func (t *FlowTable) Bucket(b uint32) *FTBucket {
	return (*FTBucket)(unsafe.Pointer(&t.meta[b*FTBucketSize]))
}

// Way is way w of bucket b, in the mapped table.
func (t *FlowTable) Way(b, w uint32) *FTWay {
	return (*FTWay)(unsafe.Pointer(&t.ways[(b*FTWays+w)*FTWaySize]))
}

// Each calls fn with a copy of every entry of the table and whether it
// had a packet after its first, until fn returns false. Entries written
// meanwhile may be seen half written (skipped: their bucket moved on).
func (t *FlowTable) Each(fn func(w *FTWay, hot bool) bool) {
	for b := range t.Buckets {
		m := t.Bucket(b)
		for i := range uint32(FTWays) {
			seq := atomic.LoadUint32(&m.Seq)
			if atomic.LoadUint32(&m.Tag[i]) == 0 || seq&1 != 0 {
				continue
			}
			w := *t.Way(b, i)
			hot := m.Hot[i] != 0
			if atomic.LoadUint32(&m.Seq) != seq {
				continue
			}
			if !fn(&w, hot) {
				return
			}
		}
	}
}

// place returns the bucket and tag of key k.
func (t *FlowTable) place(k *FlowKey) (b, tag uint32) {
	if t.secret == nil {
		panic("bpf: a flow table mapped without its secret placed a flow")
	}
	h := FTHash(*t.secret, k)
	return uint32(h) & (t.Buckets - 1), uint32(h>>32) | 1
}

// Find returns the bucket and way holding key k, or ok false.
func (t *FlowTable) Find(k *FlowKey) (b, w uint32, ok bool) {
	b, tag := t.place(k)
	m := t.Bucket(b)
	for i := range uint32(FTWays) {
		if atomic.LoadUint32(&m.Tag[i]) == tag && t.Way(b, i).K == *k {
			return b, i, true
		}
	}
	return 0, 0, false
}

// Insert writes entry e under its key, as the dataplane would for a new
// flow: into an empty way, else one whose flow had a single packet or
// went idle (edge_ft_insert's choice at tick now), keeping hot. It
// returns false when the bucket has no room, the key is there already,
// or a packet is writing the bucket (the caller's copy then leaves it).
func (t *FlowTable) Insert(e *FTWay, hot bool, now uint16) bool {
	if t.copied {
		return false
	}
	b, tag := t.place(&e.K)
	m := t.Bucket(b)
	seq := atomic.LoadUint32(&m.Seq)
	if seq&1 != 0 || !atomic.CompareAndSwapUint32(&m.Seq, seq, seq+1) {
		return false
	}
	defer atomic.StoreUint32(&m.Seq, seq+2)
	best, top := -1, -1
	for k := range FTWays {
		i := (int(m.Next) + k) % FTWays
		if m.Tag[i] == tag && t.Way(b, uint32(i)).K == e.K {
			return false
		}
		if m.Tag[i] == 0 {
			if top < 1<<20 {
				best, top = i, 1<<20
			}
			continue
		}
		age := int(uint16(now - m.Seen[i]))
		if m.Hot[i] != 0 && age < FTIdle {
			continue
		}
		score := 2 * age
		if m.Hot[i] == 0 {
			score++
		}
		if score > top {
			best, top = i, score
		}
	}
	if best < 0 {
		return false
	}
	if m.Tag[best] != 0 {
		m.Next = uint8(best+1) % FTWays
	}
	*t.Way(b, uint32(best)) = *e
	m.Seen[best] = now
	m.Hot[best] = 0
	if hot {
		m.Hot[best] = 1
	}
	atomic.StoreUint32(&m.Tag[best], tag)
	return true
}

// FlowTable maps o's flow table, placed by o's secret; the caller
// unmaps it.
func (o *Object) FlowTable() (*FlowTable, error) {
	return MapFlowTable(o.EdgeFt, o.EdgeFtMeta, &o.Secret)
}
