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
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// MaxOperations bounds one Apply batch.
const MaxOperations = 100_000

// ListFlows bounds: top 0 asks for DefaultFlows, and no call gets more
// than MaxFlows. Without them one call would return the whole flow
// cache (millions of entries, hundreds of MB of response).
const (
	DefaultFlows = 100
	MaxFlows     = 10_000
)

// Backend is what the API drives, an agent or a controller: the
// objects and the batches that change them. What else a backend serves
// it has as further interfaces, which NewServer looks for: an agent's
// dataplane (dataplane.Counters, dataplane.Paths, dataplane.Strategies)
// and a controller's Fleet. A call for a part the backend lacks is
// refused with FailedPrecondition.
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
	// the ApplyRequest that made it (protobuf wire format, proto.Marshal),
	// which Ops turns back into operations for a replay. A config.Errors error names every
	// problem at its operation's path, classified by FieldError.Code.
	Apply(ops []config.Op, dryRun bool, rec []byte) (gen uint32, err error)
}

// SyncedBackend is what a Backend that journals its batches adds (an
// agent): Apply, that also says how long the journal's sync took that
// made the batch durable (ApplyResponse.sync_micros). NewServer prefers
// it to Backend.Apply.
type SyncedBackend interface {
	ApplySynced(ops []config.Op, dryRun bool, rec []byte) (gen uint32, sync time.Duration, err error)
}

// Fleet is what a controller's Backend adds: objects kept per Target,
// and the gateways that take them. Its View and Apply are those of the
// target that names all gateways.
type Fleet interface {
	// ViewTarget runs fn on the store of t's objects.
	ViewTarget(t *pb.Target, fn func(*config.Store)) error
	// ApplyTo applies a batch to t's objects, as Backend.Apply does to
	// an agent's, and returns the etcd revision that holds it.
	ApplyTo(t *pb.Target, ops []config.Op, dryRun bool) (rev uint64, err error)
	// Gateways lists the gateways whose labels hold selector's pairs.
	Gateways(selector map[string]string) ([]*pb.GatewayStatus, error)
}

// ErrNoDataplane is why a backend without a dataplane (a controller)
// refuses what only a gateway's dataplane knows (counters, flows, path
// and CPU status).
var ErrNoDataplane = errors.New("a controller has no dataplane: ask a gateway (edgeplane get gateways lists them)")

// Server implements edgeplanev1.GatewayServer over a Backend.
type Server struct {
	pb.UnimplementedGatewayServer
	b Backend
	// The parts of b it has, nil where it has none.
	counters   dataplane.Counters
	paths      dataplane.Paths
	strategies dataplane.Strategies
	sessions   dataplane.Sessions
	fleet      Fleet         // a controller's
	synced     SyncedBackend // an agent's
}

// NewServer returns a Server driving b and whichever of the further
// parts Backend names b has.
func NewServer(b Backend) *Server {
	s := &Server{b: b}
	s.counters, _ = b.(dataplane.Counters)
	s.paths, _ = b.(dataplane.Paths)
	s.strategies, _ = b.(dataplane.Strategies)
	s.sessions, _ = b.(dataplane.Sessions)
	s.fleet, _ = b.(Fleet)
	s.synced, _ = b.(SyncedBackend)
	return s
}

// errNoDataplane refuses a call for what only a dataplane knows.
var errNoDataplane = status.Error(codes.FailedPrecondition, ErrNoDataplane.Error())

// noTarget reports whether t names no gateway (nil or empty): at an
// agent, the agent itself; at a controller, all gateways.
func noTarget(t *pb.Target) bool {
	return t.GetGateway() == "" && len(t.GetSelector()) == 0
}

// errAgentTarget refuses a target at an agent.
var errAgentTarget = status.Error(codes.InvalidArgument, "target: an agent serves only itself; targets are for a controller (edgeplane controller)")

// view runs fn on the store of target t: the agent's own (t empty), or a
// controller's per-target store.
func (s *Server) view(t *pb.Target, fn func(*config.Store)) error {
	if s.fleet != nil {
		if err := s.fleet.ViewTarget(t, fn); err != nil {
			return applyStatus(err)
		}
		return nil
	}
	if !noTarget(t) {
		return errAgentTarget
	}
	s.b.View(fn)
	return nil
}

// Apply implements edgeplanev1.GatewayServer.
func (s *Server) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	if n := len(req.GetOperations()); n == 0 {
		return nil, status.Error(codes.InvalidArgument, "operations: empty batch")
	} else if n > MaxOperations {
		// boundedCodec decodes at most one operation more than this.
		return nil, status.Errorf(codes.InvalidArgument, "operations: more than %d operations in one batch", MaxOperations)
	}
	start := time.Now()
	ops, err := Ops(req.GetOperations())
	if err != nil {
		return nil, err
	}
	var rec []byte
	if !req.GetDryRun() {
		if rec, err = proto.Marshal(req); err != nil {
			return nil, status.Errorf(codes.Internal, "record the batch: %v", err)
		}
	}
	if s.fleet != nil {
		rev, err := s.fleet.ApplyTo(req.GetTarget(), ops, req.GetDryRun())
		if err != nil {
			return nil, applyStatus(err)
		}
		return &pb.ApplyResponse{Revision: rev, CommitMicros: uint64(time.Since(start).Microseconds())}, nil
	}
	if !noTarget(req.GetTarget()) {
		return nil, errAgentTarget
	}
	var gen uint32
	var synced time.Duration
	if s.synced != nil {
		gen, synced, err = s.synced.ApplySynced(ops, req.GetDryRun(), rec)
	} else {
		gen, err = s.b.Apply(ops, req.GetDryRun(), rec)
	}
	if err != nil {
		return nil, applyStatus(err)
	}
	return &pb.ApplyResponse{Generation: gen, CommitMicros: uint64(time.Since(start).Microseconds()), SyncMicros: uint64(synced.Microseconds())}, nil
}

// Ops turns a batch's operations into the config model's, each at its
// path ("operations[7].create.pdr"); its error is a gRPC status naming
// every field that does not convert. The agent replays its journal with
// it.
func Ops(in []*pb.Operation) ([]config.Op, error) {
	schema := config.Builtin()
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
			k, m, ok := ObjectMessage(obj)
			if !ok || !schema.Has(k) {
				fe = append(fe, config.FieldError{Path: base, Reason: "no object (want one of " + strings.Join(KindNames(), ", ") + ")"})
				continue
			}
			o.At, o.Kind = base+"."+string(k), k
			var errs config.Errors
			o.Object, errs = FromPB(schema, k, m, o.At)
			fe = append(fe, errs...)
		case *pb.Operation_Delete:
			ref := x.Delete
			o.At, o.Verb = opPath+".delete", config.Delete
			k, ok := refKind(schema, ref.GetKind())
			if !ok {
				var names []string
				for _, n := range KindNames() {
					names = append(names, "KIND_"+strings.ToUpper(n))
				}
				fe = append(fe, config.FieldError{Path: o.At + ".kind", Reason: "must be one of " + strings.Join(names, ", ")})
				continue
			}
			o.Kind, o.Name, o.ID = k, ref.GetName(), ref.GetId()
		default:
			fe = append(fe, config.FieldError{Path: opPath, Reason: "no operation (want one of create, update, delete)"})
		}
	}
	if len(fe) > 0 {
		return nil, fieldStatus(codes.InvalidArgument, fe)
	}
	return ops, nil
}

// refKind returns the config kind a Kind enum value names (KIND_PDR:
// pdr).
func refKind(s *config.Schema, k pb.Kind) (config.Kind, bool) {
	name, ok := strings.CutPrefix(k.String(), "KIND_")
	if !ok || k == pb.Kind_KIND_UNSPECIFIED {
		return "", false
	}
	kind, ok := s.Lookup(name)
	return kind, ok && Carries(kind)
}

// KindRef returns the Kind enum value of config kind k.
func KindRef(k config.Kind) pb.Kind {
	return pb.Kind(pb.Kind_value["KIND_"+strings.ToUpper(string(k))])
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

// list answers a List: every object of kind k the serving store holds,
// in R, the kind's list response (one repeated field).
func list[R proto.Message](s *Server, t *pb.Target, k config.Kind) (R, error) {
	var objs []any
	var zero R
	if err := s.view(t, func(st *config.Store) { objs = st.List(k) }); err != nil {
		return zero, err
	}
	m := zero.ProtoReflect().Type().New()
	fd := m.Descriptor().Fields().Get(0)
	l := m.Mutable(fd).List()
	for _, o := range objs {
		l.Append(protoreflect.ValueOfMessage(ToPB(k, o).ProtoReflect()))
	}
	return m.Interface().(R), nil
}

// get answers a Get: the object of kind k with key, or NotFound.
func get[P proto.Message](s *Server, t *pb.Target, k config.Kind, key config.Key) (P, error) {
	var obj any
	var ok bool
	var zero P
	if err := s.view(t, func(st *config.Store) { obj, ok = st.Get(k, key) }); err != nil {
		return zero, err
	}
	if !ok {
		if key.ID == 0 {
			return zero, status.Errorf(codes.NotFound, "no %s %q", k, key.Name)
		}
		return zero, status.Errorf(codes.NotFound, "no %s %d", k, key.ID)
	}
	return ToPB(k, obj).(P), nil
}

// The List and Get methods of each kind the API carries are generated
// (kinds_gen.go, by kindgen): each a line over list and get.

// GetStats implements edgeplanev1.GatewayServer.
func (s *Server) GetStats(context.Context, *pb.GetStatsRequest) (*pb.Stats, error) {
	if s.counters == nil {
		return nil, errNoDataplane
	}
	snap, err := s.counters.Snapshot()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read counters: %v", err)
	}
	return statsToPB(snap), nil
}

// ListFlows implements edgeplanev1.GatewayServer.
func (s *Server) ListFlows(_ context.Context, req *pb.ListFlowsRequest) (*pb.ListFlowsResponse, error) {
	top := int(req.GetTop())
	switch {
	case top == 0:
		top = DefaultFlows
	case top > MaxFlows:
		return nil, status.Errorf(codes.InvalidArgument, "top: %d, at most %d", top, MaxFlows)
	}
	if s.counters == nil {
		return nil, errNoDataplane
	}
	flows, names, err := s.counters.Flows(top)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read flows: %v", err)
	}
	out := &pb.ListFlowsResponse{}
	for _, f := range flows {
		pf := &pb.Flow{Src: f.Src.String(), Dst: f.Dst.String(), Proto: config.Proto{Num: f.Proto, Set: true}.String(),
			Sport: uint32(f.Sport), Dport: uint32(f.Dport), In: names[f.Ifindex], Dscp: uint32(f.DSCP),
			Pdr: f.PDR, Live: f.Live, Packets: f.Packets, Bytes: f.Bytes,
			RttUs: f.RTTUs, MinRttUs: f.MinRTTUs, RttSamples: f.RTTSamples, RateBps: uint64(f.Rate) * 8, Congested: f.Congested}
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

// ListStrategyStatus implements edgeplanev1.GatewayServer.
func (s *Server) ListStrategyStatus(context.Context, *pb.ListRequest) (*pb.ListStrategyStatusResponse, error) {
	if s.strategies == nil {
		return nil, errNoDataplane
	}
	return &pb.ListStrategyStatusResponse{Strategies: strategyStatusToPB(s.strategies.StrategyStatus())}, nil
}

// Pages of ListSessions: its default and largest.
const (
	SessionsPage    = 1000
	MaxSessionsPage = 10000
)

// ListSessions implements edgeplanev1.GatewayServer.
func (s *Server) ListSessions(_ context.Context, r *pb.ListSessionsRequest) (*pb.ListSessionsResponse, error) {
	if s.sessions == nil {
		return nil, errNoDataplane
	}
	// A page at a time: 100,000 sessions in one answer would be ~800,000
	// counter reads and past gRPC's 4 MiB message.
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = SessionsPage
	}
	if limit > MaxSessionsPage {
		return nil, status.Errorf(codes.InvalidArgument, "limit %d: at most %d sessions a page", limit, MaxSessionsPage)
	}
	list, next, ok, err := s.sessions.SessionStatus(dataplane.SessionQuery{UPSEIDs: r.GetUpSeid(), After: r.GetAfter(), Limit: limit})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "no user plane runs here: the agent carries sessions with --n4-addr and --n3-addr")
	}
	out := &pb.ListSessionsResponse{Next: next}
	for _, ss := range list {
		ps := &pb.Session{UpSeid: ss.UPSEID, CpSeid: ss.CPSEID, CpAddr: ss.CPAddr, CpNode: ss.CPNode}
		for _, p := range ss.PDRs {
			dir := "downlink"
			if p.Uplink {
				dir = "uplink"
			}
			sp := &pb.SessionPdr{Id: uint32(p.ID), Precedence: p.Precedence, Direction: dir, Teid: p.TEID,
				UeIp: p.UEIP, Qfi: uint32(p.QFI), Sdf: p.SDF, Far: p.FAR, Action: p.Action, GateClosed: p.GateClosed,
				OuterTeid: p.OuterTEID, OuterAddr: p.OuterAddr, Packets: p.Packets, Bytes: p.Bytes,
				Mar: uint32(p.MAR), Steering: p.Steering}
			for _, a := range p.Accesses {
				sp.Accesses = append(sp.Accesses, &pb.SessionAccess{Far: a.FAR, OuterTeid: a.OuterTEID, OuterAddr: a.OuterAddr,
					Up: a.Up, RttUs: uint32(a.RTT.Microseconds()), Preferred: a.Preferred})
			}
			ps.Pdrs = append(ps.Pdrs, sp)
		}
		out.Sessions = append(out.Sessions, ps)
	}
	return out, nil
}

// ListPathStatus implements edgeplanev1.GatewayServer.
func (s *Server) ListPathStatus(context.Context, *pb.ListRequest) (*pb.ListPathStatusResponse, error) {
	if s.paths == nil {
		return nil, errNoDataplane
	}
	return &pb.ListPathStatusResponse{Paths: pathStatusToPB(s.paths.PathStatus())}, nil
}

// ListGateways implements edgeplanev1.GatewayServer.
func (s *Server) ListGateways(_ context.Context, req *pb.ListRequest) (*pb.ListGatewaysResponse, error) {
	if s.fleet == nil {
		return nil, status.Error(codes.FailedPrecondition, "this is an agent, not a controller: it lists no gateways (edgeplane controller does)")
	}
	if req.GetTarget().GetGateway() != "" {
		return nil, status.Error(codes.InvalidArgument, "target.gateway: gateways are listed by selector")
	}
	gws, err := s.fleet.Gateways(req.GetTarget().GetSelector())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read the gateways from etcd: %v", err)
	}
	return &pb.ListGatewaysResponse{Gateways: gws}, nil
}
