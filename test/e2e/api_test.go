// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/topo"
)

const (
	apiGRPC  = "127.0.0.1:50051"
	apiREST  = "127.0.0.1:8080"
	apiToken = "test-token-0123456789abcdef"
	// apiJWTKey signs the JWTs the agent accepts in these tests.
	apiJWTKey = "jwt-key-for-tests-0123456789abcdefghij"
)

// nsDial returns a dialer whose sockets live in network namespace ns: the
// agent's API listens on loopback inside the gateway namespace. The
// socket keeps its namespace after the thread that made it is gone; the
// thread, left in ns, ends with its goroutine (locked, never unlocked).
func nsDial(ns string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var c net.Conn
		err := topo.Do(ns, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
}

// apiGateway is a gateway whose agent serves the API with a static token
// and JWTs, and clients reaching it inside the gateway namespace.
type apiGateway struct {
	*gateway
	gc   pb.GatewayClient
	http *http.Client
	args []string // the agent's API flags
}

// restart stops the agent (SIGTERM: the dataplane stays) and starts it
// again with the same flags; the client reconnects on its next call.
func (a *apiGateway) restart(t *testing.T) {
	t.Helper()
	if err := a.StopAgent(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.start(a.args...)
}

func newAPIGateway(t *testing.T, cfg string) *apiGateway {
	t.Helper()
	return startAPIGateway(t, newGateway(t, cfg))
}

// startAPIGateway starts g's agent with the API and connects to it.
func startAPIGateway(t *testing.T, g *gateway) *apiGateway {
	t.Helper()
	tokens := filepath.Join(g.dir, "tokens")
	key := filepath.Join(g.dir, "jwt.key")
	if err := os.WriteFile(tokens, []byte("# test clients\n"+apiToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte(apiJWTKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--grpc-addr", apiGRPC, "--rest-addr", apiREST, "--api-tokens", tokens, "--api-jwt-key", key}
	g.start(args...)
	conn, err := grpc.NewClient("passthrough:///"+apiGRPC,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(nsDial(g.GW)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	dial := nsDial(g.GW)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
	}}
	return &apiGateway{gateway: g, gc: pb.NewGatewayClient(conn), http: hc, args: args}
}

// ctx returns a context carrying token as the bearer token.
func withToken(token string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx, cancel
}

func (a *apiGateway) apply(t *testing.T, ops ...*pb.Operation) (*pb.ApplyResponse, error) {
	t.Helper()
	ctx, cancel := withToken(apiToken)
	defer cancel()
	return a.gc.Apply(ctx, &pb.ApplyRequest{Operations: ops})
}

// rest sends a REST request with the test's token and returns the
// status and the body.
func (a *apiGateway) rest(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+apiREST+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (a *apiGateway) mustApply(t *testing.T, ops ...*pb.Operation) *pb.ApplyResponse {
	t.Helper()
	r, err := a.apply(t, ops...)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return r
}

func createOp(o *pb.Object) *pb.Operation { return &pb.Operation{Op: &pb.Operation_Create{Create: o}} }
func updateOp(o *pb.Object) *pb.Operation { return &pb.Operation{Op: &pb.Operation_Update{Update: o}} }
func deleteOp(k pb.Kind, id uint32, name string) *pb.Operation {
	return &pb.Operation{Op: &pb.Operation_Delete{Delete: &pb.Ref{Kind: k, Id: id, Name: name}}}
}
func pdrObj(p *pb.Pdr) *pb.Object      { return &pb.Object{Kind: &pb.Object_Pdr{Pdr: p}} }
func farObj(f *pb.Far) *pb.Object      { return &pb.Object{Kind: &pb.Object_Far{Far: f}} }
func pathObj(p *pb.Path) *pb.Object    { return &pb.Object{Kind: &pb.Object_Path{Path: p}} }
func ifObj(i *pb.Interface) *pb.Object { return &pb.Object{Kind: &pb.Object_Interface{Interface: i}} }
func u32(v uint32) *uint32             { return &v }
func wantCode(t *testing.T, what string, err error, code codes.Code) *status.Status {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Errorf("%s: %v, want %s", what, err, code)
	}
	return st
}

// violations returns the field paths of a status's BadRequest details.
func violations(st *status.Status) []string {
	var out []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out = append(out, v.GetField())
			}
		}
	}
	return out
}

// TestAPIObjects creates, reads, lists, updates and deletes one object of
// each kind over gRPC, checking each change is live in the dataplane
// (generation and counters) and in the persisted config file.
func TestAPIObjects(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	ctx, cancel := withToken(apiToken)
	defer cancel()
	gen0 := a.stats().Generation

	// An interface needs to exist on the host: a veth in the gateway.
	if err := topo.AddVeth(topo.End{NS: openNS(t, a.GW), Name: "ext0"}, topo.End{Name: "ext0p"}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	itf := &pb.Interface{Name: "ext0", Role: "lan", Xdp: "generic"}
	// TTL 64 is filled in as the default, as when a file is loaded; the
	// monitor comes back as an empty message (every default).
	path := &pb.Path{Id: 7, Type: "gre", Interface: "wan0", Local: "10.2.0.1", Remote: "10.2.0.2", Key: u32(70), Ttl: 64, Monitor: &pb.PathMonitor{Insecure: true}}
	far := &pb.Far{Id: 40, Action: "encap", Path: 7}
	pdr := &pb.Pdr{Id: 77, Precedence: 5, Far: 40, Match: &pb.Match{In: "lan0", Dst: "10.77.0.0/16", Proto: "udp", Dport: "7000-7099"}}
	r := a.mustApply(t, createOp(ifObj(itf)), createOp(pathObj(path)), createOp(farObj(far)), createOp(pdrObj(pdr)))
	if r.GetGeneration() != gen0+1 {
		t.Errorf("generation after create %d, want %d", r.GetGeneration(), gen0+1)
	}
	if got := a.stats().Generation; got != r.GetGeneration() {
		t.Errorf("dataplane generation %d, API said %d", got, r.GetGeneration())
	}
	if out, on := xdpOn(t, a.GW, "ext0"); !on {
		t.Errorf("no XDP on ext0 after creating the interface:\n%s", out)
	}

	check := func(what string, got, want proto.Message) {
		t.Helper()
		if !proto.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
	}
	gi, err := a.gc.GetInterface(ctx, &pb.GetByNameRequest{Name: "ext0"})
	if err != nil {
		t.Fatal(err)
	}
	check("get interface", gi, itf)
	gp, err := a.gc.GetPath(ctx, &pb.GetByIDRequest{Id: 7})
	if err != nil {
		t.Fatal(err)
	}
	check("get path", gp, path)
	gf, err := a.gc.GetFar(ctx, &pb.GetByIDRequest{Id: 40})
	if err != nil {
		t.Fatal(err)
	}
	check("get far", gf, far)
	gd, err := a.gc.GetPdr(ctx, &pb.GetByIDRequest{Id: 77})
	if err != nil {
		t.Fatal(err)
	}
	check("get pdr", gd, pdr)

	lp, err := a.gc.ListPdrs(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(lp.GetPdrs()); n != 9 {
		t.Errorf("list pdrs: %d, want the config's 8 and the new one", n)
	}
	li, _ := a.gc.ListInterfaces(ctx, &pb.ListRequest{})
	lpa, _ := a.gc.ListPaths(ctx, &pb.ListRequest{})
	lf, _ := a.gc.ListFars(ctx, &pb.ListRequest{})
	if len(li.GetInterfaces()) != 3 || len(lpa.GetPaths()) != 1 || len(lf.GetFars()) != 4 {
		t.Errorf("lists: %d interfaces, %d paths, %d fars; want 3, 1, 4", len(li.GetInterfaces()), len(lpa.GetPaths()), len(lf.GetFars()))
	}

	// Updates replace whole objects.
	pdr2 := proto.Clone(pdr).(*pb.Pdr)
	pdr2.Precedence, pdr2.Match.Dport = 6, "8000"
	path2 := proto.Clone(path).(*pb.Path)
	path2.Seq, path2.Dscp = true, u32(46)
	a.mustApply(t, updateOp(pdrObj(pdr2)), updateOp(pathObj(path2)))
	gd, _ = a.gc.GetPdr(ctx, &pb.GetByIDRequest{Id: 77})
	check("pdr after update", gd, pdr2)
	gp, _ = a.gc.GetPath(ctx, &pb.GetByIDRequest{Id: 7})
	check("path after update", gp, path2)

	// The journal is folded into the config file within a second.
	var file *config.Config
	folded := waitFor(5*time.Second, func() bool {
		file, _ = yamlcfg.Load(a.cfgPath)
		p, ok := findPDR(file, 77)
		return ok && p.Precedence == 6 && p.Match.Dport.String() == "8000"
	})
	if !folded {
		t.Errorf("config file has no pdr 77 with precedence 6, dport 8000 after 5 s: %+v", file)
	}

	// Deletes, in an order that keeps references whole.
	a.mustApply(t, deleteOp(pb.Kind_KIND_PDR, 77, ""), deleteOp(pb.Kind_KIND_FAR, 40, ""),
		deleteOp(pb.Kind_KIND_PATH, 7, ""), deleteOp(pb.Kind_KIND_INTERFACE, 0, "ext0"))
	for what, err := range map[string]error{
		"pdr":       second(a.gc.GetPdr(ctx, &pb.GetByIDRequest{Id: 77})),
		"far":       second(a.gc.GetFar(ctx, &pb.GetByIDRequest{Id: 40})),
		"path":      second(a.gc.GetPath(ctx, &pb.GetByIDRequest{Id: 7})),
		"interface": second(a.gc.GetInterface(ctx, &pb.GetByNameRequest{Name: "ext0"})),
	} {
		wantCode(t, "get deleted "+what, err, codes.NotFound)
	}
	if out, on := xdpOn(t, a.GW, "ext0"); on {
		t.Errorf("XDP still on ext0 after deleting the interface:\n%s", out)
	}

	// Create over an existing object, update or delete of a missing one.
	_, err = a.apply(t, createOp(farObj(&pb.Far{Id: 1, Action: "drop"})))
	wantCode(t, "create existing far 1", err, codes.AlreadyExists)
	_, err = a.apply(t, updateOp(farObj(&pb.Far{Id: 99, Action: "drop"})))
	wantCode(t, "update missing far 99", err, codes.NotFound)
	_, err = a.apply(t, deleteOp(pb.Kind_KIND_PDR, 99, ""))
	wantCode(t, "delete missing pdr 99", err, codes.NotFound)
	// Deleting what is still used names the user.
	_, err = a.apply(t, deleteOp(pb.Kind_KIND_FAR, 1, ""))
	st := wantCode(t, "delete far 1 in use", err, codes.FailedPrecondition)
	if !strings.Contains(st.Message(), "operations[0].delete: far 1 is still used by pdr") {
		t.Errorf("delete far 1 in use: %q, want it to name the delete and a pdr", st.Message())
	}
}

func second[T any](_ T, err error) error { return err }

func findPDR(c *config.Config, id uint32) (config.PDR, bool) {
	for _, p := range c.PDRs {
		if p.ID == id {
			return p, true
		}
	}
	return config.PDR{}, false
}

// TestAPIBatchAtomic sends batches of 100 operations with one bad one: the
// whole batch is refused with the bad field named, and nothing of it is
// applied (lists, generation and config file unchanged). A batch that
// overflows the classifier is refused as RESOURCE_EXHAUSTED.
func TestAPIBatchAtomic(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	ctx, cancel := withToken(apiToken)
	defer cancel()
	fileBefore, _ := os.ReadFile(a.cfgPath)
	genBefore := a.stats().Generation

	batch := func(bad int, mutate func(*pb.Pdr)) []*pb.Operation {
		var ops []*pb.Operation
		for i := range 100 {
			p := &pb.Pdr{Id: uint32(1000 + i), Precedence: uint32(200 + i), Far: 1, Match: &pb.Match{In: "lan0", Dst: fmt.Sprintf("10.50.%d.0/24", i)}}
			if i == bad {
				mutate(p)
			}
			ops = append(ops, createOp(pdrObj(p)))
		}
		return ops
	}
	for _, c := range []struct {
		name   string
		bad    int
		mutate func(*pb.Pdr)
		code   codes.Code
		field  string
	}{
		{"bad CIDR", 57, func(p *pb.Pdr) { p.Match.Dst = "10.50.300.0/24" }, codes.InvalidArgument, "operations[57].create.pdr.match.dst"},
		{"host bits", 3, func(p *pb.Pdr) { p.Match.Src = "10.0.0.1/8" }, codes.InvalidArgument, "operations[3].create.pdr.match.src"},
		{"unknown far", 99, func(p *pb.Pdr) { p.Far = 12345 }, codes.InvalidArgument, "operations[99].create.pdr.far"},
		{"unknown interface", 0, func(p *pb.Pdr) { p.Match.In = "nope0" }, codes.InvalidArgument, "operations[0].create.pdr.match.in"},
		{"ports without proto", 42, func(p *pb.Pdr) { p.Match.Dport = "80" }, codes.InvalidArgument, "operations[42].create.pdr.match.dport"},
		{"duplicate id", 10, func(p *pb.Pdr) { p.Id = 1011 }, codes.AlreadyExists, "operations[11].create.pdr"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.apply(t, batch(c.bad, c.mutate)...)
			st := wantCode(t, "apply", err, c.code)
			v := violations(st)
			if len(v) != 1 || !strings.HasPrefix(v[0], c.field) {
				t.Errorf("violations %v, want just %s (message %q)", v, c.field, st.Message())
			}
		})
	}
	// Every operation valid, but a port range of 1-65534 expands to 30
	// classifier entries: 100 such PDRs do not fit limits.rules 1024.
	ops := batch(-1, nil)
	for _, op := range ops {
		m := op.GetCreate().GetPdr().GetMatch()
		m.Proto, m.Dport = "tcp", "1-65534"
	}
	_, err := a.apply(t, ops...)
	st := wantCode(t, "apply 3,000 classifier entries into limits.rules 1024", err, codes.ResourceExhausted)
	t.Logf("overflow: %s", st.Message())

	lp, err := a.gc.ListPdrs(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(lp.GetPdrs()); n != 8 {
		t.Errorf("%d pdrs after refused batches, want the config's 8", n)
	}
	if g := a.stats().Generation; g != genBefore {
		t.Errorf("generation %d after refused batches, want %d", g, genBefore)
	}
	if fileAfter, _ := os.ReadFile(a.cfgPath); string(fileAfter) != string(fileBefore) {
		t.Errorf("config file changed by refused batches")
	}
	// Forwarding carries on with the old rules.
	a.warmUp()
	before := a.stats()
	mustSendUDP(t, a.A, "10.2.0.2", 7777, 5, 0, 16)
	if d := a.stats().pdr(12).Packets - before.pdr(12).Packets; d != 5 {
		t.Errorf("pdr 12 counted %d of 5 packets after refused batches", d)
	}
}

// TestAPIAuth checks both protocols refuse calls without a valid bearer
// token, accept the static token and valid JWTs, and serve /openapi.json
// to anyone.
func TestAPIAuth(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	sign := func(key string, exp time.Time, method jwt.SigningMethod) string {
		tok, err := jwt.NewWithClaims(method, jwt.MapClaims{"sub": "test", "exp": exp.Unix()}).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	future, past := time.Now().Add(time.Hour), time.Now().Add(-time.Minute)
	for _, c := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"none", "", false},
		{"wrong static", "test-token-0123456789abcdeX", false},
		{"static", apiToken, true},
		{"jwt", sign(apiJWTKey, future, jwt.SigningMethodHS256), true},
		{"jwt hs512", sign(apiJWTKey, future, jwt.SigningMethodHS512), true},
		{"jwt expired", sign(apiJWTKey, past, jwt.SigningMethodHS256), false},
		{"jwt other key", sign(apiJWTKey+"x", future, jwt.SigningMethodHS256), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := withToken(c.token)
			defer cancel()
			_, err := a.gc.ListPdrs(ctx, &pb.ListRequest{})
			_, aerr := a.gc.Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{deleteOp(pb.Kind_KIND_PDR, 31, "")}, DryRun: true})
			code := codes.OK
			if !c.ok {
				code = codes.Unauthenticated
			}
			wantCode(t, "grpc list", err, code)
			wantCode(t, "grpc apply dry run", aerr, code)

			req, _ := http.NewRequest(http.MethodGet, "http://"+apiREST+"/v1/pdrs", nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := a.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := http.StatusOK
			if !c.ok {
				want = http.StatusUnauthorized
			}
			if resp.StatusCode != want {
				t.Errorf("rest GET /v1/pdrs: %d %s, want %d", resp.StatusCode, body, want)
			}
		})
	}
	resp, err := a.http.Get("http://" + apiREST + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"swagger"`) || !strings.Contains(string(body), "/v1/apply") {
		t.Errorf("GET /openapi.json: %d, %.200s", resp.StatusCode, body)
	}
	// A dry run changed nothing.
	if _, err := yamlcfg.Load(a.cfgPath); err != nil {
		t.Fatal(err)
	}
	if p, ok := findPDR(mustLoad(t, a.cfgPath), 31); !ok || p.ID != 31 {
		t.Errorf("pdr 31 gone after dry-run deletes")
	}
}

func mustLoad(t *testing.T, path string) *config.Config {
	t.Helper()
	c, err := yamlcfg.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAPIRESTErrors checks REST maps validation to 400 with the field
// path, unknown objects to 404, and JSON fields by their proto names.
func TestAPIRESTErrors(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	do := func(method, path, body string) (int, string) { return a.rest(t, method, path, body) }
	code, body := do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"pdr":{"id":500,"precedence":1,"far":1,"match":{"in":"lan0","dst":"10.9.0.0/33"}}}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[0].create.pdr.match.dst") {
		t.Errorf("bad CIDR: %d %s, want 400 naming operations[0].create.pdr.match.dst", code, body)
	}
	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"pdr":{"id":500,"precedence":1,"far":1,"match":{"in":"lan0","gre_key":5}}}}]}`)
	if code != http.StatusOK || !strings.Contains(body, `"generation"`) {
		t.Errorf("valid create: %d %s, want 200 with the generation", code, body)
	}
	code, body = do(http.MethodGet, "/v1/pdrs/500", "")
	if code != http.StatusOK || !strings.Contains(body, `"gre_key":5`) && !strings.Contains(body, `"gre_key": 5`) {
		t.Errorf("GET /v1/pdrs/500: %d %s, want 200 with gre_key 5", code, body)
	}
	code, body = do(http.MethodGet, "/v1/pdrs/501", "")
	if code != http.StatusNotFound {
		t.Errorf("GET /v1/pdrs/501: %d %s, want 404", code, body)
	}
	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"pdr":{"id":"x"}}}]}`)
	if code != http.StatusBadRequest {
		t.Errorf("malformed JSON: %d %s, want 400", code, body)
	}
}

// TestAPIRestartPersists applies changes, restarts the agent and expects
// it to serve exactly what was last committed, with forwarding going on.
func TestAPIRestartPersists(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	// Drop UDP 7777 (was redirected by pdr 12) with a higher-precedence
	// rule, and remove pdr 31.
	a.mustApply(t, createOp(pdrObj(&pb.Pdr{Id: 5, Precedence: 1, Far: 3, Match: &pb.Match{In: "lan0", Proto: "udp", Dport: "7777"}})),
		deleteOp(pb.Kind_KIND_PDR, 31, ""))
	ctx, cancel := withToken(apiToken)
	defer cancel()
	before, err := a.gc.ListPdrs(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.StopAgent(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.start("--grpc-addr", apiGRPC, "--rest-addr", apiREST, "--api-tokens", filepath.Join(a.dir, "tokens"), "--api-jwt-key", filepath.Join(a.dir, "jwt.key"))
	var after *pb.ListPdrsResponse
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, err = a.gc.ListPdrs(ctx, &pb.ListRequest{})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, after) {
		t.Errorf("pdrs after restart:\n%v\nwant\n%v", after, before)
	}
	a.warmUp()
	s0 := a.stats()
	mustSendUDP(t, a.A, "10.2.0.2", 7777, 4, 0, 16)
	s1 := a.stats()
	if d := s1.pdr(5).Packets - s0.pdr(5).Packets; d != 4 {
		t.Errorf("pdr 5 (created over the API before the restart) counted %d of 4", d)
	}
	if d := s1.pdr(12).Packets - s0.pdr(12).Packets; d != 0 {
		t.Errorf("pdr 12 counted %d packets, want 0 (pdr 5 wins)", d)
	}

	// Killed right after an Apply, before the journal is folded into the
	// file: the restarted agent replays the journal.
	a.mustApply(t, deleteOp(pb.Kind_KIND_PDR, 5, ""), createOp(pdrObj(&pb.Pdr{Id: 6, Precedence: 2, Far: 3, Match: &pb.Match{In: "lan0", Proto: "udp", Dport: "7778"}})))
	want, err := a.gc.ListPdrs(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.StopAgent(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if file, err := yamlcfg.Load(a.cfgPath); err == nil {
		if _, ok := findPDR(file, 6); ok {
			t.Logf("the file already had pdr 6 when the agent was killed (folded early); the replay is not exercised")
		}
	}
	a.start("--grpc-addr", apiGRPC, "--rest-addr", apiREST, "--api-tokens", filepath.Join(a.dir, "tokens"), "--api-jwt-key", filepath.Join(a.dir, "jwt.key"))
	if !strings.Contains(a.log(), "replayed API changes") {
		t.Errorf("restarted agent did not log a journal replay")
	}
	got, err := a.gc.ListPdrs(ctx, &pb.ListRequest{})
	for i := 0; err != nil && i < 100; i++ {
		time.Sleep(50 * time.Millisecond)
		got, err = a.gc.ListPdrs(ctx, &pb.ListRequest{})
	}
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(want, got) {
		t.Errorf("pdrs after SIGKILL and restart:\n%v\nwant\n%v", got, want)
	}
}

// TestAPIFlows sends two UDP flows of known sizes through the gateway and
// reads them back over gRPC and with `edgeplane flows`: exact packets and
// bytes, the PDR that classified them, the ingress interface, the busier
// first.
func TestAPIFlows(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	a.warmUp()
	const payload = 100
	mustSendUDP(t, a.A, lab.AddrB, countUDPPort, 25, 0, payload)
	mustSendUDP(t, a.A, lab.AddrB, countUDPPort, 5, 0, payload)
	ctx, cancel := withToken(apiToken)
	defer cancel()
	r, err := a.gc.ListFlows(ctx, &pb.ListFlowsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ours []*pb.Flow
	for _, f := range r.GetFlows() {
		if f.GetDst() == lab.AddrB && f.GetDport() == countUDPPort && f.GetProto() == "udp" {
			ours = append(ours, f)
		}
	}
	if len(ours) != 2 {
		t.Fatalf("%d flows to %s:%d, want 2: %v", len(ours), lab.AddrB, countUDPPort, r.GetFlows())
	}
	for i, n := range []uint64{25, 5} {
		f := ours[i]
		if f.GetPackets() != n || f.GetBytes() != n*udp4Frame(payload) || f.GetPdr() != 12 || f.GetIn() != lab.LanName || !f.GetLive() || f.GetSrc() != lab.AddrA {
			t.Errorf("flow %d: %v, want %d packets, %d bytes, pdr 12, in lan0, live, from %s", i, f, n, n*udp4Frame(payload), lab.AddrA)
		}
	}
	top, err := a.gc.ListFlows(ctx, &pb.ListFlowsRequest{Top: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(top.GetFlows()) != 1 || top.GetFlows()[0].GetSport() != ours[0].GetSport() {
		t.Errorf("top 1: %v, want the 25-packet flow", top.GetFlows())
	}
	out, err := nsRun(a.GW, edgeplaneBin, "flows", "--top", "3", "--server", apiGRPC, "--token", apiToken)
	if err != nil {
		t.Fatalf("edgeplane flows: %v\n%s", err, out)
	}
	// RTT and RATE: "-", FlowOpt's probe is off.
	if !strings.Contains(out, "PACKETS") || !regexp.MustCompile(fmt.Sprintf(`\s25\s+%d\s+-\s+-\n`, 25*udp4Frame(payload))).MatchString(out) {
		t.Errorf("edgeplane flows --top 3: want the 25-packet flow's counters:\n%s", out)
	}
}

// TestAPIQoSClasses: QoS classes are objects of the API like the others:
// created over REST, read back over gRPC with their fields as written,
// listed at /v1/qos-classes; a bad field is refused naming it; a PDR
// names a class; a class a PDR names cannot be deleted.
func TestAPIQoSClasses(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	ctx, cancel := withToken(apiToken)
	defer cancel()
	do := func(method, path, body string) (int, string) { return a.rest(t, method, path, body) }
	code, body := do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"qos_class":{"id":2,"type":"embb","dscp":"10,12,14","rate":"200mbit","quantum":3000}}}]}`)
	if code != http.StatusOK {
		t.Fatalf("create qos class: %d %s", code, body)
	}
	want := &pb.QosClass{Id: 2, Type: "embb", Dscp: "10,12,14", Rate: "200mbit", Quantum: 3000}
	got, err := a.gc.GetQosClass(ctx, &pb.GetByIDRequest{Id: 2})
	if err != nil || !proto.Equal(got, want) {
		t.Errorf("get qos class: %v, %v; want %v", got, err, want)
	}
	if code, body := do(http.MethodGet, "/v1/qos-classes", ""); code != http.StatusOK || !strings.Contains(body, `"200mbit"`) {
		t.Errorf("GET /v1/qos-classes: %d %s", code, body)
	}
	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"qos_class":{"id":3,"type":"urllc","dscp":"12"}}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[0].create.qos_class.dscp") || !strings.Contains(body, "dscp 12 is already") {
		t.Errorf("a code point in two classes: %d %s, want 400 naming the field", code, body)
	}
	a.mustApply(t, createOp(pdrObj(&pb.Pdr{Id: 88, Precedence: 3, Far: 1, Qos: 2, Match: &pb.Match{In: "lan0", Dst: "10.88.0.0/16"}})))
	if _, err := a.apply(t, deleteOp(pb.Kind_KIND_QOS_CLASS, 2, "")); err == nil || !strings.Contains(err.Error(), "pdr 88") {
		t.Errorf("deleting a class a PDR names: %v, want refused naming pdr 88", err)
	}
}

// TestAPIFlowOpt: FlowOpt modules are objects of the API like the
// others, named by their module: created over REST, read back over gRPC
// with their fields as written, listed at /v1/flowopt and got at
// /v1/flowopt/{module}; switched off and on at runtime by an update and
// taken out by a delete by name; a setting on a module it is not for,
// or out of its range, is refused naming the field.
func TestAPIFlowOpt(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	ctx, cancel := withToken(apiToken)
	defer cancel()
	do := func(method, path, body string) (int, string) { return a.rest(t, method, path, body) }
	code, body := do(http.MethodPost, "/v1/apply", `{"operations":[`+
		`{"create":{"flowopt":{"module":"probe","rtt_factor":"2"}}},`+
		`{"create":{"flowopt":{"module":"relief","hot":"200%","min_pps":5000}}}]}`)
	if code != http.StatusOK {
		t.Fatalf("create flowopt modules: %d %s", code, body)
	}
	want := &pb.FlowOptModule{Module: "relief", Hot: "200%", MinPps: 5000}
	got, err := a.gc.GetFlowOpt(ctx, &pb.GetByNameRequest{Name: "relief"})
	if err != nil || !proto.Equal(got, want) {
		t.Errorf("get flowopt relief: %v, %v; want %v", got, err, want)
	}
	// protojson spaces its output at random: compare messages, not text.
	probe := &pb.FlowOptModule{Module: "probe", RttFactor: "2"}
	var list pb.ListFlowOptResponse
	code, body = do(http.MethodGet, "/v1/flowopt", "")
	if err := protojson.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil ||
		!proto.Equal(&list, &pb.ListFlowOptResponse{Flowopt: []*pb.FlowOptModule{probe, want}}) {
		t.Errorf("GET /v1/flowopt: %d %s (%v)", code, body, err)
	}
	var one pb.FlowOptModule
	code, body = do(http.MethodGet, "/v1/flowopt/probe", "")
	if err := protojson.Unmarshal([]byte(body), &one); code != http.StatusOK || err != nil || !proto.Equal(&one, probe) {
		t.Errorf("GET /v1/flowopt/probe: %d %s (%v)", code, body, err)
	}
	if code, body := do(http.MethodGet, "/v1/flowopt/fairness", ""); code != http.StatusNotFound {
		t.Errorf("GET /v1/flowopt/fairness (not listed): %d %s, want 404", code, body)
	}

	// Switched off at runtime, and on again.
	off := &pb.FlowOptModule{Module: "relief", Off: true, Hot: "200%", MinPps: 5000}
	a.mustApply(t, updateOp(&pb.Object{Kind: &pb.Object_Flowopt{Flowopt: off}}))
	if got, err := a.gc.GetFlowOpt(ctx, &pb.GetByNameRequest{Name: "relief"}); err != nil || !got.GetOff() {
		t.Errorf("relief after switching it off: %v, %v", got, err)
	}
	a.mustApply(t, updateOp(&pb.Object{Kind: &pb.Object_Flowopt{Flowopt: want}}))
	if got, err := a.gc.GetFlowOpt(ctx, &pb.GetByNameRequest{Name: "relief"}); err != nil || got.GetOff() {
		t.Errorf("relief after switching it on: %v, %v", got, err)
	}

	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"flowopt":{"module":"fairness","hot":"150%"}}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[0].create.flowopt.hot") || !strings.Contains(body, "not for module fairness") {
		t.Errorf("hot on fairness: %d %s, want 400 naming the field", code, body)
	}
	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[{"update":{"flowopt":{"module":"probe","rtt_factor":"20"}}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[0].update.flowopt.rtt_factor") || !strings.Contains(body, "20 is outside 1.1-10") {
		t.Errorf("rtt_factor 20: %d %s, want 400 naming the field and the range", code, body)
	}
	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"flowopt":{"module":"pacing"}}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[0].create.flowopt.module") || !strings.Contains(body, "want probe, fairness or relief") {
		t.Errorf("unknown module: %d %s, want 400 listing the modules", code, body)
	}

	a.mustApply(t, deleteOp(pb.Kind_KIND_FLOWOPT, 0, "probe"))
	if _, err := a.gc.GetFlowOpt(ctx, &pb.GetByNameRequest{Name: "probe"}); status.Code(err) != codes.NotFound {
		t.Errorf("get flowopt probe after delete: %v, want NotFound", err)
	}
}

// TestAPIStrategies: CPU strategies are objects of the API like the
// others: created over REST with their selectors (pod labels a map),
// read back over gRPC with their fields as written, listed at
// /v1/strategies and got at /v1/strategies/{id}; updated and deleted by
// id; a setting of another policy, a dedicated CPU another strategy has
// or a regex that does not compile is refused naming the field.
func TestAPIStrategies(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	ctx, cancel := withToken(apiToken)
	defer cancel()
	do := func(method, path, body string) (int, string) { return a.rest(t, method, path, body) }
	code, body := do(http.MethodPost, "/v1/apply", `{"operations":[`+
		`{"create":{"strategy":{"id":1,"name":"gnb","command_regex":"^nr-gnb$","selectors":{"pod_labels":{"app":"gnb"}},"priority":true,"cpus":"2-3","irq_affinity":["lan0"]}}},`+
		`{"create":{"strategy":{"id":2,"selectors":{"user":"open5gs"},"priority":true,"policy":"deadline","execution_time":"500us"}}}]}`)
	if code != http.StatusOK {
		t.Fatalf("create strategies: %d %s", code, body)
	}
	gnb := &pb.Strategy{Id: 1, Name: "gnb", CommandRegex: "^nr-gnb$", Selectors: &pb.Selectors{PodLabels: map[string]string{"app": "gnb"}},
		Priority: true, Cpus: "2-3", IrqAffinity: []string{"lan0"}}
	got, err := a.gc.GetStrategy(ctx, &pb.GetByIDRequest{Id: 1})
	if err != nil || !proto.Equal(got, gnb) {
		t.Errorf("get strategy 1: %v, %v; want %v", got, err, gnb)
	}
	// protojson spaces its output at random: compare messages, not text.
	upf := &pb.Strategy{Id: 2, Selectors: &pb.Selectors{User: "open5gs"}, Priority: true, Policy: "deadline", ExecutionTime: "500µs"}
	var list pb.ListStrategiesResponse
	code, body = do(http.MethodGet, "/v1/strategies", "")
	if err := protojson.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil ||
		!proto.Equal(&list, &pb.ListStrategiesResponse{Strategies: []*pb.Strategy{gnb, upf}}) {
		t.Errorf("GET /v1/strategies: %d %s (%v)", code, body, err)
	}
	var one pb.Strategy
	code, body = do(http.MethodGet, "/v1/strategies/2", "")
	if err := protojson.Unmarshal([]byte(body), &one); code != http.StatusOK || err != nil || !proto.Equal(&one, upf) {
		t.Errorf("GET /v1/strategies/2: %d %s (%v)", code, body, err)
	}
	if code, body := do(http.MethodGet, "/v1/strategies/3", ""); code != http.StatusNotFound {
		t.Errorf("GET /v1/strategies/3 (none): %d %s, want 404", code, body)
	}

	// Updated: round robin at 20, the CPUs given up.
	rr := &pb.Strategy{Id: 1, Name: "gnb", CommandRegex: "^nr-gnb$", Selectors: &pb.Selectors{User: "0"}, Priority: true, Policy: "rr", RtPriority: 20}
	a.mustApply(t, updateOp(&pb.Object{Kind: &pb.Object_Strategy{Strategy: rr}}))
	if got, err := a.gc.GetStrategy(ctx, &pb.GetByIDRequest{Id: 1}); err != nil || !proto.Equal(got, rr) {
		t.Errorf("strategy 1 after the update: %v, %v; want %v", got, err, rr)
	}

	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"strategy":{"id":3,"command_regex":"ue","priority":true,"execution_time":"1ms"}}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[0].create.strategy.execution_time") || !strings.Contains(body, "FIFO and RR have no budget") {
		t.Errorf("execution_time on fifo: %d %s, want 400 naming the field and why", code, body)
	}
	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[`+
		`{"create":{"strategy":{"id":3,"command_regex":"ue","cpus":"4-5"}}},`+
		`{"create":{"strategy":{"id":4,"command_regex":"ru","cpus":"5"}}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[1].create.strategy.cpus") || !strings.Contains(body, "cpu 5 is already dedicated to strategy 3") {
		t.Errorf("cpu 5 in two strategies: %d %s, want 400 naming the field and the strategy", code, body)
	}
	code, body = do(http.MethodPost, "/v1/apply", `{"operations":[{"create":{"strategy":{"id":3,"command_regex":"(ue"}}}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[0].create.strategy.command_regex") || !strings.Contains(body, "invalid RE2 expression") {
		t.Errorf("a regex that does not compile: %d %s, want 400 naming the field", code, body)
	}

	a.mustApply(t, deleteOp(pb.Kind_KIND_STRATEGY, 2, ""))
	if _, err := a.gc.GetStrategy(ctx, &pb.GetByIDRequest{Id: 2}); status.Code(err) != codes.NotFound {
		t.Errorf("get strategy 2 after delete: %v, want NotFound", err)
	}
}
