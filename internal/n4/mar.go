// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"github.com/wmnsk/go-pfcp/ie"
)

// MAR is a multi-access rule (TS 29.244 5.20, 7.5.2.8): how the PDRs
// that name it (instead of a FAR) steer a multi-access PDU session's
// downlink between its 3GPP access (Access[0]) and its non-3GPP one
// (Access[1]), each a FAR, with the ATSSS-LL steering functionality.
type MAR struct {
	ID uint16
	// Mode is the steering mode (ie.SteeringMode*: active-standby,
	// smallest delay, load balancing, priority-based).
	Mode   uint8
	Access [2]Access
}

// Access is one access's forwarding action information of a MAR: its
// FAR (HasFAR false: the access is not given), weight (load balancing:
// percent of the flows) and priority (ie.Priority*: active or standby,
// high or low).
type Access struct {
	FAR         uint32   `json:",omitempty"`
	HasFAR      bool     `json:",omitempty"`
	Weight      uint8    `json:",omitempty"`
	HasWeight   bool     `json:",omitempty"`
	Priority    uint8    `json:",omitempty"`
	HasPriority bool     `json:",omitempty"`
	URRs        []uint32 `json:",omitempty"`
}

// ruleMAR is a MAR's rule type in the Failed Rule ID IE (TS 29.244
// 8.2.80).
const ruleMAR = 5

// Preferred tells which access m prefers: 1 when the non-3GPP access
// is the active one (active-standby) or the high-priority one
// (priority-based), else 0 (the 3GPP access, also when neither says).
func (m *MAR) Preferred() int {
	switch m.Mode {
	case ie.SteeringModeActiveStandby:
		if a := m.Access[1]; a.HasFAR && a.HasPriority && a.Priority == ie.PriorityActive {
			return 1
		}
		if a := m.Access[0]; a.HasFAR && a.HasPriority && a.Priority == ie.PriorityStandby {
			return 1
		}
	case ie.SteeringModePriorityBased:
		if a := m.Access[1]; a.HasFAR && a.HasPriority && a.Priority == ie.PriorityHigh {
			return 1
		}
		if a := m.Access[0]; a.HasFAR && a.HasPriority && a.Priority == ie.PriorityLow {
			return 1
		}
	}
	return 0
}

// parseMAR reads a Create MAR g.
func parseMAR(g *ie.IE) (*MAR, *refusal) {
	one, r := need(g, ie.MARID, ie.SteeringFunctionality, ie.SteeringMode)
	if r != nil {
		return nil, r
	}
	m := &MAR{}
	var err error
	if m.ID, err = one[ie.MARID].MARID(); err != nil {
		return nil, incorrect(ie.MARID)
	}
	if r := m.steering(one); r != nil {
		return nil, r
	}
	for i, t := range []uint16{ie.TGPPAccessForwardingActionInformation, ie.NonTGPPAccessForwardingActionInformation} {
		if v := one[t]; v != nil {
			if r := m.Access[i].parse(v, true); r != nil {
				return nil, r
			}
		}
	}
	return m, m.check()
}

// steering reads the steering functionality and mode of a Create or
// Update MAR (one: its IEs by type; those it lacks stay as they are).
// Only ATSSS-LL is carried (MPTCP needs a proxy in the user plane), and
// the modes ATSSS-LL has.
func (m *MAR) steering(one map[uint16]*ie.IE) *refusal {
	if v := one[ie.SteeringFunctionality]; v != nil {
		f, err := v.SteeringFunctionality()
		if err != nil {
			return incorrect(ie.SteeringFunctionality)
		}
		if f != ie.SteeringFunctionalityATSSSLL {
			return failedRule(ruleMAR, uint32(m.ID))
		}
	}
	if v := one[ie.SteeringMode]; v != nil {
		mode, err := v.SteeringMode()
		if err != nil {
			return incorrect(ie.SteeringMode)
		}
		if mode > ie.SteeringModePriorityBased {
			return failedRule(ruleMAR, uint32(m.ID))
		}
		m.Mode = mode
	}
	return nil
}

// parse reads an access's forwarding action information g (create: a
// FAR ID it must have; an update's keeps what it does not give).
func (a *Access) parse(g *ie.IE, create bool) *refusal {
	one, urrs := children(g, ie.URRID)
	if v := one[ie.FARID]; v != nil {
		id, err := v.FARID()
		if err != nil {
			return incorrect(ie.FARID)
		}
		a.FAR, a.HasFAR = id, true
	} else if create {
		return missing(ie.FARID)
	}
	if v := one[ie.Weight]; v != nil {
		w, err := v.Weight()
		if err != nil || w > 100 {
			return incorrect(ie.Weight)
		}
		a.Weight, a.HasWeight = w, true
	}
	if v := one[ie.Priority]; v != nil {
		p, err := v.Priority()
		if err != nil || p > ie.PriorityLow {
			return incorrect(ie.Priority)
		}
		a.Priority, a.HasPriority = p, true
	}
	if urrs != nil {
		a.URRs = nil
		for _, u := range urrs {
			id, err := u.URRID()
			if err != nil {
				return incorrect(ie.URRID)
			}
			a.URRs = append(a.URRs, id)
		}
	}
	return nil
}

// check refuses a MAR that steers over no access, or whose load
// balancing weights do not share the flows out (they add up to 100
// where both accesses are given).
func (m *MAR) check() *refusal {
	a, b := m.Access[0], m.Access[1]
	if !a.HasFAR && !b.HasFAR {
		return condMissing(ie.TGPPAccessForwardingActionInformation)
	}
	if m.Mode == ie.SteeringModeLoadBalancing && a.HasFAR && b.HasFAR && int(a.Weight)+int(b.Weight) != 100 {
		return failedRule(ruleMAR, uint32(m.ID))
	}
	return nil
}

// createMARs adds the MARs of Create MAR IEs gs to s, refusing an ID s
// has or two of one ID.
func (s *Session) createMARs(gs []*ie.IE) *refusal {
	for _, g := range gs {
		m, r := parseMAR(g)
		if r != nil {
			return r
		}
		if _, dup := s.MARs[m.ID]; dup {
			return failedRule(ruleMAR, uint32(m.ID))
		}
		s.MARs[m.ID] = m
	}
	return nil
}

// updateMAR applies an Update MAR g to s's MAR it names.
func (s *Session) updateMAR(g *ie.IE) *refusal {
	id, r := idOf(g, ie.MARID, (*ie.IE).MARID)
	if r != nil {
		return r
	}
	old, ok := s.MARs[id]
	if !ok {
		return failedRule(ruleMAR, uint32(id))
	}
	m := *old
	m.Access[0].URRs = append([]uint32(nil), old.Access[0].URRs...)
	m.Access[1].URRs = append([]uint32(nil), old.Access[1].URRs...)
	one, _ := children(g, 0)
	if r := m.steering(one); r != nil {
		return r
	}
	for i, x := range []struct{ create, update uint16 }{
		{ie.TGPPAccessForwardingActionInformation, ie.UpdateTGPPAccessForwardingActionInformation},
		{ie.NonTGPPAccessForwardingActionInformation, ie.UpdateNonTGPPAccessForwardingActionInformation},
	} {
		if v := one[x.create]; v != nil {
			m.Access[i] = Access{}
			if r := m.Access[i].parse(v, true); r != nil {
				return r
			}
		}
		if v := one[x.update]; v != nil {
			if !m.Access[i].HasFAR {
				return failedRule(ruleMAR, uint32(id))
			}
			if r := m.Access[i].parse(v, false); r != nil {
				return r
			}
		}
	}
	if r := m.check(); r != nil {
		return r
	}
	s.MARs[id] = &m
	return nil
}

// marRefs checks that every FAR and URR s's MARs name is in s.
func (s *Session) marRefs() *refusal {
	for id, m := range s.MARs {
		for _, a := range m.Access {
			if _, ok := s.FARs[a.FAR]; a.HasFAR && !ok {
				return failedRule(ruleMAR, uint32(id))
			}
			for _, u := range a.URRs {
				if _, ok := s.URRs[u]; !ok {
					return failedRule(ruleMAR, uint32(id))
				}
			}
		}
	}
	return nil
}
