// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"context"
	"net/netip"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// Heartbeats to the peers (TS 29.244 6.2.2): the node asks each
// associated SMF every Options.HeartbeatEvery; a peer that leaves
// Options.HeartbeatTries requests in a row unanswered is down until it
// answers again, and an answer whose recovery time stamp moved says the
// SMF restarted (noted, as its own heartbeats say it). The associations
// stay either way: the SMF sets them up again when it comes back.

// Liveness defaults.
const (
	DefaultHeartbeatEvery = 5 * time.Second
	DefaultHeartbeatTries = 3
)

// liveness is a peer's, kept beside its association.
type liveness struct {
	up     bool
	missed int // requests in a row unanswered
	asked  uint32
	// waiting: the last request is unanswered.
	waiting bool
}

// PeerUp tells, by node ID, which associated peers answer heartbeats.
func (n *Node) PeerUp() map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]bool{}
	for id := range n.peers {
		out[id] = n.live[id] == nil || n.live[id].up
	}
	return out
}

// heartbeats asks every associated peer every HeartbeatEvery until ctx
// ends.
func (n *Node) heartbeats(ctx context.Context) {
	t := time.NewTicker(n.opt.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.beat()
		}
	}
}

// beat counts the unanswered requests of the last round and sends the
// next one to each peer.
func (n *Node) beat() {
	type req struct {
		to  netip.AddrPort
		seq uint32
		id  string
	}
	var out []req
	n.mu.Lock()
	for id, p := range n.peers {
		l := n.live[id]
		if l == nil {
			l = &liveness{up: true}
			n.live[id] = l
		}
		if l.waiting {
			l.missed++
			if l.missed >= n.opt.HeartbeatTries && l.up {
				l.up = false
				n.opt.Log.Warn("n4: peer does not answer heartbeats", "node_id", id, "missed", l.missed)
				n.count("peer_down")
			}
		}
		n.seq = (n.seq + 1) & 0xffffff
		l.asked, l.waiting = n.seq, true
		out = append(out, req{p.Addr, n.seq, id})
	}
	n.mu.Unlock()
	for _, r := range out {
		b := marshal(message.NewHeartbeatRequest(r.seq, ie.NewRecoveryTimeStamp(n.opt.Recovery), nil))
		if _, err := n.conn.WriteToUDPAddrPort(b, r.to); err != nil {
			n.count("send_failed")
		}
	}
}

// answered takes a Heartbeat Response: the peer that was asked under its
// sequence number is up; false when no peer was.
func (n *Node) answered(b []byte, from netip.AddrPort) bool {
	m, err := message.Parse(b)
	if err != nil {
		return false
	}
	hb, ok := m.(*message.HeartbeatResponse)
	if !ok {
		return false
	}
	var ts time.Time
	if hb.RecoveryTimeStamp != nil {
		ts, _ = hb.RecoveryTimeStamp.RecoveryTimeStamp()
	}
	n.mu.Lock()
	found := false
	for id, l := range n.live {
		p := n.peers[id]
		if p == nil || !l.waiting || l.asked != hb.Sequence() || p.Addr != from {
			continue
		}
		found = true
		if !l.up {
			n.opt.Log.Info("n4: peer answers heartbeats again", "node_id", id)
		}
		l.up, l.missed, l.waiting = true, 0, false
		if !ts.IsZero() && !p.Recovery.Equal(ts) {
			n.opt.Log.Warn("n4: peer restarted", "node_id", id, "was", p.Recovery, "now", ts)
			p.Recovery = ts // in memory only, as heartbeat notes it
		}
	}
	n.mu.Unlock()
	return found
}
