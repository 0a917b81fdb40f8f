// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// RunRoot holds one run directory per gateway, named after its pin dir.
const RunRoot = "/run/edgeplane"

// RunDir is the run directory of the gateway pinned at pinDir: its last
// element under RunRoot. A unix socket path is the same in every
// network namespace, so gateways on one machine need one each, as they
// need a pin dir each.
func RunDir(pinDir string) string {
	return filepath.Join(RunRoot, filepath.Base(filepath.Clean(pinDir)))
}

// DefaultAPISocket is where the agent of pinDir serves gRPC to root when
// --api-socket is not given.
func DefaultAPISocket(pinDir string) string { return filepath.Join(RunDir(pinDir), "api.sock") }

// DefaultRESTSocket is where it serves REST to root when --rest-socket
// is not given.
func DefaultRESTSocket(pinDir string) string { return filepath.Join(RunDir(pinDir), "rest.sock") }

func socketPath(flag, pinDir string, dflt func(string) string) string {
	switch flag {
	case "":
		return dflt(pinDir)
	case "none":
		return ""
	}
	return flag
}

// APIOptions loads the API's credentials and checks its addresses and
// the metrics and pprof ones, so a bad combination is refused before the
// dataplane is touched.
func APIOptions(o Options, log *slog.Logger) (api.Options, *api.Cert, error) {
	if o.Pprof {
		if o.MetricsAddr == "" {
			return api.Options{}, nil, errors.New("--pprof serves on --metrics-addr, which is empty: give --pprof-addr")
		}
		if !loopbackListen(o.MetricsAddr) {
			return api.Options{}, nil, fmt.Errorf("--pprof would serve profiles on --metrics-addr %s, beyond loopback: give --pprof-addr (with --pprof-beyond-loopback to expose them beyond loopback)", o.MetricsAddr)
		}
	}
	if _, err := pprofListen(o); err != nil {
		return api.Options{}, nil, err
	}
	auth, err := api.LoadAuthRules(o.APITokens, o.APIJWTKey, o.JWT)
	if err != nil {
		return api.Options{}, nil, err
	}
	var cert *api.Cert
	var tlsCfg *tls.Config
	switch {
	case o.TLSCert != "" && o.TLSKey != "":
		if cert, err = api.LoadCert(o.TLSCert, o.TLSKey); err != nil {
			return api.Options{}, nil, err
		}
		tlsCfg = cert.Config()
	case o.TLSCert != "" || o.TLSKey != "":
		return api.Options{}, nil, errors.New("--tls-cert and --tls-key go together")
	}
	if auth == nil && o.APILoopbackNoAuth {
		// An address on every interface (":50051") is narrowed to
		// loopback; one naming another host is refused.
		o.GRPCAddr, o.RESTAddr = loopbackIfAny(o.GRPCAddr), loopbackIfAny(o.RESTAddr)
		if o.GRPCAddr != "" || o.RESTAddr != "" {
			log.Warn("TCP API without authentication (--api-loopback-no-auth): any local user can drive it")
		}
	}
	ao := api.Options{
		GRPCAddr: o.GRPCAddr, RESTAddr: o.RESTAddr,
		GRPCSocket: socketPath(o.APISocket, o.PinDir, DefaultAPISocket), RESTSocket: socketPath(o.RESTSocket, o.PinDir, DefaultRESTSocket),
		Auth: auth, NoAuthLoopback: o.APILoopbackNoAuth, TLS: tlsCfg, Log: log,
	}
	if err := ao.Check(); err != nil {
		return api.Options{}, nil, err
	}
	return ao, cert, nil
}

// The API finds the dataplane's parts by type: a method lost here would
// turn an agent's calls for them into refusals, so the compiler checks.
var (
	_ api.Backend         = (*Agent)(nil)
	_ dataplane.Dataplane = (*Agent)(nil)
	_ dataplane.Dataplane = fleetManaged{}
	_ dataplane.Sessions  = (*Agent)(nil)
)

// serveAPI starts the control API (APIOptions): the unix sockets, and
// the TCP listeners asked for.
func (a *Agent) serveAPI(o api.Options, errc chan<- error) (*api.Listeners, error) {
	a.apiAuth = o.Auth
	o.Refused = a.apiRefused
	if a.member != nil {
		return api.Serve(api.NewServer(fleetManaged{a}), o, errc)
	}
	return api.Serve(api.NewServer(a), o, errc)
}

// closeAPI stops the API servers (their sockets go with them) and
// removes the gateway's run dir when nothing else is left in it.
func (a *Agent) closeAPI(ls *api.Listeners) {
	ls.Close()
	_ = os.Remove(RunDir(a.opts.PinDir))
}

// reloadCredentials re-reads the API's token and key files and its TLS
// certificate (SIGHUP): a revoked token stops working on the next call.
func (a *Agent) reloadCredentials() {
	if a.apiAuth != nil {
		if err := a.apiAuth.Reload(); err != nil {
			a.log.Error("reload api tokens", "error", err)
		} else {
			a.log.Info("api tokens reloaded")
		}
	}
	if a.apiCert != nil {
		if err := a.apiCert.Reload(); err != nil {
			a.log.Error("reload tls certificate; the one loaded before keeps serving", "error", err)
		} else {
			a.log.Info("tls certificate reloaded")
		}
	}
}

// loopbackIfAny turns a listen address on every interface (empty,
// 0.0.0.0 or :: host) into the same port on 127.0.0.1.
func loopbackIfAny(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// serveMetrics starts the metrics listener, serving reg, (and pprof's)
// when asked for (APIOptions checked the addresses); the function it
// returns stops them.
func (a *Agent) serveMetrics(reg *prometheus.Registry, errc chan<- error) (func(), error) {
	o := a.opts
	var srvs []*http.Server
	stop := func() {
		for _, s := range srvs {
			s.Close()
		}
	}
	if o.MetricsAddr != "" { // APIOptions checked the combination
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", a.serveHealth)
		if o.Pprof {
			handlePprof(mux)
		}
		srv, err := listenHTTP("metrics", o.MetricsAddr, mux, o.Pprof, errc)
		if err != nil {
			return nil, err
		}
		srvs = append(srvs, srv)
		if !loopbackListen(o.MetricsAddr) {
			a.log.Info("metrics served beyond loopback, without authentication", "addr", o.MetricsAddr)
		}
	}
	if o.PprofAddr != "" {
		addr, err := pprofListen(o)
		if err != nil {
			stop()
			return nil, err
		}
		mux := http.NewServeMux()
		handlePprof(mux)
		srv, err := listenHTTP("pprof", addr, mux, true, errc)
		if err != nil {
			stop()
			return nil, err
		}
		srvs = append(srvs, srv)
		if o.PprofBeyondLoopback && !loopbackListen(addr) {
			a.log.Warn("Go profiles served beyond loopback, without authentication (--pprof-beyond-loopback)", "addr", addr)
		}
	}
	return stop, nil
}

// pprofListen returns the address --pprof-addr listens on: a loopback
// address (a name is resolved, and every address it gives must be
// loopback; the one checked is the one bound), or with
// --pprof-beyond-loopback the address as given.
func pprofListen(o Options) (string, error) {
	if o.PprofAddr == "" || o.PprofBeyondLoopback {
		return o.PprofAddr, nil
	}
	addr, err := api.LoopbackAddr(o.PprofAddr)
	if err != nil {
		return "", fmt.Errorf("--pprof-addr %q: %w: Go profiles are unauthenticated and show the agent's memory; listen on 127.0.0.1, or give --pprof-beyond-loopback to expose them there", o.PprofAddr, err)
	}
	return addr, nil
}

func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// listenHTTP serves h at addr with timeouts on every phase of a request,
// so a slow or stalled client cannot hold a connection; long leaves
// room for a CPU profile or trace (30 s by default) to be written.
func listenHTTP(what, addr string, h http.Handler, long bool, errc chan<- error) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s on %s: %w", what, addr, err)
	}
	write := 30 * time.Second
	if long {
		write = 2 * time.Minute
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: write, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("%s server: %w", what, err)
		}
	}()
	return srv, nil
}

// loopbackListen reports whether a listen address is a loopback address
// (a name is not resolved here: only an address literal counts).
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
