// SPDX-License-Identifier: Apache-2.0

package api_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/api/apitest"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

const (
	testToken = "serve-test-token-0123456789"
	testCfg   = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: pass}
pdrs:
  - {id: 10, precedence: 100, match: {in: lan0, dst: 10.2.0.0/16}, far: 1}
`
)

func newBackend(t *testing.T) *apitest.Backend {
	t.Helper()
	c, err := yamlcfg.Parse([]byte(testCfg))
	if err != nil {
		t.Fatal(err)
	}
	return apitest.New(c, 1)
}

func tokenAuth(t *testing.T, tokens ...string) (*api.Auth, string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(f, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := api.LoadAuth(f, "")
	if err != nil {
		t.Fatal(err)
	}
	return a, f
}

func serve(t *testing.T, b api.Backend, o api.Options) *api.Listeners {
	t.Helper()
	l, err := api.Serve(api.NewServer(b), o, make(chan error, 4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

func dialGRPC(t *testing.T, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func authCtx(t *testing.T, token string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

// TestAuthBeforeRead sends Applies of 8 MiB (4M empty operations)
// without a token: each is refused on its headers, so the client gets to
// send little more than one stream's flow-control window of it. With a token, the
// same request is decoded with at most MaxOperations+1 operations, not
// 4M objects.
func TestAuthBeforeRead(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	l := serve(t, newBackend(t), api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth})
	var written atomic.Int64
	conn := dialGRPC(t, "passthrough:///"+l.GRPC.String(), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return apitest.CountingConn{Conn: c, N: &written}, err
	}))
	payload := bytes.Repeat([]byte{0x0a, 0x00}, 4<<20)
	const calls = 4
	for i := 0; i < calls; i++ {
		var out []byte
		err := conn.Invoke(authCtx(t, ""), "/edgeplane.v1.Gateway/Apply", payload, &out, grpc.ForceCodecV2(apitest.RawCodec{}))
		wantCode(t, "unauthenticated apply", err, codes.Unauthenticated)
	}
	t.Logf("%d unauthenticated Applies of %d MiB: the client wrote %d KiB", calls, len(payload)>>20, written.Load()>>10)
	// A stream's flow-control window is 256 KiB.
	if w := written.Load(); w > calls*(320<<10) {
		t.Errorf("the client wrote %d bytes of %d requests of %d: the server read requests it had not authenticated", w, calls, len(payload))
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var out []byte
	err := conn.Invoke(authCtx(t, testToken), "/edgeplane.v1.Gateway/Apply", payload, &out, grpc.ForceCodecV2(apitest.RawCodec{}))
	runtime.ReadMemStats(&after)
	wantCode(t, "authenticated apply of 4M operations", err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), "more than 100000 operations") {
		t.Errorf("apply of 4M operations: %v", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("an authenticated Apply of 4M empty operations allocated %d MiB in all", alloc>>20)
	if alloc > 100<<20 {
		t.Errorf("an Apply of 4M empty operations allocated %d MiB: it was decoded whole", alloc>>20)
	}
}

// TestMaxConcurrentStreams runs 100 calls at once on one connection; the
// server runs at most Limits.MaxStreams of them at a time.
func TestMaxConcurrentStreams(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	b := newBackend(t)
	b.Hold = make(chan struct{})
	l := serve(t, b, api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth})
	gc := pb.NewGatewayClient(dialGRPC(t, "passthrough:///"+l.GRPC.String()))
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := gc.ListPdrs(authCtx(t, testToken), &pb.ListRequest{})
			errs <- err
		}()
	}
	max := int32(api.DefaultLimits.MaxStreams)
	deadline := time.Now().Add(5 * time.Second)
	for b.InView.Load() < max && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for more to start, if they could
	running := b.InView.Load()
	close(b.Hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call failed: %v", err)
		}
	}
	if running != max || b.Peak.Load() != max {
		t.Errorf("%d calls ran at once (peak %d), want %d", running, b.Peak.Load(), max)
	}
}

// TestIdleConnectionClosed shows the server closes a gRPC connection that
// has had no call for Limits.Idle.
func TestIdleConnectionClosed(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	l := serve(t, newBackend(t), api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth, Limits: api.Limits{Idle: 300 * time.Millisecond}})
	conn := dialGRPC(t, "passthrough:///"+l.GRPC.String())
	if _, err := pb.NewGatewayClient(conn).ListPdrs(authCtx(t, testToken), &pb.ListRequest{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatal("the connection is still open 3 s after its last call (idle limit 300 ms)")
		}
	}
}

// waitClosed reads from c until the peer closes it, or fails after d.
func waitClosed(t *testing.T, c net.Conn, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server still holds the connection after %s", what, d)
	}
	return time.Since(start)
}

// TestSlowClients holds connections open without completing a request:
// the servers close them after their handshake and read limits.
func TestSlowClients(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	lim := api.Limits{Handshake: 300 * time.Millisecond, Read: 500 * time.Millisecond}
	l := serve(t, newBackend(t), api.Options{GRPCAddr: "127.0.0.1:0", RESTAddr: "127.0.0.1:0", Auth: auth, Limits: lim})
	dial := func(addr net.Addr) net.Conn {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	t.Run("grpc-silent", func(t *testing.T) {
		took := waitClosed(t, dial(l.GRPC), 5*time.Second, "a gRPC connection that never sends the HTTP/2 preface")
		t.Logf("closed after %s", took)
	})
	t.Run("rest-slow-body", func(t *testing.T) {
		c := dial(l.REST)
		fmt.Fprintf(c, "POST /v1/apply HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"oper", testToken)
		took := waitClosed(t, c, 5*time.Second, "a REST request whose body stalls")
		t.Logf("closed after %s", took)
	})
}

// TestConnectionLimit opens one connection more than Limits.MaxConns:
// the last is closed at once.
func TestConnectionLimit(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	l := serve(t, newBackend(t), api.Options{RESTAddr: "127.0.0.1:0", Auth: auth, Limits: api.Limits{MaxConns: 4}})
	var conns []net.Conn
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", l.REST.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	waitClosed(t, conns[4], 2*time.Second, "the fifth connection of four allowed")
	// The four within the limit are served.
	c := conns[0]
	fmt.Fprintf(c, "GET /v1/pdrs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a connection within the limit: %v %v", resp, err)
	}
}

// TestRESTBodyLimit sends the headers of an authenticated POST whose
// declared body is over the limit: it is refused before any of the body
// is sent.
func TestRESTBodyLimit(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	l := serve(t, newBackend(t), api.Options{RESTAddr: "127.0.0.1:0", Auth: auth})
	c, err := net.Dial("tcp", l.REST.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/apply HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", testToken, api.MaxRequestBytes+1)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer before the body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %s, want 413", resp.StatusCode, body)
	}
}

// TestJSONOpsCount: the count REST makes of an Apply's operations
// before decoding it, across strings, nesting and whitespace.
func TestJSONOpsCount(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{`{}`, 0},
		{`{"operations":[]}`, 0},
		{`{"operations": [ ] , "dryRun": true}`, 0},
		{`{"operations":[{}]}`, 1},
		{`{"operations":[{},{},{}]}`, 3},
		{"{\"operations\":[\n {\"put\":{\"pdr\":{\"id\":1,\"ports\":[1,2,3]}}} ,\n\t{} ]}", 2},
		{`{"operations":[{"put":{"pdr":{"name":"a,b],[{"}}},"x\\\",[", 7]}`, 3},
		{`{"operations":[{},{},{},{},{}]}`, 5},
	} {
		if got := api.JSONOpsCount([]byte(c.body), 10); got != c.want {
			t.Errorf("%s: %d operations, want %d", c.body, got, c.want)
		}
	}
	if got := api.JSONOpsCount([]byte(`{"operations":[{},{},{},{},{}]}`), 3); got != 4 {
		t.Errorf("bound 3: counted %d, want to stop at 4", got)
	}
}

// TestRESTOpsBound: a REST Apply of more than MaxOperations operations
// is refused as gRPC refuses it, from a count made on its bytes: a body
// of empty operations up to the size limit (~11M of them) would decode
// into well over a gigabyte of objects first.
func TestRESTOpsBound(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	l := serve(t, newBackend(t), api.Options{RESTAddr: "127.0.0.1:0", Auth: auth})
	n := (api.MaxRequestBytes - 64) / 3
	body := make([]byte, 0, api.MaxRequestBytes)
	body = append(body, `{"operations":[`...)
	for i := range n {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, "{}"...)
	}
	body = append(body, "]}"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, _ := http.NewRequest(http.MethodPost, "http://"+l.REST.String()+"/v1/apply", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), "more than 100000 operations") {
		t.Errorf("%d operations: %d %s, want 400 naming the bound", n, resp.StatusCode, got)
	}
	// The body itself is read once (32 MiB, doubled while it grows);
	// decoded, its operations would take ~1 GB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
		t.Errorf("refusing %d operations allocated %d MiB, want the body's size, not its objects'", n, alloc>>20)
	}
}

// TestTCPWithoutAuth: TCP without tokens needs NoAuthLoopback, then only
// on loopback, with a name resolved and checked before it is bound.
func TestTCPWithoutAuth(t *testing.T) {
	b := newBackend(t)
	if _, err := api.Serve(api.NewServer(b), api.Options{GRPCAddr: "127.0.0.1:0"}, make(chan error, 1)); err == nil || !strings.Contains(err.Error(), "--api-loopback-no-auth") {
		t.Errorf("TCP without tokens, not asked for: %v", err)
	}
	if _, err := api.Serve(api.NewServer(b), api.Options{RESTAddr: "0.0.0.0:0", NoAuthLoopback: true}, make(chan error, 1)); err == nil {
		t.Errorf("TCP without tokens on every interface: served")
	}
	resolve := *api.LookupHost
	t.Cleanup(func() { *api.LookupHost = resolve })
	var answer []netip.Addr
	*api.LookupHost = func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != "localhost" {
			return nil, fmt.Errorf("no host %s", host)
		}
		return answer, nil
	}
	answer = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.0.2.7")}
	if _, err := api.Serve(api.NewServer(b), api.Options{GRPCAddr: "localhost:0", NoAuthLoopback: true}, make(chan error, 1)); err == nil || !strings.Contains(err.Error(), "192.0.2.7") {
		t.Errorf("localhost resolving beyond loopback: %v", err)
	}
	answer = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	l := serve(t, b, api.Options{GRPCAddr: "localhost:0", NoAuthLoopback: true})
	if ip := l.GRPC.(*net.TCPAddr).IP; !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("localhost bound as %s", l.GRPC)
	}
}

// TestPlaintextTokenWarning: tokens over plain TCP beyond loopback are
// logged as a warning; over TLS or on loopback they are not.
func TestPlaintextTokenWarning(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	cert := testutil.NewTestCert(t)
	for _, c := range []struct {
		name string
		addr string
		tls  *tls.Config
		warn bool
	}{
		{"plain beyond loopback", "0.0.0.0:0", nil, true},
		{"tls beyond loopback", "0.0.0.0:0", cert.Server, false},
		{"plain loopback", "127.0.0.1:0", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			serve(t, newBackend(t), api.Options{GRPCAddr: c.addr, RESTAddr: c.addr, Auth: auth, TLS: c.tls,
				Log: slog.New(slog.NewTextHandler(&logs, nil))})
			if got := strings.Count(logs.String(), "unencrypted"); (got == 2) != c.warn || (!c.warn && got != 0) {
				t.Errorf("%d warnings about unencrypted tokens, want %v for both listeners:\n%s", got, c.warn, logs.String())
			}
		})
	}
}

// TestUnixSocket serves the API without tokens on unix sockets only root
// can use: mode 0600, a stale socket replaced, a live one refused, and a
// peer of another uid turned away even when the mode would let it in.
func TestUnixSocket(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "api.sock")
	rest := filepath.Join(dir, "run", "rest.sock")
	// A stale socket, as a killed agent leaves it.
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()

	b := newBackend(t)
	l := serve(t, b, api.Options{GRPCSocket: sock, RESTSocket: rest})
	for _, p := range []string{sock, rest} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s: mode %s, want a socket of 0600", p, fi.Mode())
		}
	}
	if _, err := api.Serve(api.NewServer(b), api.Options{GRPCSocket: sock}, make(chan error, 1)); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("a second server on a live socket: %v", err)
	}
	gc := pb.NewGatewayClient(dialGRPC(t, "unix://"+sock))
	if r, err := gc.ListPdrs(authCtx(t, ""), &pb.ListRequest{}); err != nil || len(r.GetPdrs()) != 1 {
		t.Fatalf("list over the socket as root: %v %v", r, err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", rest)
		}}}
	resp, err := hc.Get("http://edgeplane/v1/pdrs")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("REST over the socket as root: %v %v", resp, err)
	}
	resp.Body.Close()

	// Open the mode up; a peer of another uid is still turned away.
	for p := sock; p != "/"; p = filepath.Dir(p) {
		if strings.HasPrefix(p, os.TempDir()+"/") {
			if err := os.Chmod(p, 0o777); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := testutil.RunAs(65534, "/usr/bin/python3", "-c", pySocketProbe, sock)
	if err != nil {
		t.Fatalf("probe as uid 65534: %v %s", err, out)
	}
	if strings.TrimSpace(out) != "closed" {
		t.Errorf("a peer of uid 65534 on the socket: %q, want the server to close on it", out)
	}
	l.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
}

// pySocketProbe connects to a unix socket, sends an HTTP/2 preface and
// prints "closed" when the server closes without answering, else what
// it answered.
const pySocketProbe = `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(3)
s.connect(sys.argv[1])
try:
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    d = s.recv(100)
except (ConnectionResetError, BrokenPipeError):
    d = b""
print("closed" if not d else "answered %d bytes" % len(d))
`

// TestListFlowsBounds: top 0 gives a bounded default, not every flow,
// and more than the maximum is refused.
func TestListFlowsBounds(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	b := newBackend(t)
	b.NFlows = 3 * api.MaxFlows
	l := serve(t, b, api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth})
	gc := pb.NewGatewayClient(dialGRPC(t, "passthrough:///"+l.GRPC.String()))
	for _, c := range []struct {
		top  uint32
		want int
		code codes.Code
	}{{0, api.DefaultFlows, codes.OK}, {50, 50, codes.OK}, {api.MaxFlows, api.MaxFlows, codes.OK}, {api.MaxFlows + 1, 0, codes.InvalidArgument}} {
		r, err := gc.ListFlows(authCtx(t, testToken), &pb.ListFlowsRequest{Top: c.top})
		wantCode(t, fmt.Sprintf("top %d", c.top), err, c.code)
		if len(r.GetFlows()) != c.want {
			t.Errorf("top %d: %d flows, want %d", c.top, len(r.GetFlows()), c.want)
		}
	}
}

// TestTLSCertReload: after Reload, new handshakes get the new
// certificate.
func TestTLSCertReload(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	first, second := testutil.NewTestCert(t), testutil.NewTestCert(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	install := func(c *testutil.TestCert) { c.CopyTo(t, certFile, keyFile) }
	install(first)
	cert, err := api.LoadCert(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l := serve(t, newBackend(t), api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth, TLS: cert.Config()})
	call := func(c *testutil.TestCert) error {
		conn := dialGRPC(t, "passthrough:///"+l.GRPC.String(),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: c.Pool, ServerName: "127.0.0.1"})))
		_, err := pb.NewGatewayClient(conn).ListPdrs(authCtx(t, testToken), &pb.ListRequest{})
		return err
	}
	if err := call(first); err != nil {
		t.Fatalf("with the first certificate: %v", err)
	}
	install(second)
	if err := cert.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := call(second); err != nil {
		t.Errorf("after the reload, trusting the second certificate: %v", err)
	}
	if err := call(first); err == nil {
		t.Errorf("after the reload, the first certificate is still served")
	}
	// A broken file keeps the certificate that serves.
	if err := os.WriteFile(keyFile, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cert.Reload(); err == nil {
		t.Error("reload of a broken key: no error")
	}
	if err := call(second); err != nil {
		t.Errorf("after a failed reload: %v", err)
	}
}
