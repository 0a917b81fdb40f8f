// SPDX-License-Identifier: Apache-2.0

package upf

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/wmnsk/go-pfcp/ie"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/n4"
)

// TestCompileRefusesClearAccess: a downlink FAR that forwards toward
// the access side without creating a GTP-U header would send the UE's
// packet in the clear: the PDR naming it is refused (73 on N4); with
// the outer header, or buffering, it is carried.
func TestCompileRefusesClearAccess(t *testing.T) {
	s := &n4.Session{
		PDRs: map[uint16]*n4.PDR{2: {ID: 2, Precedence: 100, Source: ie.SrcInterfaceCore,
			UEIP: netip.MustParseAddr("10.45.0.2"), FAR: 2, HasFAR: true}},
		FARs: map[uint32]*n4.FAR{2: {ID: 2, Action: n4.ActForw, Dest: ie.DstInterfaceAccess}},
	}
	_, _, err := Compile(s, map[uint16]uint8{})
	if re, ok := errors.AsType[*n4.RuleError](err); !ok || re.PDR != 2 {
		t.Fatalf("forwarding to access in the clear: %v, want a RuleError naming PDR 2", err)
	}
	s.FARs[2].Outer = ie.NewOuterHeaderCreationFields(0x0100, 0x9000, "10.2.0.9", "", 0, 0, 0)
	if _, _, err := Compile(s, map[uint16]uint8{}); err != nil {
		t.Errorf("with outer header creation: %v", err)
	}
	s.FARs[2].Outer, s.FARs[2].Action = nil, n4.ActBuff
	if _, _, err := Compile(s, map[uint16]uint8{}); err != nil {
		t.Errorf("buffering: %v", err)
	}
}

// TestCompileRefusesDuplicating: a FAR that asks for copies (DUPL) is
// refused naming the PDR: no copy would be made.
func TestCompileRefusesDuplicating(t *testing.T) {
	s := &n4.Session{
		PDRs: map[uint16]*n4.PDR{3: {ID: 3, Precedence: 100, Source: ie.SrcInterfaceCore,
			UEIP: netip.MustParseAddr("10.45.0.2"), FAR: 2, HasFAR: true}},
		FARs: map[uint32]*n4.FAR{2: {ID: 2, Action: n4.ActForw | n4.ActDupl, Dest: ie.DstInterfaceAccess,
			Outer: ie.NewOuterHeaderCreationFields(0x0100, 0x9000, "10.2.0.9", "", 0, 0, 0)}},
	}
	_, _, err := Compile(s, map[uint16]uint8{})
	if re, ok := errors.AsType[*n4.RuleError](err); !ok || re.PDR != 3 {
		t.Fatalf("DUPL: %v, want a RuleError naming PDR 3", err)
	}
}

// TestCompileMeters: a QER's MBR becomes its direction's meter, shared
// by the PDRs naming it, in bytes a second; one past what a meter can
// count (the IE carries up to 2^40 kbit/s) is not policed rather than
// overflowing the bucket's arithmetic.
func TestCompileMeters(t *testing.T) {
	s := &n4.Session{
		PDRs: map[uint16]*n4.PDR{
			1: {ID: 1, Precedence: 100, Source: ie.SrcInterfaceAccess, HasTEID: true, TEID: 0x100, FAR: 1, HasFAR: true, QERs: []uint32{1}},
			2: {ID: 2, Precedence: 200, Source: ie.SrcInterfaceAccess, HasTEID: true, TEID: 0x100, FAR: 1, HasFAR: true, QERs: []uint32{1}},
			3: {ID: 3, Precedence: 100, Source: ie.SrcInterfaceCore, UEIP: netip.MustParseAddr("10.45.0.2"), FAR: 1, HasFAR: true, QERs: []uint32{1}},
		},
		FARs: map[uint32]*n4.FAR{1: {ID: 1, Action: n4.ActDrop}},
		QERs: map[uint32]*n4.QER{1: {ID: 1, MBRUL: 8000, MBRDL: 1 << 40}},
	}
	rec, keys, err := Compile(s, map[uint16]uint8{})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.Meters) != 1 || keys.Meters[0].Rate != 1_000_000 {
		t.Fatalf("meters %+v, want one of 1,000,000 bytes/s (8,000 kbit/s uplink)", keys.Meters)
	}
	for _, e := range rec.Pdr[:rec.Npdr] {
		ul := e.Flags&bpf.SessUL != 0
		if ul && e.Meter != keys.Meters[0].Index || !ul && e.Meter != 0 {
			t.Errorf("entry %+v: uplink PDRs share the meter, the downlink (2^40 kbit/s) has none", e)
		}
	}
}

// TestCompileMultiAccess: a downlink PDR naming a MAR with both accesses
// becomes one entry steered by a multi-access rule: the 3GPP access's
// outer header in the entry, the non-3GPP one's (TEID, peer, marking)
// and the mode beside it, the preferred access and the 3GPP weight;
// PDRs naming one MAR share its rule. A non-3GPP access that creates
// no GTP-U/IPv4 header is refused naming the PDR; a MAR of one access
// is that access's FAR.
func TestCompileMultiAccess(t *testing.T) {
	ue := netip.MustParseAddr("10.45.0.2")
	s := &n4.Session{
		PDRs: map[uint16]*n4.PDR{
			2: {ID: 2, Precedence: 100, Source: ie.SrcInterfaceCore, UEIP: ue, MAR: 1, HasMAR: true, SDF: []string{"permit out udp from any to assigned"}},
			3: {ID: 3, Precedence: 200, Source: ie.SrcInterfaceCore, UEIP: ue, MAR: 1, HasMAR: true},
		},
		FARs: map[uint32]*n4.FAR{
			2: {ID: 2, Action: n4.ActForw, Dest: ie.DstInterfaceAccess, Outer: ie.NewOuterHeaderCreationFields(0x0100, 0x9000, "10.2.0.9", "", 0, 0, 0)},
			3: {ID: 3, Action: n4.ActForw, Dest: ie.DstInterfaceAccess, Outer: ie.NewOuterHeaderCreationFields(0x0100, 0xa000, "10.3.0.7", "", 0, 0, 0),
				TOS: 0x2eff, HasTOS: true},
		},
		MARs: map[uint16]*n4.MAR{1: {ID: 1, Mode: ie.SteeringModeActiveStandby, Access: [2]n4.Access{
			{FAR: 2, HasFAR: true, Priority: ie.PriorityStandby, HasPriority: true, Weight: 70},
			{FAR: 3, HasFAR: true, Priority: ie.PriorityActive, HasPriority: true, Weight: 30}}}},
	}
	rec, _, err := Compile(s, map[uint16]uint8{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Npdr != 2 {
		t.Fatalf("%d entries, want 2", rec.Npdr)
	}
	for _, e := range rec.Pdr[:rec.Npdr] {
		if e.Ma != 1 || e.Flags&bpf.SessOHC == 0 || e.OhcTeid != bpf.BE32(0x9000) || e.OhcAddr != bpf.Addr4(netip.MustParseAddr("10.2.0.9")) {
			t.Errorf("entry %+v: want the gNB's outer header and multi-access rule 1", e)
		}
	}
	m := rec.Ma[0]
	if m.Mode != bpf.MAActiveStandby|bpf.MAPrefer2 || m.Weight1 != 70 || m.Alt.OhcTeid != bpf.BE32(0xa000) ||
		m.Alt.OhcAddr != bpf.Addr4(netip.MustParseAddr("10.3.0.7")) || m.Alt.Flags&(bpf.SessTOS|bpf.SessOHC) != bpf.SessTOS|bpf.SessOHC ||
		m.Alt.Tos != 0x2e || m.Alt.Ma != 0 || m.Alt.Action != bpf.SessForw || rec.Ma[1] != (bpf.SessMA{}) {
		t.Errorf("multi-access rules %+v", rec.Ma)
	}
	s.FARs[3].Outer = nil
	_, _, err = Compile(s, map[uint16]uint8{})
	if re, ok := errors.AsType[*n4.RuleError](err); !ok || (re.PDR != 2 && re.PDR != 3) {
		t.Errorf("a non-3GPP access without an outer header: %v, want a RuleError naming the PDR", err)
	}
	s.MARs[1].Access[1] = n4.Access{}
	rec, _, err = Compile(s, map[uint16]uint8{})
	if err != nil || rec.Pdr[0].Ma != 0 || rec.Pdr[0].OhcTeid != bpf.BE32(0x9000) {
		t.Errorf("a MAR of one access: %v, entry %+v", err, rec.Pdr[0])
	}
}
