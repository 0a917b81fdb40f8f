// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// Session is a PFCP session as an SMF's Session Establishment Request
// describes it: its rules by ID, each checked whole (mandatory IEs
// present and decoding, IDs unique, every rule a PDR names created).
type Session struct {
	// UPSEID is the node's SEID for it, CPSEID and CPAddr the SMF's
	// F-SEID, CPNode the SMF's node ID.
	UPSEID uint64
	CPSEID uint64
	CPAddr netip.Addr
	CPNode string
	// Since is when it was established (usage reports' start time).
	Since time.Time
	PDRs  map[uint16]*PDR
	FARs  map[uint32]*FAR
	QERs  map[uint32]*QER
	URRs  map[uint32]*URR
	// MARs are its multi-access rules (a multi-access PDU session's).
	MARs map[uint16]*MAR `json:",omitempty"`
	// BAR is the session's buffering action rule (nil: none).
	BAR *BAR
}

// PDR is a packet detection rule.
type PDR struct {
	ID         uint16
	Precedence uint32
	// Source is the PDI's source interface (ie.SrcInterface*).
	Source uint8
	// TEID is the local F-TEID's (Choose: the UPF picks it, sharing
	// one among the PDRs of ChooseID when set, and an address of each
	// family Want asks for), TEIDAddr and TEIDAddr6 its addresses.
	TEID      uint32
	TEIDAddr  netip.Addr
	TEIDAddr6 netip.Addr `json:",omitempty"`
	Want      uint8      `json:",omitempty"` // CHOOSE: the F-TEID's V4 (1) and V6 (2) flags
	Choose    bool
	ChooseID  uint8
	HasTEID   bool
	Instance  string
	// UEIP is the UE's IPv4 address, UEIP6 its IPv6 /64 prefix (the
	// rest zero) (invalid: none).
	UEIP  netip.Addr
	UEIP6 netip.Addr `json:",omitzero"`
	// SDF are the SDF filters' flow descriptions.
	SDF []string
	QFI uint8
	// RemoveOuter is the outer header removal's description + 1 (0:
	// none; 1: GTP-U/UDP/IPv4).
	RemoveOuter uint16
	FAR         uint32
	HasFAR      bool
	// MAR is the multi-access rule a PDR names instead of a FAR.
	MAR        uint16 `json:",omitempty"`
	HasMAR     bool   `json:",omitempty"`
	QERs, URRs []uint32
}

// Apply action bits, octet 5 of TS 29.244 8.2.26.
const (
	ActDrop = 1 << 0
	ActForw = 1 << 1
	ActBuff = 1 << 2
	ActNocp = 1 << 3
	ActDupl = 1 << 4
)

// FAR is a forwarding action rule.
type FAR struct {
	ID     uint32
	Action uint8 // Act*
	// Dest is the forwarding parameters' destination interface.
	Dest     uint8
	Instance string
	// Outer is the outer header to create (nil: none).
	Outer *ie.OuterHeaderCreationFields
	// TOS is the transport level marking (ToS/traffic class and mask),
	// HasTOS whether one was given.
	TOS    uint16
	HasTOS bool
	BAR    uint8
}

// QER is a QoS enforcement rule: gate status (0 open, 1 closed) and
// maximum bit rates (kbit/s) per direction.
type QER struct {
	ID             uint32
	GateUL, GateDL uint8
	MBRUL, MBRDL   uint64
	QFI            uint8
}

// URR is a usage reporting rule.
type URR struct {
	ID       uint32
	Method   uint8
	Triggers []byte
	// VolumeThreshold is in bytes, total (0: none), ThresholdUL and
	// ThresholdDL each way; VolumeQuota is total bytes (0: none).
	VolumeThreshold, VolumeQuota uint64
	ThresholdUL, ThresholdDL     uint64 `json:",omitempty"`
	// Period is the measurement period (PERIO; 0: none), Inactivity
	// the inactivity detection time (STOPT; 0: DefaultInactivity).
	Period     time.Duration `json:",omitempty"`
	Inactivity time.Duration `json:",omitempty"`
	// Exhausted: its quota was reached; its PDRs drop what they
	// detect until a modification gives it another.
	Exhausted bool `json:",omitempty"`
	// TimeThreshold (TIMTH) and TimeQuota (TIMQU) are durations of
	// measurement (0: none): a report when the time since the last one
	// reaches the threshold; the time since the quota was given
	// (TimeQuotaFrom) reaching the quota spends it (TimeSpent), and its
	// PDRs drop what they detect as for a spent volume quota.
	TimeThreshold time.Duration `json:",omitempty"`
	TimeQuota     time.Duration `json:",omitempty"`
	TimeQuotaFrom time.Time     `json:",omitzero"`
	TimeSpent     bool          `json:",omitempty"`
}

// Spent tells whether a quota of u is spent: its PDRs drop.
func (u *URR) Spent() bool { return u.Exhausted || u.TimeSpent }

// BAR is a buffering action rule: how long to wait before telling the
// SMF downlink data is buffered (Delay: the Downlink Data Notification
// Delay, 0 none) and how many packets to hold per session (Count: the
// Suggested Buffering Packets Count, 0 the user plane's own bound).
type BAR struct {
	ID    uint8
	Delay time.Duration `json:",omitempty"`
	Count uint8         `json:",omitempty"`
}

// parseBAR reads a Create or Update BAR g into b (its ID mandatory in
// either).
func parseBAR(g *ie.IE, b *BAR) *refusal {
	one, r := need(g, ie.BARID)
	if r != nil {
		return r
	}
	var err error
	if b.ID, err = one[ie.BARID].BARID(); err != nil {
		return incorrect(ie.BARID)
	}
	if v := one[ie.DownlinkDataNotificationDelay]; v != nil {
		if b.Delay, err = v.DownlinkDataNotificationDelay(); err != nil {
			return incorrect(ie.DownlinkDataNotificationDelay)
		}
	}
	if v := one[ie.SuggestedBufferingPacketsCount]; v != nil {
		if b.Count, err = v.SuggestedBufferingPacketsCount(); err != nil {
			return incorrect(ie.SuggestedBufferingPacketsCount)
		}
	}
	return nil
}

// refusal is why a request is refused: its cause, the IE at fault
// (Offending IE) and, for a rule that could not be made, the rule
// (Failed Rule ID: type, id).
type refusal struct {
	cause     uint8
	offending uint16
	ruleType  uint8
	ruleID    uint32
	hasRule   bool
}

func (r *refusal) Error() string {
	return fmt.Sprintf("cause %d (offending IE %d)", r.cause, r.offending)
}

func missing(t uint16) *refusal { return &refusal{cause: ie.CauseMandatoryIEMissing, offending: t} }

// condMissing refuses a request that lacks IE t a rule it has needs.
func condMissing(t uint16) *refusal {
	return &refusal{cause: ie.CauseConditionalIEMissing, offending: t}
}

func incorrect(t uint16) *refusal { return &refusal{cause: ie.CauseMandatoryIEIncorrect, offending: t} }

// Rule types of the Failed Rule ID IE (TS 29.244 8.2.80).
const (
	rulePDR = 0
	ruleFAR = 1
	ruleQER = 2
	ruleURR = 3
	ruleBAR = 4
)

func failedRule(typ uint8, id uint32) *refusal {
	return &refusal{cause: ie.CauseRuleCreationModificationFailure, ruleType: typ, ruleID: id, hasRule: true}
}

// children returns grouped IE g's IEs by type (the first of each) and
// all of type many.
func children(g *ie.IE, many uint16) (map[uint16]*ie.IE, []*ie.IE) {
	one := map[uint16]*ie.IE{}
	var all []*ie.IE
	for _, c := range g.ChildIEs {
		if c == nil {
			continue
		}
		if c.Type == many {
			all = append(all, c)
		}
		if _, ok := one[c.Type]; !ok {
			one[c.Type] = c
		}
	}
	return one, all
}

// need returns grouped IE g's IEs by type (the first of each), or the
// refusal for the first of types it lacks.
func need(g *ie.IE, types ...uint16) (map[uint16]*ie.IE, *refusal) {
	one, _ := children(g, 0)
	for _, t := range types {
		if one[t] == nil {
			return nil, missing(t)
		}
	}
	return one, nil
}

// parseSession checks a Session Establishment Request's rules and
// returns the session they make, or why it is refused.
func parseSession(m *message.SessionEstablishmentRequest, cpSEID uint64, cpAddr netip.Addr) (*Session, *refusal) {
	if len(m.CreatePDR) == 0 {
		return nil, missing(ie.CreatePDR)
	}
	if len(m.CreateFAR) == 0 {
		return nil, missing(ie.CreateFAR)
	}
	s := &Session{CPSEID: cpSEID, CPAddr: cpAddr, PDRs: map[uint16]*PDR{}, FARs: map[uint32]*FAR{},
		QERs: map[uint32]*QER{}, URRs: map[uint32]*URR{}, MARs: map[uint16]*MAR{}}
	if r := s.create(m.CreateFAR, m.CreateQER, m.CreateURR); r != nil {
		return nil, r
	}
	if r := s.createMARs(m.CreateMAR); r != nil {
		return nil, r
	}
	if r := s.marRefs(); r != nil {
		return nil, r
	}
	if m.CreateBAR != nil {
		s.BAR = &BAR{}
		if r := parseBAR(m.CreateBAR, s.BAR); r != nil {
			return nil, r
		}
	}
	for _, g := range m.CreatePDR {
		p, r := parsePDR(g)
		if r != nil {
			return nil, r
		}
		if _, dup := s.PDRs[p.ID]; dup {
			return nil, failedRule(rulePDR, uint32(p.ID))
		}
		if r := s.refsOf(p); r != nil {
			return nil, r
		}
		s.PDRs[p.ID] = p
	}
	return s, nil
}

// rule is a FAR, QER or URR: a rule with a 32-bit ID.
type rule interface{ ruleID() uint32 }

func (f *FAR) ruleID() uint32 { return f.ID }
func (q *QER) ruleID() uint32 { return q.ID }
func (u *URR) ruleID() uint32 { return u.ID }

// addRules parses each of gs into into, by ID: the first refusal, or a
// failed rule of type typ for a second rule of one ID.
func addRules[R rule](into map[uint32]R, gs []*ie.IE, parse func(*ie.IE) (R, *refusal), typ uint8) *refusal {
	for _, g := range gs {
		x, r := parse(g)
		if r != nil {
			return r
		}
		if _, dup := into[x.ruleID()]; dup {
			return failedRule(typ, x.ruleID())
		}
		into[x.ruleID()] = x
	}
	return nil
}

// refsOf checks that every rule PDR p names is in s.
func (s *Session) refsOf(p *PDR) *refusal {
	if _, ok := s.FARs[p.FAR]; p.HasFAR && !ok {
		return failedRule(rulePDR, uint32(p.ID))
	}
	if _, ok := s.MARs[p.MAR]; p.HasMAR && !ok {
		return failedRule(rulePDR, uint32(p.ID))
	}
	for _, q := range p.QERs {
		if _, ok := s.QERs[q]; !ok {
			return failedRule(rulePDR, uint32(p.ID))
		}
	}
	for _, u := range p.URRs {
		if _, ok := s.URRs[u]; !ok {
			return failedRule(rulePDR, uint32(p.ID))
		}
	}
	return nil
}

func parsePDR(g *ie.IE) (*PDR, *refusal) {
	one, r := need(g, ie.PDRID, ie.Precedence, ie.PDI)
	if r != nil {
		return nil, r
	}
	p := &PDR{}
	id, prec, pdi := one[ie.PDRID], one[ie.Precedence], one[ie.PDI]
	var err error
	if p.ID, err = id.PDRID(); err != nil {
		return nil, incorrect(ie.PDRID)
	}
	if p.Precedence, err = prec.Precedence(); err != nil {
		return nil, incorrect(ie.Precedence)
	}
	if r := p.pdi(pdi); r != nil {
		return nil, r
	}
	if f := one[ie.FARID]; f != nil {
		if p.FAR, err = f.FARID(); err != nil {
			return nil, incorrect(ie.FARID)
		}
		p.HasFAR = true
	}
	if v := one[ie.MARID]; v != nil {
		if p.HasFAR {
			// A PDR forwards by a FAR or steers by a MAR, not both.
			return nil, failedRule(rulePDR, uint32(p.ID))
		}
		if p.MAR, err = v.MARID(); err != nil {
			return nil, incorrect(ie.MARID)
		}
		p.HasMAR = true
	}
	if o := one[ie.OuterHeaderRemoval]; o != nil {
		b, err := o.OuterHeaderRemoval()
		if err != nil || len(b) < 1 {
			return nil, incorrect(ie.OuterHeaderRemoval)
		}
		p.RemoveOuter = uint16(b[0]) + 1
	}
	if r := p.ruleIDs(g); r != nil {
		return nil, r
	}
	return p, nil
}

// ruleIDs sets p's QER and URR IDs to those a Create or Update PDR g
// names, where it names any.
func (p *PDR) ruleIDs(g *ie.IE) *refusal {
	var qers, urrs []uint32
	for _, c := range g.ChildIEs {
		switch c.Type {
		case ie.QERID:
			v, err := c.QERID()
			if err != nil {
				return incorrect(ie.QERID)
			}
			qers = append(qers, v)
		case ie.URRID:
			v, err := c.URRID()
			if err != nil {
				return incorrect(ie.URRID)
			}
			urrs = append(urrs, v)
		}
	}
	if qers != nil {
		p.QERs = qers
	}
	if urrs != nil {
		p.URRs = urrs
	}
	return nil
}

// pdi reads a PDR's packet detection information into p.
func (p *PDR) pdi(g *ie.IE) *refusal {
	one, sdfs := children(g, ie.SDFFilter)
	src := one[ie.SourceInterface]
	if src == nil {
		return missing(ie.SourceInterface)
	}
	var err error
	if p.Source, err = src.SourceInterface(); err != nil {
		return incorrect(ie.SourceInterface)
	}
	if t := one[ie.FTEID]; t != nil {
		f, err := t.FTEID()
		if err != nil {
			return incorrect(ie.FTEID)
		}
		p.HasTEID, p.Choose, p.TEID = true, f.HasCh(), f.TEID
		if f.HasChID() {
			p.ChooseID = f.ChooseID
		}
		if p.Choose {
			p.Want = f.Flags & (fteidV4 | fteidV6)
		} else {
			if a, ok := netip.AddrFromSlice(f.IPv4Address.To4()); ok && f.HasIPv4() && f.IPv4Address != nil {
				p.TEIDAddr = a
			}
			if a, ok := netip.AddrFromSlice(f.IPv6Address.To16()); ok && f.HasIPv6() && f.IPv6Address != nil && f.IPv6Address.To4() == nil {
				p.TEIDAddr6 = a
			}
			if !p.TEIDAddr.IsValid() && !p.TEIDAddr6.IsValid() {
				return incorrect(ie.FTEID)
			}
		}
	}
	if n := one[ie.NetworkInstance]; n != nil {
		if p.Instance, err = n.NetworkInstance(); err != nil {
			return incorrect(ie.NetworkInstance)
		}
	}
	if u := one[ie.UEIPAddress]; u != nil {
		f, err := u.UEIPAddress()
		if err != nil {
			return incorrect(ie.UEIPAddress)
		}
		p.UEIP, p.UEIP6 = ipOf(f.IPv4Address, nil), netip.Addr{}
		if a, ok := netip.AddrFromSlice(f.IPv6Address.To16()); ok && f.IPv6Address != nil && f.IPv6Address.To4() == nil {
			// A PDU session's IPv6 is a /64 prefix (TS 23.501
			// 5.8.2.2.3): what the UE's addresses share.
			p.UEIP6 = netip.PrefixFrom(a, 64).Masked().Addr()
		}
		if !p.UEIP.IsValid() && !p.UEIP6.IsValid() {
			return incorrect(ie.UEIPAddress)
		}
	}
	for _, c := range sdfs {
		f, err := c.SDFFilter()
		if err != nil {
			return incorrect(ie.SDFFilter)
		}
		p.SDF = append(p.SDF, f.FlowDescription)
	}
	if q := one[ie.QFI]; q != nil {
		if p.QFI, err = q.QFI(); err != nil || p.QFI > 63 {
			return incorrect(ie.QFI)
		}
	}
	return nil
}

// The F-TEID's flags (TS 29.244 8.2.3): an IPv4, an IPv6 address.
const (
	fteidV4 = 0x01
	fteidV6 = 0x02
)

// ipOf is v4, else v6, as an address (invalid: neither).
func ipOf(v4, v6 net.IP) netip.Addr {
	if a, ok := netip.AddrFromSlice(v4.To4()); ok && v4 != nil {
		return a
	}
	if a, ok := netip.AddrFromSlice(v6.To16()); ok && v6 != nil {
		return a
	}
	return netip.Addr{}
}

func parseFAR(g *ie.IE) (*FAR, *refusal) {
	one, r := need(g, ie.FARID, ie.ApplyAction)
	if r != nil {
		return nil, r
	}
	id, act := one[ie.FARID], one[ie.ApplyAction]
	f := &FAR{}
	var err error
	if f.ID, err = id.FARID(); err != nil {
		return nil, incorrect(ie.FARID)
	}
	b, err := act.ApplyAction()
	if err != nil || len(b) < 1 {
		return nil, incorrect(ie.ApplyAction)
	}
	f.Action = b[0] & (ActDrop | ActForw | ActBuff | ActNocp | ActDupl)
	// One of DROP, FORW and BUFF, as 8.2.26 asks.
	if n := countBits(f.Action & (ActDrop | ActForw | ActBuff)); n != 1 {
		return nil, incorrect(ie.ApplyAction)
	}
	if b := one[ie.BARID]; b != nil {
		if f.BAR, err = b.BARID(); err != nil {
			return nil, incorrect(ie.BARID)
		}
	}
	fp := one[ie.ForwardingParameters]
	if f.Action&ActForw == 0 {
		return f, nil
	}
	if fp == nil {
		return nil, &refusal{cause: ie.CauseConditionalIEMissing, offending: ie.ForwardingParameters}
	}
	return f, f.forwarding(fp)
}

// forwarding reads a FAR's forwarding parameters into f.
// ownOuter returns o with addresses of its own: go-pfcp's point into
// the datagram, whose buffer the next one overwrites, and a session
// keeps its rules long after.
func ownOuter(o *ie.OuterHeaderCreationFields) *ie.OuterHeaderCreationFields {
	c := *o
	c.IPv4Address = slices.Clone(o.IPv4Address)
	c.IPv6Address = slices.Clone(o.IPv6Address)
	return &c
}

func (f *FAR) forwarding(g *ie.IE) *refusal {
	one, r := need(g, ie.DestinationInterface)
	if r != nil {
		return r
	}
	d := one[ie.DestinationInterface]
	var err error
	if f.Dest, err = d.DestinationInterface(); err != nil {
		return incorrect(ie.DestinationInterface)
	}
	if n := one[ie.NetworkInstance]; n != nil {
		if f.Instance, err = n.NetworkInstance(); err != nil {
			return incorrect(ie.NetworkInstance)
		}
	}
	if o := one[ie.OuterHeaderCreation]; o != nil {
		if f.Outer, err = o.OuterHeaderCreation(); err != nil {
			return incorrect(ie.OuterHeaderCreation)
		}
		f.Outer = ownOuter(f.Outer)
	}
	if t := one[ie.TransportLevelMarking]; t != nil {
		if f.TOS, err = t.TransportLevelMarking(); err != nil {
			return incorrect(ie.TransportLevelMarking)
		}
		f.HasTOS = true
	}
	return nil
}

func parseQER(g *ie.IE) (*QER, *refusal) {
	one, r := need(g, ie.QERID, ie.GateStatus)
	if r != nil {
		return nil, r
	}
	q := &QER{}
	var err error
	if q.ID, err = one[ie.QERID].QERID(); err != nil {
		return nil, incorrect(ie.QERID)
	}
	if r := q.fill(one); r != nil {
		return nil, r
	}
	return q, nil
}

// fill sets what the IEs of a Create or Update QER give (by type: one)
// in q: gate status, MBR, QFI.
func (q *QER) fill(one map[uint16]*ie.IE) *refusal {
	if v := one[ie.GateStatus]; v != nil {
		gs, err := v.GateStatus()
		if err != nil {
			return incorrect(ie.GateStatus)
		}
		q.GateUL, q.GateDL = gs>>2&3, gs&3
	}
	if m := one[ie.MBR]; m != nil {
		var err1, err2 error
		q.MBRUL, err1 = m.MBRUL()
		q.MBRDL, err2 = m.MBRDL()
		if err1 != nil || err2 != nil {
			return incorrect(ie.MBR)
		}
	}
	if v := one[ie.QFI]; v != nil {
		var err error
		if q.QFI, err = v.QFI(); err != nil || q.QFI > 63 {
			return incorrect(ie.QFI)
		}
	}
	return nil
}

func parseURR(g *ie.IE) (*URR, *refusal) {
	one, r := need(g, ie.URRID, ie.MeasurementMethod, ie.ReportingTriggers)
	if r != nil {
		return nil, r
	}
	u := &URR{}
	var err error
	if u.ID, err = one[ie.URRID].URRID(); err != nil {
		return nil, incorrect(ie.URRID)
	}
	if r := u.fill(one); r != nil {
		return nil, r
	}
	return u, nil
}

// fill sets what the IEs of a Create or Update URR give (by type: one)
// in u, and checks that every trigger u has has what it needs.
func (u *URR) fill(one map[uint16]*ie.IE) *refusal {
	var err error
	if v := one[ie.MeasurementMethod]; v != nil {
		if u.Method, err = v.MeasurementMethod(); err != nil {
			return incorrect(ie.MeasurementMethod)
		}
	}
	if v := one[ie.ReportingTriggers]; v != nil {
		if u.Triggers, err = v.ReportingTriggers(); err != nil || len(u.Triggers) < 1 {
			return incorrect(ie.ReportingTriggers)
		}
		u.Triggers = slices.Clone(u.Triggers)
	}
	if v := one[ie.VolumeThreshold]; v != nil {
		f, err := v.VolumeThreshold()
		if err != nil {
			return incorrect(ie.VolumeThreshold)
		}
		u.VolumeThreshold, u.ThresholdUL, u.ThresholdDL = 0, 0, 0
		if f.HasTOVOL() {
			u.VolumeThreshold = f.TotalVolume
		}
		if f.HasULVOL() {
			u.ThresholdUL = f.UplinkVolume
		}
		if f.HasDLVOL() {
			u.ThresholdDL = f.DownlinkVolume
		}
	}
	if v := one[ie.VolumeQuota]; v != nil {
		f, err := v.VolumeQuota()
		if err != nil || !f.HasTOVOL() || f.TotalVolume == 0 {
			// A quota each way only is not carried: refused, not
			// ignored.
			return incorrect(ie.VolumeQuota)
		}
		u.VolumeQuota, u.Exhausted = f.TotalVolume, false
	}
	if v := one[ie.TimeThreshold]; v != nil {
		if u.TimeThreshold, err = v.TimeThreshold(); err != nil || u.TimeThreshold < time.Second {
			return incorrect(ie.TimeThreshold)
		}
	}
	if v := one[ie.TimeQuota]; v != nil {
		if u.TimeQuota, err = v.TimeQuota(); err != nil || u.TimeQuota < time.Second {
			return incorrect(ie.TimeQuota)
		}
		u.TimeQuotaFrom, u.TimeSpent = time.Now(), false
	}
	if v := one[ie.MeasurementPeriod]; v != nil {
		if u.Period, err = v.MeasurementPeriod(); err != nil || u.Period < time.Second {
			return incorrect(ie.MeasurementPeriod)
		}
	}
	if v := one[ie.InactivityDetectionTime]; v != nil {
		t, err := v.InactivityDetectionTime()
		if err != nil {
			return incorrect(ie.InactivityDetectionTime)
		}
		u.Inactivity = time.Duration(t) * time.Second
	}
	switch t := u.triggers(); {
	case t&trigPERIO != 0 && u.Period == 0:
		return condMissing(ie.MeasurementPeriod)
	case t&trigVOLTH != 0 && u.VolumeThreshold+u.ThresholdUL+u.ThresholdDL == 0:
		return condMissing(ie.VolumeThreshold)
	case t&trigVOLQU != 0 && u.VolumeQuota == 0:
		return condMissing(ie.VolumeQuota)
	case t&trigTIMTH != 0 && u.TimeThreshold == 0:
		return condMissing(ie.TimeThreshold)
	case t&trigTIMQU != 0 && u.TimeQuota == 0:
		return condMissing(ie.TimeQuota)
	}
	return nil
}

func countBits(b uint8) int {
	n := 0
	for ; b != 0; b &= b - 1 {
		n++
	}
	return n
}
