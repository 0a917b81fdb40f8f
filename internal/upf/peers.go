// SPDX-License-Identifier: Apache-2.0

package upf

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/rtloop"
)

// PeerWriter is the dataplane's table of GTP-U peers (commit.Writer's
// GTP-U peer methods).
type PeerWriter interface {
	SetGTPUPeer(i uint32, addr netip.Addr) error
	ClearGTPUPeers() error
	GTPUPeer(i uint32) (bpf.GTPUPeer, error)
	PutGTPUPeer(i uint32, v bpf.GTPUPeer) error
	AskGTPUPeer(i uint32, v bpf.GTPUPeer, want uint16) error
}

// DefaultEchoInterval is how often Peers sends each peer an Echo
// Request (TS 29.281 7.2.1 asks for no more than one a minute per path
// for path management; a multi-access session's failover needs its
// access's loss seen in seconds, as ATSSS-LL's PMF measures it).
const DefaultEchoInterval = time.Second

// echoMisses is how many Echo Requests in a row a peer leaves
// unanswered before it counts as down: its access gives way within
// echoMisses + 1/2 intervals of its loss (Run), and one lost datagram
// moves nothing.
const echoMisses = 2

// Peers tracks the GTP-U peers of multi-access sessions' accesses (the
// gNBs and N3IWFs their MARs steer between): each at a place of the
// dataplane's table (XDP's multi-access steering reads it, ma_pick),
// sent an Echo Request every Interval from N3, whose answer XDP times;
// a peer that leaves echoMisses in a row unanswered is down until it
// answers again, and its RTT is the smoothed time to the answer.
// A peer keeps its place while the agent runs (at most bpf.GTPUPeers).
type Peers struct {
	w        PeerWriter
	send     func(peer netip.Addr, msg []byte) error
	interval time.Duration
	log      *slog.Logger

	mu   sync.Mutex
	ix   map[netip.Addr]uint32
	st   []*peer
	full uint64 // peers refused a place
}

// peer is Peers' state of one: its address, the Echo Request in
// flight (seq, sent at sentNs on CLOCK_MONOTONIC, bpf_ktime_get_ns's
// clock), answers missed in a row, the smoothed RTT.
type peer struct {
	addr    netip.Addr
	round   uint16
	seq     uint16 // of the request in flight (commit.GTPUSeq)
	sentNs  int64
	judged  bool // the answer to seq was looked for
	misses  int
	srttNs  int64
	down    bool
	sent    uint64
	answers uint64
}

// NewPeers returns Peers writing w, sending Echo Requests with send
// every interval (0: DefaultEchoInterval). Places the last run left are
// cleared first: an address that is no peer now is timed no more.
func NewPeers(w PeerWriter, send func(netip.Addr, []byte) error, interval time.Duration, log *slog.Logger) (*Peers, error) {
	if interval <= 0 {
		interval = DefaultEchoInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Peers{w: w, send: send, interval: interval, log: log, ix: map[netip.Addr]uint32{}}
	return p, w.ClearGTPUPeers()
}

// Interval is how often each peer is sent an Echo Request.
func (p *Peers) Interval() time.Duration { return p.interval }

// Place returns peer a's place in the dataplane's table + 1, giving it
// one the first time: 0 when a is not IPv4 or the table is full (its
// access is then taken as up, with no RTT).
func (p *Peers) Place(a netip.Addr) uint16 {
	a = a.Unmap()
	if !a.Is4() {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.ix[a]; ok {
		return uint16(i + 1)
	}
	i := uint32(len(p.st))
	if i >= bpf.GTPUPeers {
		p.full++
		return 0
	}
	if err := p.w.SetGTPUPeer(i, a); err != nil {
		p.log.Warn("upf: GTP-U peer not tracked", "peer", a, "err", err)
		return 0
	}
	p.ix[a] = i
	p.st = append(p.st, &peer{addr: a})
	return uint16(i + 1)
}

// placeAll fills in the peers' places of record rec's multi-access
// rules.
func (p *Peers) placeAll(rec *bpf.Sess) {
	for _, e := range rec.Pdr[:rec.Npdr] {
		if e.Ma == 0 || int(e.Ma) > len(rec.Ma) {
			continue
		}
		m := &rec.Ma[e.Ma-1]
		m.Peer1 = p.Place(addrOf(e.OhcAddr))
		m.Peer2 = p.Place(addrOf(m.Alt.OhcAddr))
	}
}

// addrOf is the address a __be32 field holds.
func addrOf(v uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// Run probes the peers until ctx ends, on a real-time thread as the
// path monitor's probes are (a failover is no later than the gateway's
// load makes the loop): every half interval, each peer's last Echo
// Request is judged (answered, or missed) or the next is sent, in turn.
// A request is judged half an interval after it left (an answer later
// than that counts as lost), so a peer cut off just after an answer is
// down within 2.5 intervals: two requests missed.
func (p *Peers) Run(ctx context.Context) {
	send := false
	rtloop.Run(ctx, p.log, "GTP-U echo", p.interval/2, func(time.Time) {
		send = !send
		p.Round(send)
	})
}

// Round judges each peer's last Echo Request (send false) or sends each
// the next (send true).
func (p *Peers) Round(send bool) {
	p.mu.Lock()
	st := slices.Clone(p.st)
	p.mu.Unlock()
	for i, x := range st {
		var err error
		if send {
			err = p.ask(uint32(i), x)
		} else {
			err = p.judge(uint32(i), x)
		}
		if err != nil {
			p.log.Warn("upf: GTP-U echo", "peer", x.addr, "err", err)
		}
	}
}

// judge reads the answer to peer x's last Echo Request (at place i): its
// RTT, or a miss; two in a row make it down, one answered up.
func (p *Peers) judge(i uint32, x *peer) error {
	v, err := p.w.GTPUPeer(i)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if x.sentNs == 0 || x.judged {
		return nil
	}
	x.judged = true
	if v.EchoSeq == uint32(x.seq) && v.WantSeq == uint32(x.seq) && int64(v.EchoNs) >= x.sentNs {
		rtt := int64(v.EchoNs) - x.sentNs
		if x.srttNs == 0 {
			x.srttNs = rtt
		} else {
			x.srttNs += (rtt - x.srttNs) / 8
		}
		x.misses = 0
		x.answers++
	} else {
		x.misses++
	}
	down := x.misses >= echoMisses
	if down != x.down {
		x.down = down
		p.log.Info("upf: GTP-U peer", "peer", x.addr, "up", !down, "misses", x.misses)
	}
	v.Down = 0
	if x.down {
		v.Down = 1
	}
	v.RttUs = 0
	if x.srttNs != 0 {
		v.RttUs = uint32(max(x.srttNs/1000, 1))
	}
	return p.w.PutGTPUPeer(i, v)
}

// ask sends peer x (at place i) its next Echo Request, XDP told first
// which sequence number to time the answer of.
func (p *Peers) ask(i uint32, x *peer) error {
	v, err := p.w.GTPUPeer(i)
	if err != nil {
		return err
	}
	p.mu.Lock()
	x.round++
	x.seq = commit.GTPUSeq(i, x.round)
	if err := p.w.AskGTPUPeer(i, v, x.seq); err != nil {
		p.mu.Unlock()
		return err
	}
	x.sentNs, x.judged = rtloop.Monotonic(), false
	x.sent++
	seq := x.seq
	p.mu.Unlock()
	return p.send(x.addr, EchoRequest(seq))
}

// EchoRequest is a GTP-U Echo Request (TS 29.281 7.2.1) with sequence
// number seq: version 1, GTP, S set, TEID 0, no IEs.
func EchoRequest(seq uint16) []byte {
	b := []byte{0x32, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[8:], seq)
	return b
}

// PeerStatus is a tracked peer as Peers sees it.
type PeerStatus struct {
	Addr    netip.Addr
	Up      bool
	RTT     time.Duration // smoothed (0: no answer yet)
	Sent    uint64        // Echo Requests
	Answers uint64        // answered in time
}

// Status lists the tracked peers.
func (p *Peers) Status() []PeerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PeerStatus, 0, len(p.st))
	for _, x := range p.st {
		out = append(out, PeerStatus{Addr: x.addr, Up: !x.down, RTT: time.Duration(x.srttNs), Sent: x.sent, Answers: x.answers})
	}
	return out
}

// Refused counts peers the table had no place for.
func (p *Peers) Refused() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.full
}
