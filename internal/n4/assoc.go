// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// heartbeat answers a Heartbeat Request with the node's recovery time
// stamp. A peer's changed time stamp says it restarted: noted in memory
// and logged, not written back (Changed): a heartbeat, which anyone
// reaching N4 can forge at any rate, costs no synced write; the SMF
// sets its association up again, which is.
func (n *Node) heartbeat(m *message.HeartbeatRequest, from netip.AddrPort) []byte {
	if m.RecoveryTimeStamp != nil {
		if ts, err := m.RecoveryTimeStamp.RecoveryTimeStamp(); err == nil {
			n.mu.Lock()
			for _, p := range n.peers {
				if p.Addr == from && !p.Recovery.Equal(ts) {
					// Once a minute a peer: some (pfcpsim) stamp every
					// heartbeat with the time it is sent.
					if now := time.Now(); now.Sub(n.warned[p.NodeID]) > time.Minute {
						n.warned[p.NodeID] = now
						n.opt.Log.Warn("n4: peer restarted", "node_id", p.NodeID, "was", p.Recovery, "now", ts)
					}
					p.Recovery = ts
				}
			}
			n.mu.Unlock()
		}
	}
	n.count("answered")
	return marshal(message.NewHeartbeatResponse(m.Sequence(), ie.NewRecoveryTimeStamp(n.opt.Recovery)))
}

// associate sets up (or sets up again) the association with the
// requesting node: Node ID and Recovery Time Stamp are mandatory.
func (n *Node) associate(m *message.AssociationSetupRequest, from netip.AddrPort) []byte {
	t, seq := m.MessageType(), m.Sequence()
	id, c := nodeID(m.NodeID)
	if c != 0 {
		return n.refuse(t, seq, c, ie.NodeID, 0)
	}
	if m.RecoveryTimeStamp == nil {
		return n.refuse(t, seq, ie.CauseMandatoryIEMissing, ie.RecoveryTimeStamp, 0)
	}
	ts, err := m.RecoveryTimeStamp.RecoveryTimeStamp()
	if err != nil {
		return n.refuse(t, seq, ie.CauseMandatoryIEIncorrect, ie.RecoveryTimeStamp, 0)
	}
	n.mu.Lock()
	old, again := n.peers[id]
	if !again && len(n.peers) >= n.opt.MaxPeers {
		n.mu.Unlock()
		return n.refuse(t, seq, ie.CauseNoResourcesAvailable, 0, 0)
	}
	same := again && old.Addr == from && old.Recovery.Equal(ts)
	if !same {
		n.peers[id] = &Peer{NodeID: id, Addr: from, Recovery: ts, Since: time.Now()}
		delete(n.live, id) // up, asked afresh
	}
	n.mu.Unlock()
	if !same {
		// The same setup again (a lost answer resent) changes nothing.
		n.opt.Log.Info("n4: association set up", "node_id", id, "from", from, "again", again)
		n.changed()
	}
	if again && !old.Recovery.Equal(ts) {
		// The SMF restarted: the sessions it set up before are gone
		// on its side (TS 29.244 6.2.6.2).
		n.dropSessionsOf(id, "the SMF restarted")
	}
	n.count("answered")
	return marshal(message.NewAssociationSetupResponse(seq,
		ie.NewNodeIDHeuristic(n.opt.NodeID), ie.NewCause(ie.CauseRequestAccepted),
		ie.NewRecoveryTimeStamp(n.opt.Recovery), ie.New(ie.UPFunctionFeatures, UPFeatures)))
}

// associated returns the node ID of the association a request from
// from belongs to: the one of its Node ID IE, or, when no association
// has that ID, the one set up from from (some SMFs name another node
// in later requests: pfcpsim names the UPF in its release); else the
// cause to refuse the request with and the IE that offends (0: none).
func (n *Node) associated(i *ie.IE, from netip.AddrPort) (string, uint8, uint16) {
	id, c := nodeID(i)
	if c != 0 {
		return "", c, ie.NodeID
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.peers[id]; ok {
		return id, 0, 0
	}
	for pid, p := range n.peers {
		if p.Addr == from {
			n.opt.Log.Debug("n4: request taken for the association of its address", "node_id", id, "association", pid)
			return pid, 0, 0
		}
	}
	return "", ie.CauseNoEstablishedPFCPAssociation, 0
}

// update accepts an Association Update Request from an associated node.
func (n *Node) update(m *message.AssociationUpdateRequest, from netip.AddrPort) []byte {
	t, seq := m.MessageType(), m.Sequence()
	if _, c, off := n.associated(m.NodeID, from); c != 0 {
		return n.refuse(t, seq, c, off, 0)
	}
	n.count("answered")
	return marshal(message.NewAssociationUpdateResponse(seq,
		ie.NewNodeIDHeuristic(n.opt.NodeID), ie.NewCause(ie.CauseRequestAccepted)))
}

// release ends the association with the requesting node.
func (n *Node) release(m *message.AssociationReleaseRequest, from netip.AddrPort) []byte {
	t, seq := m.MessageType(), m.Sequence()
	id, c, off := n.associated(m.NodeID, from)
	if c != 0 {
		return n.refuse(t, seq, c, off, 0)
	}
	n.mu.Lock()
	delete(n.peers, id)
	delete(n.live, id)
	n.mu.Unlock()
	n.opt.Log.Info("n4: association released", "node_id", id)
	n.changed()
	n.dropSessionsOf(id, "its association was released")
	n.count("answered")
	return marshal(message.NewAssociationReleaseResponse(seq,
		ie.NewNodeIDHeuristic(n.opt.NodeID), ie.NewCause(ie.CauseRequestAccepted)))
}

// establish answers a Session Establishment Request: Node ID and CP
// F-SEID are mandatory, the node must be associated, and the rules
// must be whole (parseSession). The answer goes to the CP's SEID when
// it decodes.
func (n *Node) establish(m *message.SessionEstablishmentRequest, from netip.AddrPort) []byte {
	t, seq := m.MessageType(), m.Sequence()
	var seid uint64
	if m.CPFSEID != nil {
		if f, err := m.CPFSEID.FSEID(); err == nil {
			seid = f.SEID
		}
	}
	cp, c, off := n.associated(m.NodeID, from)
	if c != 0 {
		return n.refuse(t, seq, c, off, seid)
	}
	if m.CPFSEID == nil {
		return n.refuse(t, seq, ie.CauseMandatoryIEMissing, ie.FSEID, 0)
	}
	if seid == 0 {
		return n.refuse(t, seq, ie.CauseMandatoryIEIncorrect, ie.FSEID, 0)
	}
	s, r := parseSession(m, seid, cpAddrOf(m.CPFSEID))
	if r != nil {
		return n.refuseRule(t, seq, r, seid)
	}
	if n.opt.UserPlane == nil {
		// Rules all well formed, and no user plane to carry them.
		return n.refuse(t, seq, ie.CauseServiceNotSupported, 0, seid)
	}
	s.CPNode, s.Since = cp, time.Now()
	n.mu.Lock()
	for s.UPSEID == 0 || n.sessions[s.UPSEID] != nil {
		// Unguessable: a forged modification must name it.
		s.UPSEID = rand.Uint64()
	}
	pdrs := make([]*PDR, 0, len(s.PDRs))
	for _, p := range s.PDRs {
		pdrs = append(pdrs, p)
	}
	chosen, r := n.chooseTEIDs(s, pdrs, true)
	if r == nil {
		// Held while the user plane carries it: no other request takes
		// its SEID or TEIDs meanwhile.
		n.keep(s)
	}
	n.mu.Unlock()
	if r == nil {
		if r = n.carry(s); r != nil {
			n.mu.Lock()
			n.forget(s.UPSEID)
			n.mu.Unlock()
		}
	}
	if r != nil {
		// A place the user plane gave the session (ChooseTEID) goes
		// back.
		_ = n.opt.UserPlane.Delete(s)
		return n.refuseRule(t, seq, r, seid)
	}
	n.meters(s, nil, s.Since)
	n.count("session_established")
	ies := []*ie.IE{ie.NewNodeIDHeuristic(n.opt.NodeID), ie.NewCause(ie.CauseRequestAccepted), n.upFSEID(s.UPSEID)}
	ies = append(ies, createdPDRs(chosen)...)
	return marshal(message.NewSessionEstablishmentResponse(0, 0, seid, seq, 0, ies...))
}

// cpAddrOf is the address of a CP F-SEID IE (invalid: none).
func cpAddrOf(i *ie.IE) netip.Addr {
	f, err := i.FSEID()
	if err != nil {
		return netip.Addr{}
	}
	return ipOf(f.IPv4Address, f.IPv6Address)
}
