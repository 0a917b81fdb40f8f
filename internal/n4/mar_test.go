// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"net/netip"
	"testing"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// maRules are a multi-access session's rules beside the whole
// session's: a FAR toward an N3IWF (3), and a downlink PDR (3) steered
// by MAR 1 between the gNB's FAR (2) and it.
func maRules(mode uint8, afai3gpp, afaiNon []*ie.IE) []*ie.IE {
	return []*ie.IE{
		ie.NewCreateFAR(ie.NewFARID(3), ie.NewApplyAction(ActForw),
			ie.NewForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess),
				ie.NewOuterHeaderCreation(0x0100, 0x5678, "192.0.2.60", "", 0, 0, 0))),
		ie.NewCreateMAR(ie.NewMARID(1), ie.NewSteeringFunctionality(ie.SteeringFunctionalityATSSSLL), ie.NewSteeringMode(mode),
			ie.NewTGPPAccessForwardingActionInformation(afai3gpp...),
			ie.NewNonTGPPAccessForwardingActionInformation(afaiNon...)),
		ie.NewCreatePDR(ie.NewPDRID(3), ie.NewPrecedence(50),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore), ie.NewUEIPAddress(0x06, "10.45.0.2", "", 0, 0)),
			ie.NewMARID(1)),
	}
}

// parsed is the session an establishment request of extra beside the
// whole session's rules makes, or its refusal.
func parsed(t *testing.T, extra ...*ie.IE) (*Session, *refusal) {
	t.Helper()
	m, err := message.Parse(marshal(establishment(1, wholeSession, extra...)))
	if err != nil {
		t.Fatal(err)
	}
	return parseSession(m.(*message.SessionEstablishmentRequest), 0x77, netip.MustParseAddr(smfID))
}

// TestMARParsed: a Create MAR reads back as the SMF wrote it (mode,
// each access's FAR, weight and priority), a PDR names it instead of a
// FAR, and which access is preferred follows the priorities of the
// mode.
func TestMARParsed(t *testing.T) {
	s, r := parsed(t, maRules(ie.SteeringModeLoadBalancing,
		[]*ie.IE{ie.NewFARID(2), ie.NewWeight(70), ie.NewURRID(1)}, []*ie.IE{ie.NewFARID(3), ie.NewWeight(30)})...)
	if r != nil {
		t.Fatalf("refused: %v", r)
	}
	m, p := s.MARs[1], s.PDRs[3]
	if m == nil || p == nil || !p.HasMAR || p.MAR != 1 || p.HasFAR {
		t.Fatalf("MAR %+v, its PDR %+v", m, p)
	}
	if m.Mode != ie.SteeringModeLoadBalancing || m.Access[0].FAR != 2 || m.Access[0].Weight != 70 || len(m.Access[0].URRs) != 1 ||
		m.Access[1].FAR != 3 || m.Access[1].Weight != 30 || !m.Access[1].HasFAR {
		t.Errorf("MAR %+v", m)
	}
	for _, c := range []struct {
		name      string
		mode      uint8
		prio3, pn uint8
		want      int
	}{
		{"active 3GPP", ie.SteeringModeActiveStandby, ie.PriorityActive, ie.PriorityStandby, 0},
		{"active non-3GPP", ie.SteeringModeActiveStandby, ie.PriorityStandby, ie.PriorityActive, 1},
		{"high 3GPP", ie.SteeringModePriorityBased, ie.PriorityHigh, ie.PriorityLow, 0},
		{"high non-3GPP", ie.SteeringModePriorityBased, ie.PriorityLow, ie.PriorityHigh, 1},
		{"smallest delay", ie.SteeringModeSmallestDelay, ie.PriorityLow, ie.PriorityHigh, 0},
	} {
		s, r := parsed(t, maRules(c.mode, []*ie.IE{ie.NewFARID(2), ie.NewPriority(c.prio3)}, []*ie.IE{ie.NewFARID(3), ie.NewPriority(c.pn)})...)
		if r != nil {
			t.Fatalf("%s: refused: %v", c.name, r)
		}
		if got := s.MARs[1].Preferred(); got != c.want {
			t.Errorf("%s: prefers access %d, want %d", c.name, got, c.want)
		}
	}
}

// TestMARRefused: a MAR that cannot be carried is refused with the
// cause TS 29.244 names and, for a rule that cannot be made, the MAR
// named in the Failed Rule ID (type 5, its 2-octet ID): MPTCP steering,
// a mode past priority-based, load-balancing weights that do not add
// up to 100, an access FAR not created, a PDR naming a MAR not created
// or a FAR and a MAR; a MAR missing a mandatory IE or every access
// names that IE.
func TestMARRefused(t *testing.T) {
	s := newSMF(t)
	refused(t, "setup", s.setup(ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started)), ie.CauseRequestAccepted, 0)
	far3 := maRules(0, nil, nil)[0]
	pdr3 := maRules(0, nil, nil)[2]
	mar := func(ies ...*ie.IE) *ie.IE { return ie.NewCreateMAR(append([]*ie.IE{ie.NewMARID(1)}, ies...)...) }
	sf, sm := ie.NewSteeringFunctionality(ie.SteeringFunctionalityATSSSLL), ie.NewSteeringMode(ie.SteeringModeActiveStandby)
	a3, an := ie.NewTGPPAccessForwardingActionInformation(ie.NewFARID(2)), ie.NewNonTGPPAccessForwardingActionInformation(ie.NewFARID(3))
	marRule := []byte{ruleMAR, 0, 1}
	for _, c := range []struct {
		name      string
		extra     []*ie.IE
		cause     uint8
		offending uint16
		rule      []byte
	}{
		{"MPTCP", []*ie.IE{far3, pdr3, mar(ie.NewSteeringFunctionality(ie.SteeringFunctionalityMPTCP), sm, a3, an)},
			ie.CauseRuleCreationModificationFailure, 0, marRule},
		{"mode 5", []*ie.IE{far3, pdr3, mar(sf, ie.NewSteeringMode(5), a3, an)}, ie.CauseRuleCreationModificationFailure, 0, marRule},
		{"weights 60 + 30", maRules(ie.SteeringModeLoadBalancing, []*ie.IE{ie.NewFARID(2), ie.NewWeight(60)},
			[]*ie.IE{ie.NewFARID(3), ie.NewWeight(30)}), ie.CauseRuleCreationModificationFailure, 0, marRule},
		{"weight 101", maRules(ie.SteeringModeLoadBalancing, []*ie.IE{ie.NewFARID(2), ie.NewWeight(101)},
			[]*ie.IE{ie.NewFARID(3)}), ie.CauseMandatoryIEIncorrect, ie.Weight, nil},
		{"access FAR not created", []*ie.IE{pdr3, mar(sf, sm, a3, an)}, ie.CauseRuleCreationModificationFailure, 0, marRule},
		{"PDR names a MAR not created", []*ie.IE{far3, pdr3}, ie.CauseRuleCreationModificationFailure, 0, []byte{rulePDR, 0, 3}},
		{"PDR names a FAR and a MAR", []*ie.IE{far3, mar(sf, sm, a3, an), ie.NewCreatePDR(ie.NewPDRID(3), ie.NewPrecedence(50),
			ie.NewPDI(ie.NewSourceInterface(ie.SrcInterfaceCore)), ie.NewFARID(2), ie.NewMARID(1))},
			ie.CauseRuleCreationModificationFailure, 0, []byte{rulePDR, 0, 3}},
		{"no steering mode", []*ie.IE{far3, pdr3, mar(sf, a3, an)}, ie.CauseMandatoryIEMissing, ie.SteeringMode, nil},
		{"no steering functionality", []*ie.IE{far3, pdr3, mar(sm, a3, an)}, ie.CauseMandatoryIEMissing, ie.SteeringFunctionality, nil},
		{"no access", []*ie.IE{far3, pdr3, mar(sf, sm)}, ie.CauseConditionalIEMissing, ie.TGPPAccessForwardingActionInformation, nil},
		{"access without a FAR", []*ie.IE{far3, pdr3, mar(sf, sm, ie.NewTGPPAccessForwardingActionInformation(ie.NewWeight(5)))},
			ie.CauseMandatoryIEMissing, ie.FARID, nil},
		{"two MARs of one ID", []*ie.IE{far3, pdr3, mar(sf, sm, a3, an), mar(sf, sm, a3)},
			ie.CauseRuleCreationModificationFailure, 0, marRule},
	} {
		_, b := s.ask(establishment(s.next(), wholeSession, c.extra...))
		refused(t, c.name, b, c.cause, c.offending)
		failedRuleIs(t, c.name, b, c.rule)
	}
}

// TestMARModified: a modification's Update MAR changes the mode and an
// access's weight and keeps the rest; Create and Remove MAR add and
// take one; a MAR removed while a PDR names it, or updated to weights
// that do not add up, is refused and the session is left as it was.
func TestMARModified(t *testing.T) {
	base, r := parsed(t, maRules(ie.SteeringModeActiveStandby, []*ie.IE{ie.NewFARID(2), ie.NewPriority(ie.PriorityActive)},
		[]*ie.IE{ie.NewFARID(3), ie.NewPriority(ie.PriorityStandby)})...)
	if r != nil {
		t.Fatal(r)
	}
	base.UPSEID = 5
	base.PDRs[1].TEID, base.PDRs[1].Choose = 0x100, false
	n := &Node{opt: Options{N3: netip.MustParseAddr("10.2.0.1")}, teids: map[uint32]uint64{0x100: 5}, sessions: map[uint64]*Session{5: base}}
	mod := func(ies ...*ie.IE) (*Session, *refusal) {
		s := base.clone()
		_, r := n.change(s, message.NewSessionModificationRequest(0, 0, 5, 2, 0, ies...))
		return s, r
	}
	s, r := mod(ie.NewUpdateMAR(ie.NewMARID(1), ie.NewSteeringMode(ie.SteeringModeLoadBalancing),
		ie.NewUpdateTGPPAccessForwardingActionInformation(ie.NewWeight(80)),
		ie.NewUpdateNonTGPPAccessForwardingActionInformation(ie.NewWeight(20))))
	if r != nil {
		t.Fatalf("update: %v", r)
	}
	if m := s.MARs[1]; m.Mode != ie.SteeringModeLoadBalancing || m.Access[0].Weight != 80 || m.Access[1].Weight != 20 ||
		m.Access[0].FAR != 2 || m.Access[1].FAR != 3 || m.Access[0].Priority != ie.PriorityActive {
		t.Errorf("after the update: %+v", m)
	}
	if base.MARs[1].Mode != ie.SteeringModeActiveStandby || base.MARs[1].Access[0].Weight != 0 {
		t.Errorf("the session before the modification changed: %+v", base.MARs[1])
	}
	if _, r := mod(ie.NewUpdateMAR(ie.NewMARID(1), ie.NewSteeringMode(ie.SteeringModeLoadBalancing),
		ie.NewUpdateTGPPAccessForwardingActionInformation(ie.NewWeight(80)))); r == nil || r.ruleType != ruleMAR {
		t.Errorf("weights 80 + 0 accepted: %v", r)
	}
	if _, r := mod(ie.NewUpdateMAR(ie.NewMARID(2), ie.NewSteeringMode(0))); r == nil || r.ruleType != ruleMAR || r.ruleID != 2 {
		t.Errorf("an update of no MAR: %v", r)
	}
	if _, r := mod(ie.NewRemoveMAR(ie.NewMARID(1))); r == nil || r.ruleType != rulePDR || r.ruleID != 3 {
		t.Errorf("a MAR its PDR names removed: %v", r)
	}
	s, r = mod(ie.NewRemovePDR(ie.NewPDRID(3)), ie.NewRemoveMAR(ie.NewMARID(1)),
		ie.NewCreateMAR(ie.NewMARID(2), ie.NewSteeringFunctionality(0), ie.NewSteeringMode(ie.SteeringModeSmallestDelay),
			ie.NewTGPPAccessForwardingActionInformation(ie.NewFARID(2)), ie.NewNonTGPPAccessForwardingActionInformation(ie.NewFARID(3))),
		ie.NewUpdatePDR(ie.NewPDRID(2), ie.NewMARID(2)))
	if r != nil {
		t.Fatalf("remove, create, move a PDR to it: %v", r)
	}
	if s.MARs[1] != nil || s.MARs[2] == nil || !s.PDRs[2].HasMAR || s.PDRs[2].MAR != 2 || s.PDRs[2].HasFAR {
		t.Errorf("after remove and create: MARs %+v, PDR 2 %+v", s.MARs, s.PDRs[2])
	}
}
