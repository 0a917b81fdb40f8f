// SPDX-License-Identifier: Apache-2.0

package api

import (
	"reflect"
	"testing"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

// TestConvertInPathAndPrecedence carries a PDR's in_path and a service's
// precedence to the API and back.
func TestConvertInPathAndPrecedence(t *testing.T) {
	pdr := config.PDR{ID: 10, Precedence: 5, FAR: 1, Match: config.Match{InPath: 3}}
	p := PDRToPB(pdr)
	if p.GetMatch().GetInPath() != 3 {
		t.Errorf("PDRToPB in_path = %d, want 3", p.GetMatch().GetInPath())
	}
	back, err := PDRFromPB(p)
	if err != nil || !reflect.DeepEqual(back, pdr) {
		t.Errorf("PDRFromPB = %+v, %v; want %+v", back, err, pdr)
	}

	sv := config.Service{ID: 1, Port: 80, LBR: 2, Precedence: 100}
	s := ServiceToPB(sv)
	if s.GetPrecedence() != 100 {
		t.Errorf("ServiceToPB precedence = %d, want 100", s.GetPrecedence())
	}
	svBack, err := ServiceFromPB(s)
	if err != nil || !reflect.DeepEqual(svBack, sv) {
		t.Errorf("ServiceFromPB = %+v, %v; want %+v", svBack, err, sv)
	}

	ops, err := Ops([]*pb.Operation{{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Pdr{Pdr: p}}}}})
	if err != nil || ops[0].PDR.Match.InPath != 3 {
		t.Errorf("Ops: %+v, %v", ops, err)
	}
}
