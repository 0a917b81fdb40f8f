// SPDX-License-Identifier: Apache-2.0

package upf_test

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/n4"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/upf"
)

const (
	smfID  = "192.0.2.10"
	n3     = "10.2.0.1"
	ueAddr = "10.45.0.2"
	gnb    = "192.0.2.50"
)

// gateway is a dataplane (real maps), its session plane with a journal
// in dir, and an N4 node carrying its sessions, on loopback.
type gateway struct {
	dp    *loader.Dataplane
	plane *upf.Plane
	node  *n4.Node
	stop  func()
}

func openDataplane(t *testing.T) *loader.Dataplane {
	t.Helper()
	testutil.RequireRoot(t)
	dp, err := loader.Open(bpf.Limits{Flows: 1024, Rules: 64, Sessions: 64}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	return dp
}

func startGateway(t *testing.T, dp *loader.Dataplane, dir string, peers []n4.Peer, opts ...func(*n4.Options)) *gateway {
	t.Helper()
	ss, err := dp.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	p, err := upf.Open(filepath.Join(dir, "edgeplane.yaml.sessions"), ss, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := n4.Options{Addr: "127.0.0.1:0", NodeID: "192.0.2.1", UserPlane: p, N3: netip.MustParseAddr(n3),
		Sessions: p.Sessions(), Peers: peers}
	for _, f := range opts {
		f(&o)
	}
	n, err := n4.Listen(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	g := &gateway{dp: dp, plane: p, node: n}
	g.stop = func() {
		cancel()
		<-done
		_ = n.Close()
		_ = p.Close()
	}
	t.Cleanup(func() {
		if g.stop != nil {
			g.stop()
		}
	})
	return g
}

// smf asks gw over real UDP with messages go-pfcp builds; the Session
// Report Requests the node sends meanwhile are kept in reports.
type smf struct {
	t       *testing.T
	conn    *net.UDPConn
	seq     uint32
	reports []*message.SessionReportRequest
}

func dialSMF(t *testing.T, g *gateway) *smf {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(g.node.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &smf{t: t, conn: c}
}

func (s *smf) ask(m message.Message) message.Message {
	s.t.Helper()
	b := make([]byte, m.MarshalLen())
	if err := m.MarshalTo(b); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.conn.Write(b); err != nil {
		s.t.Fatal(err)
	}
	for {
		r, err := s.read(2 * time.Second)
		if err != nil {
			s.t.Fatalf("%s: no answer: %v", m.MessageTypeName(), err)
		}
		if rr, ok := r.(*message.SessionReportRequest); ok {
			s.reports = append(s.reports, rr)
			continue
		}
		return r
	}
}

// read reads the next message from the node, waiting at most d.
func (s *smf) read(d time.Duration) (message.Message, error) {
	_ = s.conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 65536)
	n, err := s.conn.Read(buf)
	if err != nil {
		return nil, err
	}
	r, err := message.Parse(buf[:n])
	if err != nil {
		s.t.Fatal(err)
	}
	return r, nil
}

func (s *smf) next() uint32 { s.seq++; return s.seq }

// associate sets the SMF's association up with recovery time stamp
// recovery.
func (s *smf) associate(recovery time.Time) {
	s.t.Helper()
	a := s.ask(message.NewAssociationSetupRequest(s.next(), ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(recovery)))
	if c := cause(s.t, a.(*message.AssociationSetupResponse).Cause); c != ie.CauseRequestAccepted {
		s.t.Fatalf("association: cause %d", c)
	}
}

func cause(t *testing.T, c *ie.IE) uint8 {
	t.Helper()
	if c == nil {
		t.Fatal("no cause")
	}
	v, err := c.Cause()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// establish sets up the SMF's association and one session for the UE:
// uplink from the gNB by a TEID the UPF chooses, SDF "any", QFI 9;
// downlink buffered until the gNB's TEID is known. It returns the UP
// SEID and the TEID chosen.
func (s *smf) establish() (uint64, uint32) {
	t := s.t
	t.Helper()
	s.associate(time.Now())
	r := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0,
		ie.NewNodeID(smfID, "", ""), ie.NewFSEID(0x77, net.ParseIP(smfID), nil),
		ie.NewCreatePDR(ie.NewPDRID(1), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x05, 0, nil, nil, 0),
				ie.NewUEIPAddress(0x02, ueAddr, "", 0, 0), ie.NewSDFFilter("permit out ip from any to assigned", "", "", "", 0), ie.NewQFI(9)),
			ie.NewOuterHeaderRemoval(0, 0), ie.NewFARID(1), ie.NewQERID(1), ie.NewURRID(1)),
		ie.NewCreatePDR(ie.NewPDRID(2), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore), ie.NewUEIPAddress(0x06, ueAddr, "", 0, 0),
				ie.NewSDFFilter("permit out 17 from 10.6.0.0/16 7777 to assigned 5000-5999", "", "", "", 0)),
			ie.NewFARID(2), ie.NewQERID(1), ie.NewURRID(1)),
		ie.NewCreateURR(ie.NewURRID(1), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x01, 0x00), ie.NewMeasurementPeriod(time.Second)),
		ie.NewCreateFAR(ie.NewFARID(1), ie.NewApplyAction(n4.ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceCore))),
		ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(n4.ActBuff)),
		ie.NewCreateQER(ie.NewQERID(1), ie.NewGateStatus(0, 0), ie.NewMBR(100000, 200000), ie.NewQFI(9))))
	resp := r.(*message.SessionEstablishmentResponse)
	if c := cause(t, resp.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("establishment: cause %d", c)
	}
	if resp.SEID() != 0x77 || resp.UPFSEID == nil || len(resp.CreatedPDR) != 1 {
		t.Fatalf("establishment response: SEID %#x, UP F-SEID %v, created PDRs %d", resp.SEID(), resp.UPFSEID, len(resp.CreatedPDR))
	}
	up, err := resp.UPFSEID.FSEID()
	if err != nil || up.SEID == 0 {
		t.Fatalf("UP F-SEID: %v %v", up, err)
	}
	f, err := resp.CreatedPDR[0].FTEID()
	if err != nil || f.TEID == 0 || !f.IPv4Address.Equal(net.ParseIP(n3)) {
		t.Fatalf("created PDR's F-TEID: %+v %v", f, err)
	}
	return up.SEID, f.TEID
}

// record reads the live record of the session the UE's address leads
// to, and the slot.
func record(t *testing.T, dp *loader.Dataplane) (bpf.Sess, uint32, bool) {
	t.Helper()
	var slot, live uint32
	if err := dp.EdgeUe4.Lookup(bpf.Addr4(netip.MustParseAddr(ueAddr)), &slot); err != nil {
		return bpf.Sess{}, 0, false
	}
	if err := dp.EdgeSessLive.Lookup(slot, &live); err != nil {
		t.Fatal(err)
	}
	var rec bpf.Sess
	if err := dp.EdgeSessions.Lookup(slot*2+live, &rec); err != nil {
		t.Fatal(err)
	}
	return rec, slot, true
}

// TestSessionsCarried: an SMF's session, established, modified and
// deleted over real N4, is what the dataplane holds after each message:
// the chosen TEID and the UE's address lead to its slot, its record has
// the PDRs by precedence with their FARs' actions, QER gate and SDF
// filter. A modification naming a FAR the session lacks is refused and
// changes nothing. An agent restart (the plane and node opened again
// from the journal, on the same maps) keeps the session, its slot and
// TEID, and the SMF modifies it as before; after deletion nothing leads
// to it, across a restart too.
func TestSessionsCarried(t *testing.T) {
	dp := openDataplane(t)
	dir := t.TempDir()
	g := startGateway(t, dp, dir, nil)
	s := dialSMF(t, g)
	seid, teid := s.establish()

	var slot uint32
	if err := dp.EdgeTeid.Lookup(bpf.BE32(teid), &slot); err != nil {
		t.Fatalf("TEID %#x leads nowhere: %v", teid, err)
	}
	rec, ueSlot, ok := record(t, dp)
	if !ok || ueSlot != slot || rec.Id != slot+1 || rec.Npdr != 2 {
		t.Fatalf("record: %+v (slot %d, UE's %d, found %v)", rec, slot, ueSlot, ok)
	}
	// The TEID the UPF chose names the slot: XDP finds the session
	// without the hash.
	if mask := dp.Limits.SessMask(); teid&mask != slot || rec.Own != bpf.BE32(teid) {
		t.Errorf("TEID %#x in slot %d (mask %#x): the record's own TEID %#x", teid, slot, mask, rec.Own)
	}
	ul, dl := rec.Pdr[0], rec.Pdr[1]
	if ul.Flags&bpf.SessUL == 0 {
		ul, dl = dl, ul
	}
	if ul.Teid != bpf.BE32(teid) || ul.Action != bpf.SessForw || ul.Flags&bpf.SessRemove == 0 || ul.Qfi != 9 || ul.Flags&bpf.SessAny == 0 {
		t.Errorf("uplink entry %+v", ul)
	}
	if dl.Action != bpf.SessBuff || dl.Proto != 17 || dl.RportLo != 7777 || dl.RportHi != 7777 || dl.LportLo != 5000 || dl.LportHi != 5999 ||
		dl.Remote != bpf.Addr4(netip.MustParseAddr("10.6.0.0")) || dl.Rmask != bpf.BE32(0xffff0000) || dl.Flags&bpf.SessAny != 0 {
		t.Errorf("downlink entry %+v", dl)
	}

	// The gNB answered: the downlink goes to it, in GTP-U.
	forward := ie.NewUpdateFAR(ie.NewFARID(2), ie.NewApplyAction(n4.ActForw),
		ie.NewUpdateForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
			ie.NewOuterHeaderCreation(0x0100, 0x9000, gnb, "", 0, 0, 0)))
	m := s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0, forward))
	if c := cause(t, m.(*message.SessionModificationResponse).Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("modification: cause %d", c)
	}
	rec, _, _ = record(t, dp)
	dlOf := func(r bpf.Sess) bpf.SessPDR {
		for _, e := range r.Pdr[:r.Npdr] {
			if e.Flags&bpf.SessUL == 0 {
				return e
			}
		}
		return bpf.SessPDR{}
	}
	if d := dlOf(rec); d.Action != bpf.SessForw || d.Flags&bpf.SessOHC == 0 || d.OhcTeid != bpf.BE32(0x9000) ||
		d.OhcAddr != bpf.Addr4(netip.MustParseAddr(gnb)) || d.Qfi != 9 {
		t.Errorf("downlink after the modification: %+v", d)
	}

	// A modification of another rule recompiles the FAR as it was: its
	// gNB's address is the session's own, not the datagram's that
	// brought it (whose buffer later datagrams overwrite: a refused one
	// shaped alike, naming another gNB, comes in between).
	m = s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0,
		ie.NewUpdateFAR(ie.NewFARID(2), ie.NewApplyAction(n4.ActForw),
			ie.NewUpdateForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
				ie.NewOuterHeaderCreation(0x0100, 0x9999, "192.0.2.99", "", 0, 0, 0))),
		ie.NewUpdateQER(ie.NewQERID(9), ie.NewGateStatus(0, 0))))
	if c := cause(t, m.(*message.SessionModificationResponse).Cause); c != ie.CauseRuleCreationModificationFailure {
		t.Fatalf("modification of QER 9: cause %d", c)
	}
	m = s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0,
		ie.NewUpdateQER(ie.NewQERID(1), ie.NewGateStatus(0, 0))))
	if c := cause(t, m.(*message.SessionModificationResponse).Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("QER modification: cause %d", c)
	}
	if rec, _, _ = record(t, dp); dlOf(rec).OhcAddr != bpf.Addr4(netip.MustParseAddr(gnb)) || dlOf(rec).OhcTeid != bpf.BE32(0x9000) {
		t.Errorf("downlink after another rule's modification: %+v", dlOf(rec))
	}

	// A FAR the session lacks: refused, naming it; nothing changes.
	before := rec
	m = s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0,
		ie.NewUpdateFAR(ie.NewFARID(9), ie.NewApplyAction(n4.ActDrop))))
	mr := m.(*message.SessionModificationResponse)
	if c := cause(t, mr.Cause); c != ie.CauseRuleCreationModificationFailure {
		t.Errorf("update of a FAR the session lacks: cause %d, want %d", c, ie.CauseRuleCreationModificationFailure)
	}
	if rec, _, _ = record(t, dp); rec != before {
		t.Errorf("a refused modification changed the record:\n%+v\nwas\n%+v", rec, before)
	}
	// Another SEID: not found.
	m = s.ask(message.NewSessionModificationRequest(0, 0, seid+1, s.next(), 0, forward))
	if c := cause(t, m.(*message.SessionModificationResponse).Cause); c != ie.CauseSessionContextNotFound {
		t.Errorf("modification of an unknown SEID: cause %d", c)
	}

	// Restart: the journal gives the session back in its slot.
	peers := g.node.Peers()
	g.stop()
	g.stop = nil
	g = startGateway(t, dp, dir, peers)
	s = dialSMF(t, g)
	var slot2 uint32
	if err := dp.EdgeTeid.Lookup(bpf.BE32(teid), &slot2); err != nil || slot2 != slot {
		t.Fatalf("after a restart TEID %#x leads to slot %d (%v), was %d", teid, slot2, err, slot)
	}
	if rec2, _, _ := record(t, dp); rec2 != before {
		t.Errorf("after a restart the record is\n%+v\nwas\n%+v", rec2, before)
	}
	gate := ie.NewUpdateQER(ie.NewQERID(1), ie.NewGateStatus(1, 1))
	m = s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0, gate))
	if c := cause(t, m.(*message.SessionModificationResponse).Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("modification after a restart: cause %d", c)
	}
	if rec, _, _ = record(t, dp); dlOf(rec).Gate != 1 {
		t.Errorf("gate not closed: %+v", dlOf(rec))
	}

	// What XDP counts for the uplink PDR (counter 0 or 1: the one
	// whose entry has the TEID) on two CPUs, and for the downlink.
	rec, _, _ = record(t, dp)
	cntOf := func(ul bool) uint32 {
		for _, e := range rec.Pdr[:rec.Npdr] {
			if (e.Flags&bpf.SessUL != 0) == ul {
				return uint32(e.Cnt)
			}
		}
		t.Fatal("no such entry")
		return 0
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ul             bool
		packets, bytes uint64
	}{{true, 3, 300}, {false, 5, 700}} {
		per := make([]bpf.Ctr, ncpu)
		per[0] = bpf.Ctr{Packets: c.packets - 1, Bytes: c.bytes - 100}
		per[ncpu-1].Packets += 1
		per[ncpu-1].Bytes += 100
		if err := dp.EdgeSessStats.Put(slot*bpf.SessPDRs+cntOf(c.ul), per); err != nil {
			t.Fatal(err)
		}
	}

	// Deleted, and still deleted after a restart; the answer reports
	// the URR's usage: uplink 300 bytes in 3 packets, downlink 700 in 5.
	d := s.ask(message.NewSessionDeletionRequest(0, 0, seid, s.next(), 0))
	dr := d.(*message.SessionDeletionResponse)
	if c := cause(t, dr.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("deletion: cause %d", c)
	}
	if len(dr.UsageReport) != 1 {
		t.Fatalf("deletion answered with %d usage reports, want 1", len(dr.UsageReport))
	}
	var vol *ie.VolumeMeasurementFields
	var urr uint32
	var trig []byte
	for _, x := range dr.UsageReport[0].ChildIEs {
		switch x.Type {
		case ie.URRID:
			urr, _ = x.URRID()
		case ie.VolumeMeasurement:
			vol, _ = x.VolumeMeasurement()
		case ie.UsageReportTrigger:
			trig, _ = x.UsageReportTrigger()
		}
	}
	if urr != 1 || vol == nil || vol.TotalVolume != 1000 || vol.UplinkVolume != 300 || vol.DownlinkVolume != 700 ||
		vol.TotalNumberOfPackets != 8 || vol.UplinkNumberOfPackets != 3 || vol.DownlinkNumberOfPackets != 5 || len(trig) < 2 || trig[1]&0x08 == 0 {
		t.Errorf("usage report: URR %d, volume %+v, trigger %+v", urr, vol, trig)
	}
	for round := range 2 {
		if _, _, ok := record(t, dp); ok {
			t.Errorf("round %d: the UE still leads to a session", round)
		}
		if err := dp.EdgeTeid.Lookup(bpf.BE32(teid), &slot2); err == nil {
			t.Errorf("round %d: the TEID still leads to slot %d", round, slot2)
		}
		g.stop()
		g.stop = nil
		g = startGateway(t, dp, dir, peers)
		if n := len(g.plane.Sessions()); n != 0 {
			t.Errorf("round %d: %d sessions kept after deletion", round, n)
		}
	}
}

// TestSessionsOfAGoneSMF: an SMF that sets its association up again
// with a new recovery time stamp (it restarted) loses the sessions it
// had, as does one that releases its association; the same setup
// again (a resent request) keeps them.
func TestSessionsOfAGoneSMF(t *testing.T) {
	dp := openDataplane(t)
	g := startGateway(t, dp, t.TempDir(), nil)
	s := dialSMF(t, g)
	s.establish()
	if _, _, ok := record(t, dp); !ok {
		t.Fatal("no session")
	}
	peer := g.node.Peers()[0]
	again := s.ask(message.NewAssociationSetupRequest(s.next(), ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(peer.Recovery)))
	if c := cause(t, again.(*message.AssociationSetupResponse).Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("setup again: cause %d", c)
	}
	if _, _, ok := record(t, dp); !ok || len(g.plane.Sessions()) != 1 {
		t.Fatal("the same setup again took the session away")
	}
	// establish sets up with time.Now(): a later stamp, a restart.
	time.Sleep(1100 * time.Millisecond)
	s.establish()
	if n := len(g.plane.Sessions()); n != 1 {
		t.Errorf("after the SMF restarted and set one session up: %d sessions, want 1", n)
	}
	rel := s.ask(message.NewAssociationReleaseRequest(s.next(), ie.NewNodeID(smfID, "", "")))
	if c := cause(t, rel.(*message.AssociationReleaseResponse).Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("release: cause %d", c)
	}
	if _, _, ok := record(t, dp); ok || len(g.plane.Sessions()) != 0 {
		t.Errorf("the released SMF's session is still carried (%d kept)", len(g.plane.Sessions()))
	}
}

// TestIPv4v6Session: an SMF's IPv4v6 session (the UE IP Address IE
// with both) is carried both ways: the downlink PDR's record entry has
// the IPv4 address and the IPv6 /64 prefix, both lead to the session's
// slot (edge_ue4, edge_ue6), the listing shows both; after deletion
// neither leads anywhere.
func TestIPv4v6Session(t *testing.T) {
	dp := openDataplane(t)
	g := startGateway(t, dp, t.TempDir(), nil)
	s := dialSMF(t, g)
	s.associate(time.Now())
	r := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0,
		ie.NewNodeID(smfID, "", ""), ie.NewFSEID(0x66, net.ParseIP(smfID), nil),
		ie.NewCreatePDR(ie.NewPDRID(1), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x05, 0, nil, nil, 0),
				ie.NewUEIPAddress(0x03, ueAddr, "2001:db8:45:1::", 0, 0)),
			ie.NewOuterHeaderRemoval(0, 0), ie.NewFARID(1)),
		ie.NewCreatePDR(ie.NewPDRID(2), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore), ie.NewUEIPAddress(0x07, ueAddr, "2001:db8:45:1::9", 0, 0)),
			ie.NewFARID(2)),
		ie.NewCreateFAR(ie.NewFARID(1), ie.NewApplyAction(n4.ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceCore))),
		ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(n4.ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
				ie.NewOuterHeaderCreation(0x0100, 0x9000, gnb, "", 0, 0, 0))))).(*message.SessionEstablishmentResponse)
	if c := cause(t, r.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("establishment: cause %d", c)
	}
	up, _ := r.UPFSEID.FSEID()
	rec, slot, ok := record(t, dp)
	if !ok {
		t.Fatal("the UE's IPv4 address leads to no session")
	}
	key := commit.UE6Key(netip.MustParseAddr("2001:db8:45:1::"))
	var slot6 uint32
	if err := dp.EdgeUe6.Lookup(key, &slot6); err != nil || slot6 != slot {
		t.Errorf("the UE's /64 leads to slot %d (%v), want %d", slot6, err, slot)
	}
	for _, e := range rec.Pdr[:rec.Npdr] {
		if e.Flags&(bpf.SessUEIP|bpf.SessUE6) != bpf.SessUEIP|bpf.SessUE6 || e.Ue6 != key || e.Ueip != bpf.Addr4(netip.MustParseAddr(ueAddr)) {
			t.Errorf("entry %+v: want both the IPv4 address and the /64", e)
		}
	}
	list, _, err := g.plane.Status(dataplane.SessionQuery{})
	if err != nil || len(list) != 1 || list[0].PDRs[1].UEIP != ueAddr+",2001:db8:45:1::/64" {
		t.Errorf("listed %+v (%v)", list, err)
	}
	d := s.ask(message.NewSessionDeletionRequest(0, 0, up.SEID, s.next(), 0)).(*message.SessionDeletionResponse)
	if c := cause(t, d.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("deletion: cause %d", c)
	}
	if err := dp.EdgeUe6.Lookup(key, &slot6); err == nil {
		t.Errorf("the /64 still leads to slot %d", slot6)
	}
}

// TestCounterTakenOver: a PDR created in place of one removed takes its
// counter, and starts at zero rather than with the removed PDR's
// counts; the PDR that stayed keeps its own.
func TestCounterTakenOver(t *testing.T) {
	dp := openDataplane(t)
	g := startGateway(t, dp, t.TempDir(), nil)
	s := dialSMF(t, g)
	seid, _ := s.establish()
	cnt := func(ul bool) uint8 {
		rec, _, _ := record(t, dp)
		for _, e := range rec.Pdr[:rec.Npdr] {
			if (e.Flags&bpf.SessUL != 0) == ul {
				return e.Cnt
			}
		}
		t.Fatal("no such entry")
		return 0
	}
	_, slot, _ := record(t, dp)
	ulCnt, dlCnt := cnt(true), cnt(false)
	setCounts(t, dp, slot, ulCnt, 3, 300)
	setCounts(t, dp, slot, dlCnt, 5, 500)
	m := s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0,
		ie.NewRemovePDR(ie.NewPDRID(2)),
		ie.NewCreatePDR(ie.NewPDRID(3), ie.NewPrecedence(50),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore), ie.NewUEIPAddress(0x06, ueAddr, "", 0, 0)), ie.NewFARID(2))))
	if cs := cause(t, m.(*message.SessionModificationResponse).Cause); cs != ie.CauseRequestAccepted {
		t.Fatalf("modification: cause %d", cs)
	}
	if c := cnt(false); c != dlCnt {
		t.Fatalf("PDR 3 took counter %d, not PDR 2's %d: the test shows nothing", c, dlCnt)
	}
	c, _, err := g.plane.Counters(seid)
	if err != nil {
		t.Fatal(err)
	}
	if c[3].Packets != 0 || c[3].Bytes != 0 || c[1].Packets != 3 || c[1].Bytes != 300 {
		t.Errorf("counters after the takeover: %+v, want PDR 3 at zero and PDR 1 at 3 packets, 300 bytes", c)
	}
}

// TestN3OverIPv6: a user plane with an IPv6 N3 address beside its
// IPv4 one gives a CHOOSE F-TEID the addresses of the families the SMF
// asks for (V6: the IPv6 one alone; V4 and V6: both; two CHOOSEs
// without a CHOOSE ID, a TEID each), and carries
// outer header creation GTP-U/UDP/IPv6: the PDR's entry names the
// session's IPv6 peer, shared by the PDRs toward it. A third IPv6 peer
// in one session is refused naming its PDR (73), the session as it
// was; an IPv6-only CHOOSE at a user plane with no IPv6 N3 address is
// refused (76).
func TestN3OverIPv6(t *testing.T) {
	const n3v6 = "fd02::1"
	dp := openDataplane(t)
	g := startGateway(t, dp, t.TempDir(), nil, func(o *n4.Options) { o.N3v6 = netip.MustParseAddr(n3v6) })
	s := dialSMF(t, g)
	s.associate(time.Now())
	dlFAR := func(id uint32, peer string) *ie.IE {
		return ie.NewCreateFAR(ie.NewFARID(id), ie.NewApplyAction(n4.ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
				ie.NewOuterHeaderCreation(0x0200, 0x9000+id, "", peer, 0, 0, 0)))
	}
	dlPDR := func(id uint16, far uint32, port string) *ie.IE {
		return ie.NewCreatePDR(ie.NewPDRID(id), ie.NewPrecedence(100+uint32(id)),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore), ie.NewUEIPAddress(0x06, ueAddr, "", 0, 0),
				ie.NewSDFFilter("permit out 17 from any to assigned "+port, "", "", "", 0)),
			ie.NewFARID(far))
	}
	r := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0,
		ie.NewNodeID(smfID, "", ""), ie.NewFSEID(0x55, net.ParseIP(smfID), nil),
		ie.NewCreatePDR(ie.NewPDRID(1), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x06, 0, nil, nil, 0),
				ie.NewUEIPAddress(0x02, ueAddr, "", 0, 0)),
			ie.NewOuterHeaderRemoval(1, 0), ie.NewFARID(1)),
		ie.NewCreatePDR(ie.NewPDRID(2), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x07, 0, nil, nil, 0),
				ie.NewUEIPAddress(0x02, ueAddr, "", 0, 0)),
			ie.NewOuterHeaderRemoval(1, 0), ie.NewFARID(1)),
		dlPDR(3, 2, "5000"), dlPDR(4, 2, "5001"), dlPDR(5, 3, "5002"),
		ie.NewCreateFAR(ie.NewFARID(1), ie.NewApplyAction(n4.ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceCore))),
		dlFAR(2, "fd02::2"), dlFAR(3, "fd02::3"))).(*message.SessionEstablishmentResponse)
	if c := cause(t, r.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("establishment: cause %d", c)
	}
	up, _ := r.UPFSEID.FSEID()
	if len(r.CreatedPDR) != 2 {
		t.Fatalf("%d created PDRs, want 2", len(r.CreatedPDR))
	}
	teids := map[uint32]bool{}
	for _, c := range r.CreatedPDR {
		id, _ := c.PDRID()
		f, err := c.FTEID()
		if err != nil {
			t.Fatal(err)
		}
		teids[f.TEID] = true
		v6ok := f.HasIPv6() && f.IPv6Address.Equal(net.ParseIP(n3v6))
		v4ok := f.HasIPv4() && f.IPv4Address.Equal(net.ParseIP(n3))
		if id == 1 && (!v6ok || f.HasIPv4()) || id == 2 && (!v6ok || !v4ok) {
			t.Errorf("PDR %d's F-TEID: flags %#x, %v / %v", id, f.Flags, f.IPv4Address, f.IPv6Address)
		}
	}
	if len(teids) != 2 {
		t.Errorf("two CHOOSEs without a CHOOSE ID got TEIDs %v, want two", teids)
	}
	rec, _, ok := record(t, dp)
	if !ok {
		t.Fatal("the UE's address leads to no session")
	}
	peers := map[uint8]int{}
	for _, e := range rec.Pdr[:rec.Npdr] {
		if e.Flags&bpf.SessUL == 0 {
			if e.Flags&bpf.SessOHC == 0 || e.Ohc6 == 0 || e.OhcAddr != 0 {
				t.Errorf("downlink entry %+v: want outer header creation toward an IPv6 peer", e)
				continue
			}
			peers[e.Ohc6]++
		}
	}
	if rec.Peer6[0] != netip.MustParseAddr("fd02::2").As16() || rec.Peer6[1] != netip.MustParseAddr("fd02::3").As16() ||
		peers[1] != 2 || peers[2] != 1 {
		t.Errorf("peers %v, PDRs per peer %v; want fd02::2 for two, fd02::3 for one", rec.Peer6, peers)
	}

	// A third IPv6 peer: refused, naming its PDR; the session as it was.
	m := s.ask(message.NewSessionModificationRequest(0, 0, up.SEID, s.next(), 0,
		dlPDR(6, 4, "5003"), dlFAR(4, "fd02::4"))).(*message.SessionModificationResponse)
	if c := cause(t, m.Cause); c != ie.CauseRuleCreationModificationFailure || m.FailedRuleID == nil {
		t.Errorf("a third IPv6 peer: cause %d, failed rule %v", c, m.FailedRuleID)
	} else if id, err := m.FailedRuleID.FailedRuleID(); err != nil || id != 6 {
		t.Errorf("a third IPv6 peer: failed rule %d (%v), want PDR 6", id, err)
	}
	if after, _, _ := record(t, dp); after != rec {
		t.Errorf("the refused modification changed the record")
	}

	// No IPv6 N3 address: an IPv6-only CHOOSE is refused.
	g.stop()
	g.stop = nil
	g = startGateway(t, openDataplane(t), t.TempDir(), nil)
	s = dialSMF(t, g)
	s.associate(time.Now())
	r = s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0,
		ie.NewNodeID(smfID, "", ""), ie.NewFSEID(0x56, net.ParseIP(smfID), nil),
		ie.NewCreatePDR(ie.NewPDRID(1), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x06, 0, nil, nil, 0),
				ie.NewUEIPAddress(0x02, ueAddr, "", 0, 0)),
			ie.NewOuterHeaderRemoval(1, 0), ie.NewFARID(1)),
		ie.NewCreateFAR(ie.NewFARID(1), ie.NewApplyAction(n4.ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceCore))))).(*message.SessionEstablishmentResponse)
	if c := cause(t, r.Cause); c != ie.CauseInvalidFTEIDAllocationOption {
		t.Errorf("an IPv6 CHOOSE with no IPv6 N3 address: cause %d, want %d", c, ie.CauseInvalidFTEIDAllocationOption)
	}
}
