// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// agentYAML is what the agent of these tests serves.
const agentYAML = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
paths:
  - {id: 1, type: gre, interface: wan0, local: 192.0.2.1, remote: 198.51.100.1, key: 7}
fars:
  - {id: 1, action: pass}
  - {id: 2, action: encap, path: 1}
  - {id: 4, action: nat, address: 10.1.0.11, port: 8080}
  - {id: 5, action: nat, interface: lan0, address: 2001:db8::12, port: 8443}
pdrs:
  - {id: 10, precedence: 100, match: {in: lan0, dst: 10.2.0.0/16}, far: 2}
  - {id: 20, precedence: 10, match: {proto: udp, dport: 5000-5100, dscp: 46}, far: 1}
lbrs:
  - {id: 1, algorithm: maglev, members: [{far: 4}, {far: 5, weight: 3}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1}
`

func agentConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(agentYAML))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// agentObjects is agentConfig as the API carries it.
func agentObjects(t *testing.T) client.Objects {
	t.Helper()
	c := agentConfig(t)
	o := client.Objects{}
	for _, k := range schema.Kinds() {
		for _, v := range schema.Objects(c, k) {
			o[k] = append(o[k], api.ToPB(k, v))
		}
	}
	return o
}

// schema is the gateway's kinds, which the CLI serves.
var schema = config.Builtin()

// typed returns msgs as messages of type M.
func typed[M proto.Message](msgs []proto.Message) []M {
	out := make([]M, len(msgs))
	for i, m := range msgs {
		out[i] = m.(M)
	}
	return out
}

func fieldErrors(t *testing.T, err error) []string {
	t.Helper()
	var fe config.Errors
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not config.Errors", err, err)
	}
	var out []string
	for _, e := range fe {
		out = append(out, e.Error())
	}
	return out
}

func TestFileObjectsWholeConfig(t *testing.T) {
	cur := agentConfig(t)
	file, notes, err := fileObjects(schema, []byte(agentYAML+"limits: {rules: 16}\n"), &config.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(file.PDRs, cur.PDRs) || !reflect.DeepEqual(file.Paths, cur.Paths) || len(file.Interfaces) != 2 || len(file.FARs) != 4 ||
		!reflect.DeepEqual(file.LBRs, cur.LBRs) || !reflect.DeepEqual(file.Services, cur.Services) {
		t.Errorf("objects = %+v, want those of the file", file)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "limits ignored") {
		t.Errorf("notes = %q, want limits ignored", notes)
	}
}

func TestFileObjectsPartial(t *testing.T) {
	// Refers to an interface and a FAR only the agent has.
	data := "pdrs:\n  - {id: 11, precedence: 5, match: {in: lan0, proto: tcp, dport: 443}, far: 2}\n"
	file, notes, err := fileObjects(schema, []byte(data), agentConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 || len(file.Interfaces)+len(file.Paths)+len(file.FARs)+len(file.LBRs)+len(file.Services) != 0 || len(file.PDRs) != 1 {
		t.Fatalf("objects = %+v, notes %q; want pdr 11 only", file, notes)
	}
	p := file.PDRs[0]
	if p.ID != 11 || p.FAR != 2 || p.Match.In != "lan0" || p.Match.Dport.String() != "443" {
		t.Errorf("pdr = %+v", p)
	}

	// Replaces the agent's pdr 10: no duplicate id.
	file, _, err = fileObjects(schema, []byte("pdrs:\n  - {id: 10, precedence: 1, far: 1}\n"), agentConfig(t))
	if err != nil || len(file.PDRs) != 1 || file.PDRs[0].Precedence != 1 {
		t.Errorf("replacing pdr 10: %+v, %v", file, err)
	}

	// Nothing at all.
	for _, empty := range []string{"", "# nothing\n", "pdrs: []\n", "~\n"} {
		file, _, err := fileObjects(schema, []byte(empty), agentConfig(t))
		if err != nil || len(file.PDRs)+len(file.FARs)+len(file.Paths)+len(file.Interfaces) != 0 {
			t.Errorf("%q: %+v, %v; want no objects", empty, file, err)
		}
	}
}

func TestFileObjectsPartialErrors(t *testing.T) {
	data := `pdrs:
  - id: 11
    match: {dst: 10.0.0.1/8}
    far: 9
  - id: 12
    mach: {proto: udp}
    far: 1
`
	got := fieldErrors(t, func() error { _, _, err := fileObjects(schema, []byte(data), agentConfig(t)); return err }())
	want := []string{
		"pdrs[0].match.dst: host bits set; did you mean 10.0.0.0/8?",
		"pdrs[0].far: no far with id 9",
		`pdrs[1].mach: unknown field (did you mean "match"?)`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFileObjectsErrorAtAgentObject(t *testing.T) {
	// A new path with the local address and key of the agent's path 1:
	// decapsulation could not tell them apart, reported at the second.
	data := "paths:\n  - {id: 2, type: gre, interface: wan0, local: 192.0.2.1, remote: 203.0.113.1, key: 7}\n"
	got := fieldErrors(t, func() error { _, _, err := fileObjects(schema, []byte(data), agentConfig(t)); return err }())
	if len(got) != 1 || !strings.HasPrefix(got[0], "paths[1].key: ") || !strings.HasSuffix(got[0], "(paths[1] is the agent's path 1, not in the file)") {
		t.Errorf("errors = %q", got)
	}
}

func TestFileObjectsDocumentErrors(t *testing.T) {
	for _, data := range []string{"pdrs: [\n", "- id: 1\n", "pdrs: []\n---\nfars: []\n"} {
		_, _, err := fileObjects(schema, []byte(data), agentConfig(t))
		got := fieldErrors(t, err)
		if len(got) != 1 || !strings.HasPrefix(got[0], "config: ") {
			t.Errorf("%q: errors = %q, want one config: error", data, got)
		}
	}
}

func TestPlanApply(t *testing.T) {
	data := `interfaces:
  - {name: lan0, role: lan}
fars:
  - {id: 2, action: drop}
pdrs:
  - {id: 20, precedence: 10, match: {proto: udp, dport: 5000-5100, dscp: 46}, far: 1}
  - {id: 30, precedence: 1, match: {gre_key: 5}, far: 1}
`
	cur := agentConfig(t)
	file, _, err := fileObjects(schema, []byte(data), cur)
	if err != nil {
		t.Fatal(err)
	}
	changes := planApply(schema, file, cur)
	var got []string
	for _, c := range changes {
		got = append(got, string(c.kind)+" "+c.key+" "+c.verb)
		switch {
		case c.verb == "unchanged" && c.op != nil,
			c.verb == "created" && c.op.GetCreate() == nil,
			c.verb == "configured" && c.op.GetUpdate() == nil:
			t.Errorf("%s %s %s: op %v", c.kind, c.key, c.verb, c.op)
		}
	}
	want := []string{"interface lan0 unchanged", "far 2 configured", "pdr 20 unchanged", "pdr 30 created"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
	// Sent normalized: gre_key implies proto gre.
	if m := changes[3].op.GetCreate().GetPdr().GetMatch(); m.GetProto() != "gre" || m.GetGreKey() != 5 {
		t.Errorf("pdr 30 match = %v", m)
	}
	if f := changes[1].op.GetUpdate().GetFar(); f.GetAction() != "drop" || f.GetPath() != 0 {
		t.Errorf("far 2 = %v", f)
	}
}

func TestPrintTable(t *testing.T) {
	o := agentObjects(t)
	for _, tc := range []struct {
		k    config.Kind
		want string
	}{
		{config.KindPDR, `ID  PRECEDENCE  IN    SRC  DST          PROTO  SPORT  DPORT      DSCP  GRE_KEY  FAR
10  100         lan0  *    10.2.0.0/16  *      *      *          *     *        2
20  10          *     *    *            udp    *      5000-5100  46    *        1
`},
		{config.KindFAR, `ID  ACTION  INTERFACE  PATH  NAT
1   pass    -          -     -
2   encap   -          1     -
4   nat     -          -     10.1.0.11:8080
5   nat     lan0       -     [2001:db8::12]:8443
`},
		{config.KindLBR, `ID  ALGORITHM  MEMBERS
1   maglev     4:1,5:3
`},
		{config.KindService, `ID  VIP           PORT  PROTO  LBR  CONNECTIONS
1   203.0.113.10  80    tcp    1    pinned
`},
		{config.KindPath, `ID  TYPE  INTERFACE  LOCAL      REMOTE        KEY  SEQ  TTL  DSCP
1   gre   wan0       192.0.2.1  198.51.100.1  7    no   64   inner
`},
		{config.KindInterface, `NAME  ROLE  XDP
lan0  lan   auto
wan0  wan   auto
`},
	} {
		wantTable(t, o, tc.k, tc.want)
	}
}

// wantTable checks the table of kind k printed from o.
func wantTable(t *testing.T, o client.Objects, k config.Kind, want string) {
	t.Helper()
	var b bytes.Buffer
	if err := printObjects(&b, schema, k, o[k], outTable, false); err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Errorf("%s table:\n%s\nwant:\n%s", schema.Plural(k), b.String(), want)
	}
}

func TestPrintJSON(t *testing.T) {
	o := agentObjects(t)
	var b bytes.Buffer
	if err := printObjects(&b, schema, config.KindPDR, o[config.KindPDR], outJSON, false); err != nil {
		t.Fatal(err)
	}
	var list pb.ListPdrsResponse
	if err := protojson.Unmarshal(b.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&list, &pb.ListPdrsResponse{Pdrs: typed[*pb.Pdr](o[config.KindPDR])}) {
		t.Errorf("round trip: %v", &list)
	}
	for _, want := range []string{"{\n  \"pdrs\": [\n    {\n      \"id\": 10,", `"dport": "5000-5100"`, `"in": ""`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("json lacks %q:\n%s", want, b.String())
		}
	}
	// The same output every run, though protojson varies its spacing.
	var again bytes.Buffer
	_ = printObjects(&again, schema, config.KindPDR, o[config.KindPDR], outJSON, false)
	if again.String() != b.String() {
		t.Error("json output differs between runs")
	}

	b.Reset()
	one := o[config.KindFAR][1:2]
	if err := printObjects(&b, schema, config.KindFAR, one, outJSON, true); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, map[string]any{"id": 2.0, "action": "encap", "interface": "", "path": 1.0, "address": "", "port": 0.0}) {
		t.Errorf("single far = %v", m)
	}

	b.Reset()
	if err := printObjects(&b, schema, config.KindLBR, o[config.KindLBR], outJSON, false); err != nil {
		t.Fatal(err)
	}
	var lbrs pb.ListLbrsResponse
	if err := protojson.Unmarshal(b.Bytes(), &lbrs); err != nil || !proto.Equal(&lbrs, &pb.ListLbrsResponse{Lbrs: typed[*pb.Lbr](o[config.KindLBR])}) {
		t.Errorf("lbrs round trip: %v, %v", &lbrs, err)
	}
	b.Reset()
	if err := printObjects(&b, schema, config.KindService, o[config.KindService], outJSON, true); err != nil {
		t.Fatal(err)
	}
	m = nil
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, map[string]any{"id": 1.0, "vip": "203.0.113.10", "port": 80.0, "proto": "tcp", "lbr": 1.0, "health": nil, "stateless": false}) {
		t.Errorf("single service = %v", m)
	}
}

func TestPrintYAMLFeedsApply(t *testing.T) {
	o := agentObjects(t)
	cur := agentConfig(t)
	var all bytes.Buffer
	for _, k := range schema.Kinds() {
		var b bytes.Buffer
		if err := printObjects(&b, schema, k, o[k], outYAML, false); err != nil {
			t.Fatal(err)
		}
		all.Write(b.Bytes())
		if !strings.HasPrefix(b.String(), schema.Plural(k)+":\n") || strings.Contains(b.String(), "null") {
			t.Errorf("%s yaml:\n%s", schema.Plural(k), b.String())
		}
		file, _, err := fileObjects(schema, b.Bytes(), cur)
		if err != nil {
			t.Fatalf("%s yaml does not apply: %v\n%s", schema.Plural(k), err, b.String())
		}
		if n := file.Interfaces; k == config.KindInterface && !reflect.DeepEqual(n, cur.Interfaces) {
			t.Errorf("interfaces back = %+v", n)
		}
		if n := file.Paths; k == config.KindPath && !reflect.DeepEqual(n, cur.Paths) {
			t.Errorf("paths back = %+v", n)
		}
		if n := file.FARs; k == config.KindFAR && !reflect.DeepEqual(n, cur.FARs) {
			t.Errorf("fars back = %+v", n)
		}
		if n := file.PDRs; k == config.KindPDR && !reflect.DeepEqual(n, cur.PDRs) {
			t.Errorf("pdrs back = %+v", n)
		}
		if n := file.LBRs; k == config.KindLBR && !reflect.DeepEqual(n, cur.LBRs) {
			t.Errorf("lbrs back = %+v", n)
		}
		if n := file.Services; k == config.KindService && !reflect.DeepEqual(n, cur.Services) {
			t.Errorf("services back = %+v", n)
		}
		changes := planApply(schema, file, cur)
		if len(changes) != len(o[k]) {
			t.Errorf("%s: %d changes, want %d", schema.Plural(k), len(changes), len(o[k]))
		}
		for _, c := range changes {
			if c.verb != "unchanged" {
				t.Errorf("%s %s %s, want unchanged", c.kind, c.key, c.verb)
			}
		}
	}
	// Every kind's output together is a whole config: to an empty agent
	// it creates all of it, referred-to objects first.
	file, _, err := fileObjects(schema, all.Bytes(), &config.Config{})
	if err != nil {
		t.Fatalf("all kinds do not apply: %v\n%s", err, all.String())
	}
	if !reflect.DeepEqual(file.Interfaces, cur.Interfaces) || !reflect.DeepEqual(file.Paths, cur.Paths) ||
		!reflect.DeepEqual(file.FARs, cur.FARs) || !reflect.DeepEqual(file.PDRs, cur.PDRs) ||
		!reflect.DeepEqual(file.LBRs, cur.LBRs) || !reflect.DeepEqual(file.Services, cur.Services) {
		t.Errorf("all kinds back = %+v\nwant %+v", file, cur)
	}
	var order []string
	for _, c := range planApply(schema, file, &config.Config{}) {
		if c.verb != "created" {
			t.Errorf("%s %s %s, want created", c.kind, c.key, c.verb)
		}
		if len(order) == 0 || order[len(order)-1] != schema.Plural(c.kind) {
			order = append(order, schema.Plural(c.kind))
		}
	}
	if want := []string{"interfaces", "paths", "fars", "lbrs", "services", "pdrs"}; !reflect.DeepEqual(order, want) {
		t.Errorf("created in the order %q, want %q", order, want)
	}
	var b bytes.Buffer
	if err := printObjects(&b, schema, config.KindPDR, nil, outYAML, false); err != nil || b.String() != "pdrs: []\n" {
		t.Errorf("no pdrs: %q, %v", b.String(), err)
	}
	b.Reset()
	if err := printObjects(&b, schema, config.KindLBR, o[config.KindLBR], outYAML, false); err != nil {
		t.Fatal(err)
	}
	// An unset weight is left out, not printed as null.
	want := "lbrs:\n    - id: 1\n      algorithm: maglev\n      members:\n        - far: 4\n        - far: 5\n          weight: 3\n"
	if b.String() != want {
		t.Errorf("lbrs yaml:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestStatsFromPB(t *testing.T) {
	s := &bpf.Snapshot{
		Gen:       3,
		PDRs:      map[uint32]bpf.Counter{10: {Packets: 5, Bytes: 500}, 20: {}},
		Verdicts:  make([]bpf.Counter, len(bpf.VerdictNames)),
		Reasons:   make([]bpf.Counter, len(bpf.ReasonNames)),
		CacheHit:  7,
		CacheMiss: 2,
		Paths:     map[uint32]bpf.PathCounters{1: {Tx: bpf.Counter{Packets: 1, Bytes: 100}, Rx: bpf.Counter{Packets: 2, Bytes: 200}}},
	}
	s.Verdicts[bpf.XDPPass] = bpf.Counter{Packets: 9, Bytes: 900}
	s.Reasons[bpf.ReasonBadIHL] = bpf.Counter{Packets: 1, Bytes: 60}
	// As the agent sends it: every verdict, only the reasons that happened.
	p := &pb.Stats{
		Generation: 3,
		Pdrs: []*pb.PdrCounter{
			{Id: 10, Counter: &pb.Counter{Packets: 5, Bytes: 500}},
			{Id: 20, Counter: &pb.Counter{}},
		},
		Verdicts:        map[string]*pb.Counter{},
		Reasons:         map[string]*pb.Counter{"bad_ihl": {Packets: 1, Bytes: 60}, "from_the_future": {Packets: 1}},
		Paths:           []*pb.PathCounter{{Id: 1, Tx: &pb.Counter{Packets: 1, Bytes: 100}, Rx: &pb.Counter{Packets: 2, Bytes: 200}}},
		FlowCacheHits:   7,
		FlowCacheMisses: 2,
	}
	for i, n := range bpf.VerdictNames {
		p.Verdicts[n] = &pb.Counter{Packets: s.Verdicts[i].Packets, Bytes: s.Verdicts[i].Bytes}
	}
	got := statsFromPB(p)
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("snapshot = %+v\nwant %+v", got, s)
	}
	for _, asJSON := range []bool{false, true} {
		var a, b bytes.Buffer
		ca, cb := &cobra.Command{}, &cobra.Command{}
		ca.SetOut(&a)
		cb.SetOut(&b)
		if err := printStats(ca, s, asJSON); err != nil {
			t.Fatal(err)
		}
		if err := printStats(cb, got, asJSON); err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() {
			t.Errorf("json %v: output differs:\n%s\nvs\n%s", asJSON, a.String(), b.String())
		}
	}
}

func TestStatsAPIFlagsNeedServer(t *testing.T) {
	for _, args := range [][]string{
		{"stats", "--token", "x"},
		{"stats", "--tls"},
		{"stats", "--server", "127.0.0.1:1", "--pin-dir", "/x"},
	} {
		err := run(context.Background(), args)
		if err == nil || !(strings.Contains(err.Error(), "needs --server") || strings.Contains(err.Error(), "pin-dir")) {
			t.Errorf("%q: error %v", args, err)
		}
	}
}

// fakeAgent is an api.Backend holding a config in memory (a
// config.Store, as the agent does, without a dataplane).
type fakeAgent struct {
	mu    sync.Mutex
	store *config.Store
	gen   uint32
}

func (f *fakeAgent) Config() *config.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store.Config()
}

func (f *fakeAgent) View(fn func(*config.Store)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.store)
}

func (f *fakeAgent) Apply(ops []config.Op, dryRun bool, _ []byte) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, undo, err := f.store.Apply(ops)
	if err != nil {
		return 0, err
	}
	if dryRun {
		undo()
		return f.gen, nil
	}
	f.gen++
	return f.gen, nil
}

func (f *fakeAgent) Flows(int) ([]bpf.FlowStat, map[uint32]string, error) {
	return nil, nil, nil
}

func (f *fakeAgent) Snapshot() (*bpf.Snapshot, error) {
	return &bpf.Snapshot{Gen: f.gen, PDRs: map[uint32]bpf.Counter{10: {Packets: 1, Bytes: 64}},
		Verdicts: make([]bpf.Counter, len(bpf.VerdictNames)), Reasons: make([]bpf.Counter, len(bpf.ReasonNames)),
		Paths: map[uint32]bpf.PathCounters{}}, nil
}

// TestCommandsAgainstAPI runs get, apply, delete and stats --server
// against the API server on loopback, with a token and TLS.
func TestCommandsAgainstAPI(t *testing.T) {
	const token = "ctl-test-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := api.LoadAuth(tokens, "")
	if err != nil {
		t.Fatal(err)
	}
	cert := testutil.NewTestCert(t)
	ca, tlsCfg := cert.CertFile, cert.Server
	agent := &fakeAgent{store: config.NewStore(agentConfig(t)), gen: 1}
	l, err := api.Serve(api.NewServer(agent), api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth, TLS: tlsCfg}, make(chan error, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	conn := []string{"--server", l.GRPC.String(), "--tls-ca", ca, "--token", token, "--timeout", "5s"}

	ctl := func(stdin string, args ...string) (string, error) {
		t.Helper()
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetIn(strings.NewReader(stdin))
		root.SetArgs(append(args, conn...))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}

	out, err := ctl("", "get", "far", "2")
	if err != nil || out != "ID  ACTION  INTERFACE  PATH  NAT\n2   encap   -          1     -\n" {
		t.Errorf("get far 2: %q, %v", out, err)
	}
	objs := "fars:\n  - {id: 3, action: drop}\npdrs:\n  - {id: 10, precedence: 100, match: {in: lan0, dst: 10.2.0.0/16}, far: 3}\n  - {id: 20, precedence: 10, match: {proto: udp, dport: 5000-5100, dscp: 46}, far: 1}\n"
	out, err = ctl(objs, "apply", "-f", "-", "--dry-run")
	if err != nil || out != "far 3 created (dry run)\npdr 10 configured (dry run)\npdr 20 unchanged\ndry run: valid, nothing changed (generation 1 serving)\n" {
		t.Errorf("apply --dry-run: %q, %v", out, err)
	}
	out, err = ctl(objs, "apply", "-f", "-")
	if err != nil || !strings.HasPrefix(out, "far 3 created\npdr 10 configured\npdr 20 unchanged\ngeneration 2 (committed in ") {
		t.Errorf("apply: %q, %v", out, err)
	}
	if p := agent.Config().PDRs[0]; p.ID != 10 || p.FAR != 3 {
		t.Errorf("agent's pdr 10 = %+v", p)
	}
	out, err = ctl(objs, "apply", "-f", "-")
	if err != nil || out != "far 3 unchanged\npdr 10 unchanged\npdr 20 unchanged\n" {
		t.Errorf("apply again: %q, %v", out, err)
	}
	out, err = ctl("", "get", "pdrs", "-o", "yaml")
	if err != nil || !strings.HasPrefix(out, "pdrs:\n    - id: 10\n") {
		t.Errorf("get pdrs -o yaml: %q, %v", out, err)
	}

	// far 3 is still used: the whole batch fails, with the agent's reason.
	_, err = ctl("", "delete", "far", "3", "1")
	if err == nil || err.Error() != "delete: FailedPrecondition:\n  operations[0].delete: far 3 is still used by pdr 10 (far 3)\n  operations[1].delete: far 1 is still used by pdr 20 (far 1)" {
		t.Errorf("delete far 3 1: %v", err)
	}
	out, err = ctl("", "delete", "pdr", "10")
	if err != nil || !strings.HasPrefix(out, "pdr 10 deleted\ngeneration 3 (committed in ") {
		t.Errorf("delete pdr 10: %q, %v", out, err)
	}
	_, err = ctl("", "get", "pdr", "10")
	if err == nil || err.Error() != "get pdr 10: NotFound: no pdr 10" {
		t.Errorf("get pdr 10 after delete: %v", err)
	}
	// A service over an LBR of two new nat FARs. The file lists them
	// the other way round; apply sends what is referred to first.
	lb := `services:
  - {id: 2, vip: 203.0.113.20, port: 53, proto: udp, lbr: 3, stateless: true}
lbrs:
  - {id: 3, algorithm: maglev, members: [{far: 6, weight: 2}, {far: 7, weight: 0}]}
fars:
  - {id: 6, action: nat, address: 10.1.0.21, port: 5353}
  - {id: 7, action: nat, address: 10.1.0.22, port: 5353}
`
	out, err = ctl(lb, "apply", "-f", "-")
	if err != nil || !strings.HasPrefix(out, "far 6 created\nfar 7 created\nlbr 3 created\nservice 2 created\ngeneration 4 (committed in ") {
		t.Errorf("apply service: %q, %v", out, err)
	}
	out, err = ctl("", "get", "services")
	if err != nil || out != "ID  VIP           PORT  PROTO  LBR  CONNECTIONS\n1   203.0.113.10  80    tcp    1    pinned\n2   203.0.113.20  53    udp    3    stateless\n" {
		t.Errorf("get services: %q, %v", out, err)
	}
	out, err = ctl("", "get", "lbr", "3")
	if err != nil || out != "ID  ALGORITHM  MEMBERS\n3   maglev     6:2,7:0\n" {
		t.Errorf("get lbr 3: %q, %v", out, err)
	}
	out, err = ctl("", "get", "fars", "6", "7")
	if err != nil || out != "ID  ACTION  INTERFACE  PATH  NAT\n6   nat     -          -     10.1.0.21:5353\n7   nat     -          -     10.1.0.22:5353\n" {
		t.Errorf("get fars 6 7: %q, %v", out, err)
	}
	out, err = ctl("", "get", "services", "2", "-o", "yaml")
	if err != nil || out != "services:\n    - id: 2\n      vip: 203.0.113.20\n      port: 53\n      proto: udp\n      lbr: 3\n      stateless: true\n" {
		t.Errorf("get service 2 -o yaml: %q, %v", out, err)
	}
	out, err = ctl(out, "apply", "-f", "-")
	if err != nil || out != "service 2 unchanged\n" {
		t.Errorf("apply get's yaml: %q, %v", out, err)
	}
	// What uses an object goes first: the service, then its LBR, then
	// the LBR's FARs.
	_, err = ctl("", "delete", "lbr", "3")
	if err == nil || err.Error() != "delete: FailedPrecondition:\n  operations[0].delete: lbr 3 is still used by service 2 (lbr 3)" {
		t.Errorf("delete lbr 3 before its service: %v", err)
	}
	out, err = ctl("", "delete", "service", "2")
	if err != nil || !strings.HasPrefix(out, "service 2 deleted\ngeneration 5 (committed in ") {
		t.Errorf("delete service 2: %q, %v", out, err)
	}
	out, err = ctl("", "delete", "lbr", "3")
	if err != nil || !strings.HasPrefix(out, "lbr 3 deleted\ngeneration 6 (committed in ") {
		t.Errorf("delete lbr 3: %q, %v", out, err)
	}
	out, err = ctl("", "delete", "far", "6", "7")
	if err != nil || !strings.HasPrefix(out, "far 6 deleted\nfar 7 deleted\ngeneration 7 (committed in ") {
		t.Errorf("delete far 6 7: %q, %v", out, err)
	}
	_, err = ctl("", "get", "service", "2")
	if err == nil || err.Error() != "get service 2: NotFound: no service 2" {
		t.Errorf("get service 2 after delete: %v", err)
	}
	if c := agent.Config(); len(c.Services) != 1 || len(c.LBRs) != 1 || len(c.FARs) != 5 {
		t.Errorf("agent after deletes: %d services, %d lbrs, %d fars", len(c.Services), len(c.LBRs), len(c.FARs))
	}

	out, err = ctl("", "stats", "--json")
	if err != nil || !strings.Contains(out, `"generation": 7`) || !strings.Contains(out, `"10": {`) {
		t.Errorf("stats --server: %q, %v", out, err)
	}

	// Without the token, or without TLS.
	root := newRootCmd()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"get", "pdrs", "--server", l.GRPC.String(), "--tls-ca", ca})
	t.Setenv(client.TokenEnv, "")
	if err := root.Execute(); err == nil || !strings.HasPrefix(err.Error(), "get pdrs: Unauthenticated: missing or invalid bearer token") {
		t.Errorf("no token: %v", err)
	}
	t.Setenv(client.TokenEnv, token)
	root = newRootCmd()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"get", "pdrs", "--server", l.GRPC.String(), "--timeout", "2s"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "give --tls") {
		t.Errorf("no tls: %v", err)
	}
}
