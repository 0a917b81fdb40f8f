// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
)

// MaxRequestBytes bounds a request on both gRPC and REST: a batch of
// MaxOperations PDRs fits with room to spare.
const MaxRequestBytes = 32 << 20

// Options configure the API listeners.
type Options struct {
	// GRPCAddr and RESTAddr are listen addresses; empty disables one.
	GRPCAddr, RESTAddr string
	// Auth checks bearer tokens; nil accepts every call, and then the
	// listeners must be on loopback addresses.
	Auth *Auth
	// TLS, when set, serves both listeners over TLS.
	TLS *tls.Config
	Log *slog.Logger
}

// Listeners are the running API servers.
type Listeners struct {
	GRPC, REST net.Addr
	grpcSrv    *grpc.Server
	httpSrv    *http.Server
}

// Close stops both servers, letting calls in flight finish for up to 5 s.
func (l *Listeners) Close() {
	if l.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.httpSrv.Shutdown(ctx)
		cancel()
	}
	if l.grpcSrv != nil {
		done := make(chan struct{})
		go func() { l.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			l.grpcSrv.Stop()
		}
	}
}

// checkLoopback refuses an unauthenticated listener beyond loopback.
func checkLoopback(flag, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s %q listens beyond loopback without authentication: give --api-tokens or --api-jwt-key, or listen on 127.0.0.1", flag, addr)
}

// Serve starts the gRPC and REST listeners for srv. Serving errors after
// the start are sent to errc.
func Serve(srv *Server, o Options, errc chan<- error) (*Listeners, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Auth == nil {
		for flag, addr := range map[string]string{"--grpc-addr": o.GRPCAddr, "--rest-addr": o.RESTAddr} {
			if addr == "" {
				continue
			}
			if err := checkLoopback(flag, addr); err != nil {
				return nil, err
			}
		}
	}
	l := &Listeners{}
	if o.GRPCAddr != "" {
		opts := []grpc.ServerOption{
			grpc.MaxRecvMsgSize(MaxRequestBytes),
			grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				var hdr string
				if md, ok := metadata.FromIncomingContext(ctx); ok {
					if v := md.Get("authorization"); len(v) > 0 {
						hdr = v[0]
					}
				}
				if err := o.Auth.Check(hdr); err != nil {
					return nil, status.Error(codes.Unauthenticated, err.Error())
				}
				return h(ctx, req)
			}),
		}
		if o.TLS != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(o.TLS)))
		}
		ln, err := net.Listen("tcp", o.GRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("listen grpc on %s: %w", o.GRPCAddr, err)
		}
		l.grpcSrv = grpc.NewServer(opts...)
		pb.RegisterGatewayServer(l.grpcSrv, srv)
		l.GRPC = ln.Addr()
		go func() {
			if err := l.grpcSrv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("grpc server: %w", err)
			}
		}()
	}
	if o.RESTAddr != "" {
		h, err := RESTHandler(srv, o.Auth)
		if err != nil {
			l.Close()
			return nil, err
		}
		ln, err := net.Listen("tcp", o.RESTAddr)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("listen rest on %s: %w", o.RESTAddr, err)
		}
		l.httpSrv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, TLSConfig: o.TLS}
		l.REST = ln.Addr()
		go func() {
			var err error
			if o.TLS != nil {
				err = l.httpSrv.ServeTLS(ln, "", "")
			} else {
				err = l.httpSrv.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("rest server: %w", err)
			}
		}()
	}
	o.Log.Info("api serving", "grpc", l.GRPC, "rest", l.REST, "auth", o.Auth != nil, "tls", o.TLS != nil)
	return l, nil
}

// RESTHandler maps REST/JSON onto srv (in process, no gRPC hop) and serves
// the OpenAPI document at /openapi.json (without auth: it is public
// knowledge). Every other path needs a bearer token when auth is set.
func RESTHandler(srv *Server, auth *Auth) (http.Handler, error) {
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
			w.Header().Set("WWW-Authenticate", `Bearer realm="edgeplane"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprintf(w, `{"code":%d,"message":%q,"details":[]}`, codes.Unauthenticated, err.Error())
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		gw.ServeHTTP(w, r)
	}))
	return mux, nil
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
