// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
)

// MaxRequestBytes bounds a request on both gRPC and REST: a batch of
// MaxOperations PDRs fits with room to spare.
const MaxRequestBytes = 32 << 20

// maxHeaderBytes bounds a request's headers (gRPC metadata, HTTP
// headers), which are read before anything is authenticated: a JWT is a
// few hundred bytes. gRPC would take 16 MiB by default, net/http 1 MiB.
const maxHeaderBytes = 64 << 10

// streamWorkers is how many goroutines the gRPC server keeps to run
// calls on: an Apply waiting for its group holds one.
const streamWorkers = 64

// Flow-control windows of a gRPC stream and connection: 256 KiB moves a
// large batch at 5 MB/s over a 50 ms round trip.
const (
	streamWindow = 256 << 10
	connWindow   = 1 << 20
)

// Limits bound what clients can make the API servers hold. The zero
// value of a field takes the one of DefaultLimits.
type Limits struct {
	// MaxConns is how many connections each TCP listener keeps open at
	// once; more are closed as they arrive.
	MaxConns int
	// MaxStreams is how many calls one gRPC connection runs at once
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; REST is HTTP/1.1, one
	// call at a time).
	MaxStreams uint32
	// Handshake is how long a new connection has to complete TLS and
	// the HTTP/2 preface (gRPC), or to send its request headers (REST).
	Handshake time.Duration
	// Idle closes a connection that has had no call this long.
	Idle time.Duration
	// Read and Write bound a REST request's body and its response.
	Read, Write time.Duration
	// AuthFailureDelay holds the answer to a call without a valid
	// token. On gRPC the wait stops the whole connection from being
	// read, so a client that keeps sending such calls is slowed to one
	// per delay, and costs the agent one refusal (and at most one
	// stream window of its request, read and thrown away) per delay,
	// not as many as it can send.
	AuthFailureDelay time.Duration
	// MaxConnsPerSource is how many connections one source (an IPv4
	// address, an IPv6 /64) keeps open at once on each TCP listener, so
	// that one source cannot take every place of MaxConns.
	MaxConnsPerSource int
	// RefusedBurst and RefusedRate are each source's budget of refused
	// calls (calls without a valid token) on the TCP listeners: a token
	// bucket of RefusedBurst, refilled at RefusedRate a second. A call
	// refused past it closes its connection unanswered, and the source's
	// new connections are closed on arrival until the budget refills.
	RefusedBurst int
	RefusedRate  float64
}

// DefaultLimits are the limits of an agent's API servers.
var DefaultLimits = Limits{MaxConns: 256, MaxStreams: 32, Handshake: 10 * time.Second, Idle: 2 * time.Minute,
	Read: time.Minute, Write: time.Minute, AuthFailureDelay: 250 * time.Millisecond,
	MaxConnsPerSource: 32, RefusedBurst: 20, RefusedRate: 2}

func (l Limits) orDefault() Limits {
	d := DefaultLimits
	if l.MaxConns > 0 {
		d.MaxConns = l.MaxConns
	}
	if l.MaxStreams > 0 {
		d.MaxStreams = l.MaxStreams
	}
	if l.MaxConnsPerSource > 0 {
		d.MaxConnsPerSource = l.MaxConnsPerSource
	}
	if l.RefusedBurst > 0 {
		d.RefusedBurst = l.RefusedBurst
	}
	if l.RefusedRate > 0 {
		d.RefusedRate = l.RefusedRate
	}
	for _, p := range []struct{ v, d *time.Duration }{{&l.Handshake, &d.Handshake}, {&l.Idle, &d.Idle}, {&l.Read, &d.Read}, {&l.Write, &d.Write}, {&l.AuthFailureDelay, &d.AuthFailureDelay}} {
		if *p.v > 0 {
			*p.d = *p.v
		}
	}
	return d
}

// Options configure the API listeners.
type Options struct {
	// GRPCAddr and RESTAddr are TCP listen addresses; empty disables
	// one. They need Auth, or NoAuthLoopback and loopback addresses.
	GRPCAddr, RESTAddr string
	// GRPCSocket and RESTSocket are unix socket paths, served without
	// bearer tokens to root only (mode 0600, and each peer's uid is
	// checked); empty disables one.
	GRPCSocket, RESTSocket string
	// Auth checks bearer tokens on the TCP listeners.
	Auth *Auth
	// NoAuthLoopback lets the TCP listeners serve without Auth, on
	// loopback addresses only: any local user can then drive the API.
	NoAuthLoopback bool
	// TLS, when set, serves both TCP listeners over TLS.
	TLS    *tls.Config
	Limits Limits
	// Refused counts what the TCP listeners refuse (NewRefusedCounter);
	// nil: counted nowhere else.
	Refused *prometheus.CounterVec
	Log     *slog.Logger

	checked bool
}

// Listeners are the running API servers.
type Listeners struct {
	GRPC, REST             net.Addr
	GRPCSocket, RESTSocket string
	grpcSrvs               []*grpc.Server
	httpSrvs               []*http.Server
}

// Close stops the servers, letting calls in flight finish for up to 5 s.
func (l *Listeners) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range l.httpSrvs {
		_ = s.Shutdown(ctx)
	}
	for _, s := range l.grpcSrvs {
		done := make(chan struct{})
		go func() { s.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.Stop()
		}
	}
}

// Check checks the TCP listen addresses against the auth configured,
// resolves a name a listener without auth is to bind to its loopback
// address, and warns of bearer tokens that would travel in the clear.
// Serve calls it; the agent calls it first, to refuse a bad combination
// before it touches the dataplane.
func (o *Options) Check() error {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.checked {
		return nil
	}
	for _, a := range []struct {
		flag string
		addr *string
	}{{"--grpc-addr", &o.GRPCAddr}, {"--rest-addr", &o.RESTAddr}} {
		if *a.addr == "" {
			continue
		}
		switch {
		case o.Auth == nil && !o.NoAuthLoopback:
			return fmt.Errorf("%s %q serves TCP without authentication: give --api-tokens or --api-jwt-key, or --api-loopback-no-auth to serve loopback without it (the unix socket serves root without tokens)", a.flag, *a.addr)
		case o.Auth == nil:
			lo, err := LoopbackAddr(*a.addr)
			if err != nil {
				return fmt.Errorf("%s %q listens beyond loopback without authentication (%w): give --api-tokens or --api-jwt-key, or listen on 127.0.0.1", a.flag, *a.addr, err)
			}
			*a.addr = lo
		case o.TLS == nil && !isLoopback(*a.addr):
			o.Log.Warn("bearer tokens reach this API unencrypted: anyone on the path can read and replay them; give --tls-cert and --tls-key", "flag", a.flag, "addr", *a.addr)
		}
	}
	o.checked = true
	return nil
}

// Serve starts the gRPC and REST listeners for srv. Serving errors after
// the start are sent to errc.
func Serve(srv *Server, o Options, errc chan<- error) (*Listeners, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	lim := o.Limits.orDefault()
	refused := o.Refused
	if refused == nil {
		refused = NewRefusedCounter()
	}
	// One account per source across both TCP listeners: a source
	// refused on one is refused on the other.
	src := newSources(lim, refused)
	l := &Listeners{}
	fail := func(err error) (*Listeners, error) {
		l.Close()
		return nil, err
	}
	if o.GRPCAddr != "" {
		ln, err := net.Listen("tcp", o.GRPCAddr)
		if err != nil {
			return fail(fmt.Errorf("listen grpc on %s: %w", o.GRPCAddr, err))
		}
		l.GRPC = ln.Addr()
		l.serveGRPC(newGRPC(srv, o.Auth, o.TLS, lim, src), limitSources(ln, lim.MaxConns, "grpc", src), errc)
	}
	if o.GRPCSocket != "" {
		ln, err := listenUnix(o.GRPCSocket)
		if err != nil {
			return fail(err)
		}
		l.GRPCSocket = o.GRPCSocket
		l.serveGRPC(newGRPC(srv, nil, nil, lim, nil), limitConns(ln, lim.MaxConns), errc)
	}
	if o.RESTAddr != "" {
		h, err := restHandler(srv, o.Auth, lim.AuthFailureDelay, src)
		if err != nil {
			return fail(err)
		}
		ln, err := net.Listen("tcp", o.RESTAddr)
		if err != nil {
			return fail(fmt.Errorf("listen rest on %s: %w", o.RESTAddr, err))
		}
		l.REST = ln.Addr()
		l.serveHTTP(newHTTP(h, o.TLS, lim), limitSources(ln, lim.MaxConns, "rest", src), errc)
	}
	if o.RESTSocket != "" {
		h, err := RESTHandler(srv, nil, 0)
		if err != nil {
			return fail(err)
		}
		ln, err := listenUnix(o.RESTSocket)
		if err != nil {
			return fail(err)
		}
		l.RESTSocket = o.RESTSocket
		l.serveHTTP(newHTTP(h, nil, lim), limitConns(ln, lim.MaxConns), errc)
	}
	o.Log.Info("api serving", "grpc", l.GRPC, "rest", l.REST, "grpc_socket", l.GRPCSocket, "rest_socket", l.RESTSocket,
		"auth", o.Auth != nil, "tls", o.TLS != nil)
	return l, nil
}

// newGRPC returns a gRPC server that checks auth (nil: none) on each
// call's headers, before any of its message is read, and bounds what a
// connection can hold; src (nil: none) holds each source to its budget
// of refused calls.
func newGRPC(srv *Server, auth *Auth, tlsCfg *tls.Config, lim Limits, src *sources) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.MaxConcurrentStreams(lim.MaxStreams),
		grpc.ConnectionTimeout(lim.Handshake),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: lim.Idle,
			// Probe a quiet connection, so a peer that vanished
			// does not hold its slot until the idle timeout.
			Time: time.Minute, Timeout: 20 * time.Second,
		}),
		// A client may ping at most every 10 s, and only during a
		// call; more is answered with GOAWAY (ping floods).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second}),
		grpc.ForceServerCodecV2(newBoundedCodec()),
		// Fixed flow-control windows: left to grow (BDP estimation),
		// a connection's window reached megabytes under a flood of
		// refused calls, each of which then sent that much before its
		// reset arrived, all read and thrown away. A refused call now
		// costs at most one stream window.
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		// Calls run on goroutines that live on, whose stacks have
		// grown to what a call needs: a goroutine per call grew its
		// stack several times in each Apply (runtime.copystack was ~9 %
		// of the agent's CPU with 32 clients applying at once). More
		// calls at once than workers get a goroutine each, as before.
		grpc.NumStreamWorkers(streamWorkers),
	}
	if auth != nil {
		// A unary interceptor would run after the generated handler
		// has read and decoded the whole request (up to
		// MaxRequestBytes); the tap runs on the headers, and a refused
		// call is reset before its message is read.
		opts = append(opts, grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			var hdr string
			if v := info.Header.Get("authorization"); len(v) > 0 {
				hdr = v[0]
			}
			if err := auth.Check(hdr); err != nil {
				if p, ok := peer.FromContext(ctx); ok && src != nil && p.LocalAddr != nil &&
					!src.refuse("grpc", p.LocalAddr.String(), p.Addr.String()) {
					// Cut off: the connection is closed already.
					return nil, status.Error(codes.Unavailable, "too many refused calls from this source")
				}
				time.Sleep(lim.AuthFailureDelay)
				return nil, status.Error(codes.Unauthenticated, err.Error())
			}
			return ctx, nil
		}))
	}
	// The credentials' connections stop being read once the server has
	// sent GOAWAY ENHANCE_YOUR_CALM (calmConn).
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	opts = append(opts, grpc.Creds(calmCreds{TransportCredentials: creds, onCalm: func(raw net.Conn) {
		if src != nil {
			src.calmed("grpc", raw)
		}
	}}))
	s := grpc.NewServer(opts...)
	pb.RegisterGatewayServer(s, srv)
	return s
}

func (l *Listeners) serveGRPC(s *grpc.Server, ln net.Listener, errc chan<- error) {
	l.grpcSrvs = append(l.grpcSrvs, s)
	go func() {
		if err := s.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("grpc server: %w", err)
		}
	}()
}

// newHTTP returns the REST server: HTTP/1.1 only, over TLS too. Go's
// HTTP/2 server answers every PING without limit (10,000 in 40 ms on one
// connection here), and REST gains nothing from HTTP/2 that would be
// worth a policy of its own: the gRPC listener is the one for HTTP/2.
func newHTTP(h http.Handler, tlsCfg *tls.Config, lim Limits) *http.Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: lim.Handshake,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    maxHeaderBytes,
		Protocols:         &protos,
	}
}

func (l *Listeners) serveHTTP(s *http.Server, ln net.Listener, errc chan<- error) {
	l.httpSrvs = append(l.httpSrvs, s)
	go func() {
		var err error
		if s.TLSConfig != nil {
			err = s.ServeTLS(ln, "", "")
		} else {
			err = s.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("rest server: %w", err)
		}
	}()
}

// RESTHandler maps REST/JSON onto srv (in process, no gRPC hop) and serves
// the OpenAPI document at /openapi.json (without auth: it is public
// knowledge). Every other path needs a bearer token when auth is set; a
// request without a valid one is answered after failDelay.
func RESTHandler(srv *Server, auth *Auth, failDelay time.Duration) (http.Handler, error) {
	return restHandler(srv, auth, failDelay, nil)
}

// restHandler is RESTHandler holding each source to its budget of
// refused calls (src; nil: none).
func restHandler(srv *Server, auth *Auth, failDelay time.Duration, src *sources) (http.Handler, error) {
	allow, err := allowedMethods(pb.OpenAPI)
	if err != nil {
		return nil, err
	}
	gw := runtime.NewServeMux(
		// Field names as in the proto and the YAML config, and fields
		// with zero values present, so a GET shows the whole object.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		runtime.WithRoutingErrorHandler(func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
			if httpStatus != http.StatusMethodNotAllowed {
				runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
				return
			}
			// grpc-gateway turns a known path with the wrong method
			// into UNIMPLEMENTED, which maps to 501: a server error
			// for the client's mistake. Answer 405 with the Allow
			// header RFC 9110 section 15.5.6 requires, and keep
			// UNIMPLEMENTED as the body's gRPC code.
			if a := allow(r.URL.Path); a != "" {
				w.Header().Set("Allow", a)
			}
			runtime.HTTPError(ctx, mux, m, w, r, &runtime.HTTPStatusError{
				HTTPStatus: http.StatusMethodNotAllowed,
				Err:        status.Errorf(codes.Unimplemented, "method %s not allowed on %s", r.Method, r.URL.Path),
			})
		}),
	)
	if err := pb.RegisterGatewayHandlerServer(context.Background(), gw, srv); err != nil {
		return nil, fmt.Errorf("register rest mapping: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(pb.OpenAPI)
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := auth.Check(r.Header.Get("Authorization")); err != nil {
			if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && src != nil &&
				!src.refuse("rest", local.String(), r.RemoteAddr) {
				// Cut off: the connection is closed already.
				return
			}
			time.Sleep(failDelay)
			w.Header().Set("WWW-Authenticate", `Bearer realm="edgeplane"`)
			writeError(w, http.StatusUnauthorized, codes.Unauthenticated, err.Error())
			return
		}
		// Refuse a declared oversize body before reading any of it;
		// one sent without a length is cut off at the limit.
		if r.ContentLength > MaxRequestBytes {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, fmt.Sprintf("request body of %d bytes, at most %d", r.ContentLength, MaxRequestBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		if r.Method == http.MethodPost && r.URL.Path == applyPath && !boundOps(w, r) {
			return
		}
		gw.ServeHTTP(w, r)
	}))
	return mux, nil
}

// applyPath is Apply's REST path (api/edgeplane/v1/gateway.proto).
const applyPath = "/v1/apply"

// boundOps reads an Apply's body and refuses it (false) when it holds
// more than MaxOperations operations, counted on the bytes before the
// gateway decodes them: a body of MaxRequestBytes of empty operations
// ("{},") would decode into ~11M objects. Otherwise it puts the body
// back for the gateway.
func boundOps(w http.ResponseWriter, r *http.Request) bool {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		code, st := codes.InvalidArgument, http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			code, st = codes.ResourceExhausted, http.StatusRequestEntityTooLarge
		}
		writeError(w, st, code, fmt.Sprintf("read request body: %v", err))
		return false
	}
	if jsonOpsCount(body, MaxOperations) > MaxOperations {
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, fmt.Sprintf("operations: more than %d operations in one batch", MaxOperations))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

// writeError answers as the gateway does: status st, a JSON body with
// the gRPC code and message.
func writeError(w http.ResponseWriter, st int, code codes.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st)
	_, _ = fmt.Fprintf(w, `{"code":%d,"message":%q,"details":[]}`, code, msg)
}

// allowedMethods returns a function giving the methods the OpenAPI
// document lists for a request path ("GET", "POST, PUT"), or "" for a
// path it does not have. The document is generated from the same REST
// mapping as the handlers, so the two cannot disagree.
func allowedMethods(doc []byte) (func(path string) string, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("parse openapi document: %w", err)
	}
	type route struct {
		segs    []string
		methods string
	}
	var routes []route
	for tmpl, ops := range d.Paths {
		var ms []string
		for m := range ops {
			// A path item also holds "parameters" and "x-" keys.
			switch m = strings.ToUpper(m); m {
			case http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete,
				http.MethodOptions, http.MethodHead, http.MethodPatch:
				ms = append(ms, m)
			}
		}
		slices.Sort(ms)
		routes = append(routes, route{strings.Split(strings.Trim(tmpl, "/"), "/"), strings.Join(ms, ", ")})
	}
	return func(path string) string {
		segs := strings.Split(strings.Trim(path, "/"), "/")
	next:
		for _, rt := range routes {
			if len(rt.segs) != len(segs) {
				continue
			}
			for i, s := range rt.segs {
				// "{id}" stands for any one segment.
				if s != segs[i] && !(strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}")) {
					continue next
				}
			}
			return rt.methods
		}
		return ""
	}, nil
}
