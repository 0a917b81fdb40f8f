// SPDX-License-Identifier: Apache-2.0

package upf

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wmnsk/go-pfcp/ie"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/n4"
)

// Plane carries N4's sessions (n4.UserPlane): each compiled into its
// dataplane record and written into a slot of its own, then appended to
// the journal and synced before the answer leaves. The journal (one
// line per change: the CRC-32C of the JSON that follows, a space, the
// JSON) is read back when the agent starts, each session put back in
// its slot with its TEIDs and counters, and rewritten with one line per
// session.
type Plane struct {
	mu    sync.Mutex
	dp    *commit.Sessions
	path  string
	f     *os.File
	kept  map[uint64]*kept // by UP SEID
	buf   []byte
	lines int  // in the journal, for the next rewrite
	dirty bool // written since the last sync
	// held is the buffer of downlink packets (nil: none), report how
	// a session's first packet held reaches its SMF; bySlot names each
	// slot's session.
	held   *Buffer
	report func(seid uint64, pdr uint16)
	bySlot map[uint32]uint64
	// reserved are slots ChooseTEID gave sessions not carried yet.
	reserved map[uint64]uint32
	// peers places the GTP-U peers multi-access rules steer between
	// (nil: their accesses are taken as up, with no RTT).
	peers *Peers
}

// kept is a session as the journal holds it: its slot and the counter
// index of each PDR.
type kept struct {
	Slot uint32           `json:"slot"`
	Cnt  map[uint16]uint8 `json:"cnt"`
	S    *n4.Session      `json:"session"`
}

// record is one journal line: a session put, or deleted (by UP SEID).
type record struct {
	Put *kept  `json:"put,omitempty"`
	Del uint64 `json:"del,omitempty"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Open reads the journal at path (none: no sessions), puts every session
// it holds back into dp, and returns the plane with them (Sessions).
// peers (nil: none) tracks the peers of multi-access sessions'
// accesses.
func Open(path string, dp *commit.Sessions, peers *Peers) (*Plane, error) {
	p := &Plane{dp: dp, path: path, kept: map[uint64]*kept{}, bySlot: map[uint32]uint64{}, reserved: map[uint64]uint32{},
		peers: peers}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := p.replay(b); err != nil {
		return nil, err
	}
	for _, k := range p.kept {
		rec, keys, err := Compile(k.S, k.Cnt)
		if err != nil {
			return nil, fmt.Errorf("session %#x of %s: %w", k.S.UPSEID, path, err)
		}
		p.own(rec, keys, k.Slot)
		if err := dp.Restore(k.Slot, rec, keys); err != nil {
			return nil, fmt.Errorf("session %#x: %w", k.S.UPSEID, err)
		}
		p.bySlot[k.Slot] = k.S.UPSEID
	}
	if err := dp.Settle(); err != nil {
		return nil, err
	}
	if err := p.rewrite(); err != nil {
		return nil, err
	}
	return p, nil
}

// replay reads journal b into p.kept. A last line without its newline
// was cut short by a crash, before its answer left: dropped. A whole
// line whose checksum fails was damaged after it was written.
func (p *Plane) replay(b []byte) error {
	for off := 0; off < len(b); {
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			break
		}
		line := b[off : off+nl]
		var sum uint32
		var r record
		if len(line) < 10 || line[8] != ' ' {
			return fmt.Errorf("session journal %s: damaged line at offset %d", p.path, off)
		}
		if _, err := fmt.Sscanf(string(line[:8]), "%08x", &sum); err != nil || crc32.Checksum(line[9:], castagnoli) != sum {
			return fmt.Errorf("session journal %s: line at offset %d fails its checksum", p.path, off)
		}
		if err := json.Unmarshal(line[9:], &r); err != nil {
			return fmt.Errorf("session journal %s: line at offset %d: %w", p.path, off, err)
		}
		switch {
		case r.Put != nil && r.Put.S != nil:
			p.kept[r.Put.S.UPSEID] = r.Put
		case r.Del != 0:
			delete(p.kept, r.Del)
		}
		off += nl + 1
	}
	return nil
}

// rewrite replaces the journal with one line per session. Called with
// p.mu held, or before p is shared.
func (p *Plane) rewrite() error {
	var out []byte
	for _, k := range p.kept {
		var err error
		if out, err = appendLine(out, record{Put: k}); err != nil {
			return err
		}
	}
	// Durable, and what it holds: every change written so far.
	if err := atomicfile.Replace(p.path, out, 0o600, true); err != nil {
		return fmt.Errorf("session journal: %w", err)
	}
	if p.f != nil {
		_ = p.f.Close()
	}
	f, err := os.OpenFile(p.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	p.f, p.lines, p.dirty = f, len(p.kept), false
	return nil
}

func appendLine(dst []byte, r record) ([]byte, error) {
	j, err := json.Marshal(r)
	if err != nil {
		return dst, err
	}
	dst = fmt.Appendf(dst, "%08x ", crc32.Checksum(j, castagnoli))
	dst = append(dst, j...)
	return append(dst, '\n'), nil
}

// write appends r to the journal, synced by Sync (the N4 node calls it
// once for a batch of requests, before their answers leave); when the
// journal has grown to more than twice the lines its sessions need, it
// is rewritten. Called with p.mu held.
func (p *Plane) write(r record) error {
	var err error
	if p.buf, err = appendLine(p.buf[:0], r); err != nil {
		return err
	}
	if _, err := p.f.Write(p.buf); err != nil {
		return fmt.Errorf("session journal: %w", err)
	}
	p.dirty = true
	p.lines++
	if p.lines > 2*len(p.kept)+1024 {
		return p.rewrite()
	}
	return nil
}

// Sync makes what Put and Delete wrote durable (n4.Syncer).
func (p *Plane) Sync() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.dirty || p.f == nil {
		return nil
	}
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("session journal: %w", err)
	}
	p.dirty = false
	return nil
}

// Sessions returns the sessions the plane holds.
func (p *Plane) Sessions() []*n4.Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*n4.Session, 0, len(p.kept))
	for _, k := range p.kept {
		out = append(out, k.S)
	}
	return out
}

// Put carries session s (n4.UserPlane): compiled, written into its slot
// (a new session's taken from the free ones), journaled.
func (p *Plane) Put(s *n4.Session) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.kept[s.UPSEID]
	k := &kept{Cnt: map[uint16]uint8{}, S: s}
	if old != nil {
		k.Slot, k.Cnt = old.Slot, maps.Clone(old.Cnt)
	}
	rec, keys, err := Compile(s, k.Cnt)
	if err != nil {
		return err
	}
	if old != nil {
		// A counter a PDR takes over from one gone starts at zero.
		for id, c := range k.Cnt {
			if was, ok := old.Cnt[id]; !ok || was != c {
				keys.Reset = append(keys.Reset, c)
			}
		}
	}
	if old == nil {
		if slot, ok := p.reserved[s.UPSEID]; ok {
			k.Slot = slot
			delete(p.reserved, s.UPSEID)
		} else if k.Slot, err = p.dp.Slot(); errors.Is(err, commit.ErrSessionsFull) {
			return fmt.Errorf("%w: %w", n4.ErrNoResources, err)
		} else if err != nil {
			return err
		}
	}
	p.own(rec, keys, k.Slot)
	if err := p.dp.Put(k.Slot, rec, keys); err != nil {
		if old == nil {
			p.dp.Unreserve(k.Slot)
		}
		return err
	}
	// Kept before the line is written: a rewrite the write makes holds
	// it.
	p.kept[s.UPSEID] = k
	if err := p.write(record{Put: k}); err != nil {
		// Not kept: the dataplane goes back to what the journal says.
		if old != nil {
			p.kept[s.UPSEID] = old
		} else {
			delete(p.kept, s.UPSEID)
		}
		p.undo(old, k.Slot)
		return err
	}
	p.bySlot[k.Slot] = s.UPSEID
	// Forwarding again: what was held goes, in order, after the flip.
	if p.held != nil && !buffers(rec) {
		p.held.Release(k.Slot)
	}
	return nil
}

// steeringNames name the steering modes (ie.SteeringMode*).
var steeringNames = []string{"active-standby", "smallest-delay", "load-balancing", "priority-based"}

// accesses fills in sp (multi-access PDR) MAR m's mode and accesses:
// each one's FAR, outer header, and its peer's state (peers, by
// address; a peer not tracked counts as up).
func (p *Plane) accesses(sp *dataplane.SessionPDR, s *n4.Session, m *n4.MAR, peers map[netip.Addr]PeerStatus) {
	sp.MAR = m.ID
	if int(m.Mode) < len(steeringNames) {
		sp.Steering = steeringNames[m.Mode]
	}
	pref := m.Preferred()
	for i, a := range m.Access {
		f := s.FARs[a.FAR]
		if !a.HasFAR || f == nil {
			continue
		}
		x := dataplane.SessionAccess{FAR: a.FAR, Up: true, Preferred: i == pref && m.Mode != ie.SteeringModeLoadBalancing}
		if o := f.Outer; o != nil {
			peer := n4.OuterPeer(o)
			x.OuterTEID, x.OuterAddr = o.TEID, peer.String()
			if st, ok := peers[peer]; ok {
				x.Up, x.RTT = st.Up, st.RTT
			}
		}
		sp.Accesses = append(sp.Accesses, x)
	}
}

// buffers tells whether a PDR of record rec has its packets buffered.
func buffers(rec *bpf.Sess) bool {
	for _, e := range rec.Pdr[:rec.Npdr] {
		if e.Action == bpf.SessBuff {
			return true
		}
	}
	return false
}

// Hold makes b the buffer of the sessions' downlink packets: the first
// a session holds is reported (report, the SMF's downlink data
// report), and a session whose FAR forwards again releases what it
// held.
func (p *Plane) Hold(b *Buffer, report func(seid uint64, pdr uint16)) {
	p.mu.Lock()
	p.held, p.report = b, report
	p.mu.Unlock()
	b.OnFirst = p.first
	b.Limit = p.bufferLimit
}

// bufferLimit is how many packets session slot's BAR suggests holding
// (0: none suggested).
func (p *Plane) bufferLimit(slot uint32) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := p.kept[p.bySlot[slot]]; k != nil && k.S.BAR != nil {
		return int(k.S.BAR.Count)
	}
	return 0
}

// first reports the first packet a session held, by the PDR of counter
// cnt.
func (p *Plane) first(slot uint32, cnt uint8) {
	p.mu.Lock()
	seid, ok := p.bySlot[slot]
	k := p.kept[seid]
	report := p.report
	p.mu.Unlock()
	if !ok || k == nil || report == nil {
		return
	}
	for id, c := range k.Cnt {
		if c != cnt {
			continue
		}
		// Only a FAR that asks (NOCP) has the SMF told.
		pdr := k.S.PDRs[id]
		if pdr == nil {
			return
		}
		// A multi-access PDR buffers by its MAR's first access's FAR.
		if far, ok := farOf(k.S, pdr); !ok || k.S.FARs[far] == nil || k.S.FARs[far].Action&n4.ActNocp == 0 {
			return
		}
		// The BAR's Downlink Data Notification Delay: told only if
		// the session still holds packets then.
		if bar := k.S.BAR; bar != nil && bar.Delay > 0 {
			time.AfterFunc(bar.Delay, func() {
				p.mu.Lock()
				held, same := p.held, p.bySlot[slot] == seid
				p.mu.Unlock()
				if same && held != nil && held.Holding(slot) {
					report(seid, id)
				}
			})
			return
		}
		report(seid, id)
		return
	}
}

// undo puts slot back as old left it (nil: no session).
func (p *Plane) undo(old *kept, slot uint32) {
	if old == nil {
		_ = p.dp.Delete(slot)
		return
	}
	if rec, keys, err := Compile(old.S, maps.Clone(old.Cnt)); err == nil {
		p.own(rec, keys, slot)
		_ = p.dp.Put(slot, rec, keys)
	}
}

// own marks in rec the uplink TEID that names slot, if the session has
// one (ChooseTEID gave it), and the places of its accesses' peers.
func (p *Plane) own(rec *bpf.Sess, keys commit.SessionKeys, slot uint32) {
	if p.peers != nil {
		p.peers.placeAll(rec)
	}
	rec.Own = 0
	for _, t := range keys.TEIDs {
		if t&p.dp.Mask() == slot {
			rec.Own = bpf.BE32(t)
			return
		}
	}
}

// ChooseTEID gives the session of seid a slot (its own, or one kept for
// it until it is carried) and returns a TEID that names it: random
// above the slot bits, not taken (n4.TEIDChooser).
func (p *Plane) ChooseTEID(seid uint64, taken func(uint32) bool) (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var slot uint32
	if k := p.kept[seid]; k != nil {
		slot = k.Slot
	} else if r, ok := p.reserved[seid]; ok {
		slot = r
	} else {
		var err error
		if slot, err = p.dp.Slot(); errors.Is(err, commit.ErrSessionsFull) {
			return 0, fmt.Errorf("%w: %w", n4.ErrNoResources, err)
		} else if err != nil {
			return 0, err
		}
		p.reserved[seid] = slot
	}
	mask := p.dp.Mask()
	for range 1 << 16 {
		t := rand.Uint32()&^mask | slot
		if t != 0 && !taken(t) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: no TEID free for slot %d", n4.ErrNoResources, slot)
}

// Delete takes session s out of the dataplane and the journal.
func (p *Plane) Delete(s *n4.Session) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.kept[s.UPSEID]
	if k == nil {
		// Never carried: the slot ChooseTEID kept for it goes back.
		if slot, ok := p.reserved[s.UPSEID]; ok {
			delete(p.reserved, s.UPSEID)
			p.dp.Unreserve(slot)
		}
		return nil
	}
	delete(p.kept, s.UPSEID)
	if err := p.write(record{Del: s.UPSEID}); err != nil {
		p.kept[s.UPSEID] = k
		return err
	}
	delete(p.bySlot, k.Slot)
	if p.held != nil {
		p.held.Discard(k.Slot)
	}
	return p.dp.Delete(k.Slot)
}

// Counters returns the packets and bytes of each PDR of session seid,
// by PDR ID (false: no such session).
func (p *Plane) Counters(seid uint64) (map[uint16]bpf.Ctr, bool, error) {
	p.mu.Lock()
	k := p.kept[seid]
	p.mu.Unlock()
	if k == nil {
		return nil, false, nil
	}
	c, err := p.dp.Counters(k.Slot)
	if err != nil {
		return nil, true, err
	}
	out := map[uint16]bpf.Ctr{}
	for id, i := range k.Cnt {
		out[id] = c[i]
	}
	return out, true, nil
}

// Usage returns what each PDR of session s counted (n4.Meter).
func (p *Plane) Usage(s *n4.Session) (map[uint16]n4.Usage, error) {
	c, _, err := p.Counters(s.UPSEID)
	out := make(map[uint16]n4.Usage, len(c))
	for id, v := range c {
		out[id] = n4.Usage{Packets: v.Packets, Bytes: v.Bytes}
	}
	return out, err
}

// UsageMany returns what each PDR of each of sessions ss counted, by UP
// SEID (n4.BulkMeter): one batch read of every slot's counters.
func (p *Plane) UsageMany(ss []*n4.Session) (map[uint64]map[uint16]n4.Usage, error) {
	all, err := p.dp.AllCounters()
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]map[uint16]n4.Usage, len(ss))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range ss {
		k := p.kept[s.UPSEID]
		if k == nil {
			continue
		}
		u := make(map[uint16]n4.Usage, len(k.Cnt))
		for id, i := range k.Cnt {
			if at := int(k.Slot)*bpf.SessPDRs + int(i); at < len(all) {
				u[id] = n4.Usage{Packets: all[at].Packets, Bytes: all[at].Bytes}
			}
		}
		out[s.UPSEID] = u
	}
	return out, nil
}

// Barrier returns once packets that read a session's record before the
// call are done (n4.Barrier).
func (p *Plane) Barrier() error { return p.dp.Barrier() }

// Close closes the journal.
func (p *Plane) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil
	}
	return p.f.Close()
}

var (
	_ n4.UserPlane   = (*Plane)(nil)
	_ n4.Syncer      = (*Plane)(nil)
	_ n4.Meter       = (*Plane)(nil)
	_ n4.BulkMeter   = (*Plane)(nil)
	_ n4.Barrier     = (*Plane)(nil)
	_ n4.TEIDChooser = (*Plane)(nil)
)

// Status returns each session with its PDRs as the dataplane holds them
// and their counters, by UP SEID.
func (p *Plane) Status(q dataplane.SessionQuery) ([]dataplane.SessionStatus, uint64, error) {
	p.mu.Lock()
	var list []*kept
	if len(q.UPSEIDs) > 0 {
		seen := make(map[uint64]bool, len(q.UPSEIDs))
		for _, id := range q.UPSEIDs {
			if k := p.kept[id]; k != nil && id > q.After && !seen[id] {
				seen[id] = true
				list = append(list, k)
			}
		}
	} else {
		list = make([]*kept, 0, len(p.kept))
		for id, k := range p.kept {
			if id > q.After {
				list = append(list, k)
			}
		}
	}
	p.mu.Unlock()
	slices.SortFunc(list, func(a, b *kept) int { return cmp.Compare(a.S.UPSEID, b.S.UPSEID) })
	var next uint64
	if q.Limit > 0 && len(list) > q.Limit {
		list = list[:q.Limit]
		next = list[len(list)-1].S.UPSEID
	}
	out := make([]dataplane.SessionStatus, 0, len(list))
	peers := map[netip.Addr]PeerStatus{}
	if p.peers != nil {
		for _, x := range p.peers.Status() {
			peers[x.Addr] = x
		}
	}
	for _, k := range list {
		c, err := p.dp.Counters(k.Slot)
		if err != nil {
			return nil, 0, err
		}
		s := k.S
		st := dataplane.SessionStatus{UPSEID: s.UPSEID, CPSEID: s.CPSEID, CPNode: s.CPNode}
		if s.CPAddr.IsValid() {
			st.CPAddr = s.CPAddr.String()
		}
		ids := slices.Sorted(maps.Keys(s.PDRs))
		for _, id := range ids {
			pdr := s.PDRs[id]
			sp := dataplane.SessionPDR{ID: id, Precedence: pdr.Precedence, Uplink: pdr.Source == ie.SrcInterfaceAccess,
				QFI: pdr.QFI, SDF: pdr.SDF, Action: "drop"}
			if pdr.HasTEID {
				sp.TEID = pdr.TEID
			}
			var ue []string
			if pdr.UEIP.IsValid() {
				ue = append(ue, pdr.UEIP.String())
			}
			if pdr.UEIP6.IsValid() {
				ue = append(ue, netip.PrefixFrom(pdr.UEIP6, 64).String())
			}
			sp.UEIP = strings.Join(ue, ",")
			if far, ok := farOf(s, pdr); ok && s.FARs[far] != nil {
				f := s.FARs[far]
				sp.FAR = f.ID
				switch {
				case f.Action&n4.ActForw != 0:
					sp.Action = "forward"
					if f.Outer != nil && f.Outer.OuterHeaderCreationDescription&ohcGTPUv4 != 0 {
						sp.OuterTEID, sp.OuterAddr = f.Outer.TEID, f.Outer.IPv4Address.String()
					}
				case f.Action&n4.ActBuff != 0:
					sp.Action = "buffer"
				}
			}
			if m := s.MARs[pdr.MAR]; pdr.HasMAR && m != nil {
				p.accesses(&sp, s, m, peers)
			}
			for _, q := range pdr.QERs {
				if qer := s.QERs[q]; qer != nil && (sp.Uplink && qer.GateUL != 0 || !sp.Uplink && qer.GateDL != 0) {
					sp.GateClosed = true
				}
			}
			if i, ok := k.Cnt[id]; ok {
				sp.Packets, sp.Bytes = c[i].Packets, c[i].Bytes
			}
			st.PDRs = append(st.PDRs, sp)
		}
		out = append(out, st)
	}
	return out, next, nil
}
