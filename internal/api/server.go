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
	"slices"
	"strings"
	"sync"
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
	// Commit validates cfg against the host, compiles it and commits it
	// as the next generation (dryRun: only validates), then persists rec,
	// the ApplyRequest that made cfg (protojson), which ApplyOps replays
	// on the config that was serving. A config.Errors error names every
	// bad field; errors for full maps carry FieldError.Capacity.
	Commit(cfg *config.Config, dryRun bool, rec []byte) (gen uint32, err error)
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
	// mu serialises Applies: each builds on the config the previous one
	// committed.
	mu sync.Mutex
}

// NewServer returns a Server driving b.
func NewServer(b Backend) *Server {
	return &Server{b: b}
}

// origin records which operation put an object into the next config, to
// report errors at the operation's path.
type origin map[string]string // "pdrs[3]" -> "operations[7].create.pdr"

// Apply implements edgeplanev1.GatewayServer.
func (s *Server) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	if n := len(req.GetOperations()); n == 0 {
		return nil, status.Error(codes.InvalidArgument, "operations: empty batch")
	} else if n > MaxOperations {
		return nil, status.Errorf(codes.InvalidArgument, "operations: %d operations, at most %d per batch", n, MaxOperations)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	cur := s.b.Config()
	next, orig, err := applyOps(cur, req.GetOperations())
	if err != nil {
		return nil, err
	}
	var rec []byte
	if !req.GetDryRun() {
		if rec, err = protojson.Marshal(req); err != nil {
			return nil, status.Errorf(codes.Internal, "record the batch: %v", err)
		}
	}
	gen, err := s.b.Commit(next, req.GetDryRun(), rec)
	if err != nil {
		return nil, commitStatus(err, orig)
	}
	return &pb.ApplyResponse{Generation: gen, CommitMicros: uint64(time.Since(start).Microseconds())}, nil
}

// ApplyOps returns cur with ops applied, as Apply would before
// committing; its error is a gRPC status. The agent replays its journal
// with it.
func ApplyOps(cur *config.Config, ops []*pb.Operation) (*config.Config, error) {
	next, _, err := applyOps(cur, ops)
	return next, err
}

// kinds of the config, with their list names in config paths.
const (
	listInterfaces = "interfaces"
	listPaths      = "paths"
	listFARs       = "fars"
	listPDRs       = "pdrs"
)

// applyOps returns cur with ops applied in order, and where each object
// of the result came from. cur is not modified.
func applyOps(cur *config.Config, ops []*pb.Operation) (*config.Config, origin, error) {
	next := *cur
	ifs := newKeyed(cur.Interfaces, func(x config.Interface) string { return x.Name })
	paths := newKeyed(cur.Paths, func(x config.Path) uint32 { return x.ID })
	fars := newKeyed(cur.FARs, func(x config.FAR) uint32 { return x.ID })
	pdrs := newKeyed(cur.PDRs, func(x config.PDR) uint32 { return x.ID })
	// Where each object came from, by kind and key, then turned into
	// list indexes once the lists are final.
	from := map[string]string{}
	var fe config.Errors
	var code codes.Code = codes.InvalidArgument
	fail := func(c codes.Code, path, format string, a ...any) {
		if len(fe) == 0 {
			code = c
		}
		fe = append(fe, config.FieldError{Path: path, Reason: fmt.Sprintf(format, a...)})
	}
	for i, op := range ops {
		opPath := fmt.Sprintf("operations[%d]", i)
		switch o := op.GetOp().(type) {
		case *pb.Operation_Create, *pb.Operation_Update:
			var obj *pb.Object
			verb := "create"
			if c, ok := o.(*pb.Operation_Create); ok {
				obj = c.Create
			} else {
				obj = o.(*pb.Operation_Update).Update
				verb = "update"
			}
			create := verb == "create"
			base := opPath + "." + verb
			f := &fieldErrs{}
			var key, list string
			var exists bool
			switch k := obj.GetKind().(type) {
			case *pb.Object_Interface:
				f.prefix = base + ".interface"
				v := InterfaceFromPB(k.Interface)
				list, key = listInterfaces, v.Name
				exists = ifs.upsert(v.Name, v, create)
			case *pb.Object_Path:
				f.prefix = base + ".path"
				v := pathFromPB(k.Path, f)
				list, key = listPaths, fmt.Sprint(v.ID)
				exists = paths.upsert(v.ID, v, create)
			case *pb.Object_Far:
				f.prefix = base + ".far"
				v := FARFromPB(k.Far)
				list, key = listFARs, fmt.Sprint(v.ID)
				exists = fars.upsert(v.ID, v, create)
			case *pb.Object_Pdr:
				f.prefix = base + ".pdr"
				v := pdrFromPB(k.Pdr, f)
				list, key = listPDRs, fmt.Sprint(v.ID)
				exists = pdrs.upsert(v.ID, v, create)
			default:
				fail(codes.InvalidArgument, base, "no object (want one of interface, path, far, pdr)")
				continue
			}
			fe = append(fe, f.errs...)
			switch {
			case create && exists:
				fail(codes.AlreadyExists, f.prefix, "%s %s exists; use update", singular(list), key)
			case !create && !exists:
				fail(codes.NotFound, f.prefix, "no %s %s; use create", singular(list), key)
			}
			from[list+"/"+key] = f.prefix
		case *pb.Operation_Delete:
			ref := o.Delete
			path := opPath + ".delete"
			var found bool
			var list, key string
			switch ref.GetKind() {
			case pb.Kind_KIND_INTERFACE:
				list, key = listInterfaces, ref.GetName()
				found = ifs.remove(key)
			case pb.Kind_KIND_PATH:
				list, key = listPaths, fmt.Sprint(ref.GetId())
				found = paths.remove(ref.GetId())
			case pb.Kind_KIND_FAR:
				list, key = listFARs, fmt.Sprint(ref.GetId())
				found = fars.remove(ref.GetId())
			case pb.Kind_KIND_PDR:
				list, key = listPDRs, fmt.Sprint(ref.GetId())
				found = pdrs.remove(ref.GetId())
			default:
				fail(codes.InvalidArgument, path+".kind", "must be one of KIND_INTERFACE, KIND_PATH, KIND_FAR, KIND_PDR")
				continue
			}
			if !found {
				fail(codes.NotFound, path, "no %s %s", singular(list), key)
			}
			from[list+"/"+key] = path
		default:
			fail(codes.InvalidArgument, opPath, "no operation (want one of create, update, delete)")
		}
	}
	if len(fe) > 0 {
		return nil, nil, fieldStatus(code, fe)
	}
	next.Interfaces, next.Paths, next.FARs, next.PDRs = ifs.list(), paths.list(), fars.list(), pdrs.list()
	// Objects left referring to something a delete removed: report it at
	// the delete.
	for _, e := range danglingRefs(&next) {
		if p, ok := from[e.target]; ok && strings.HasSuffix(p, ".delete") {
			fe = append(fe, config.FieldError{Path: p, Reason: fmt.Sprintf("%s is still used by %s", e.targetName, e.user)})
		}
	}
	if len(fe) > 0 {
		return nil, nil, fieldStatus(codes.FailedPrecondition, fe)
	}
	// Defaults filled in as when a config file is loaded: what is stored,
	// served back and persisted is the same whichever way it came.
	next.Normalize()
	orig := origin{}
	index := func(list string, n int, key func(int) string) {
		for i := range n {
			if p, ok := from[list+"/"+key(i)]; ok {
				orig[fmt.Sprintf("%s[%d]", list, i)] = p
			}
		}
	}
	index(listInterfaces, len(next.Interfaces), func(i int) string { return next.Interfaces[i].Name })
	index(listPaths, len(next.Paths), func(i int) string { return fmt.Sprint(next.Paths[i].ID) })
	index(listFARs, len(next.FARs), func(i int) string { return fmt.Sprint(next.FARs[i].ID) })
	index(listPDRs, len(next.PDRs), func(i int) string { return fmt.Sprint(next.PDRs[i].ID) })
	return &next, orig, nil
}

func singular(list string) string {
	switch list {
	case listInterfaces:
		return "interface"
	case listPaths:
		return "path"
	case listFARs:
		return "far"
	}
	return "pdr"
}

// keyed is a list of objects indexed by key, edited by a batch in O(1)
// per operation: an update replaces in place, a create appends, a delete
// leaves a hole that list() closes, so the order of what stays is kept.
type keyed[K comparable, T any] struct {
	items []T
	live  []bool
	idx   map[K]int
}

func newKeyed[K comparable, T any](items []T, key func(T) K) *keyed[K, T] {
	k := &keyed[K, T]{items: slices.Clone(items), live: make([]bool, len(items)), idx: make(map[K]int, len(items))}
	for i, it := range items {
		k.idx[key(it)] = i
		k.live[i] = true
	}
	return k
}

// upsert puts v under key: replacing what is there (unless create, when
// what is there stays: the batch fails anyway), or appended. It reports
// whether key existed.
func (k *keyed[K, T]) upsert(key K, v T, create bool) bool {
	if i, ok := k.idx[key]; ok {
		if !create {
			k.items[i] = v
		}
		return true
	}
	k.idx[key] = len(k.items)
	k.items = append(k.items, v)
	k.live = append(k.live, true)
	return false
}

// remove deletes key and reports whether it existed.
func (k *keyed[K, T]) remove(key K) bool {
	i, ok := k.idx[key]
	if !ok {
		return false
	}
	delete(k.idx, key)
	k.live[i] = false
	return true
}

func (k *keyed[K, T]) list() []T {
	out := make([]T, 0, len(k.idx))
	for i, it := range k.items {
		if k.live[i] {
			out = append(out, it)
		}
	}
	return out
}

type dangling struct {
	target     string // "fars/5"
	targetName string // "far 5"
	user       string // "pdr 10"
}

// danglingRefs lists references to objects cfg no longer has.
func danglingRefs(cfg *config.Config) []dangling {
	ifaces := map[string]bool{}
	for _, i := range cfg.Interfaces {
		ifaces[i.Name] = true
	}
	paths := map[uint32]bool{}
	for _, p := range cfg.Paths {
		paths[p.ID] = true
	}
	fars := map[uint32]bool{}
	for _, f := range cfg.FARs {
		fars[f.ID] = true
	}
	var out []dangling
	iface := func(name, user string) {
		if name != "" && !ifaces[name] {
			out = append(out, dangling{listInterfaces + "/" + name, "interface " + name, user})
		}
	}
	for _, p := range cfg.Paths {
		iface(p.Interface, fmt.Sprintf("path %d", p.ID))
	}
	for _, f := range cfg.FARs {
		iface(f.Interface, fmt.Sprintf("far %d", f.ID))
		if f.Path != 0 && !paths[f.Path] {
			out = append(out, dangling{fmt.Sprintf("%s/%d", listPaths, f.Path), fmt.Sprintf("path %d", f.Path), fmt.Sprintf("far %d", f.ID)})
		}
	}
	for _, p := range cfg.PDRs {
		iface(p.Match.In, fmt.Sprintf("pdr %d", p.ID))
		if !fars[p.FAR] {
			out = append(out, dangling{fmt.Sprintf("%s/%d", listFARs, p.FAR), fmt.Sprintf("far %d", p.FAR), fmt.Sprintf("pdr %d", p.ID)})
		}
	}
	return out
}

// commitStatus turns a Backend.Commit error into a gRPC status, with
// config paths rewritten to the operations that put the objects there.
func commitStatus(err error, orig origin) error {
	var fe config.Errors
	if !errors.As(err, &fe) {
		var one config.FieldError
		if !errors.As(err, &one) {
			return status.Errorf(codes.Internal, "commit: %v", err)
		}
		fe = config.Errors{one}
	}
	out := make(config.Errors, len(fe))
	capacity := true
	for i, e := range fe {
		out[i] = e
		out[i].Path = orig.rewrite(e.Path)
		capacity = capacity && e.Capacity
	}
	if capacity {
		return fieldStatus(codes.ResourceExhausted, out)
	}
	return fieldStatus(codes.InvalidArgument, out)
}

// rewrite maps "pdrs[3].match.dst" to "operations[7].create.pdr.match.dst"
// when operation 7 put pdrs[3] there; other paths are kept.
func (o origin) rewrite(path string) string {
	end := strings.IndexByte(path, ']')
	if end < 0 {
		return path
	}
	if p, ok := o[path[:end+1]]; ok {
		return p + path[end+1:]
	}
	return path
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

// ListInterfaces implements edgeplanev1.GatewayServer.
func (s *Server) ListInterfaces(context.Context, *pb.ListRequest) (*pb.ListInterfacesResponse, error) {
	out := &pb.ListInterfacesResponse{}
	for _, v := range s.b.Config().Interfaces {
		out.Interfaces = append(out.Interfaces, InterfaceToPB(v))
	}
	return out, nil
}

// GetInterface implements edgeplanev1.GatewayServer.
func (s *Server) GetInterface(_ context.Context, req *pb.GetByNameRequest) (*pb.Interface, error) {
	for _, v := range s.b.Config().Interfaces {
		if v.Name == req.GetName() {
			return InterfaceToPB(v), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "no interface %q", req.GetName())
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
	for _, v := range s.b.Config().Paths {
		if v.ID == req.GetId() {
			return PathToPB(v), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "no path %d", req.GetId())
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
	for _, v := range s.b.Config().FARs {
		if v.ID == req.GetId() {
			return FARToPB(v), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "no far %d", req.GetId())
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
	for _, v := range s.b.Config().PDRs {
		if v.ID == req.GetId() {
			return PDRToPB(v), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "no pdr %d", req.GetId())
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
