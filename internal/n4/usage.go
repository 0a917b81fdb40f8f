// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

// Usage reporting (TS 29.244 5.2.2): the node reads what the PDRs of
// each session with a URR that asks for more than a final report
// counted, every Options.UsageEvery, and sends the SMF a Session Report
// Request (USAR) with a Usage Report when a URR's trigger fires:
//
//   - PERIO: every Measurement Period;
//   - VOLTH: the volume since the last report reached the Volume
//     Threshold (total, uplink or downlink);
//   - VOLQU: the volume since the quota was given reached the Volume
//     Quota: the URR's PDRs stop forwarding (their packets are dropped)
//     until a modification gives it a new quota;
//   - START: the first packet after none (the URR's PDRs counted
//     nothing since the last look, or since it was made);
//   - STOPT: no packet for the Inactivity Detection Time (default
//     DefaultInactivity);
//   - TIMTH: the time since the last report reached the Time
//     Threshold;
//   - TIMQU: the time since the quota was given reached the Time
//     Quota: the URR's PDRs stop forwarding, as for VOLQU, until a
//     modification gives it a new one.
//
// Time is measured as the reports' Duration Measurement is, wall-clock
// time since the measurement began (traffic or not), and a time quota
// from when it was given, kept in the session: an agent restart does
// not give it back.
//
// Each report carries the volume and duration since the URR's last
// report (measured from there on), its own sequence number (URSEQN) and
// the trigger. A modification's Query URR (or QAURR) answers with an
// IMMER report per URR, a Remove URR with its TERMR report, a deletion
// with every URR's TERMR report. The counts are the dataplane's, read
// at the moments above: a quota is enforced within one UsageEvery of
// being reached (what arrives meanwhile passes and is reported).
// Measurements live in the node: a restarted agent starts them again
// from the counts it finds (an exhausted quota stays exhausted: it is
// part of the session).

// Usage defaults.
const (
	DefaultUsageEvery = time.Second
	DefaultInactivity = 5 * time.Second
)

// Reporting triggers (TS 29.244 8.2.19) and usage report triggers
// (8.2.41), as two octets: octet 5 in the low byte.
const (
	trigPERIO = 0x0001
	trigVOLTH = 0x0002
	trigTIMTH = 0x0004
	trigSTART = 0x0010
	trigSTOPT = 0x0020
	trigIMMER = 0x0080 // usage report trigger only
	trigVOLQU = 0x0100
	trigTIMQU = 0x0200
	trigTERMR = 0x0800 // usage report trigger only
)

// polled are the reporting triggers the node watches between requests.
const polled = trigPERIO | trigVOLTH | trigTIMTH | trigSTART | trigSTOPT | trigVOLQU | trigTIMQU

// triggers is a URR's reporting triggers as two octets.
func (u *URR) triggers() uint16 {
	var t uint16
	if len(u.Triggers) > 0 {
		t = uint16(u.Triggers[0])
	}
	if len(u.Triggers) > 1 {
		t |= uint16(u.Triggers[1]) << 8
	}
	return t
}

// watched tells whether u is read between requests.
func (u *URR) watched() bool {
	return u.triggers()&polled != 0 || u.VolumeQuota != 0 || u.TimeQuota != 0
}

// volume is a measurement: bytes and packets each way.
type volume struct{ ulB, dlB, ulP, dlP uint64 }

func (v volume) bytes() uint64   { return v.ulB + v.dlB }
func (v volume) packets() uint64 { return v.ulP + v.dlP }

// meter is what the node keeps of a URR between reports: each PDR's
// counts when the measurement began (its last report, or when the PDR
// came under the URR) and when its quota was given.
type meter struct {
	seq      uint32
	since    time.Time
	base     map[uint16]Usage
	quota    map[uint16]Usage
	period   time.Time // the next periodic report (zero: none)
	active   bool      // traffic seen since the last START/STOPT
	lastPkts uint64
	quiet    time.Time // since when it counted nothing
}

// measure is what u's PDRs counted since the base given (from u's PDRs'
// counts now).
func measure(s *Session, id uint32, now map[uint16]Usage, base map[uint16]Usage) volume {
	var v volume
	for _, p := range s.PDRs {
		if !slices.Contains(p.URRs, id) {
			continue
		}
		c, b := now[p.ID], base[p.ID]
		if c.Bytes < b.Bytes || c.Packets < b.Packets {
			// Read before the base was taken (counters only grow).
			continue
		}
		dB, dP := c.Bytes-b.Bytes, c.Packets-b.Packets
		if p.Source == ie.SrcInterfaceAccess {
			v.ulB, v.ulP = v.ulB+dB, v.ulP+dP
		} else {
			v.dlB, v.dlP = v.dlB+dB, v.dlP+dP
		}
	}
	return v
}

// meters keeps a meter for each URR of s, new ones measured from now
// (the counts in u; nil: zero, a new session's), and a PDR newly under
// a URR from its counts in u. Called with n.work held.
func (n *Node) meters(s *Session, u map[uint16]Usage, at time.Time) {
	if len(s.URRs) == 0 {
		delete(n.meter, s.UPSEID) // nothing to measure: no entry
		return
	}
	ms := n.meter[s.UPSEID]
	if ms == nil {
		ms = map[uint32]*meter{}
		n.meter[s.UPSEID] = ms
	}
	for id := range ms {
		if s.URRs[id] == nil {
			delete(ms, id)
		}
	}
	for id, r := range s.URRs {
		m := ms[id]
		if m == nil {
			m = &meter{since: at, base: map[uint16]Usage{}, quota: map[uint16]Usage{}, quiet: at}
			m.lastPkts = measure(s, id, u, nil).packets()
			ms[id] = m
		}
		if r.Period > 0 && m.period.IsZero() {
			m.period = at.Add(r.Period)
		} else if r.Period == 0 {
			m.period = time.Time{}
		}
		for _, p := range s.PDRs {
			if !slices.Contains(p.URRs, id) {
				continue
			}
			if _, ok := m.base[p.ID]; !ok {
				m.base[p.ID] = u[p.ID]
			}
			if _, ok := m.quota[p.ID]; !ok {
				m.quota[p.ID] = u[p.ID]
			}
		}
	}
}

// usageReport is the Usage Report IEs of URR id of s: the volume since
// its last report, why (usage report trigger t), and its measurement
// starts again from the counts in u.
func (n *Node) usageReport(s *Session, id uint32, u map[uint16]Usage, t uint16, at time.Time) []*ie.IE {
	m := n.meter[s.UPSEID][id]
	if m == nil {
		m = &meter{since: s.Since, base: map[uint16]Usage{}}
	}
	v := measure(s, id, u, m.base)
	ies := []*ie.IE{ie.NewURRID(id), ie.NewURSEQN(m.seq), ie.NewUsageReportTrigger(uint8(t), uint8(t>>8), 0),
		ie.NewVolumeMeasurement(0x3f, v.bytes(), v.ulB, v.dlB, v.packets(), v.ulP, v.dlP)}
	if !m.since.IsZero() {
		ies = append(ies, ie.NewStartTime(m.since), ie.NewEndTime(at), ie.NewDurationMeasurement(at.Sub(m.since)))
	}
	m.seq++
	m.since = at
	m.base = maps.Clone(u)
	if m.base == nil {
		m.base = map[uint16]Usage{}
	}
	return ies
}

// usageRead reads what s's PDRs counted (nil when the user plane does
// not count).
func (n *Node) usageRead(s *Session) map[uint16]Usage {
	me, ok := n.opt.UserPlane.(Meter)
	if !ok {
		return nil
	}
	u, err := me.Usage(s)
	if err != nil {
		n.opt.Log.Warn("n4: a session's usage not read", "seid", s.UPSEID, "err", err)
	}
	return u
}

// metering reads the watched sessions' usage every UsageEvery until ctx
// ends.
func (n *Node) metering(ctx context.Context) {
	if _, ok := n.opt.UserPlane.(Meter); !ok {
		return
	}
	t := time.NewTicker(n.opt.UsageEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n.meterOnce(now)
		}
	}
}

// bulkFrom is how many watched sessions make the metering loop read
// every session's counts at once (BulkMeter) rather than each's.
const bulkFrom = 16

// meterOnce looks at every watched session's URRs once.
func (n *Node) meterOnce(now time.Time) {
	n.work.Lock()
	var watched []*Session
	for _, s := range n.sessions {
		for _, u := range s.URRs {
			if u.watched() {
				watched = append(watched, s)
				break
			}
		}
	}
	n.work.Unlock()
	var all map[uint64]map[uint16]Usage
	if b, ok := n.opt.UserPlane.(BulkMeter); ok && len(watched) >= bulkFrom {
		var err error
		if all, err = b.UsageMany(watched); err != nil {
			n.opt.Log.Warn("n4: sessions' usage not read", "err", err)
			return
		}
	}
	for _, s := range watched {
		n.meterSession(s.UPSEID, all[s.UPSEID], now)
	}
}

// meterSession looks at session seid's URRs: the reports their
// triggers ask for, and a quota exhausted. u is what its PDRs counted
// (nil: read them now).
func (n *Node) meterSession(seid uint64, u map[uint16]Usage, now time.Time) {
	n.work.Lock()
	defer n.work.Unlock()
	s := n.sessions[seid]
	if s == nil {
		return
	}
	if u == nil {
		if u = n.usageRead(s); u == nil {
			return
		}
	}
	var reports []*ie.IE
	var spent, timeSpent []uint32
	for _, id := range slices.Sorted(maps.Keys(s.URRs)) {
		r, m := s.URRs[id], n.meter[seid][id]
		if m == nil {
			// Not measured yet (a session a restart kept): from now.
			n.meters(s, u, now)
			continue
		}
		if !r.watched() {
			continue
		}
		trig := r.triggers()
		v := measure(s, id, u, m.base)
		var why uint16
		pk := measure(s, id, u, nil).packets()
		moved := pk != m.lastPkts
		m.lastPkts = pk
		if moved {
			m.quiet = now
		}
		switch {
		case moved && !m.active:
			m.active = true
			why |= trigSTART & trig
		case !moved && m.active && now.Sub(m.quiet) >= r.inactivity():
			m.active = false
			why |= trigSTOPT & trig
		}
		if trig&trigVOLTH != 0 && (r.VolumeThreshold != 0 && v.bytes() >= r.VolumeThreshold ||
			r.ThresholdUL != 0 && v.ulB >= r.ThresholdUL || r.ThresholdDL != 0 && v.dlB >= r.ThresholdDL) {
			why |= trigVOLTH
		}
		if q := r.VolumeQuota; q != 0 && !r.Exhausted && measure(s, id, u, m.quota).bytes() >= q {
			why |= trigVOLQU
			spent = append(spent, id)
		}
		if trig&trigTIMTH != 0 && r.TimeThreshold > 0 && now.Sub(m.since) >= r.TimeThreshold {
			why |= trigTIMTH
		}
		if q := r.TimeQuota; q != 0 && !r.TimeSpent && now.Sub(r.TimeQuotaFrom) >= q {
			why |= trigTIMQU
			timeSpent = append(timeSpent, id)
		}
		if !m.period.IsZero() && !now.Before(m.period) {
			why |= trigPERIO
			for !now.Before(m.period) {
				m.period = m.period.Add(r.Period)
			}
		}
		if why != 0 {
			reports = append(reports, ie.NewUsageReportWithinSessionReportRequest(n.usageReport(s, id, u, why, now)...))
		}
	}
	if len(spent)+len(timeSpent) > 0 {
		c := s.clone()
		for _, id := range spent {
			r := *c.URRs[id]
			r.Exhausted = true
			c.URRs[id] = &r
		}
		for _, id := range timeSpent {
			r := *c.URRs[id]
			r.TimeSpent = true
			c.URRs[id] = &r
		}
		if rf := n.carry(c); rf != nil {
			n.opt.Log.Warn("n4: a spent quota's PDRs still forward", "seid", seid, "cause", rf.cause)
		} else {
			n.mu.Lock()
			n.keep(c)
			n.mu.Unlock()
			if sy, ok := n.opt.UserPlane.(Syncer); ok {
				if err := sy.Sync(); err != nil {
					n.opt.Log.Warn("n4: a spent quota not journaled", "seid", seid, "err", err)
				}
			}
			n.count("quota_spent")
		}
	}
	if len(reports) > 0 {
		if err := n.report(seid, ie.NewReportType(0, 0, 1, 0), reports...); err != nil {
			n.opt.Log.Warn("n4: usage report not sent", "seid", seid, "err", err)
		}
	}
}

// inactivity is how long u's PDRs count nothing before the stop of
// traffic is reported.
func (u *URR) inactivity() time.Duration {
	if u.Inactivity > 0 {
		return u.Inactivity
	}
	return DefaultInactivity
}

// queried are the Usage Reports a modification's answer carries: an
// IMMER report for each URR it queries (every URR with QAURR), a TERMR
// report for each it removes (of old, the session before it). Called
// with n.work held, after the modification is carried.
func (n *Node) queried(old, s *Session, m *message.SessionModificationRequest, read func() map[uint16]Usage) []*ie.IE {
	var ids []uint32
	if f := m.PFCPSMReqFlags; f != nil && len(f.Payload) > 0 && f.Payload[0]&0x04 != 0 {
		ids = slices.Sorted(maps.Keys(s.URRs))
	} else {
		for _, g := range m.QueryURR {
			if id, r := id32(g, ie.URRID); r == nil && s.URRs[id] != nil && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	var gone []uint32
	for id := range old.URRs {
		if s.URRs[id] == nil {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	if len(ids) == 0 && len(gone) == 0 {
		return nil
	}
	u := read()
	var out []*ie.IE
	for _, id := range gone {
		out = append(out, ie.NewUsageReportWithinSessionModificationResponse(n.usageReport(old, id, u, trigTERMR, time.Now())...))
	}
	for _, id := range ids {
		out = append(out, ie.NewUsageReportWithinSessionModificationResponse(n.usageReport(s, id, u, trigIMMER, time.Now())...))
	}
	return out
}

// remeter are the Usage Reports a modification's answer carries
// (queried), and keeps s's meters: a URR or a PDR under one new since
// old measured from the counts now, a quota given again measured from
// now. Called with n.work held, after the modification is carried.
func (n *Node) remeter(old, s *Session, m *message.SessionModificationRequest) []*ie.IE {
	if len(old.URRs) == 0 && len(s.URRs) == 0 {
		return nil
	}
	for _, g := range m.UpdateURR {
		one, _ := children(g, 0)
		id, _ := id32(g, ie.URRID)
		if one[ie.VolumeQuota] != nil && n.meter[s.UPSEID][id] != nil {
			n.meter[s.UPSEID][id].quota = map[uint16]Usage{}
		}
	}
	var u map[uint16]Usage
	read := func() map[uint16]Usage {
		if u == nil {
			u = n.usageRead(s)
		}
		return u
	}
	out := n.queried(old, s, m, read)
	if n.unmetered(s) {
		read()
	}
	n.meters(s, u, time.Now())
	return out
}

// unmetered tells whether a PDR of s is under a URR that does not
// measure it yet. Called with n.work held.
func (n *Node) unmetered(s *Session) bool {
	ms := n.meter[s.UPSEID]
	for id := range s.URRs {
		m := ms[id]
		if m == nil {
			return true
		}
		for _, p := range s.PDRs {
			if slices.Contains(p.URRs, id) {
				if _, ok := m.base[p.ID]; !ok {
					return true
				}
				if _, ok := m.quota[p.ID]; !ok {
					return true
				}
			}
		}
	}
	return false
}
