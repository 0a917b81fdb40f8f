// SPDX-License-Identifier: Apache-2.0

// Package upf is the user plane behind N4: it compiles each PFCP session
// (n4.Session) into the dataplane's record of it (Compile), writes it
// (commit.Sessions) and keeps it in a journal beside the config, so a
// restarted agent carries every session with the slot and TEIDs it had
// (Plane).
package upf

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/wmnsk/go-pfcp/ie"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/n4"
)

// Outer header creation descriptions (TS 29.244 8.2.56, octets 5-6).
const (
	ohcGTPUv4 = 0x0100
	ohcGTPUv6 = 0x0200
)

// Compile turns session s into its dataplane record: each PDR with its
// FAR and the gate of its QERs, one entry per SDF filter, best
// precedence first (a lower value, then a lower ID), at most
// bpf.SessPDRs entries. cnt gives each PDR ID its counter index; a PDR
// without one gets the lowest free (cnt is updated). It returns the
// keys that lead packets to the session.
func Compile(s *n4.Session, cnt map[uint16]uint8) (*bpf.Sess, commit.SessionKeys, error) {
	var keys commit.SessionKeys
	rec := &bpf.Sess{}
	ids := make([]uint16, 0, len(s.PDRs))
	for id := range s.PDRs {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uint16) int {
		pa, pb := s.PDRs[a], s.PDRs[b]
		if pa.Precedence != pb.Precedence {
			return cmpU32(pa.Precedence, pb.Precedence)
		}
		return int(a) - int(b)
	})
	for id := range cnt {
		if s.PDRs[id] == nil {
			delete(cnt, id)
		}
	}
	for _, id := range ids {
		if _, err := counter(cnt, id); err != nil {
			return nil, keys, err
		}
	}
	meter := meters(s, cnt)
	mas := map[uint32]uint8{} // MAR ID << 8 | QFI -> its place in rec.Ma + 1
	for _, id := range ids {
		p := s.PDRs[id]
		c := cnt[id]
		base, peer6, err := entry(s, p)
		if err != nil {
			return nil, keys, err
		}
		if err := multiAccess(rec, s, p, &base, peer6, mas); err != nil {
			return nil, keys, err
		}
		if peer6.IsValid() {
			if base.Ohc6, err = peerSlot(rec, peer6); err != nil {
				return nil, keys, &n4.RuleError{PDR: id, Reason: err.Error()}
			}
		}
		base.Cnt = c
		if m, ok := meter[id]; ok {
			base.Meter = m.Index
			if !slices.Contains(keys.Meters, m) {
				keys.Meters = append(keys.Meters, m)
			}
		}
		sdfs := p.SDF
		if len(sdfs) == 0 {
			sdfs = []string{""}
		}
		for _, d := range sdfs {
			e := base
			if err := sdf(&e, d); err != nil {
				return nil, keys, &n4.RuleError{PDR: id, Reason: err.Error()}
			}
			if rec.Npdr == bpf.SessPDRs {
				return nil, keys, fmt.Errorf("%w: more than %d PDRs and SDF filters in one session", n4.ErrNoResources, bpf.SessPDRs)
			}
			rec.Pdr[rec.Npdr] = e
			rec.Npdr++
		}
		if base.Flags&bpf.SessUL != 0 && p.HasTEID && !slices.Contains(keys.TEIDs, p.TEID) {
			keys.TEIDs = append(keys.TEIDs, p.TEID)
		}
		if base.Flags&bpf.SessUL == 0 {
			for _, a := range []netip.Addr{p.UEIP, p.UEIP6} {
				if a.IsValid() && !slices.Contains(keys.UEs, a) {
					keys.UEs = append(keys.UEs, a)
				}
			}
		}
	}
	return rec, keys, nil
}

// peerSlot returns the place + 1 of IPv6 peer a among rec's
// (bpf.Sess.Peer6), taking the next free one for a peer it lacks.
func peerSlot(rec *bpf.Sess, a netip.Addr) (uint8, error) {
	b := a.As16()
	for i := range rec.Peer6 {
		if rec.Peer6[i] == b {
			return uint8(i + 1), nil
		}
		if rec.Peer6[i] == [16]byte{} {
			rec.Peer6[i] = b
			return uint8(i + 1), nil
		}
	}
	return 0, fmt.Errorf("outer header creation toward %s: more than %d IPv6 peers in one session", a, len(rec.Peer6))
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// meters gives each PDR of s that a QER limits (a maximum bit rate for
// the PDR's direction) the meter it shares with the other PDRs of that
// QER and direction: numbered by the lowest counter index among them
// (+1), so a meter keeps its number while its PDRs do. A PDR under
// several such QERs takes the lowest rate.
func meters(s *n4.Session, cnt map[uint16]uint8) map[uint16]commit.Meter {
	type qd struct {
		qer uint32
		ul  bool
	}
	index := map[qd]uint8{}
	rate := map[uint16]struct {
		q    qd
		kbps uint64
	}{}
	for id, p := range s.PDRs {
		ul := p.Source == ie.SrcInterfaceAccess
		for _, q := range p.QERs {
			kbps := s.QERs[q].MBRDL
			if ul {
				kbps = s.QERs[q].MBRUL
			}
			if kbps == 0 || kbps > maxMeterKbps {
				// None, or more than a meter counts (and than any
				// link here carries): not policed.
				continue
			}
			if r, ok := rate[id]; !ok || kbps < r.kbps || kbps == r.kbps && q < r.q.qer {
				rate[id] = struct {
					q    qd
					kbps uint64
				}{qd{q, ul}, kbps}
			}
		}
	}
	for id, r := range rate {
		if i, ok := index[r.q]; !ok || cnt[id]+1 < i {
			index[r.q] = cnt[id] + 1
		}
	}
	out := make(map[uint16]commit.Meter, len(rate))
	for id, r := range rate {
		// MBR is in kbit/s: 125 bytes a second each.
		out[id] = commit.Meter{Index: index[r.q], Rate: r.kbps * 125}
	}
	return out
}

// maxMeterKbps is the highest MBR a meter polices: 2^33 bytes a
// second (68.7 Gbit/s), which keeps a second's refill in byte-ns
// (10^9 x the rate) and a bucket within 64 bits. The MBR IE carries up
// to 2^40 kbit/s.
const maxMeterKbps = (1 << 33) / 125

// counter returns PDR id's counter index, giving it the lowest free.
func counter(cnt map[uint16]uint8, id uint16) (uint8, error) {
	if c, ok := cnt[id]; ok {
		return c, nil
	}
	used := make([]bool, bpf.SessPDRs)
	for _, c := range cnt {
		used[c] = true
	}
	for c := range used {
		if !used[c] {
			cnt[id] = uint8(c)
			return uint8(c), nil
		}
	}
	return 0, fmt.Errorf("%w: more than %d PDRs in one session", n4.ErrNoResources, bpf.SessPDRs)
}

// entry is PDR p's record entry before its SDF filter, and the IPv6
// peer its FAR creates outer headers toward (none: the invalid Addr;
// the entry's Ohc6 is the caller's to fill in).
func entry(s *n4.Session, p *n4.PDR) (bpf.SessPDR, netip.Addr, error) {
	e := bpf.SessPDR{Prec: p.Precedence, Flags: bpf.SessAny}
	var peer6 netip.Addr
	bad := func(f string, a ...any) (bpf.SessPDR, netip.Addr, error) {
		return e, netip.Addr{}, &n4.RuleError{PDR: p.ID, Reason: fmt.Sprintf(f, a...)}
	}
	switch p.Source {
	case ie.SrcInterfaceAccess:
		e.Flags |= bpf.SessUL
		e.Teid = bpf.BE32(p.TEID)
		if !p.HasTEID {
			return bad("an uplink PDR needs a local F-TEID")
		}
	case ie.SrcInterfaceCore, ie.SrcInterfaceSGiLANN6LAN:
	default:
		return bad("source interface %d is not carried", p.Source)
	}
	if p.UEIP.IsValid() {
		if !p.UEIP.Is4() {
			return bad("UE address %s: not IPv4", p.UEIP)
		}
		e.Flags |= bpf.SessUEIP
		e.Ueip = bpf.Addr4(p.UEIP)
	}
	if p.UEIP6.IsValid() {
		e.Flags |= bpf.SessUE6
		e.Ue6 = commit.UE6Key(p.UEIP6)
	}
	if e.Flags&(bpf.SessUL|bpf.SessUEIP|bpf.SessUE6) == 0 {
		return bad("a downlink PDR needs the UE's address")
	}
	if p.QFI != 0 {
		e.Flags |= bpf.SessQFI
		e.Qfi = p.QFI
	}
	if p.RemoveOuter != 0 {
		e.Flags |= bpf.SessRemove
	}
	e.Action = bpf.SessDrop
	if far, ok := farOf(s, p); ok {
		f := s.FARs[far]
		if f.Action&n4.ActDupl != 0 {
			// Copies for lawful intercept need duplicating
			// parameters this user plane does not carry: refused
			// rather than silently not copied.
			return bad("FAR %d duplicates (DUPL): not carried", f.ID)
		}
		switch {
		case f.Action&n4.ActForw != 0:
			e.Action = bpf.SessForw
		case f.Action&n4.ActBuff != 0:
			e.Action = bpf.SessBuff
		}
		if o := f.Outer; o != nil && e.Action == bpf.SessForw && o.OuterHeaderCreationDescription&(ohcGTPUv4|ohcGTPUv6) != 0 {
			a := n4.OuterPeer(o)
			if !a.IsValid() {
				family := "IPv6"
				if o.OuterHeaderCreationDescription&ohcGTPUv4 != 0 {
					family = "IPv4"
				}
				return bad("FAR %d: outer header creation without an %s address", f.ID, family)
			}
			e.Flags |= bpf.SessOHC
			e.OhcTeid = bpf.BE32(o.TEID)
			if a.Is4() {
				e.OhcAddr = bpf.Addr4(a)
			} else {
				peer6 = a
			}
		}
		// Forwarded toward the access side with no GTP-U header made,
		// a UE's packet would leave in the clear wherever the FIB
		// routes its address: refused, not carried.
		if e.Action == bpf.SessForw && f.Dest == ie.DstInterfaceAccess && e.Flags&bpf.SessOHC == 0 {
			return bad("FAR %d forwards to the access side without outer header creation", f.ID)
		}
		if f.HasTOS {
			e.Flags |= bpf.SessTOS
			e.Tos = uint8(f.TOS >> 8)
		}
	}
	for _, id := range p.URRs {
		if s.URRs[id].Spent() {
			// Its quota is spent: what it detects is dropped until
			// the SMF gives another.
			e.Action = bpf.SessDrop
		}
	}
	for _, id := range p.QERs {
		q := s.QERs[id]
		gate := q.GateDL
		if e.Flags&bpf.SessUL != 0 {
			gate = q.GateUL
		}
		if gate != 0 {
			e.Gate = 1
		}
		if q.QFI != 0 && e.Flags&bpf.SessOHC != 0 {
			e.Qfi = q.QFI
		}
	}
	return e, peer6, nil
}

// farOf is the FAR PDR p forwards by: its own, or its MAR's first
// access's (the 3GPP one; else the other), whose outer header
// multiAccess sets beside the second's.
func farOf(s *n4.Session, p *n4.PDR) (uint32, bool) {
	if p.HasMAR {
		m := s.MARs[p.MAR]
		if m == nil {
			return 0, false
		}
		for _, a := range m.Access {
			if a.HasFAR {
				return a.FAR, true
			}
		}
		return 0, false
	}
	return p.FAR, p.HasFAR
}

// multiAccess makes e (PDR p's entry, from its MAR's 3GPP access's FAR)
// steer between both accesses of the MAR p names, when it names one
// with both: the steering mode and e as the second access's FAR makes
// it (its outer header and marking) in a place of rec.Ma (one per MAR
// and QFI: mas gives it, + 1), which e names.
// Both accesses must forward with GTP-U over IPv4 (peer6: the first's
// IPv6 peer, none allowed). Their peers' places in the dataplane are
// the plane's to fill in (Peers).
func multiAccess(rec *bpf.Sess, s *n4.Session, p *n4.PDR, e *bpf.SessPDR, peer6 netip.Addr, mas map[uint32]uint8) error {
	if !p.HasMAR {
		return nil
	}
	m := s.MARs[p.MAR]
	if m == nil || !m.Access[0].HasFAR || !m.Access[1].HasFAR || e.Flags&bpf.SessUL != 0 {
		return nil
	}
	bad := func(f string, a ...any) error {
		return &n4.RuleError{PDR: p.ID, Reason: fmt.Sprintf("MAR %d: ", m.ID) + fmt.Sprintf(f, a...)}
	}
	if e.Action != bpf.SessForw {
		// Buffering or dropping: no access is taken.
		return nil
	}
	if e.Flags&bpf.SessOHC == 0 || peer6.IsValid() {
		return bad("the 3GPP access's FAR %d must create a GTP-U/UDP/IPv4 outer header", m.Access[0].FAR)
	}
	f := s.FARs[m.Access[1].FAR]
	o := f.Outer
	if f.Action&n4.ActForw == 0 || o == nil || o.OuterHeaderCreationDescription&ohcGTPUv4 == 0 || !n4.OuterPeer(o).Is4() {
		return bad("the non-3GPP access's FAR %d must forward with a GTP-U/UDP/IPv4 outer header", f.ID)
	}
	// One rule per MAR and QFI (the second access's copy carries the
	// QFI its downlink is sent with).
	key := uint32(m.ID)<<8 | uint32(e.Qfi)
	if i, ok := mas[key]; ok {
		e.Ma = i
		return nil
	}
	n := len(mas)
	if n == bpf.SessMAs {
		return fmt.Errorf("%w: more than %d MARs (and QFIs) steering one session", n4.ErrNoResources, bpf.SessMAs)
	}
	alt := *e
	alt.OhcTeid, alt.OhcAddr = bpf.BE32(o.TEID), bpf.Addr4(n4.OuterPeer(o))
	alt.Flags &^= bpf.SessTOS
	alt.Tos = 0
	if f.HasTOS {
		alt.Flags |= bpf.SessTOS
		alt.Tos = uint8(f.TOS >> 8)
	}
	ma := bpf.SessMA{Mode: m.Mode, Weight1: m.Access[0].Weight, Alt: alt}
	if m.Preferred() == 1 {
		ma.Mode |= bpf.MAPrefer2
	}
	rec.Ma[n] = ma
	mas[key] = uint8(n + 1)
	e.Ma = uint8(n + 1)
	return nil
}

// sdf narrows e by SDF filter flow description d (TS 29.244 5.2.1A.2A,
// IPFilterRule of RFC 6733 as 3GPP restricts it: "permit out PROTO from
// REMOTE [PORTS] to LOCAL [PORTS]", seen from the N6 side, so "from" is
// the remote end and "to" the UE). "" narrows nothing.
func sdf(e *bpf.SessPDR, d string) error {
	if d == "" {
		return nil
	}
	f := strings.Fields(d)
	if len(f) < 6 || f[0] != "permit" || f[1] != "out" || f[3] != "from" {
		return fmt.Errorf("flow description %q: want \"permit out PROTO from ADDR [PORTS] to ADDR [PORTS]\"", d)
	}
	e.Flags &^= bpf.SessAny
	if v, ok := protoNames[f[2]]; ok {
		e.Proto = v
	} else {
		v, err := strconv.ParseUint(f[2], 10, 8)
		if err != nil {
			return fmt.Errorf("flow description %q: protocol %q", d, f[2])
		}
		e.Proto = uint8(v)
	}
	rest := f[4:]
	to := slices.Index(rest, "to")
	if to < 1 {
		return fmt.Errorf("flow description %q: no \"to\"", d)
	}
	var err error
	if e.Remote, e.Rmask, err = sdfAddr(rest[0]); err != nil {
		return fmt.Errorf("flow description %q: %w", d, err)
	}
	e.RportLo, e.RportHi, e.LportLo, e.LportHi = 0, 0xffff, 0, 0xffff
	if to == 2 {
		if e.RportLo, e.RportHi, err = ports(rest[1]); err != nil {
			return fmt.Errorf("flow description %q: %w", d, err)
		}
	}
	if len(rest) > to+2 {
		if e.LportLo, e.LportHi, err = ports(rest[to+2]); err != nil {
			return fmt.Errorf("flow description %q: %w", d, err)
		}
	}
	if e.Proto == 0 && e.Rmask == 0 && e.RportLo == 0 && e.RportHi == 0xffff && e.LportLo == 0 && e.LportHi == 0xffff {
		// "permit out ip from any to assigned": narrows nothing.
		e.Flags |= bpf.SessAny
	}
	return nil
}

// protoNames are the protocols filters name rather than number ("ip":
// any).
var protoNames = map[string]uint8{"ip": 0, "icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58}

// sdfAddr reads a filter's address: "any", "assigned", an IPv4 address
// or prefix.
func sdfAddr(s string) (addr, mask uint32, err error) {
	if s == "any" || s == "assigned" {
		return 0, 0, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, err2 := netip.ParseAddr(s)
		if err2 != nil {
			return 0, 0, fmt.Errorf("address %q", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if !p.Addr().Is4() {
		return 0, 0, fmt.Errorf("address %q: IPv4 only", s)
	}
	m := uint32(0)
	if p.Bits() > 0 {
		m = ^uint32(0) << (32 - p.Bits())
	}
	return bpf.Addr4(p.Masked().Addr()), bpf.BE32(m), nil
}

// ports reads "N" or "LO-HI" (a list of several is not carried).
func ports(s string) (lo, hi uint16, err error) {
	a, b, rng := strings.Cut(s, "-")
	x, err1 := strconv.ParseUint(a, 10, 16)
	y := x
	var err2 error
	if rng {
		y, err2 = strconv.ParseUint(b, 10, 16)
	}
	if err1 != nil || err2 != nil || y < x {
		return 0, 0, fmt.Errorf("ports %q", s)
	}
	return uint16(x), uint16(y), nil
}
