// SPDX-License-Identifier: Apache-2.0

package upf_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/n4"
)

// usage is a Usage Report as the SMF reads it.
type usage struct {
	urr, seq       uint32
	trig           uint16
	total, ul, dl  uint64
	packets        uint64
	start, end     time.Time
	hasVol, hasDur bool
}

func usageOf(t *testing.T, g *ie.IE) usage {
	t.Helper()
	var u usage
	for _, x := range g.ChildIEs {
		switch x.Type {
		case ie.URRID:
			u.urr, _ = x.URRID()
		case ie.URSEQN:
			u.seq, _ = x.URSEQN()
		case ie.UsageReportTrigger:
			b, _ := x.UsageReportTrigger()
			u.trig = uint16(b[0]) | uint16(b[1])<<8
		case ie.VolumeMeasurement:
			v, err := x.VolumeMeasurement()
			if err != nil {
				t.Fatal(err)
			}
			u.total, u.ul, u.dl, u.packets, u.hasVol = v.TotalVolume, v.UplinkVolume, v.DownlinkVolume, v.TotalNumberOfPackets, true
		case ie.StartTime:
			u.start, _ = x.StartTime()
		case ie.EndTime:
			u.end, _ = x.EndTime()
		case ie.DurationMeasurement:
			u.hasDur = true
		}
	}
	return u
}

// Usage report triggers as the SMF reads them (octet 5 low).
const (
	trPERIO = 0x0001
	trVOLTH = 0x0002
	trTIMTH = 0x0004
	trSTART = 0x0010
	trSTOPT = 0x0020
	trIMMER = 0x0080
	trVOLQU = 0x0100
	trTIMQU = 0x0200
	trTERMR = 0x0800
)

// usageRules is an establishment's IEs for a UE with an uplink PDR
// under URRs 1 and 2 and a downlink PDR under URRs 1 and 3, with urrs.
func usageRules(urrs ...*ie.IE) []*ie.IE {
	return append([]*ie.IE{ie.NewNodeID(smfID, "", ""), ie.NewFSEID(0x99, net.ParseIP(smfID), nil),
		ie.NewCreatePDR(ie.NewPDRID(1), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x05, 0, nil, nil, 0),
				ie.NewUEIPAddress(0x02, ueAddr, "", 0, 0)),
			ie.NewOuterHeaderRemoval(0, 0), ie.NewFARID(1), ie.NewURRID(1), ie.NewURRID(2)),
		ie.NewCreatePDR(ie.NewPDRID(2), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore), ie.NewUEIPAddress(0x06, ueAddr, "", 0, 0)),
			ie.NewFARID(2), ie.NewURRID(1), ie.NewURRID(3)),
		ie.NewCreateFAR(ie.NewFARID(1), ie.NewApplyAction(n4.ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceCore))),
		ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(n4.ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
				ie.NewOuterHeaderCreation(0x0100, 0x9000, gnb, "", 0, 0, 0)))}, urrs...)
}

// uplinkAction is the action of the session record's uplink entry.
func uplinkAction(t *testing.T, dp *loader.Dataplane) uint8 {
	t.Helper()
	rec, _, ok := record(t, dp)
	if !ok {
		t.Fatal("no record")
	}
	for _, e := range rec.Pdr[:rec.Npdr] {
		if e.Flags&bpf.SessUL != 0 {
			return e.Action
		}
	}
	t.Fatal("no uplink entry")
	return 0
}

// waitDrop waits up to 2 s for the uplink entry to drop (when: what
// should have made it).
func waitDrop(t *testing.T, dp *loader.Dataplane, when string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for uplinkAction(t, dp) != bpf.SessDrop && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a := uplinkAction(t, dp); a != bpf.SessDrop {
		t.Fatalf("uplink action %d %s, want drop", a, when)
	}
}

// restartGateway stops g and starts the agent's N4 again on dir (its
// peers kept), and associates the SMF anew from a new socket: the same
// association (recovery), the sessions kept.
func restartGateway(t *testing.T, dp *loader.Dataplane, dir string, g *gateway, s *smf, recovery time.Time,
	opts ...func(*n4.Options)) (*gateway, *smf) {
	t.Helper()
	peers := g.node.Peers()
	g.stop()
	g.stop = nil
	g = startGateway(t, dp, dir, peers, opts...)
	s2 := dialSMF(t, g)
	s2.seq = s.seq
	s2.associate(recovery)
	return g, s2
}

// refusedURR asks for an establishment of ies and checks it is refused
// with cause want naming IE off (name: the case).
func refusedURR(t *testing.T, s *smf, name string, ies []*ie.IE, want uint8, off uint16) {
	t.Helper()
	r := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, ies...)).(*message.SessionEstablishmentResponse)
	if got := cause(t, r.Cause); got != want {
		t.Errorf("%s: cause %d, want %d", name, got, want)
	} else if o, err := r.OffendingIE.OffendingIE(); err != nil || o != off {
		t.Errorf("%s: offending IE %d (%v), want %d", name, o, err, off)
	}
}

// fastUsage has the node read usage every 20 ms.
func fastUsage(o *n4.Options) { o.UsageEvery = 20 * time.Millisecond }

// meteredGateway opens a dataplane and starts N4 on a state directory,
// reading usage every 20 ms, with an SMF associated at recovery.
func meteredGateway(t *testing.T) (*loader.Dataplane, string, *gateway, *smf, time.Time) {
	t.Helper()
	dp := openDataplane(t)
	dir := t.TempDir()
	g := startGateway(t, dp, dir, nil, fastUsage)
	s := dialSMF(t, g)
	recovery := time.Now()
	s.associate(recovery)
	return dp, dir, g, s, recovery
}

// waitUsage reads the node's Session Report Requests until one carries
// a usage report of urr with trigger bit trig (within d), and returns
// it; reports before it, and others the same request carries, are kept
// in s.reports.
func (s *smf) waitUsage(urr uint32, trig uint16, d time.Duration) usage {
	s.t.Helper()
	take := func(r *message.SessionReportRequest) (usage, bool) {
		for i, g := range r.UsageReport {
			if u := usageOf(s.t, g); u.urr == urr && u.trig&trig != 0 {
				r.UsageReport = append(r.UsageReport[:i:i], r.UsageReport[i+1:]...)
				return u, true
			}
		}
		return usage{}, false
	}
	for i, r := range s.reports {
		if u, ok := take(r); ok {
			if len(r.UsageReport) == 0 {
				s.reports = append(s.reports[:i:i], s.reports[i+1:]...)
			}
			return u
		}
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		m, err := s.read(time.Until(end))
		if err != nil {
			break
		}
		r, ok := m.(*message.SessionReportRequest)
		if !ok {
			continue
		}
		if rt, err := r.ReportType.ReportType(); err != nil || rt&0x02 == 0 {
			s.t.Errorf("report type %#x (%v), want USAR", rt, err)
		}
		u, ok := take(r)
		if len(r.UsageReport) > 0 {
			s.reports = append(s.reports, r)
		}
		if ok {
			return u
		}
	}
	for _, r := range s.reports {
		for _, g := range r.UsageReport {
			s.t.Logf("report kept: %+v", usageOf(s.t, g))
		}
	}
	s.t.Fatalf("no usage report of URR %d with trigger %#x within %v", urr, trig, d)
	return usage{}
}

// setCounts makes a session PDR's counters read packets and bytes (as
// XDP counts them: TestGTPUSessions), split over the first and last
// CPU.
func setCounts(t *testing.T, dp *loader.Dataplane, slot uint32, cnt uint8, packets, bytes uint64) {
	t.Helper()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	per := make([]bpf.Ctr, ncpu)
	per[0] = bpf.Ctr{Packets: packets / 2, Bytes: bytes / 2}
	per[ncpu-1].Packets += packets - packets/2
	per[ncpu-1].Bytes += bytes - bytes/2
	if err := dp.EdgeSessStats.Put(slot*bpf.SessPDRs+uint32(cnt), per); err != nil {
		t.Fatal(err)
	}
}

// TestUsageReports: URRs report as their triggers say, over real N4,
// from the counters of real maps. Uplink traffic starting is reported
// (START), a volume threshold crossed is (VOLTH, the volume since the
// last report), a quota spent is (VOLQU) and the uplink PDR then drops
// what it detects, across an agent restart too, until a new quota; a
// quiet URR reports the stop (STOPT); a periodic one reports every
// period; Query URR answers with the usage since the last report,
// Remove URR with the final one, each report numbered per URR. A URR
// whose trigger lacks what it needs is refused, naming the IE.
func TestUsageReports(t *testing.T) {
	dp, dir, g, s, recovery := meteredGateway(t)
	rules := usageRules
	urr1 := ie.NewCreateURR(ie.NewURRID(1), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x32, 0x00),
		ie.NewVolumeThreshold(0x01, 1000, 0, 0), ie.NewInactivityDetectionTime(1))
	urr2 := ie.NewCreateURR(ie.NewURRID(2), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x00, 0x01),
		ie.NewVolumeQuota(0x01, 5000, 0, 0))
	urr3 := ie.NewCreateURR(ie.NewURRID(3), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x01, 0x00),
		ie.NewMeasurementPeriod(time.Second))

	// Triggers without what they need: refused, naming the IE.
	for _, c := range []struct {
		name string
		urr  *ie.IE
		off  uint16
	}{
		{"periodic, no period", ie.NewCreateURR(ie.NewURRID(3), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x01, 0x00)), ie.MeasurementPeriod},
		{"threshold, none given", ie.NewCreateURR(ie.NewURRID(3), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x02, 0x00)), ie.VolumeThreshold},
		{"quota, none given", ie.NewCreateURR(ie.NewURRID(3), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x00, 0x01)), ie.VolumeQuota},
	} {
		refusedURR(t, s, c.name, rules(urr1, urr2, c.urr), ie.CauseConditionalIEMissing, c.off)
	}
	if n := len(g.plane.Sessions()); n != 0 {
		t.Fatalf("refused establishments left %d sessions", n)
	}

	r := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, rules(urr1, urr2, urr3)...)).(*message.SessionEstablishmentResponse)
	if c := cause(t, r.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("establishment: cause %d", c)
	}
	up, _ := r.UPFSEID.FSEID()
	seid := up.SEID
	rec, slot, ok := record(t, dp)
	if !ok {
		t.Fatal("no record")
	}
	var ulCnt, dlCnt uint8
	for _, e := range rec.Pdr[:rec.Npdr] {
		if e.Flags&bpf.SessUL != 0 {
			ulCnt = e.Cnt
		} else {
			dlCnt = e.Cnt
		}
	}
	ulAction := func() uint8 { return uplinkAction(t, dp) }

	// Traffic starts: 600 bytes up.
	setCounts(t, dp, slot, ulCnt, 6, 600)
	if u := s.waitUsage(1, trSTART, 2*time.Second); u.ul != 600 || u.dl != 0 || u.seq != 0 || !u.hasDur {
		t.Errorf("start of traffic: %+v", u)
	}
	// 1,100 bytes more: over the threshold since that report.
	setCounts(t, dp, slot, ulCnt, 17, 1700)
	if u := s.waitUsage(1, trVOLTH, 2*time.Second); u.ul != 1100 || u.total != 1100 || u.packets != 11 || u.seq != 1 {
		t.Errorf("threshold: %+v", u)
	}
	if ulAction() != bpf.SessForw {
		t.Fatalf("uplink action %d before the quota is spent", ulAction())
	}
	// 5,200 bytes since the session began: the 5,000-byte quota is
	// spent; the uplink PDR drops.
	setCounts(t, dp, slot, ulCnt, 52, 5200)
	if u := s.waitUsage(2, trVOLQU, 2*time.Second); u.ul != 5200 || u.seq != 0 {
		t.Errorf("quota: %+v", u)
	}
	waitDrop(t, dp, "after the quota is spent")
	// Downlink traffic and the periodic report of URR 3.
	setCounts(t, dp, slot, dlCnt, 3, 900)
	if u := s.waitUsage(3, trPERIO, 3*time.Second); u.dl != 900 || u.ul != 0 {
		t.Errorf("periodic: %+v", u)
	}
	// Nothing moves for the inactivity time: URR 1 reports the stop.
	if u := s.waitUsage(1, trSTOPT, 4*time.Second); !u.hasVol {
		t.Errorf("stop of traffic: %+v", u)
	}

	// An agent restart keeps the spent quota spent.
	g, s = restartGateway(t, dp, dir, g, s, recovery, fastUsage)
	if a := ulAction(); a != bpf.SessDrop {
		t.Fatalf("uplink action %d after a restart, want drop", a)
	}
	// A new quota: forwarding again. Query URR 1: the usage since its
	// last report. Remove URR 3: its final report.
	setCounts(t, dp, slot, ulCnt, 60, 6000)
	m := s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0,
		ie.NewUpdateURR(ie.NewURRID(2), ie.NewVolumeQuota(0x01, 10000, 0, 0)),
		ie.NewQueryURR(ie.NewURRID(1)), ie.NewRemoveURR(ie.NewURRID(3)),
		ie.NewUpdatePDR(ie.NewPDRID(2), ie.NewFARID(2), ie.NewURRID(1)))).(*message.SessionModificationResponse)
	if c := cause(t, m.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("modification: cause %d", c)
	}
	if a := ulAction(); a != bpf.SessForw {
		t.Errorf("uplink action %d after a new quota, want forward", a)
	}
	got := map[uint32]usage{}
	for _, g := range m.UsageReport {
		u := usageOf(t, g)
		got[u.urr] = u
	}
	if u, ok := got[1]; !ok || u.trig&trIMMER == 0 || !u.hasVol {
		t.Errorf("queried URR 1: %+v (%v)", u, ok)
	}
	if u, ok := got[3]; !ok || u.trig&trTERMR == 0 {
		t.Errorf("removed URR 3: %+v (%v)", u, ok)
	}
	if len(got) != 2 {
		t.Errorf("modification answered with reports of %d URRs, want 2", len(got))
	}
	// The new quota counts from when it was given.
	setCounts(t, dp, slot, ulCnt, 165, 16500)
	// Its report: the volume since the last (the first quota's, or the
	// restart's first look, at 5,200 or 6,000 bytes).
	if u := s.waitUsage(2, trVOLQU, 2*time.Second); u.ul < 10500 || u.ul > 11300 {
		t.Errorf("second quota: %+v", u)
	}
	// A query of a URR the session lacks: refused, nothing changes.
	m = s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0, ie.NewQueryURR(ie.NewURRID(7)))).(*message.SessionModificationResponse)
	if c := cause(t, m.Cause); c != ie.CauseRuleCreationModificationFailure {
		t.Errorf("query of URR 7: cause %d", c)
	}
	// Deletion: every URR's final report.
	d := s.ask(message.NewSessionDeletionRequest(0, 0, seid, s.next(), 0)).(*message.SessionDeletionResponse)
	if len(d.UsageReport) != 2 {
		t.Fatalf("deletion: %d usage reports, want 2", len(d.UsageReport))
	}
	for _, g := range d.UsageReport {
		if u := usageOf(t, g); u.trig&trTERMR == 0 {
			t.Errorf("deletion report %+v", u)
		}
	}
}

// TestUsageManySessions: with many watched sessions the endpoint reads
// every session's counters in one batch (Plane.UsageMany), which reads
// what each session's own lookups read, and reports the sessions whose
// volume crossed their threshold, and only those.
func TestUsageManySessions(t *testing.T) {
	dp := openDataplane(t)
	g := startGateway(t, dp, t.TempDir(), nil, func(o *n4.Options) { o.UsageEvery = 20 * time.Millisecond })
	s := dialSMF(t, g)
	s.associate(time.Now())
	upSEID := establishMany(t, s, 60) // the test dataplane holds 64
	ss := g.plane.Sessions()
	// Counters over the sessions' slots: some over the threshold.
	over := map[uint64]bool{}
	for i, x := range ss {
		var slot uint32
		if err := dp.EdgeTeid.Lookup(bpf.BE32(x.PDRs[1].TEID), &slot); err != nil {
			t.Fatal(err)
		}
		b := uint64(100 * (i%7 + 1))
		if i%9 == 0 {
			b = 5000 + uint64(i)
			over[x.CPSEID] = true
		}
		setCounts(t, dp, slot, 0, b/100, b)
	}
	many, err := g.plane.UsageMany(ss)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ss {
		one, err := g.plane.Usage(x)
		if err != nil {
			t.Fatal(err)
		}
		if got := many[x.UPSEID]; len(got) != 1 || got[1] != one[1] {
			t.Errorf("session %#x: the batch read %+v, its own %+v", x.UPSEID, got, one)
		}
	}
	// The reports: the sessions over, each once.
	seen := map[uint64]int{}
	end := time.Now().Add(time.Second)
	for time.Now().Before(end) {
		m, err := s.read(time.Until(end))
		if err != nil {
			break
		}
		if r, ok := m.(*message.SessionReportRequest); ok {
			seen[r.SEID()]++
			if u := usageOf(t, r.UsageReport[0]); u.trig&trVOLTH == 0 || u.ul < 5000 {
				t.Errorf("session %#x: report %+v", r.SEID(), u)
			}
		}
	}
	for cp := range upSEID {
		if want := map[bool]int{true: 1}[over[cp]]; seen[cp] != want {
			t.Errorf("session %#x: %d threshold reports, want %d", cp, seen[cp], want)
		}
	}
}

// establishMany establishes n sessions for UEs 10.45.1.0 up, each with
// an uplink PDR under URR 1 (a 1,000-byte volume threshold), CP SEIDs
// 0x1000 up. It returns their UP SEIDs by CP SEID.
func establishMany(t *testing.T, s *smf, n int) map[uint64]uint64 {
	t.Helper()
	upSEID := map[uint64]uint64{}
	for i := range n {
		cp := uint64(0x1000 + i)
		ue := netip.AddrFrom4([4]byte{10, 45, 1, byte(i)}).String()
		r := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0,
			ie.NewNodeID(smfID, "", ""), ie.NewFSEID(cp, net.ParseIP(smfID), nil),
			ie.NewCreatePDR(ie.NewPDRID(1), ie.NewPrecedence(100),
				ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x05, 0, nil, nil, 0),
					ie.NewUEIPAddress(0x02, ue, "", 0, 0)),
				ie.NewOuterHeaderRemoval(0, 0), ie.NewFARID(1), ie.NewURRID(1)),
			ie.NewCreateFAR(ie.NewFARID(1), ie.NewApplyAction(n4.ActForw),
				ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceCore))),
			ie.NewCreateURR(ie.NewURRID(1), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x02, 0x00),
				ie.NewVolumeThreshold(0x01, 1000, 0, 0)))).(*message.SessionEstablishmentResponse)
		if c := cause(t, r.Cause); c != ie.CauseRequestAccepted {
			t.Fatalf("session %d: cause %d", i, c)
		}
		f, _ := r.UPFSEID.FSEID()
		upSEID[cp] = f.SEID
	}
	return upSEID
}

// TestSessionStatusPages: the sessions are listed by UP SEID a page at
// a time, each page's next the SEID to ask after, every session once;
// SEIDs asked for are the only ones listed.
func TestSessionStatusPages(t *testing.T) {
	dp := openDataplane(t)
	g := startGateway(t, dp, t.TempDir(), nil)
	s := dialSMF(t, g)
	s.associate(time.Now())
	up := establishMany(t, s, 50)
	var seen []uint64
	q := dataplane.SessionQuery{Limit: 20}
	pages := 0
	for {
		list, next, err := g.plane.Status(q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, x := range list {
			seen = append(seen, x.UPSEID)
			if len(x.PDRs) != 1 {
				t.Errorf("session %#x listed with %d PDRs", x.UPSEID, len(x.PDRs))
			}
		}
		if next == 0 {
			break
		}
		if next != list[len(list)-1].UPSEID || len(list) != 20 {
			t.Fatalf("page %d: %d sessions, next %#x", pages, len(list), next)
		}
		q.After = next
	}
	if pages != 3 || len(seen) != 50 || !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != 50 {
		t.Errorf("%d pages listed %d sessions (sorted %v)", pages, len(seen), slices.IsSorted(seen))
	}
	want := []uint64{up[0x1003], up[0x1010]}
	list, next, err := g.plane.Status(dataplane.SessionQuery{UPSEIDs: append(want, 12345), Limit: 20})
	if err != nil || next != 0 || len(list) != 2 || !slices.Contains(want, list[0].UPSEID) || !slices.Contains(want, list[1].UPSEID) {
		t.Errorf("two SEIDs asked for (and one unknown): %d listed, next %#x, %v", len(list), next, err)
	}
}

// TestTimeUsageReports: a URR with a Time Threshold reports when the
// time since its last report reaches it (TIMTH), carrying the duration;
// one with a Time Quota reports when the time since the quota was given
// reaches it (TIMQU) and its PDR drops what it detects, across an agent
// restart too, until a modification gives a new quota. Either trigger
// without its IE is refused naming it; a time under a second is refused
// as incorrect.
func TestTimeUsageReports(t *testing.T) {
	dp, dir, g, s, recovery := meteredGateway(t)
	durat := ie.NewMeasurementMethod(0, 0, 1)
	urr1 := ie.NewCreateURR(ie.NewURRID(1), durat, ie.NewReportingTriggers(0x04, 0x00), ie.NewTimeThreshold(time.Second))
	urr2 := ie.NewCreateURR(ie.NewURRID(2), durat, ie.NewReportingTriggers(0x00, 0x02), ie.NewTimeQuota(2*time.Second))
	urr3 := ie.NewCreateURR(ie.NewURRID(3), durat, ie.NewReportingTriggers(0x00, 0x00))
	for _, c := range []struct {
		name  string
		urr   *ie.IE
		cause uint8
		off   uint16
	}{
		{"time threshold, none given", ie.NewCreateURR(ie.NewURRID(3), durat, ie.NewReportingTriggers(0x04, 0x00)),
			ie.CauseConditionalIEMissing, ie.TimeThreshold},
		{"time quota, none given", ie.NewCreateURR(ie.NewURRID(3), durat, ie.NewReportingTriggers(0x00, 0x02)),
			ie.CauseConditionalIEMissing, ie.TimeQuota},
		{"time quota of 0 s", ie.NewCreateURR(ie.NewURRID(3), durat, ie.NewReportingTriggers(0x00, 0x02), ie.NewTimeQuota(0)),
			ie.CauseMandatoryIEIncorrect, ie.TimeQuota},
	} {
		refusedURR(t, s, c.name, usageRules(urr1, urr2, c.urr), c.cause, c.off)
	}
	if n := len(g.plane.Sessions()); n != 0 {
		t.Fatalf("refused establishments left %d sessions", n)
	}
	start := time.Now()
	r := s.ask(message.NewSessionEstablishmentRequest(0, 0, 0, s.next(), 0, usageRules(urr1, urr2, urr3)...)).(*message.SessionEstablishmentResponse)
	if c := cause(t, r.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("establishment: cause %d", c)
	}
	up, _ := r.UPFSEID.FSEID()
	ulAction := func() uint8 { return uplinkAction(t, dp) }
	if a := ulAction(); a != bpf.SessForw {
		t.Fatalf("uplink action %d with time left, want forward", a)
	}
	// A report a second in, then another a second after it.
	u := s.waitUsage(1, trTIMTH, 3*time.Second)
	if d := u.end.Sub(u.start); !u.hasDur || d < time.Second || d > 2*time.Second || u.seq != 0 {
		t.Errorf("time threshold: %+v (%v)", u, d)
	}
	if u := s.waitUsage(1, trTIMTH, 3*time.Second); u.seq != 1 {
		t.Errorf("second time threshold report: %+v", u)
	}
	// Two seconds after the quota was given: spent, the uplink drops.
	if u := s.waitUsage(2, trTIMQU, 3*time.Second); time.Since(start) < 2*time.Second {
		t.Errorf("time quota reported %v after it was given, want 2 s or more: %+v", time.Since(start), u)
	}
	waitDrop(t, dp, "after the time quota is spent")

	// An agent restart keeps it spent.
	g, s = restartGateway(t, dp, dir, g, s, recovery, fastUsage)
	if a := ulAction(); a != bpf.SessDrop {
		t.Fatalf("uplink action %d after a restart, want drop", a)
	}
	// A new quota: forwarding again, spent again when it runs out.
	m := s.ask(message.NewSessionModificationRequest(0, 0, up.SEID, s.next(), 0,
		ie.NewUpdateURR(ie.NewURRID(2), ie.NewTimeQuota(time.Second)))).(*message.SessionModificationResponse)
	if c := cause(t, m.Cause); c != ie.CauseRequestAccepted {
		t.Fatalf("modification: cause %d", c)
	}
	if a := ulAction(); a != bpf.SessForw {
		t.Errorf("uplink action %d after a new time quota, want forward", a)
	}
	s.waitUsage(2, trTIMQU, 3*time.Second)
	waitDrop(t, dp, "after the second time quota")
}
