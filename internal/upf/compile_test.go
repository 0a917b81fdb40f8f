// SPDX-License-Identifier: Apache-2.0

package upf

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/wmnsk/go-pfcp/ie"

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
