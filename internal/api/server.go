// SPDX-License-Identifier: Apache-2.0

// Package api serves the edgeplane.v1 control API over gRPC and, mapped
// from the same definitions by grpc-gateway, over REST/JSON, with bearer
// token auth on both. It turns a batch of operations into the next
// config, and hands that to its Backend (the agent), which validates,
// compiles and commits it as one rules generation and persists it.
package api

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// MaxOperations bounds one Apply batch.
const MaxOperations = 100_000

// Backend is what the API drives: the agent.
type Backend interface {
	// Config returns the config now serving. The caller must not modify
	// what it points to.
	Config() *config.Config
	// View runs fn on the store that serves, which must not change while
	// fn runs: lookups by id cost what one object does, not the config.
	View(fn func(*config.Store))
	// Apply applies a batch of operations, all or nothing: it checks
	// what the batch touches, compiles it and commits it as the next
	// generation (dryRun: checks and compiles only), then persists rec,
	// the ApplyRequest that made it (protojson), which Ops turns back
	// into operations for a replay. A config.Errors error names every
	// problem at its operation's path, classified by FieldError.Code.
	Apply(ops []config.Op, dryRun bool, rec []byte) (gen uint32, err error)
	// Snapshot reads the dataplane's counters.
	Snapshot() (*bpf.Snapshot, error)
	// Flows reads the top n flows by bytes (all when n is 0), with
	// ingress interfaces named.
	Flows(n int) ([]bpf.FlowStat, map[uint32]string, error)
}

// Server implements edgeplanev1.GatewayServer over a Backend.
type Server struct {
	pb.UnimplementedGatewayServer
	b Backend
}

// NewServer returns a Server driving b.
func NewServer(b Backend) *Server {
	return &Server{b: b}
}

// Apply implements edgeplanev1.GatewayServer.
func (s *Server) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	if n := len(req.GetOperations()); n == 0 {
		return nil, status.Error(codes.InvalidArgument, "operations: empty batch")
	} else if n > MaxOperations {
		return nil, status.Errorf(codes.InvalidArgument, "operations: %d operations, at most %d per batch", n, MaxOperations)
	}
	start := time.Now()
	ops, err := Ops(req.GetOperations())
	if err != nil {
		return nil, err
	}
	var rec []byte
	if !req.GetDryRun() {
		if rec, err = protojson.Marshal(req); err != nil {
			return nil, status.Errorf(codes.Internal, "record the batch: %v", err)
		}
	}
	gen, err := s.b.Apply(ops, req.GetDryRun(), rec)
	if err != nil {
		return nil, applyStatus(err)
	}
	return &pb.ApplyResponse{Generation: gen, CommitMicros: uint64(time.Since(start).Microseconds())}, nil
}

// Ops turns a batch's operations into the config model's, each at its
// path ("operations[7].create.pdr"); its error is a gRPC status naming
// every field that does not convert. The agent replays its journal with
// it.
func Ops(in []*pb.Operation) ([]config.Op, error) {
	ops := make([]config.Op, len(in))
	var fe config.Errors
	for i, op := range in {
		opPath := "operations[" + strconv.Itoa(i) + "]"
		o := &ops[i]
		switch x := op.GetOp().(type) {
		case *pb.Operation_Create, *pb.Operation_Update:
			var obj *pb.Object
			verb := "create"
			if c, ok := x.(*pb.Operation_Create); ok {
				obj, o.Verb = c.Create, config.Create
			} else {
				obj, o.Verb, verb = x.(*pb.Operation_Update).Update, config.Update, "update"
			}
			base := opPath + "." + verb
			f := &fieldErrs{}
			switch k := obj.GetKind().(type) {
			case *pb.Object_Interface:
				f.prefix, o.Kind = base+".interface", config.KindInterface
				o.Interface = InterfaceFromPB(k.Interface)
			case *pb.Object_Path:
				f.prefix, o.Kind = base+".path", config.KindPath
				o.Path = pathFromPB(k.Path, f)
			case *pb.Object_Far:
				f.prefix, o.Kind = base+".far", config.KindFAR
				o.FAR = farFromPB(k.Far, f)
			case *pb.Object_Pdr:
				f.prefix, o.Kind = base+".pdr", config.KindPDR
				o.PDR = pdrFromPB(k.Pdr, f)
			case *pb.Object_Lbr:
				f.prefix, o.Kind = base+".lbr", config.KindLBR
				o.LBR = LBRFromPB(k.Lbr)
			case *pb.Object_Service:
				f.prefix, o.Kind = base+".service", config.KindService
				o.Service = serviceFromPB(k.Service, f)
			default:
				fe = append(fe, config.FieldError{Path: base, Reason: "no object (want one of interface, path, far, pdr, lbr, service)"})
				continue
			}
			o.At = f.prefix
			fe = append(fe, f.errs...)
		case *pb.Operation_Delete:
			ref := x.Delete
			o.At, o.Verb = opPath+".delete", config.Delete
			switch ref.GetKind() {
			case pb.Kind_KIND_INTERFACE:
				o.Kind, o.Name = config.KindInterface, ref.GetName()
			case pb.Kind_KIND_PATH:
				o.Kind, o.ID = config.KindPath, ref.GetId()
			case pb.Kind_KIND_FAR:
				o.Kind, o.ID = config.KindFAR, ref.GetId()
			case pb.Kind_KIND_PDR:
				o.Kind, o.ID = config.KindPDR, ref.GetId()
			case pb.Kind_KIND_LBR:
				o.Kind, o.ID = config.KindLBR, ref.GetId()
			case pb.Kind_KIND_SERVICE:
				o.Kind, o.ID = config.KindService, ref.GetId()
			default:
				fe = append(fe, config.FieldError{Path: o.At + ".kind", Reason: "must be one of KIND_INTERFACE, KIND_PATH, KIND_FAR, KIND_PDR, KIND_LBR, KIND_SERVICE"})
			}
		default:
			fe = append(fe, config.FieldError{Path: opPath, Reason: "no operation (want one of create, update, delete)"})
		}
	}
	if len(fe) > 0 {
		return nil, fieldStatus(codes.InvalidArgument, fe)
	}
	return ops, nil
}

// applyStatus turns a Backend.Apply error into a gRPC status: the code of
// the first error that is not about capacity, or ResourceExhausted when
// all are.
func applyStatus(err error) error {
	var fe config.Errors
	if !errors.As(err, &fe) {
		var one config.FieldError
		if !errors.As(err, &one) {
			return status.Errorf(codes.Internal, "commit: %v", err)
		}
		fe = config.Errors{one}
	}
	code := codes.ResourceExhausted
	for _, e := range fe {
		if e.Code != config.CodeCapacity {
			code = grpcCode[e.Code]
			break
		}
	}
	return fieldStatus(code, fe)
}

var grpcCode = map[config.ErrorCode]codes.Code{
	config.CodeInvalid:  codes.InvalidArgument,
	config.CodeCapacity: codes.ResourceExhausted,
	config.CodeExists:   codes.AlreadyExists,
	config.CodeNotFound: codes.NotFound,
	config.CodeInUse:    codes.FailedPrecondition,
}

// fieldStatus is a status with every field error in the message (one per
// line, "path: reason") and as google.rpc.BadRequest field violations.
func fieldStatus(code codes.Code, fe config.Errors) error {
	st := status.New(code, fe.Error())
	br := &errdetails.BadRequest{}
	for _, e := range fe {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: e.Path, Description: e.Reason})
	}
	if d, err := st.WithDetails(br); err == nil {
		return d.Err()
	}
	return st.Err()
}

// lookup answers a Get: the object look finds in the serving store, or
// NotFound with the message format and its argument.
func lookup[T, P any](s *Server, look func(*config.Store) (T, bool), toPB func(T) P, format string, arg any) (P, error) {
	var v T
	var ok bool
	s.b.View(func(st *config.Store) { v, ok = look(st) })
	if !ok {
		var zero P
		return zero, status.Errorf(codes.NotFound, format, arg)
	}
	return toPB(v), nil
}

// ListInterfaces implements edgeplanev1.GatewayServer.
func (s *Server) ListInterfaces(context.Context, *pb.ListRequest) (*pb.ListInterfacesResponse, error) {
	out := &pb.ListInterfacesResponse{}
	var list []config.Interface
	s.b.View(func(st *config.Store) { list = st.Interfaces() })
	for _, v := range list {
		out.Interfaces = append(out.Interfaces, InterfaceToPB(v))
	}
	return out, nil
}

// GetInterface implements edgeplanev1.GatewayServer.
func (s *Server) GetInterface(_ context.Context, req *pb.GetByNameRequest) (*pb.Interface, error) {
	return lookup(s, func(st *config.Store) (config.Interface, bool) { return st.Interface(req.GetName()) },
		InterfaceToPB, "no interface %q", req.GetName())
}

// ListPaths implements edgeplanev1.GatewayServer.
func (s *Server) ListPaths(context.Context, *pb.ListRequest) (*pb.ListPathsResponse, error) {
	out := &pb.ListPathsResponse{}
	for _, v := range s.b.Config().Paths {
		out.Paths = append(out.Paths, PathToPB(v))
	}
	return out, nil
}

// GetPath implements edgeplanev1.GatewayServer.
func (s *Server) GetPath(_ context.Context, req *pb.GetByIDRequest) (*pb.Path, error) {
	return lookup(s, func(st *config.Store) (config.Path, bool) { return st.Path(req.GetId()) },
		PathToPB, "no path %d", req.GetId())
}

// ListFars implements edgeplanev1.GatewayServer.
func (s *Server) ListFars(context.Context, *pb.ListRequest) (*pb.ListFarsResponse, error) {
	out := &pb.ListFarsResponse{}
	for _, v := range s.b.Config().FARs {
		out.Fars = append(out.Fars, FARToPB(v))
	}
	return out, nil
}

// GetFar implements edgeplanev1.GatewayServer.
func (s *Server) GetFar(_ context.Context, req *pb.GetByIDRequest) (*pb.Far, error) {
	return lookup(s, func(st *config.Store) (config.FAR, bool) { return st.FAR(req.GetId()) },
		FARToPB, "no far %d", req.GetId())
}

// ListPdrs implements edgeplanev1.GatewayServer.
func (s *Server) ListPdrs(context.Context, *pb.ListRequest) (*pb.ListPdrsResponse, error) {
	out := &pb.ListPdrsResponse{}
	for _, v := range s.b.Config().PDRs {
		out.Pdrs = append(out.Pdrs, PDRToPB(v))
	}
	return out, nil
}

// GetPdr implements edgeplanev1.GatewayServer.
func (s *Server) GetPdr(_ context.Context, req *pb.GetByIDRequest) (*pb.Pdr, error) {
	return lookup(s, func(st *config.Store) (config.PDR, bool) { return st.PDR(req.GetId()) },
		PDRToPB, "no pdr %d", req.GetId())
}

// ListLbrs implements edgeplanev1.GatewayServer.
func (s *Server) ListLbrs(context.Context, *pb.ListRequest) (*pb.ListLbrsResponse, error) {
	out := &pb.ListLbrsResponse{}
	for _, v := range s.b.Config().LBRs {
		out.Lbrs = append(out.Lbrs, LBRToPB(v))
	}
	return out, nil
}

// GetLbr implements edgeplanev1.GatewayServer.
func (s *Server) GetLbr(_ context.Context, req *pb.GetByIDRequest) (*pb.Lbr, error) {
	return lookup(s, func(st *config.Store) (config.LBR, bool) { return st.LBR(req.GetId()) },
		LBRToPB, "no lbr %d", req.GetId())
}

// ListServices implements edgeplanev1.GatewayServer.
func (s *Server) ListServices(context.Context, *pb.ListRequest) (*pb.ListServicesResponse, error) {
	out := &pb.ListServicesResponse{}
	for _, v := range s.b.Config().Services {
		out.Services = append(out.Services, ServiceToPB(v))
	}
	return out, nil
}

// GetService implements edgeplanev1.GatewayServer.
func (s *Server) GetService(_ context.Context, req *pb.GetByIDRequest) (*pb.Service, error) {
	return lookup(s, func(st *config.Store) (config.Service, bool) { return st.Service(req.GetId()) },
		ServiceToPB, "no service %d", req.GetId())
}

// GetStats implements edgeplanev1.GatewayServer.
func (s *Server) GetStats(context.Context, *pb.GetStatsRequest) (*pb.Stats, error) {
	snap, err := s.b.Snapshot()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read counters: %v", err)
	}
	return statsToPB(snap), nil
}

// ListFlows implements edgeplanev1.GatewayServer.
func (s *Server) ListFlows(_ context.Context, req *pb.ListFlowsRequest) (*pb.ListFlowsResponse, error) {
	flows, names, err := s.b.Flows(int(req.GetTop()))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read flows: %v", err)
	}
	out := &pb.ListFlowsResponse{}
	for _, f := range flows {
		pf := &pb.Flow{Src: f.Src.String(), Dst: f.Dst.String(), Proto: config.Proto{Num: f.Proto, Set: true}.String(),
			Sport: uint32(f.Sport), Dport: uint32(f.Dport), In: names[f.Ifindex], Dscp: uint32(f.DSCP),
			Pdr: f.PDR, Live: f.Live, Packets: f.Packets, Bytes: f.Bytes}
		if pf.In == "" {
			pf.In = fmt.Sprintf("ifindex %d", f.Ifindex)
		}
		if f.HasGREKey {
			k := f.GREKey
			pf.GreKey = &k
		}
		out.Flows = append(out.Flows, pf)
	}
	return out, nil
}
