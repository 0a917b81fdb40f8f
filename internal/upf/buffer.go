// SPDX-License-Identifier: Apache-2.0

package upf

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Buffer holds the downlink packets of sessions whose FAR buffers them
// (an idle UE's, until the SMF has it paged): XDP hands each to the
// agent through a ring (edge_buff). Each session holds at most
// PerSession packets and all of them together TotalBytes; past either
// the session's oldest packet is dropped first (or, for a session
// holding none, the new one), counted. The first packet of a session
// held since it last released is reported (OnFirst: the SMF's downlink
// data report); Release sends what a session held, in order, when its
// FAR forwards again.
type Buffer struct {
	mu         sync.Mutex
	rd         *ringbuf.Reader
	q          map[uint32]*queue // by session slot
	bytes      int
	PerSession int
	TotalBytes int
	// OnFirst is called (outside the lock) with the slot and PDR
	// counter of a session's first packet held; Inject sends a frame
	// as if it came in by ifindex.
	OnFirst func(slot uint32, cnt uint8)
	Inject  func(frame []byte, ifindex uint32) error
	// Limit, when set, is how many packets session slot may hold (0:
	// PerSession; at most PerSession). Called outside the lock.
	Limit func(slot uint32) int
	// OnEndMarker is called (outside the lock) with the TEID of each
	// GTP-U End Marker that came in and the address it came from.
	OnEndMarker func(teid uint32, from netip.Addr)
	stats       BufferStats
}

// BufferStats counts what the buffer did.
type BufferStats struct {
	Held, Released, Dropped, Reports uint64
	// EndMarkers counts the End Markers XDP handed over.
	EndMarkers uint64
	// Now is the packets held at this moment.
	Now int
}

type queue struct {
	frames []held
	bytes  int
}

type held struct {
	frame   []byte
	ifindex uint32
}

// Default bounds of a Buffer.
const (
	DefaultPerSession = 256
	DefaultTotalBytes = 64 << 20
)

// NewBuffer reads the ring m (edge_buff).
func NewBuffer(m *ebpf.Map) (*Buffer, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, err
	}
	return &Buffer{rd: rd, q: map[uint32]*queue{}, PerSession: DefaultPerSession, TotalBytes: DefaultTotalBytes}, nil
}

// Run takes what XDP hands over until Close.
func (b *Buffer) Run() {
	for {
		r, err := b.rd.Read()
		if errors.Is(err, ringbuf.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		b.take(r.RawSample)
	}
}

// Close stops Run.
func (b *Buffer) Close() error { return b.rd.Close() }

// take holds one record of edge_buff (struct edge_buff_rec).
func (b *Buffer) take(rec []byte) {
	if len(rec) < 16 {
		return
	}
	slot := binary.NativeEndian.Uint32(rec[0:])
	ifindex := binary.NativeEndian.Uint32(rec[4:])
	n := int(binary.NativeEndian.Uint16(rec[8:]))
	cnt := rec[10]
	if 16+n > len(rec) {
		return
	}
	if rec[11] == recEndMarker {
		b.endMarker(binary.BigEndian.Uint32(rec[0:]), rec[16:16+n])
		return
	}
	frame := append([]byte(nil), rec[16:16+n]...)
	per := b.PerSession
	if b.Limit != nil {
		if l := b.Limit(slot); l > 0 && l < per {
			per = l
		}
	}
	b.mu.Lock()
	q := b.q[slot]
	first := q == nil
	if first {
		q = &queue{}
		b.q[slot] = q
	}
	for len(q.frames) > 0 && (len(q.frames) >= per || b.bytes+n > b.TotalBytes) {
		b.dropOldest(q)
	}
	if b.bytes+n > b.TotalBytes {
		b.stats.Dropped++
	} else {
		q.frames = append(q.frames, held{frame, ifindex})
		q.bytes += n
		b.bytes += n
		b.stats.Held++
	}
	if first {
		b.stats.Reports++
	}
	on := b.OnFirst
	b.mu.Unlock()
	if first && on != nil {
		on(slot, cnt)
	}
}

// recEndMarker is the kind of an edge_buff record that holds an End
// Marker (EDGE_BUFF_END_MARKER; the others hold packets to hold).
const recEndMarker = 1

// endMarker takes an End Marker to TEID teid, in frame (Ethernet, IPv4).
func (b *Buffer) endMarker(teid uint32, frame []byte) {
	var from netip.Addr
	if len(frame) >= 14+20 {
		from = netip.AddrFrom4([4]byte(frame[14+12 : 14+16]))
	}
	b.mu.Lock()
	b.stats.EndMarkers++
	on := b.OnEndMarker
	b.mu.Unlock()
	if on != nil {
		on(teid, from)
	}
}

// dropOldest drops q's oldest packet. Called with b.mu held.
func (b *Buffer) dropOldest(q *queue) {
	b.bytes -= len(q.frames[0].frame)
	q.bytes -= len(q.frames[0].frame)
	q.frames = q.frames[1:]
	b.stats.Dropped++
}

// Release sends what session slot held, in order, and forgets it: its
// next packet held is a new first.
func (b *Buffer) Release(slot uint32) {
	b.mu.Lock()
	q := b.q[slot]
	delete(b.q, slot)
	if q != nil {
		b.bytes -= q.bytes
	}
	inject := b.Inject
	b.mu.Unlock()
	if q == nil {
		return
	}
	sent := 0
	for _, h := range q.frames {
		if inject != nil && inject(h.frame, h.ifindex) == nil {
			sent++
		}
	}
	b.mu.Lock()
	b.stats.Released += uint64(sent)
	b.stats.Dropped += uint64(len(q.frames) - sent)
	b.mu.Unlock()
}

// Holding tells whether session slot holds packets.
func (b *Buffer) Holding(slot uint32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.q[slot] != nil
}

// Discard forgets what session slot held (it was deleted).
func (b *Buffer) Discard(slot uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.q[slot]; q != nil {
		b.bytes -= q.bytes
		b.stats.Dropped += uint64(len(q.frames))
		delete(b.q, slot)
	}
}

// Stats returns the buffer's counts.
func (b *Buffer) Stats() BufferStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	for _, q := range b.q {
		s.Now += len(q.frames)
	}
	return s
}
