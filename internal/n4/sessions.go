// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// UserPlane carries a node's sessions: the dataplane and the journal
// behind it. Put is given a session as a request leaves it (new, or
// changed whole) before the answer goes out; its error refuses the
// request, and the node keeps the session as it was. Delete takes one
// away.
type UserPlane interface {
	Put(s *Session) error
	Delete(s *Session) error
}

// Usage is what a PDR counted.
type Usage struct{ Packets, Bytes uint64 }

// Meter is what a UserPlane that counts adds: what each PDR of s
// counted, by PDR ID. A deletion's answer reports each URR's usage
// from it.
type Meter interface {
	Usage(s *Session) (map[uint16]Usage, error)
}

// Barrier is what a UserPlane adds whose changes packets may still be
// reading the old form of: Barrier returns once every packet that read
// the user plane's state before the call is done. End markers wait for
// it, so none leaves ahead of a packet still on the old path.
type Barrier interface {
	Barrier() error
}

// BulkMeter is what a Meter adds that reads many sessions' counts at
// once: by UP SEID, what each PDR of each session of ss counted. The
// metering loop takes it when it has many sessions to read.
type BulkMeter interface {
	UsageMany(ss []*Session) (map[uint64]map[uint16]Usage, error)
}

// TEIDChooser is what a UserPlane adds that can make a TEID name its
// session's place (so a G-PDU to it needs no lookup): ChooseTEID
// returns one for the session of seid, not taken; a session never
// carried after it gives its place back with Delete.
type TEIDChooser interface {
	ChooseTEID(seid uint64, taken func(uint32) bool) (uint32, error)
}

// ErrNoResources is what a UserPlane returns when it holds as many
// sessions (or rules in one) as it can: the request is refused "No
// resources available".
var ErrNoResources = errors.New("no resources")

// clone returns a copy of s whose rule maps can change without
// touching s's (the rules themselves are replaced, never changed in
// place).
func (s *Session) clone() *Session {
	c := *s
	c.PDRs = maps.Clone(s.PDRs)
	c.FARs = maps.Clone(s.FARs)
	c.QERs = maps.Clone(s.QERs)
	c.URRs = maps.Clone(s.URRs)
	c.MARs = maps.Clone(s.MARs)
	if c.MARs == nil {
		c.MARs = map[uint16]*MAR{}
	}
	return &c
}

// chooseTEIDs gives each PDR of s asking for one (CHOOSE) a TEID no
// other session's PDR has, one per CHOOSE ID, at the N3 address, and
// checks that the TEIDs the SMF chose are not another session's. It
// returns the PDRs whose F-TEIDs were chosen.
func (n *Node) chooseTEIDs(s *Session, pdrs []*PDR, own bool) ([]*PDR, *refusal) {
	for _, p := range pdrs {
		if p.Choose && !n.n3For(p.Want).IsValid() && !n.n3For6(p.Want).IsValid() {
			// No N3 address of a family the SMF asked for.
			return nil, &refusal{cause: ie.CauseInvalidFTEIDAllocationOption, offending: ie.FTEID}
		}
	}
	byChoose := map[uint8]uint32{}
	var chosen []*PDR
	for _, p := range pdrs {
		if !p.HasTEID {
			continue
		}
		if !p.Choose {
			if owner, ok := n.teids[p.TEID]; ok && owner != s.UPSEID {
				return nil, failedRule(rulePDR, uint32(p.ID))
			}
			continue
		}
		taken := func(t uint32) bool {
			_, used := n.teids[t]
			return t == 0 || used || teidOf(s, p, t)
		}
		if t, ok := byChoose[p.ChooseID]; ok && p.ChooseID != 0 {
			p.TEID = t
		} else if c, ok := n.opt.UserPlane.(TEIDChooser); ok && own {
			// The first the user plane picks: it names the session.
			t, err := c.ChooseTEID(s.UPSEID, taken)
			if err != nil {
				return nil, &refusal{cause: ie.CauseNoResourcesAvailable}
			}
			p.TEID, own = t, false
			byChoose[p.ChooseID] = t
		} else {
			for p.TEID = rand.Uint32(); taken(p.TEID); p.TEID = rand.Uint32() {
			}
			byChoose[p.ChooseID] = p.TEID
		}
		p.TEIDAddr, p.TEIDAddr6, p.Choose = n.n3For(p.Want), n.n3For6(p.Want), false
		chosen = append(chosen, p)
	}
	return chosen, nil
}

// n3For is the IPv4 N3 address a CHOOSE F-TEID whose V4 and V6 flags
// are want is given: when it asks for IPv4 (or names no family).
func (n *Node) n3For(want uint8) netip.Addr {
	if want&fteidV4 != 0 || want == 0 {
		return n.opt.N3
	}
	return netip.Addr{}
}

// n3For6 is n3For's IPv6 address: when it asks for IPv6, or names no
// family and N3 has no IPv4 address.
func (n *Node) n3For6(want uint8) netip.Addr {
	if want&fteidV6 != 0 || want == 0 && !n.opt.N3.IsValid() {
		return n.opt.N3v6
	}
	return netip.Addr{}
}

// teidOf tells whether a PDR of s other than p has TEID t. (Not p: a
// PDR whose TEID is being chosen holds the candidate already, and
// counting it made every candidate taken, a second CHOOSE of a session
// looping forever with the node's lock held.)
func teidOf(s *Session, p *PDR, t uint32) bool {
	for _, q := range s.PDRs {
		if q != p && q.HasTEID && q.TEID == t {
			return true
		}
	}
	return false
}

// createdPDRs are the Created PDR IEs naming the F-TEIDs chosen.
func createdPDRs(chosen []*PDR) []*ie.IE {
	var out []*ie.IE
	for _, p := range chosen {
		var flags uint8
		var v4, v6 net.IP
		if p.TEIDAddr.IsValid() {
			flags, v4 = flags|fteidV4, net.IP(p.TEIDAddr.AsSlice())
		}
		if p.TEIDAddr6.IsValid() {
			flags, v6 = flags|fteidV6, net.IP(p.TEIDAddr6.AsSlice())
		}
		out = append(out, ie.NewCreatedPDR(ie.NewPDRID(p.ID), ie.NewFTEID(flags, p.TEID, v4, v6, 0)))
	}
	return out
}

// keep makes s the node's session, replacing the one of its SEID.
// Called with n.mu held.
func (n *Node) keep(s *Session) {
	if old := n.sessions[s.UPSEID]; old != nil {
		for _, p := range old.PDRs {
			if p.HasTEID {
				delete(n.teids, p.TEID)
			}
		}
	}
	n.sessions[s.UPSEID] = s
	for _, p := range s.PDRs {
		if p.HasTEID {
			n.teids[p.TEID] = s.UPSEID
		}
	}
}

// forget takes the session of seid away. Called with n.mu held.
func (n *Node) forget(seid uint64) {
	if s := n.sessions[seid]; s != nil {
		for _, p := range s.PDRs {
			if p.HasTEID && n.teids[p.TEID] == seid {
				delete(n.teids, p.TEID)
			}
		}
	}
	delete(n.sessions, seid)
	delete(n.meter, seid)
}

// carry hands s to the user plane: the refusal when it cannot carry it.
func (n *Node) carry(s *Session) *refusal {
	if err := n.opt.UserPlane.Put(s); err != nil {
		n.opt.Log.Warn("n4: session not carried", "seid", s.UPSEID, "err", err)
		if re, ok := errors.AsType[*RuleError](err); ok {
			return failedRule(rulePDR, uint32(re.PDR))
		}
		if errors.Is(err, ErrNoResources) {
			return &refusal{cause: ie.CauseNoResourcesAvailable}
		}
		return &refusal{cause: ie.CauseSystemFailure}
	}
	return nil
}

// upFSEID is the UP F-SEID IE of a session: its SEID at the node's N4
// address.
func (n *Node) upFSEID(seid uint64) *ie.IE {
	a := n.Addr().Addr()
	if a.IsUnspecified() || !a.IsValid() {
		if id, err := netip.ParseAddr(n.opt.NodeID); err == nil {
			a = id
		}
	}
	if a.Is4() || a.Is4In6() {
		return ie.NewFSEID(seid, net.IP(a.Unmap().AsSlice()), nil)
	}
	return ie.NewFSEID(seid, nil, net.IP(a.AsSlice()))
}

// SessionOfTEID is the UP SEID of the session whose PDR has local TEID
// teid (0: none).
func (n *Node) SessionOfTEID(teid uint32) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.teids[teid]
}

// Sessions returns the sessions the node holds.
func (n *Node) Sessions() []*Session {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*Session, 0, len(n.sessions))
	for _, s := range n.sessions {
		out = append(out, s)
	}
	return out
}

// modify answers a Session Modification Request: the session its
// header's SEID names, changed as its Remove, Create and Update IEs
// say, checked whole, then carried; or refused, unchanged.
func (n *Node) modify(m *message.SessionModificationRequest, from netip.AddrPort) []byte {
	t, seq, seid := m.MessageType(), m.Sequence(), m.SEID()
	n.mu.Lock()
	old := n.sessions[seid]
	n.mu.Unlock()
	if old == nil {
		return n.refuse(t, seq, ie.CauseSessionContextNotFound, 0, 0)
	}
	s := old.clone()
	chosen, r := n.change(s, m)
	if r == nil {
		r = n.carry(s)
	}
	if r != nil {
		return n.refuseRule(t, seq, r, old.CPSEID)
	}
	n.mu.Lock()
	n.keep(s)
	n.mu.Unlock()
	n.count("session_modified")
	ies := append([]*ie.IE{ie.NewCause(ie.CauseRequestAccepted)}, createdPDRs(chosen)...)
	ies = append(ies, n.remeter(old, s, m)...)
	n.endMarkers(old, s, m)
	return marshal(message.NewSessionModificationResponse(0, 0, s.CPSEID, seq, 0, ies...))
}

// endMarkers sends, when modification m asks (SNDEM), an End Marker
// along each downlink path it moved: the old outer header of each FAR
// whose GTP-U outer header creation (peer or TEID) s changed from old.
// OuterPeer is the peer outer header creation o sends GTP-U to, by the
// family its description names (GTP-U/UDP/IPv4 first): an IPv4
// address, or an IPv6 one that is neither unspecified nor an IPv4
// address; invalid for none (o nil, no GTP-U description, or no usable
// address of the family named). The user plane compiles a FAR's outer
// header by it, and end markers go where it says.
func OuterPeer(o *ie.OuterHeaderCreationFields) netip.Addr {
	switch {
	case o == nil:
	case o.OuterHeaderCreationDescription&0x0100 != 0:
		if a, ok := netip.AddrFromSlice(o.IPv4Address.To4()); ok {
			return a
		}
	case o.OuterHeaderCreationDescription&0x0200 != 0:
		if a, ok := netip.AddrFromSlice(o.IPv6Address.To16()); ok && o.IPv6Address.To4() == nil && !a.IsUnspecified() {
			return a
		}
	}
	return netip.Addr{}
}

func (n *Node) endMarkers(old, s *Session, m *message.SessionModificationRequest) {
	f := m.PFCPSMReqFlags
	if f == nil || len(f.Payload) == 0 || f.Payload[0]&0x02 == 0 || n.opt.EndMarker == nil {
		return
	}
	type path struct {
		peer netip.Addr
		teid uint32
	}
	var left []path
	for id, was := range old.FARs {
		o := was.Outer
		peer := OuterPeer(o)
		if !peer.IsValid() {
			continue
		}
		if now := s.FARs[id]; now != nil && now.Outer != nil && now.Outer.TEID == o.TEID && OuterPeer(now.Outer) == peer {
			continue
		}
		left = append(left, path{peer, o.TEID})
	}
	if len(left) == 0 {
		return
	}
	// The last packet on the old path before its end marker: packets
	// that read the old record are done first.
	if b, ok := n.opt.UserPlane.(Barrier); ok {
		if err := b.Barrier(); err != nil {
			n.opt.Log.Warn("n4: end markers sent without waiting for the old path's packets", "seid", s.UPSEID, "err", err)
		}
	}
	for _, l := range left {
		peer := l.peer
		if err := n.opt.EndMarker(peer, l.teid); err != nil {
			n.opt.Log.Warn("n4: end marker not sent", "seid", s.UPSEID, "peer", peer, "err", err)
		} else {
			n.count("end_marker_sent")
		}
	}
}

// change applies a modification's rules to s: the PDRs whose F-TEIDs
// it chose, or the refusal.
func (n *Node) change(s *Session, m *message.SessionModificationRequest) ([]*PDR, *refusal) {
	for _, g := range m.RemovePDR {
		id, err := idOf(g, ie.PDRID, (*ie.IE).PDRID)
		if err != nil {
			return nil, err
		}
		delete(s.PDRs, id)
	}
	for _, x := range []struct {
		gs  []*ie.IE
		typ uint16
		del func(uint32)
	}{
		{m.RemoveFAR, ie.FARID, func(id uint32) { delete(s.FARs, id) }},
		{m.RemoveQER, ie.QERID, func(id uint32) { delete(s.QERs, id) }},
		{m.RemoveURR, ie.URRID, func(id uint32) { delete(s.URRs, id) }},
	} {
		for _, g := range x.gs {
			id, r := id32(g, x.typ)
			if r != nil {
				return nil, r
			}
			x.del(id)
		}
	}
	for _, g := range m.RemoveMAR {
		id, r := idOf(g, ie.MARID, (*ie.IE).MARID)
		if r != nil {
			return nil, r
		}
		delete(s.MARs, id)
	}
	if r := s.create(m.CreateFAR, m.CreateQER, m.CreateURR); r != nil {
		return nil, r
	}
	if r := s.createMARs(m.CreateMAR); r != nil {
		return nil, r
	}
	for _, g := range m.UpdateMAR {
		if r := s.updateMAR(g); r != nil {
			return nil, r
		}
	}
	for _, g := range m.UpdateFAR {
		if r := s.updateFAR(g); r != nil {
			return nil, r
		}
	}
	for _, g := range m.UpdateQER {
		if r := s.updateQER(g); r != nil {
			return nil, r
		}
	}
	for _, g := range m.UpdateURR {
		if r := s.updateURR(g); r != nil {
			return nil, r
		}
	}
	if m.RemoveBAR != nil {
		s.BAR = nil
	}
	if g := m.CreateBAR; g != nil {
		if s.BAR != nil {
			return nil, failedRule(ruleBAR, uint32(s.BAR.ID))
		}
		s.BAR = &BAR{}
		if r := parseBAR(g, s.BAR); r != nil {
			return nil, r
		}
	}
	if g := m.UpdateBAR; g != nil {
		var b BAR
		if s.BAR != nil {
			b = *s.BAR
		}
		if r := parseBAR(g, &b); r != nil {
			return nil, r
		}
		if s.BAR == nil || b.ID != s.BAR.ID {
			// No such BAR in the session.
			return nil, failedRule(ruleBAR, uint32(b.ID))
		}
		s.BAR = &b
	}
	for _, g := range m.QueryURR {
		if id, r := id32(g, ie.URRID); r != nil {
			return nil, r
		} else if s.URRs[id] == nil {
			return nil, failedRule(ruleURR, id)
		}
	}
	var fresh []*PDR
	for _, g := range m.CreatePDR {
		p, r := parsePDR(g)
		if r != nil {
			return nil, r
		}
		if _, dup := s.PDRs[p.ID]; dup {
			return nil, failedRule(rulePDR, uint32(p.ID))
		}
		s.PDRs[p.ID] = p
		fresh = append(fresh, p)
	}
	for _, g := range m.UpdatePDR {
		p, r := s.updatePDR(g)
		if r != nil {
			return nil, r
		}
		fresh = append(fresh, p)
	}
	// Every rule a PDR or a MAR names must still be there.
	for _, p := range s.PDRs {
		if r := s.refsOf(p); r != nil {
			return nil, r
		}
	}
	if r := s.marRefs(); r != nil {
		return nil, r
	}
	return n.chooseTEIDs(s, fresh, false)
}

// create adds the FARs, QERs and URRs of Create IEs to s, refusing an
// ID s has or two of one ID.
func (s *Session) create(fars, qers, urrs []*ie.IE) *refusal {
	if r := addNew(s.FARs, fars, parseFAR, ruleFAR); r != nil {
		return r
	}
	if r := addNew(s.QERs, qers, parseQER, ruleQER); r != nil {
		return r
	}
	return addNew(s.URRs, urrs, parseURR, ruleURR)
}

// addNew parses each of gs into into, refusing an ID the session has.
func addNew[R rule](into map[uint32]R, gs []*ie.IE, parse func(*ie.IE) (R, *refusal), typ uint8) *refusal {
	fresh := map[uint32]R{}
	if r := addRules(fresh, gs, parse, typ); r != nil {
		return r
	}
	for id, x := range fresh {
		if _, dup := into[id]; dup {
			return failedRule(typ, id)
		}
		into[id] = x
	}
	return nil
}

// idOf reads the ID IE of type typ in grouped IE g with get.
func idOf[T any](g *ie.IE, typ uint16, get func(*ie.IE) (T, error)) (T, *refusal) {
	var zero T
	one, r := need(g, typ)
	if r != nil {
		return zero, r
	}
	v, err := get(one[typ])
	if err != nil {
		return zero, incorrect(typ)
	}
	return v, nil
}

// id32 reads a FAR, QER or URR ID of grouped IE g.
func id32(g *ie.IE, typ uint16) (uint32, *refusal) {
	get := map[uint16]func(*ie.IE) (uint32, error){ie.FARID: (*ie.IE).FARID, ie.QERID: (*ie.IE).QERID, ie.URRID: (*ie.IE).URRID}[typ]
	return idOf(g, typ, get)
}

// updating returns the ID of the rule of rules an Update IE g names
// (by ID IE typ; rule type rt), a copy of it to change, and g's IEs by
// type.
func updating[R any](rules map[uint32]*R, g *ie.IE, typ uint16, rt uint8) (uint32, *R, map[uint16]*ie.IE, *refusal) {
	id, r := id32(g, typ)
	if r != nil {
		return 0, nil, nil, r
	}
	old, ok := rules[id]
	if !ok {
		return 0, nil, nil, failedRule(rt, id)
	}
	c := *old
	one, _ := children(g, 0)
	return id, &c, one, nil
}

// updateFAR applies an Update FAR: the apply action and the forwarding
// parameters it gives replace the FAR's.
func (s *Session) updateFAR(g *ie.IE) *refusal {
	id, f, one, r := updating(s.FARs, g, ie.FARID, ruleFAR)
	if r != nil {
		return r
	}
	if a := one[ie.ApplyAction]; a != nil {
		b, err := a.ApplyAction()
		if err != nil || len(b) < 1 {
			return incorrect(ie.ApplyAction)
		}
		f.Action = b[0] & (ActDrop | ActForw | ActBuff | ActNocp | ActDupl)
		if countBits(f.Action&(ActDrop|ActForw|ActBuff)) != 1 {
			return incorrect(ie.ApplyAction)
		}
	}
	if fp := one[ie.UpdateForwardingParameters]; fp != nil {
		p, _ := children(fp, 0)
		if d := p[ie.DestinationInterface]; d != nil {
			v, err := d.DestinationInterface()
			if err != nil {
				return incorrect(ie.DestinationInterface)
			}
			f.Dest = v
		}
		if o := p[ie.OuterHeaderCreation]; o != nil {
			v, err := o.OuterHeaderCreation()
			if err != nil {
				return incorrect(ie.OuterHeaderCreation)
			}
			f.Outer = ownOuter(v)
		}
		if t := p[ie.TransportLevelMarking]; t != nil {
			v, err := t.TransportLevelMarking()
			if err != nil {
				return incorrect(ie.TransportLevelMarking)
			}
			f.TOS, f.HasTOS = v, true
		}
	}
	if b := one[ie.BARID]; b != nil {
		v, err := b.BARID()
		if err != nil {
			return incorrect(ie.BARID)
		}
		f.BAR = v
	}
	s.FARs[id] = f
	return nil
}

// updateQER applies an Update QER: what it gives (gate status, MBR,
// QFI) replaces the QER's.
func (s *Session) updateQER(g *ie.IE) *refusal {
	id, q, one, r := updating(s.QERs, g, ie.QERID, ruleQER)
	if r != nil {
		return r
	}
	if r := q.fill(one); r != nil {
		return r
	}
	s.QERs[id] = q
	return nil
}

// updateURR applies an Update URR: what it gives replaces the URR's (a
// new quota makes a spent one usable again).
func (s *Session) updateURR(g *ie.IE) *refusal {
	id, u, one, r := updating(s.URRs, g, ie.URRID, ruleURR)
	if r != nil {
		return r
	}
	if r := u.fill(one); r != nil {
		return r
	}
	s.URRs[id] = u
	return nil
}

// updatePDR applies an Update PDR: what it gives replaces the PDR's.
func (s *Session) updatePDR(g *ie.IE) (*PDR, *refusal) {
	id, r := idOf(g, ie.PDRID, (*ie.IE).PDRID)
	if r != nil {
		return nil, r
	}
	old, ok := s.PDRs[id]
	if !ok {
		return nil, failedRule(rulePDR, uint32(id))
	}
	p := *old
	one, _ := children(g, 0)
	var err error
	if v := one[ie.Precedence]; v != nil {
		if p.Precedence, err = v.Precedence(); err != nil {
			return nil, incorrect(ie.Precedence)
		}
	}
	if v := one[ie.PDI]; v != nil {
		q := PDR{ID: p.ID}
		if r := q.pdi(v); r != nil {
			return nil, r
		}
		p.Source, p.TEID, p.TEIDAddr, p.Choose, p.ChooseID, p.HasTEID = q.Source, q.TEID, q.TEIDAddr, q.Choose, q.ChooseID, q.HasTEID
		p.TEIDAddr6, p.Want = q.TEIDAddr6, q.Want
		p.Instance, p.UEIP, p.UEIP6, p.SDF, p.QFI = q.Instance, q.UEIP, q.UEIP6, q.SDF, q.QFI
	}
	if v := one[ie.FARID]; v != nil {
		if p.FAR, err = v.FARID(); err != nil {
			return nil, incorrect(ie.FARID)
		}
		p.HasFAR, p.MAR, p.HasMAR = true, 0, false
	}
	if v := one[ie.MARID]; v != nil {
		if p.MAR, err = v.MARID(); err != nil {
			return nil, incorrect(ie.MARID)
		}
		p.HasMAR, p.FAR, p.HasFAR = true, 0, false
	}
	if r := p.ruleIDs(g); r != nil {
		return nil, r
	}
	s.PDRs[id] = &p
	return &p, nil
}

// dropSessionsOf deletes the sessions the SMF of node ID id set up.
func (n *Node) dropSessionsOf(id, why string) {
	if n.opt.UserPlane == nil {
		return
	}
	n.mu.Lock()
	var gone []*Session
	for _, s := range n.sessions {
		if s.CPNode == id {
			gone = append(gone, s)
		}
	}
	n.mu.Unlock()
	for _, s := range gone {
		if err := n.opt.UserPlane.Delete(s); err != nil {
			n.opt.Log.Warn("n4: session not deleted", "seid", s.UPSEID, "err", err)
			continue
		}
		n.mu.Lock()
		n.forget(s.UPSEID)
		n.mu.Unlock()
		n.count("session_deleted")
	}
	if len(gone) > 0 {
		n.opt.Log.Info("n4: sessions deleted", "node_id", id, "sessions", len(gone), "why", why)
	}
}

// remove answers a Session Deletion Request: the session goes.
func (n *Node) remove(m *message.SessionDeletionRequest, from netip.AddrPort) []byte {
	t, seq, seid := m.MessageType(), m.Sequence(), m.SEID()
	n.mu.Lock()
	s := n.sessions[seid]
	n.mu.Unlock()
	if s == nil {
		return n.refuse(t, seq, ie.CauseSessionContextNotFound, 0, 0)
	}
	// What its URRs measured, read before its counters go.
	var reports []*ie.IE
	if len(s.URRs) > 0 {
		u, now := n.usageRead(s), time.Now()
		for _, id := range slices.Sorted(maps.Keys(s.URRs)) {
			reports = append(reports, ie.NewUsageReportWithinSessionDeletionResponse(n.usageReport(s, id, u, trigTERMR, now)...))
		}
	}
	if err := n.opt.UserPlane.Delete(s); err != nil {
		n.opt.Log.Warn("n4: session not deleted", "seid", seid, "err", err)
		return n.refuse(t, seq, ie.CauseSystemFailure, 0, s.CPSEID)
	}
	n.mu.Lock()
	n.forget(seid)
	n.mu.Unlock()
	n.count("session_deleted")
	ies := append([]*ie.IE{ie.NewCause(ie.CauseRequestAccepted)}, reports...)
	return marshal(message.NewSessionDeletionResponse(0, 0, s.CPSEID, seq, 0, ies...))
}

// refuseRule answers request t with refusal r (its Failed Rule ID when
// it names one).
func (n *Node) refuseRule(t uint8, seq uint32, r *refusal, seid uint64) []byte {
	var extra []*ie.IE
	switch {
	case r.hasRule && r.ruleType == ruleMAR:
		// A MAR ID is 2 octets (8.2.80); go-pfcp writes none.
		extra = append(extra, ie.New(ie.FailedRuleID, []byte{ruleMAR, byte(r.ruleID >> 8), byte(r.ruleID)}))
	case r.hasRule:
		extra = append(extra, ie.NewFailedRuleID(r.ruleType, r.ruleID))
	}
	return n.refuse(t, seq, r.cause, r.offending, seid, extra...)
}

// RuleError is what a UserPlane returns for a rule it cannot carry: the
// request is refused "Rule creation/modification failure" naming it.
type RuleError struct {
	PDR    uint16
	Reason string
}

func (e *RuleError) Error() string { return fmt.Sprintf("PDR %d: %s", e.PDR, e.Reason) }
