// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

const smfID = "192.0.2.10"

var started = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// smf is a PFCP peer over real UDP on loopback: go-pfcp builds what it
// sends and reads what it gets back.
type smf struct {
	t    *testing.T
	node *Node
	conn *net.UDPConn
	seq  uint32
}

func newSMF(t *testing.T) *smf {
	t.Helper()
	n, err := Listen(Options{Addr: "127.0.0.1:0", NodeID: "192.0.2.1", Recovery: started})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(n.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &smf{t: t, node: n, conn: c}
}

// send sends raw bytes and returns the answer, nil when none comes
// within wait.
func (s *smf) send(b []byte, wait time.Duration) []byte {
	s.t.Helper()
	if _, err := s.conn.Write(b); err != nil {
		s.t.Fatal(err)
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 65536)
	l, err := s.conn.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:l]
}

// ask sends m and returns the answer, parsed, and its raw bytes.
func (s *smf) ask(m message.Message) (message.Message, []byte) {
	s.t.Helper()
	b := marshal(m)
	if b == nil {
		s.t.Fatalf("marshal %s", m.MessageTypeName())
	}
	out := s.send(b, 2*time.Second)
	if out == nil {
		s.t.Fatalf("%s: no answer", m.MessageTypeName())
	}
	r, err := message.Parse(out)
	if err != nil {
		s.t.Fatalf("%s: answer does not parse: %v", m.MessageTypeName(), err)
	}
	if r.Sequence() != m.Sequence() {
		s.t.Errorf("%s: answer's sequence %d, want %d", m.MessageTypeName(), r.Sequence(), m.Sequence())
	}
	return r, out
}

func (s *smf) next() uint32 { s.seq++; return s.seq }

// answerIEs are an answer's top-level IEs by type, read from its bytes.
func answerIEs(t *testing.T, b []byte) map[uint16][]byte {
	t.Helper()
	at := headerLen
	if b[0]&1 != 0 {
		at = seidHeaderLen
	}
	out := map[uint16][]byte{}
	for at+4 <= len(b) {
		typ, l := binary.BigEndian.Uint16(b[at:]), int(binary.BigEndian.Uint16(b[at+2:]))
		if at+4+l > len(b) {
			t.Fatalf("answer's IE %d runs past its end", typ)
		}
		out[typ] = b[at+4 : at+4+l]
		at += 4 + l
	}
	return out
}

// refused checks that answer b carries cause want and names offending
// (0: none).
func refused(t *testing.T, what string, b []byte, want uint8, offending uint16) {
	t.Helper()
	ies := answerIEs(t, b)
	c, ok := ies[ie.Cause]
	if !ok || len(c) != 1 {
		t.Fatalf("%s: answer has no cause", what)
	}
	if c[0] != want {
		t.Errorf("%s: cause %d, want %d", what, c[0], want)
	}
	o, ok := ies[ie.OffendingIE]
	switch {
	case offending == 0 && ok:
		t.Errorf("%s: names offending IE %d, want none", what, binary.BigEndian.Uint16(o))
	case offending != 0 && (!ok || len(o) != 2 || binary.BigEndian.Uint16(o) != offending):
		t.Errorf("%s: offending IE %v, want type %d", what, o, offending)
	}
}

func (s *smf) setup(ies ...*ie.IE) []byte {
	_, b := s.ask(message.NewAssociationSetupRequest(s.next(), ies...))
	return b
}

func peersOf(n *Node) []string {
	var ids []string
	for _, p := range n.Peers() {
		ids = append(ids, p.NodeID)
	}
	return ids
}

// TestAssociation: an SMF sets an association up, updates it and
// releases it; the answers carry the node's ID, recovery time stamp
// and FTUP, and the association is listed while it exists.
func TestAssociation(t *testing.T) {
	s := newSMF(t)
	hb, _ := s.ask(message.NewHeartbeatRequest(s.next(), ie.NewRecoveryTimeStamp(time.Now()), nil))
	if ts, err := hb.(*message.HeartbeatResponse).RecoveryTimeStamp.RecoveryTimeStamp(); err != nil || !ts.Equal(started) {
		t.Errorf("heartbeat: recovery time stamp %v (%v), want %v", ts, err, started)
	}

	r, b := s.ask(message.NewAssociationSetupRequest(s.next(), ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started.Add(time.Hour))))
	refused(t, "setup", b, ie.CauseRequestAccepted, 0)
	rs := r.(*message.AssociationSetupResponse)
	if id, err := rs.NodeID.NodeID(); err != nil || id != "192.0.2.1" {
		t.Errorf("setup: node ID %q (%v)", id, err)
	}
	if rs.UPFunctionFeatures == nil || !rs.UPFunctionFeatures.HasFTUP() {
		t.Errorf("setup: UP function features %v do not say FTUP", rs.UPFunctionFeatures)
	}
	// ATSSS-LL: octet 9 bit 1 (the fifth octet of the value).
	if f := rs.UPFunctionFeatures; f == nil || len(f.Payload) < 5 || f.Payload[4]&0x01 == 0 {
		t.Errorf("setup: UP function features %v do not say ATSSS-LL", rs.UPFunctionFeatures)
	}
	if ts, err := rs.RecoveryTimeStamp.RecoveryTimeStamp(); err != nil || !ts.Equal(started) {
		t.Errorf("setup: recovery time stamp %v (%v), want %v", ts, err, started)
	}
	if p := s.node.Peers(); len(p) != 1 || p[0].NodeID != smfID || !p[0].Recovery.Equal(started.Add(time.Hour)) {
		t.Fatalf("peers after setup: %+v", p)
	}

	_, b = s.ask(message.NewAssociationUpdateRequest(s.next(), ie.NewNodeID(smfID, "", "")))
	refused(t, "update", b, ie.CauseRequestAccepted, 0)
	_, b = s.ask(message.NewAssociationReleaseRequest(s.next(), ie.NewNodeID(smfID, "", "")))
	refused(t, "release", b, ie.CauseRequestAccepted, 0)
	if p := peersOf(s.node); len(p) != 0 {
		t.Errorf("peers after release: %v", p)
	}
	_, b = s.ask(message.NewAssociationReleaseRequest(s.next(), ie.NewNodeID(smfID, "", "")))
	refused(t, "release again", b, ie.CauseNoEstablishedPFCPAssociation, 0)
}

// TestRefusedRequests: each request the spec's error handling rejects
// gets its cause (and the IE at fault), and none changes the
// associations.
func TestRefusedRequests(t *testing.T) {
	s := newSMF(t)
	id, ts := ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started)
	badID := ie.New(ie.NodeID, []byte{7, 1, 2, 3, 4}) // node ID type 7: none such
	cpSEID := ie.NewFSEID(0x1234, net.ParseIP(smfID), nil)
	for _, c := range []struct {
		name      string
		m         message.Message
		cause     uint8
		offending uint16
	}{
		{"setup without node ID", message.NewAssociationSetupRequest(s.next(), ts), ie.CauseMandatoryIEMissing, ie.NodeID},
		{"setup without recovery time stamp", message.NewAssociationSetupRequest(s.next(), id), ie.CauseMandatoryIEMissing, ie.RecoveryTimeStamp},
		{"setup with an unknown node ID type", message.NewAssociationSetupRequest(s.next(), badID, ts), ie.CauseMandatoryIEIncorrect, ie.NodeID},
		{"setup with a short recovery time stamp", message.NewAssociationSetupRequest(s.next(), id, ie.New(ie.RecoveryTimeStamp, []byte{1})),
			ie.CauseMandatoryIEIncorrect, ie.RecoveryTimeStamp},
		{"update unassociated", message.NewAssociationUpdateRequest(s.next(), id), ie.CauseNoEstablishedPFCPAssociation, 0},
		{"update without node ID", message.NewAssociationUpdateRequest(s.next()), ie.CauseMandatoryIEMissing, ie.NodeID},
		{"release unassociated", message.NewAssociationReleaseRequest(s.next(), id), ie.CauseNoEstablishedPFCPAssociation, 0},
		{"session unassociated", message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, id, cpSEID), ie.CauseNoEstablishedPFCPAssociation, 0},
		{"session without node ID", message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, cpSEID), ie.CauseMandatoryIEMissing, ie.NodeID},
		{"modification of no session", message.NewSessionModificationRequest(0, 0, 0x99, s.next(), 0), ie.CauseSessionContextNotFound, 0},
		{"deletion of no session", message.NewSessionDeletionRequest(0, 0, 0x99, s.next(), 0), ie.CauseSessionContextNotFound, 0},
	} {
		r, b := s.ask(c.m)
		if want := c.m.MessageType() + 1; r.MessageType() != want {
			t.Errorf("%s: answered with message type %d, want %d", c.name, r.MessageType(), want)
		}
		refused(t, c.name, b, c.cause, c.offending)
		if p := peersOf(s.node); len(p) != 0 {
			t.Fatalf("%s: peers %v, want none", c.name, p)
		}
	}
	// A session request is answered to the SMF's SEID when it has one.
	r, _ := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, id, cpSEID))
	if r.SEID() != 0x1234 {
		t.Errorf("session establishment refused under SEID %#x, want the CP's 0x1234", r.SEID())
	}
	// Associated, a session without rules is refused, a whole one as
	// not supported yet (TestSessionRulesRefused has the rest).
	refused(t, "setup", s.setup(id, ts), ie.CauseRequestAccepted, 0)
	_, b := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, id, cpSEID))
	refused(t, "session without rules", b, ie.CauseMandatoryIEMissing, ie.CreatePDR)
	_, b = s.ask(establishment(s.next(), wholeSession))
	refused(t, "session associated", b, ie.CauseServiceNotSupported, 0)
	_, b = s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, id))
	refused(t, "session without CP F-SEID", b, ie.CauseMandatoryIEMissing, ie.FSEID)
}

// TestMalformed: datagrams that cannot be answered are dropped and
// counted; an old version gets Version Not Supported; a request whose
// IEs do not delimit is refused "Invalid Length"; the association
// set up before is untouched by all of them.
func TestMalformed(t *testing.T) {
	s := newSMF(t)
	refused(t, "setup", s.setup(ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started)), ie.CauseRequestAccepted, 0)
	hb := marshal(message.NewHeartbeatRequest(77, ie.NewRecoveryTimeStamp(started), nil))

	v2 := append([]byte(nil), hb...)
	v2[0] = 2<<5 | v2[0]&0x1f
	if out := s.send(v2, 2*time.Second); out == nil {
		t.Error("version 2: no answer")
	} else if out[1] != message.MsgTypeVersionNotSupportedResponse || out[0]>>5 != 1 || sequence(out) != 77 {
		t.Errorf("version 2: answered % x, want a version 1 Version Not Supported Response, sequence 77", out)
	}

	// An IE whose length runs past the message, the header's length
	// right: the IEs do not delimit.
	trunc := marshal(message.NewAssociationUpdateRequest(78, ie.NewNodeID(smfID, "", "")))
	binary.BigEndian.PutUint16(trunc[headerLen+2:], 200)
	if out := s.send(trunc, 2*time.Second); out == nil {
		t.Error("IE past the end: no answer")
	} else {
		refused(t, "IE past the end", out, ie.CauseInvalidLength, 0)
	}

	long := append(append([]byte(nil), hb...), 0, 0)
	unknown := append([]byte(nil), hb...)
	unknown[1] = 99
	resp := marshal(message.NewHeartbeatResponse(79, ie.NewRecoveryTimeStamp(started)))
	before := s.node.Stats()
	for _, c := range []struct {
		name, stat string
		b          []byte
	}{
		{"three bytes", "short", []byte{0x20, 1, 0}},
		{"header length shorter than the datagram", "bad_length", long},
		{"SEID flag on an 8-byte message", "bad_length", []byte{0x21, 1, 0, 4, 0, 0, 1, 0}},
		{"unknown message type", "unknown_type", unknown},
		{"a response to nothing asked", "unexpected_response", resp},
	} {
		if out := s.send(c.b, 200*time.Millisecond); out != nil {
			t.Errorf("%s: answered % x, want nothing", c.name, out)
		}
		if got := s.node.Stats()[c.stat] - before[c.stat]; got != 1 {
			t.Errorf("%s: %s counted %d times, want 1", c.name, c.stat, got)
		}
		before = s.node.Stats()
	}
	if p := peersOf(s.node); len(p) != 1 || p[0] != smfID {
		t.Errorf("peers after malformed datagrams: %v, want [%s]", p, smfID)
	}
}

// TestAssociationsBounded: N4 is unauthenticated, so the associations
// are bounded: past MaxPeers a setup from one more node is refused "No
// resources available" and nothing is written back; a known node's
// setup repeated changes nothing either.
func TestAssociationsBounded(t *testing.T) {
	writes := 0
	n, err := Listen(Options{Addr: "127.0.0.1:0", NodeID: "192.0.2.1", Recovery: started, MaxPeers: 3,
		Changed: func([]Peer) { writes++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	from := netip.MustParseAddrPort("192.0.2.10:8805")
	for i := range 5 {
		req := message.NewAssociationSetupRequest(uint32(i+1), ie.NewNodeID(fmt.Sprintf("192.0.2.%d", 20+i), "", ""),
			ie.NewRecoveryTimeStamp(started))
		want := ie.CauseRequestAccepted
		if i >= 3 {
			want = ie.CauseNoResourcesAvailable
		}
		refused(t, fmt.Sprintf("setup %d", i), n.Handle(marshal(req), from), want, 0)
	}
	again := message.NewAssociationSetupRequest(9, ie.NewNodeID("192.0.2.20", "", ""), ie.NewRecoveryTimeStamp(started))
	refused(t, "setup repeated", n.Handle(marshal(again), from), ie.CauseRequestAccepted, 0)
	if p := peersOf(n); len(p) != 3 || writes != 3 {
		t.Errorf("%d associations, %d written back; want 3 and 3", len(p), writes)
	}
}

// TestPeerRestartSeen: a heartbeat from an associated SMF with another
// recovery time stamp is its restart: the association notes it.
func TestPeerRestartSeen(t *testing.T) {
	s := newSMF(t)
	refused(t, "setup", s.setup(ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started)), ie.CauseRequestAccepted, 0)
	later := started.Add(2 * time.Hour)
	s.ask(message.NewHeartbeatRequest(s.next(), ie.NewRecoveryTimeStamp(later), nil))
	if p := s.node.Peers(); len(p) != 1 || !p[0].Recovery.Equal(later) {
		t.Errorf("peer after its restart: %+v, want recovery %v", p, later)
	}
}

// FuzzHandle: whatever arrives, the node does not panic, and what it
// answers is a PFCP version 1 message that parses.
func FuzzHandle(f *testing.F) {
	f.Add(marshal(message.NewHeartbeatRequest(1, ie.NewRecoveryTimeStamp(started), nil)))
	f.Add(marshal(message.NewAssociationSetupRequest(2, ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started))))
	f.Add(marshal(message.NewSessionEstablishmentRequest(0, 0, 0, 3, 0, ie.NewNodeID(smfID, "", ""),
		ie.NewFSEID(1, net.ParseIP(smfID), nil))))
	f.Add(marshal(message.NewSessionDeletionRequest(0, 0, 9, 4, 0)))
	n, err := Listen(Options{Addr: "127.0.0.1:0", NodeID: "192.0.2.1", Recovery: started})
	if err != nil {
		f.Fatal(err)
	}
	defer n.Close()
	from := netip.MustParseAddrPort("192.0.2.10:8805")
	f.Fuzz(func(t *testing.T, b []byte) {
		out := n.Handle(b, from)
		if out == nil {
			return
		}
		if out[0]>>5 != 1 {
			t.Fatalf("answered version %d", out[0]>>5)
		}
		if _, err := message.Parse(out); err != nil {
			t.Fatalf("answer % x does not parse: %v", out, err)
		}
	})
}

// TestPeerLiveness: the node asks its associated SMF every
// HeartbeatEvery. Answered, the peer is up; three requests in a row
// unanswered, it is down (the association stays); answering again
// with a new recovery time stamp, it is up and its restart noted.
func TestPeerLiveness(t *testing.T) {
	n, err := Listen(Options{Addr: "127.0.0.1:0", NodeID: "192.0.2.1", Recovery: started,
		HeartbeatEvery: 50 * time.Millisecond, HeartbeatTries: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Serve(ctx)
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(n.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(m message.Message) {
		if _, err := c.Write(marshal(m)); err != nil {
			t.Fatal(err)
		}
	}
	send(message.NewAssociationSetupRequest(1, ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started)))
	// serve answers the node's heartbeats for d (with recovery stamp
	// ts; zero: not at all) and returns how many it was asked.
	serve := func(d time.Duration, ts time.Time) int {
		asked := 0
		buf := make([]byte, 4096)
		for end := time.Now().Add(d); time.Now().Before(end); {
			_ = c.SetReadDeadline(end)
			l, err := c.Read(buf)
			if err != nil {
				break
			}
			m, err := message.Parse(buf[:l])
			if err != nil || m.MessageType() != message.MsgTypeHeartbeatRequest {
				continue
			}
			asked++
			if !ts.IsZero() {
				send(message.NewHeartbeatResponse(m.Sequence(), ie.NewRecoveryTimeStamp(ts)))
			}
		}
		return asked
	}
	if asked := serve(400*time.Millisecond, started); asked < 4 || !n.PeerUp()[smfID] {
		t.Fatalf("answering: asked %d times in 400 ms, up %v", asked, n.PeerUp())
	}
	if asked := serve(400*time.Millisecond, time.Time{}); asked < 4 || n.PeerUp()[smfID] {
		t.Fatalf("silent: asked %d times in 400 ms, up %v; want down", asked, n.PeerUp())
	}
	if p := peersOf(n); len(p) != 1 {
		t.Errorf("association gone with the peer's silence: %v", p)
	}
	later := started.Add(time.Hour)
	serve(300*time.Millisecond, later)
	if !n.PeerUp()[smfID] {
		t.Errorf("answering again: still down")
	}
	if p := n.Peers(); len(p) != 1 || !p[0].Recovery.Equal(later) {
		t.Errorf("peer after its restart: %+v, want recovery %v", p, later)
	}
	if st := n.Stats(); st["peer_down"] != 1 || st["heartbeat_answered"] < 8 {
		t.Errorf("counts %v: want one peer_down and the answers", st)
	}
}

// TestForgedHeartbeatsWriteNothing: heartbeats from an associated
// address with a new recovery time stamp each (anyone reaching N4 can
// forge them) are noted in memory and never written back: one write,
// the setup's, for 100 of them.
func TestForgedHeartbeatsWriteNothing(t *testing.T) {
	writes := 0
	n, err := Listen(Options{Addr: "127.0.0.1:0", NodeID: "192.0.2.1", Recovery: started, HeartbeatEvery: time.Hour,
		Changed: func([]Peer) { writes++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	from := netip.MustParseAddrPort("192.0.2.10:8805")
	n.Handle(marshal(message.NewAssociationSetupRequest(1, ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started))), from)
	for i := range 100 {
		ts := started.Add(time.Duration(i+1) * time.Second)
		if out := n.Handle(marshal(message.NewHeartbeatRequest(uint32(i+2), ie.NewRecoveryTimeStamp(ts), nil)), from); out == nil {
			t.Fatalf("heartbeat %d unanswered", i)
		}
	}
	if p := n.Peers(); writes != 1 || len(p) != 1 || !p[0].Recovery.Equal(started.Add(100*time.Second)) {
		t.Errorf("%d writes, peers %+v; want 1 write and the last stamp noted", writes, p)
	}
}
