// SPDX-License-Identifier: Apache-2.0

package upf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/n4"
)

// rec is an edge_buff record of session slot, counter cnt, carrying
// payload as its frame.
func rec(slot uint32, cnt uint8, payload string) []byte {
	b := make([]byte, 16+len(payload))
	binary.NativeEndian.PutUint32(b, slot)
	binary.NativeEndian.PutUint32(b[4:], 7)
	binary.NativeEndian.PutUint16(b[8:], uint16(len(payload)))
	b[10] = cnt
	copy(b[16:], payload)
	return b
}

// TestBufferBounds: a session holds at most PerSession packets and all
// of them TotalBytes, the session's oldest dropped first; its first
// packet held is reported once per episode; Release sends what it held
// in order, and the next packet starts a new episode; Discard drops.
func TestBufferBounds(t *testing.T) {
	b := &Buffer{q: map[uint32]*queue{}, PerSession: 4, TotalBytes: 20}
	var firsts []string
	b.OnFirst = func(slot uint32, cnt uint8) { firsts = append(firsts, fmt.Sprintf("%d/%d", slot, cnt)) }
	var sent []string
	b.Inject = func(frame []byte, ifindex uint32) error {
		if ifindex != 7 {
			t.Errorf("released by ifindex %d, want 7", ifindex)
		}
		sent = append(sent, string(frame))
		return nil
	}
	for i := range 6 {
		b.take(rec(1, 2, fmt.Sprintf("a%d", i)))
	}
	// Session 1 holds its last 4 (8 bytes). Session 2's 3-byte
	// packets: 4 fill the 20 bytes, each later one drops its oldest.
	for i := range 12 {
		b.take(rec(2, 0, fmt.Sprintf("b%02d", i)))
	}
	st := b.Stats()
	if st.Now != 4+4 || st.Dropped != 2+8 || st.Held != 18 || st.Reports != 2 {
		t.Errorf("stats %+v, want 8 held now, 10 dropped, 18 held, 2 reports", st)
	}
	// A third session with nothing held and no room: its packet goes.
	b.take(rec(4, 0, "zzzzz"))
	if st := b.Stats(); st.Now != 8 || st.Dropped != 11 {
		t.Errorf("a new session's packet with the buffer full: %+v", st)
	}
	// Session 4's packet was dropped, and still tells the SMF the UE
	// has downlink data.
	if !slices.Equal(firsts, []string{"1/2", "2/0", "4/0"}) {
		t.Errorf("first packets reported %v", firsts)
	}
	b.Release(1)
	if !slices.Equal(sent, []string{"a2", "a3", "a4", "a5"}) {
		t.Errorf("released %v, want a2..a5 in order", sent)
	}
	b.take(rec(1, 2, "again"))
	if len(firsts) != 4 {
		t.Errorf("a new episode was not reported: %v", firsts)
	}
	b.Discard(2)
	b.Discard(4)
	if st := b.Stats(); st.Now != 1 || st.Released != 4 || st.Dropped != 11+4 {
		t.Errorf("after release and discard: %+v", st)
	}
	b.take([]byte{1, 2, 3})     // short: ignored
	b.take(rec(3, 0, "x")[:16]) // its length past the record
	if st := b.Stats(); st.Held != 19 {
		t.Errorf("malformed records held: %+v", st)
	}
}

// TestBufferEndMarker: an End Marker record is reported with its TEID
// and sender, counted, and held nowhere.
func TestBufferEndMarker(t *testing.T) {
	b := &Buffer{q: map[uint32]*queue{}, PerSession: 4, TotalBytes: 1 << 20}
	var teid uint32
	var from netip.Addr
	b.OnEndMarker = func(t uint32, f netip.Addr) { teid, from = t, f }
	frame := make([]byte, 14+20+8+8)
	copy(frame[14+12:], []byte{192, 0, 2, 50})
	r := rec(0, 0, string(frame))
	binary.BigEndian.PutUint32(r, 0x9000)
	r[11] = recEndMarker
	b.take(r)
	if st := b.Stats(); teid != 0x9000 || from != netip.MustParseAddr("192.0.2.50") || st.EndMarkers != 1 || st.Held != 0 || st.Now != 0 {
		t.Errorf("end marker: TEID %#x from %v, stats %+v", teid, from, st)
	}
}

// TestBufferBAR: a session's BAR bounds what it holds (its Suggested
// Buffering Packets Count, the oldest dropped first) and delays the
// report (its Downlink Data Notification Delay): the SMF hears of the
// packets after the delay, and not at all if the FAR forwarded them
// (released) before it ran out.
func TestBufferBAR(t *testing.T) {
	b := &Buffer{q: map[uint32]*queue{}, PerSession: 256, TotalBytes: 1 << 20}
	var sent []string
	b.Inject = func(frame []byte, _ uint32) error { sent = append(sent, string(frame)); return nil }
	s := &n4.Session{UPSEID: 7, BAR: &n4.BAR{ID: 1, Delay: 100 * time.Millisecond, Count: 3},
		PDRs: map[uint16]*n4.PDR{5: {ID: 5, FAR: 2, HasFAR: true}}, FARs: map[uint32]*n4.FAR{2: {ID: 2, Action: n4.ActBuff | n4.ActNocp}}}
	p := &Plane{kept: map[uint64]*kept{7: {Slot: 2, Cnt: map[uint16]uint8{5: 1}, S: s}}, bySlot: map[uint32]uint64{2: 7}}
	reported := make(chan uint16, 4)
	p.Hold(b, func(seid uint64, pdr uint16) {
		if seid != 7 {
			t.Errorf("reported session %#x", seid)
		}
		reported <- pdr
	})
	start := time.Now()
	for i := range 5 {
		b.take(rec(2, 1, fmt.Sprintf("p%d", i)))
	}
	if st := b.Stats(); st.Now != 3 || st.Dropped != 2 {
		t.Errorf("with a suggested count of 3: %+v", st)
	}
	select {
	case pdr := <-reported:
		if d := time.Since(start); pdr != 5 || d < 100*time.Millisecond {
			t.Errorf("PDR %d reported after %v, want PDR 5 after 100 ms", pdr, d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no report after the delay")
	}
	b.Release(2)
	if !slices.Equal(sent, []string{"p2", "p3", "p4"}) {
		t.Errorf("released %v, want the newest 3 in order", sent)
	}
	// Released before the delay ran out: never reported.
	b.take(rec(2, 1, "q"))
	b.Release(2)
	select {
	case pdr := <-reported:
		t.Errorf("PDR %d reported though its packets were released before the delay", pdr)
	case <-time.After(300 * time.Millisecond):
	}
	// A FAR that buffers without NOCP: held, the SMF not told.
	s.BAR = nil
	s.FARs[2] = &n4.FAR{ID: 2, Action: n4.ActBuff}
	b.take(rec(2, 1, "r"))
	select {
	case pdr := <-reported:
		t.Errorf("PDR %d reported though its FAR does not ask (no NOCP)", pdr)
	case <-time.After(200 * time.Millisecond):
	}
	if st := b.Stats(); st.Now != 1 {
		t.Errorf("held %d, want the packet held", st.Now)
	}
}
