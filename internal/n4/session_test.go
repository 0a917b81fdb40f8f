// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// session's rules, by name, as an SMF sends them for one UE: uplink
// from the gNB (F-TEID chosen by the UPF) to N6, downlink to the gNB in
// GTP-U, a QER and a URR on the uplink.
func sessionRules() map[string]*ie.IE {
	return map[string]*ie.IE{
		"pdr1": ie.NewCreatePDR(ie.NewPDRID(1), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceAccess), ie.NewFTEID(0x05, 0, nil, nil, 0),
				ie.NewNetworkInstance("access"), ie.NewUEIPAddress(0x02, "10.45.0.2", "", 0, 0),
				ie.NewSDFFilter("permit out ip from any to assigned", "", "", "", 0), ie.NewQFI(9)),
			ie.NewOuterHeaderRemoval(0, 0), ie.NewFARID(1), ie.NewQERID(1), ie.NewURRID(1)),
		"pdr2": ie.NewCreatePDR(ie.NewPDRID(2), ie.NewPrecedence(100),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore), ie.NewUEIPAddress(0x06, "10.45.0.2", "", 0, 0)),
			ie.NewFARID(2)),
		"far1": ie.NewCreateFAR(ie.NewFARID(1), ie.NewApplyAction(ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceCore), ie.NewNetworkInstance("internet"))),
		"far2": ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
				ie.NewOuterHeaderCreation(0x0100, 0x1234, "192.0.2.50", "", 0, 0, 0))),
		"qer1": ie.NewCreateQER(ie.NewQERID(1), ie.NewGateStatus(0, 0), ie.NewMBR(100000, 200000), ie.NewQFI(9)),
		"urr1": ie.NewCreateURR(ie.NewURRID(1), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x01, 0x00), ie.NewMeasurementPeriod(time.Second),
			ie.NewVolumeThreshold(0x01, 1<<20, 0, 0)),
	}
}

// establishment is a Session Establishment Request from smfID with
// rules, those of names taken from sessionRules, then extra.
func establishment(seq uint32, names []string, extra ...*ie.IE) *message.SessionEstablishmentRequest {
	ies := []*ie.IE{ie.NewNodeID(smfID, "", ""), ie.NewFSEID(0x77, net.ParseIP(smfID), nil)}
	r := sessionRules()
	for _, n := range names {
		ies = append(ies, r[n])
	}
	return message.NewSessionEstablishmentRequest(0, 0, 0, seq, 0, append(ies, extra...)...)
}

var wholeSession = []string{"pdr1", "pdr2", "far1", "far2", "qer1", "urr1"}

// TestSessionRulesParsed: a whole session's rules read back as the SMF
// wrote them.
func TestSessionRulesParsed(t *testing.T) {
	b := marshal(establishment(1, wholeSession))
	m, err := message.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	s, r := parseSession(m.(*message.SessionEstablishmentRequest), 0x77, netip.MustParseAddr(smfID))
	if r != nil {
		t.Fatalf("refused: %v", r)
	}
	p1, p2, f2, q, u := s.PDRs[1], s.PDRs[2], s.FARs[2], s.QERs[1], s.URRs[1]
	if p1 == nil || p2 == nil || f2 == nil || q == nil || u == nil || len(s.FARs) != 2 {
		t.Fatalf("rules %+v", s)
	}
	if !p1.HasTEID || !p1.Choose || p1.Source != ie.SrcInterfaceAccess || p1.UEIP != netip.MustParseAddr("10.45.0.2") ||
		p1.QFI != 9 || p1.RemoveOuter != 1 || p1.FAR != 1 || len(p1.SDF) != 1 || p1.Instance != "access" ||
		len(p1.QERs) != 1 || len(p1.URRs) != 1 {
		t.Errorf("uplink PDR %+v", p1)
	}
	if p2.Source != ie.SrcInterfaceCore || p2.HasTEID || p2.FAR != 2 {
		t.Errorf("downlink PDR %+v", p2)
	}
	if f2.Action != ActForw || f2.Dest != ie.DstInterfaceAccess || f2.Outer == nil || f2.Outer.TEID != 0x1234 ||
		!f2.Outer.IPv4Address.Equal(net.ParseIP("192.0.2.50")) {
		t.Errorf("downlink FAR %+v (outer %+v)", f2, f2.Outer)
	}
	if q.MBRUL != 100000 || q.MBRDL != 200000 || q.QFI != 9 || q.GateUL != 0 {
		t.Errorf("QER %+v", q)
	}
	if u.VolumeThreshold != 1<<20 || u.Method != 2 {
		t.Errorf("URR %+v", u)
	}
}

// TestSessionRulesRefused: an associated SMF's session whose rules are
// not whole is refused with the cause TS 29.244 names, the IE missing
// or at fault named (Offending IE), a rule that cannot be made named
// (Failed Rule ID); a whole one is refused as not supported yet.
func TestSessionRulesRefused(t *testing.T) {
	s := newSMF(t)
	refused(t, "setup", s.setup(ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started)), ie.CauseRequestAccepted, 0)
	without := func(drop string) []string {
		var out []string
		for _, n := range wholeSession {
			if n != drop {
				out = append(out, n)
			}
		}
		return out
	}
	only := func(names ...string) []string { return names }
	for _, c := range []struct {
		name      string
		names     []string
		extra     []*ie.IE
		cause     uint8
		offending uint16
		rule      []byte // Failed Rule ID's value (nil: none)
	}{
		{"whole", wholeSession, nil, ie.CauseServiceNotSupported, 0, nil},
		{"no PDR", only("far1"), nil, ie.CauseMandatoryIEMissing, ie.CreatePDR, nil},
		{"no FAR", only("pdr2"), nil, ie.CauseMandatoryIEMissing, ie.CreateFAR, nil},
		{"PDR without ID", only("far2"), []*ie.IE{ie.NewCreatePDR(ie.NewPrecedence(1), ie.NewPDI(ie.NewSourceInterface(1)), ie.NewFARID(2))},
			ie.CauseMandatoryIEMissing, ie.PDRID, nil},
		{"PDR without PDI", only("far2"), []*ie.IE{ie.NewCreatePDR(ie.NewPDRID(3), ie.NewPrecedence(1), ie.NewFARID(2))},
			ie.CauseMandatoryIEMissing, ie.PDI, nil},
		{"PDI without source interface", only("far2"), []*ie.IE{ie.NewCreatePDR(ie.NewPDRID(3), ie.NewPrecedence(1),
			ie.NewPDI(ie.NewUEIPAddress(0x02, "10.45.0.3", "", 0, 0)), ie.NewFARID(2))}, ie.CauseMandatoryIEMissing, ie.SourceInterface, nil},
		{"short precedence", only("far2"), []*ie.IE{ie.NewCreatePDR(ie.NewPDRID(3), ie.New(ie.Precedence, []byte{1}),
			ie.NewPDI(ie.NewSourceInterface(1)), ie.NewFARID(2))}, ie.CauseMandatoryIEIncorrect, ie.Precedence, nil},
		{"F-TEID neither chosen nor addressed", only("far2"), []*ie.IE{ie.NewCreatePDR(ie.NewPDRID(3), ie.NewPrecedence(1),
			ie.NewPDI(ie.NewSourceInterface(0), ie.New(ie.FTEID, []byte{0, 0, 0, 0, 9})), ie.NewFARID(2))},
			ie.CauseMandatoryIEIncorrect, ie.FTEID, nil},
		{"QFI past 63", only("far2"), []*ie.IE{ie.NewCreatePDR(ie.NewPDRID(3), ie.NewPrecedence(1),
			ie.NewPDI(ie.NewSourceInterface(0), ie.New(ie.QFI, []byte{64})), ie.NewFARID(2))}, ie.CauseMandatoryIEIncorrect, ie.QFI, nil},
		{"PDR names a FAR not created", without("far1"), nil, ie.CauseRuleCreationModificationFailure, 0, []byte{rulePDR, 0, 1}},
		{"PDR names a QER not created", without("qer1"), nil, ie.CauseRuleCreationModificationFailure, 0, []byte{rulePDR, 0, 1}},
		{"PDR names a URR not created", without("urr1"), nil, ie.CauseRuleCreationModificationFailure, 0, []byte{rulePDR, 0, 1}},
		{"two PDRs of one ID", append(wholeSession, "pdr2"), nil, ie.CauseRuleCreationModificationFailure, 0, []byte{rulePDR, 0, 2}},
		{"two FARs of one ID", append(wholeSession, "far2"), nil, ie.CauseRuleCreationModificationFailure, 0, []byte{ruleFAR, 0, 0, 0, 2}},
		{"FAR without apply action", only("pdr2"), []*ie.IE{ie.NewCreateFAR(ie.NewFARID(2))}, ie.CauseMandatoryIEMissing, ie.ApplyAction, nil},
		{"FAR both forwarding and dropping", only("pdr2"), []*ie.IE{ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(ActForw|ActDrop),
			ie.NewForwardingParameters(ie.NewDestinationInterface(0)))}, ie.CauseMandatoryIEIncorrect, ie.ApplyAction, nil},
		{"FAR forwarding nowhere", only("pdr2"), []*ie.IE{ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(ActForw))},
			ie.CauseConditionalIEMissing, ie.ForwardingParameters, nil},
		{"forwarding without destination", only("pdr2"), []*ie.IE{ie.NewCreateFAR(ie.NewFARID(2), ie.NewApplyAction(ActForw),
			ie.NewForwardingParameters(ie.NewNetworkInstance("internet")))}, ie.CauseMandatoryIEMissing, ie.DestinationInterface, nil},
		{"QER without gate status", without("qer1"), []*ie.IE{ie.NewCreateQER(ie.NewQERID(1))},
			ie.CauseMandatoryIEMissing, ie.GateStatus, nil},
		{"URR without reporting triggers", without("urr1"), []*ie.IE{ie.NewCreateURR(ie.NewURRID(1), ie.NewMeasurementMethod(0, 1, 0))},
			ie.CauseMandatoryIEMissing, ie.ReportingTriggers, nil},
		{"BAR without ID", wholeSession, []*ie.IE{ie.NewCreateBAR()}, ie.CauseMandatoryIEMissing, ie.BARID, nil},
	} {
		r, b := s.ask(establishment(s.next(), c.names, c.extra...))
		if r.SEID() != 0x77 {
			t.Errorf("%s: answered under SEID %#x, want the CP's 0x77", c.name, r.SEID())
		}
		refused(t, c.name, b, c.cause, c.offending)
		failedRuleIs(t, c.name, b, c.rule)
	}
	if p := peersOf(s.node); len(p) != 1 {
		t.Errorf("peers after refused sessions: %v", p)
	}
	_ = binary.BigEndian
}

// failedRuleIs checks the Failed Rule ID of answer b: rule (its value),
// or none when rule is nil.
func failedRuleIs(t *testing.T, what string, b, rule []byte) {
	t.Helper()
	got, has := answerIEs(t, b)[ie.FailedRuleID]
	switch {
	case rule == nil && has:
		t.Errorf("%s: names failed rule % x, want none", what, got)
	case rule != nil && string(got) != string(rule):
		t.Errorf("%s: failed rule % x, want % x", what, got, rule)
	}
}

// FuzzModify feeds arbitrary Session Modification Requests to a whole
// session's rules (change, what a modification does before the user
// plane sees it): nothing panics, and a modification accepted leaves a
// session whose every PDR names rules it has, the original untouched.
func FuzzModify(f *testing.F) {
	b := marshal(establishment(1, wholeSession))
	m, err := message.Parse(b)
	if err != nil {
		f.Fatal(err)
	}
	base, r := parseSession(m.(*message.SessionEstablishmentRequest), 0x77, netip.MustParseAddr(smfID))
	if r != nil {
		f.Fatalf("refused: %v", r)
	}
	base.UPSEID = 5
	base.PDRs[1].TEID, base.PDRs[1].Choose = 0x100, false
	for _, ies := range [][]*ie.IE{
		{ie.NewUpdateURR(ie.NewURRID(1), ie.NewVolumeQuota(0x01, 5000, 0, 0)), ie.NewQueryURR(ie.NewURRID(1)), ie.NewPFCPSMReqFlags(0x06)},
		{ie.NewCreateBAR(ie.NewBARID(1), ie.NewDownlinkDataNotificationDelay(100*time.Millisecond), ie.NewSuggestedBufferingPacketsCount(3))},
		{ie.NewUpdatePDR(ie.NewPDRID(2), ie.NewFARID(1), ie.NewURRID(1), ie.NewQERID(1)), ie.NewRemoveURR(ie.NewURRID(1))},
		{ie.NewCreateURR(ie.NewURRID(2), ie.NewMeasurementMethod(0, 1, 0), ie.NewReportingTriggers(0x31, 0x01),
			ie.NewVolumeThreshold(0x07, 1, 2, 3), ie.NewVolumeQuota(0x01, 9, 0, 0), ie.NewInactivityDetectionTime(2))},
	} {
		f.Add(marshal(message.NewSessionModificationRequest(0, 0, 5, 2, 0, ies...)))
	}
	n := &Node{opt: Options{N3: netip.MustParseAddr("10.2.0.1"), Log: slog.New(slog.DiscardHandler)},
		teids: map[uint32]uint64{0x100: 5}, sessions: map[uint64]*Session{5: base}}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := message.Parse(b)
		if err != nil {
			return
		}
		mod, ok := m.(*message.SessionModificationRequest)
		if !ok {
			return
		}
		s := base.clone()
		if _, r := n.change(s, mod); r != nil {
			return
		}
		for _, p := range s.PDRs {
			if r := s.refsOf(p); r != nil {
				t.Fatalf("accepted, PDR %d names a rule the session lacks: %v", p.ID, r)
			}
		}
		if len(base.PDRs) != 2 || base.PDRs[1].TEID != 0x100 {
			t.Fatalf("the original session changed: %+v", base.PDRs)
		}
	})
}

// TestUpdateQER: an Update QER changes what it gives, the QFI as well
// as the gate and MBR, and leaves the rest.
func TestUpdateQER(t *testing.T) {
	m, err := message.Parse(marshal(establishment(1, wholeSession)))
	if err != nil {
		t.Fatal(err)
	}
	s, r := parseSession(m.(*message.SessionEstablishmentRequest), 0x77, netip.MustParseAddr(smfID))
	if r != nil {
		t.Fatal(r)
	}
	if r := s.updateQER(ie.NewUpdateQER(ie.NewQERID(1), ie.NewQFI(5))); r != nil {
		t.Fatal(r)
	}
	if q := s.QERs[1]; q.QFI != 5 || q.MBRUL != 100000 || q.MBRDL != 200000 || q.GateUL != 0 {
		t.Errorf("after an Update QER giving QFI 5: %+v", q)
	}
	if r := s.updateQER(ie.NewUpdateQER(ie.NewQERID(1), ie.NewQFI(64))); r == nil || r.cause != ie.CauseMandatoryIEIncorrect {
		t.Errorf("QFI 64: %v", r)
	}
}
