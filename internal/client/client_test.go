// SPDX-License-Identifier: Apache-2.0

package client

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

var schema = config.Builtin()

func TestParseKind(t *testing.T) {
	for in, want := range map[string]config.Kind{
		"pdr": config.KindPDR, "pdrs": config.KindPDR, "PDRs": config.KindPDR, "far": config.KindFAR, "fars": config.KindFAR,
		"path": config.KindPath, "paths": config.KindPath, "interface": config.KindInterface, "interfaces": config.KindInterface,
		"lbr": config.KindLBR, "LBRs": config.KindLBR, "service": config.KindService, "services": config.KindService,
		"qos_class": config.KindQoSClass, "qos_classes": config.KindQoSClass, "flowopt": config.KindFlowOpt, "FlowOpt": config.KindFlowOpt,
		"strategy": config.KindStrategy, "Strategies": config.KindStrategy,
	} {
		got, err := ParseKind(schema, in)
		if err != nil || got != want {
			t.Errorf("parseKind(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	const want = `unknown kind "rules" (want pdrs, strategies, flowopt, qos_classes, services, lbrs, fars, paths or interfaces)`
	if _, err := ParseKind(schema, "rules"); err == nil || err.Error() != want {
		t.Errorf("parseKind(rules) error = %v, want %s", err, want)
	}
}

func TestParseRefs(t *testing.T) {
	refs, err := ParseRefs(schema, config.KindPDR, []string{"10", "11", "010"})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || refs[0].GetId() != 10 || refs[1].GetId() != 11 || refs[0].GetKind() != pb.Kind_KIND_PDR {
		t.Errorf("refs = %v, want pdr 10 and 11 (repeats dropped)", refs)
	}
	refs, err = ParseRefs(schema, config.KindInterface, []string{"lan0", "wan0"})
	if err != nil || len(refs) != 2 || refs[1].GetName() != "wan0" || refs[1].GetKind() != pb.Kind_KIND_INTERFACE {
		t.Errorf("interface refs = %v, %v", refs, err)
	}
	for _, bad := range []string{"x", "0", "-1", "4294967296"} {
		if _, err := ParseRefs(schema, config.KindFAR, []string{bad}); err == nil {
			t.Errorf("parseRefs(far %q) accepted", bad)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for target, want := range map[string]bool{
		"127.0.0.1:50051": true, "[::1]:50051": true, "localhost:50051": true, "unix:///run/x.sock": true,
		"dns:///127.0.0.1:1": true, "10.0.0.1:50051": false, "gw.example:50051": false,
	} {
		if got := IsLoopback(target); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", target, got, want)
		}
	}
}

func TestRPCError(t *testing.T) {
	st := status.New(codes.InvalidArgument, "operations[1].create.pdr.match.src: invalid CIDR \"x\"\noperations[3].update.far.action: required")
	st, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "f", Description: "d"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{flags: &Flags{Server: DefaultServer, Timeout: time.Second}}
	e := c.Err("apply", st.Err())
	e.(*RPCError).Ops = []string{"far 1", "pdr 10", "pdr 11"}
	want := `apply: InvalidArgument:
  operations[1].create.pdr.match.src: invalid CIDR "x" (pdr 10)
  operations[3].update.far.action: required`
	if e.Error() != want {
		t.Errorf("error:\n%s\nwant:\n%s", e, want)
	}
	if s, ok := status.FromError(e); !ok || s.Code() != codes.InvalidArgument {
		t.Errorf("status of the wrapped error = %v", s)
	}

	// One line: one line, field violation list or not.
	e = c.Err("get pdr 9", status.Error(codes.NotFound, "no pdr 9"))
	if e.Error() != "get pdr 9: NotFound: no pdr 9" {
		t.Errorf("error = %q", e)
	}
	e = c.Err("delete", fieldStatus(t, codes.NotFound, "operations[0].delete: no pdr 9"))
	e.(*RPCError).Ops = []string{"pdr 9"}
	if e.Error() != "delete: NotFound:\n  operations[0].delete: no pdr 9 (pdr 9)" {
		t.Errorf("error = %q", e)
	}
	e = c.Err("get pdrs", status.Error(codes.Unauthenticated, "missing or invalid bearer token"))
	if !strings.HasSuffix(e.Error(), "(give --token or set "+TokenEnv+")") {
		t.Errorf("error = %q", e)
	}
}

func fieldStatus(t *testing.T, code codes.Code, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "f", Description: "d"}}})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// oldAgent is the API of an agent that predates LBRs, services, QoS
// classes, FlowOpt modules and strategies.
type oldAgent struct {
	pb.GatewayClient
}

func (oldAgent) ListInterfaces(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListInterfacesResponse, error) {
	return &pb.ListInterfacesResponse{}, nil
}

func (oldAgent) ListPaths(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListPathsResponse, error) {
	return &pb.ListPathsResponse{}, nil
}

func (oldAgent) ListFars(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListFarsResponse, error) {
	return &pb.ListFarsResponse{Fars: []*pb.Far{{Id: 1, Action: "pass"}}}, nil
}

func (oldAgent) ListPdrs(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListPdrsResponse, error) {
	return &pb.ListPdrsResponse{}, nil
}

func (oldAgent) ListLbrs(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListLbrsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method ListLbrs")
}

func (oldAgent) ListServices(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListServicesResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method ListServices")
}

func (oldAgent) ListQosClasses(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListQosClassesResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method ListQosClasses")
}

func (oldAgent) ListFlowOpt(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListFlowOptResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method ListFlowOpt")
}

func (oldAgent) ListStrategies(context.Context, *pb.ListRequest, ...grpc.CallOption) (*pb.ListStrategiesResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method ListStrategies")
}

func TestListAllOldAgent(t *testing.T) {
	c := &Conn{GatewayClient: oldAgent{}, Ctx: context.Background(), flags: &Flags{Server: DefaultServer, Timeout: time.Second}}
	o, err := c.ListAll(schema, "apply")
	if err != nil || len(o[config.KindFAR]) != 1 || len(o[config.KindLBR])+len(o[config.KindService])+len(o[config.KindQoSClass])+len(o[config.KindFlowOpt])+len(o[config.KindStrategy]) != 0 {
		t.Errorf("listAll = %+v, %v; want far 1 and no lbrs, services, qos classes, flowopt modules or strategies", o, err)
	}
}

// gadget is a kind the config could declare and the API does not carry.
type gadget struct {
	ID uint32 `yaml:"id"`
}

// TestParseKindNotInAPI refuses a kind the API does not carry, as any
// unknown kind: never taken for another.
func TestParseKindNotInAPI(t *testing.T) {
	s := config.Builtin().With(&config.KindOf[gadget]{Kind: "gadget", Plural: "gadgets", KeyField: "id"})
	if k, ok := s.Lookup("gadgets"); !ok || k != "gadget" {
		t.Fatalf("schema lacks gadgets")
	}
	const want = `unknown kind "gadgets" (want pdrs, strategies, flowopt, qos_classes, services, lbrs, fars, paths or interfaces)`
	if _, err := ParseKind(s, "gadgets"); err == nil || err.Error() != want {
		t.Errorf("ParseKind(gadgets) = %v, want %s", err, want)
	}
}

// TestWriteTableKeyOnly: a kind declared without a table is listed by
// its key, as given (T or *T).
func TestWriteTableKeyOnly(t *testing.T) {
	s := config.Builtin().With(&config.KindOf[gadget]{Kind: "gadget", Plural: "gadgets", KeyField: "id"})
	var b bytes.Buffer
	if err := WriteTable(&b, s, "gadget", []any{gadget{ID: 3}, &gadget{ID: 12}}); err != nil {
		t.Fatal(err)
	}
	if want := "ID\n3\n12\n"; b.String() != want {
		t.Errorf("table %q, want %q", b.String(), want)
	}
}
