// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/api/apitest"
	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// strategiesTable is get's table of agentYAML's strategies.
const strategiesTable = `ID  NAME  MATCH                          POLICY           CPUS
1   gnb   regex ^nr-gnb$ labels app=gnb  fifo 50          2-3
2   -     user open5gs                   weight others 2  -
`

// strategiesStatus is what get prints under strategiesTable: the test
// backend applies none.
const strategiesStatus = `
STRATEGY  PID  COMM  THREADS  APPLIED  RAN ON
1         -    -     0        -        -
2         -    -     0        -        -
`

// agentYAML is what the agent of these tests serves.
const agentYAML = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
paths:
  - {id: 1, type: gre, interface: wan0, local: 192.0.2.1, remote: 198.51.100.1, key: 7, monitor: {insecure: true}}
fars:
  - {id: 1, action: pass}
  - {id: 2, action: encap, path: 1}
  - {id: 4, action: nat, address: 10.1.0.11, port: 8080}
  - {id: 5, action: nat, interface: lan0, address: 2001:db8::12, port: 8443}
pdrs:
  - {id: 10, precedence: 100, match: {in: lan0, dst: 10.2.0.0/16}, far: 2}
  - {id: 20, precedence: 10, match: {proto: udp, dport: 5000-5100, dscp: 46}, far: 1}
qos_classes:
  - {id: 1, name: control, type: urllc, dscp: 46}
  - {id: 2, type: embb, dscp: "10,12,14,26", rate: 200mbit, quantum: 3000}
flowopt:
  - {module: fairness}
  - {module: probe, rtt_factor: 2}
  - {module: relief, off: true, hot: 200%}
strategies:
  - {id: 1, name: gnb, command_regex: "^nr-gnb$", selectors: {pod_labels: {app: gnb}}, priority: true, cpus: "2-3", irq_affinity: [wan0]}
  - {id: 2, selectors: {user: open5gs}, others_weight: 2}
lbrs:
  - {id: 1, algorithm: maglev, members: [{far: 4}, {far: 5, weight: 3}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1}
`

func agentConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := yamlcfg.Parse([]byte(agentYAML))
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
	agent := apitest.New(agentConfig(t), 1)
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

	// FlowOpt modules are switched at runtime: get shows each with its
	// settings' defaults, apply turns relief on, delete takes probe out.
	out, err = ctl("", "get", "flowopt")
	if err != nil || out != "MODULE    STATE  SETTINGS\nfairness  on     -\nprobe     on     rtt_factor 2\nrelief    off    hot 200% min_pps 20000\n" {
		t.Errorf("get flowopt: %q, %v", out, err)
	}
	out, err = ctl("flowopt:\n  - {module: relief, hot: 200%}\n", "apply", "-f", "-")
	if err != nil || !strings.HasPrefix(out, "flowopt relief configured\ngeneration 8 (committed in ") {
		t.Errorf("apply relief on: %q, %v", out, err)
	}
	out, err = ctl("", "get", "flowopt", "relief")
	if err != nil || out != "MODULE  STATE  SETTINGS\nrelief  on     hot 200% min_pps 20000\n" {
		t.Errorf("get flowopt relief: %q, %v", out, err)
	}
	_, err = ctl("flowopt:\n  - {module: probe, hot: 200%}\n", "apply", "-f", "-")
	if err == nil || err.Error() != "flowopt[0].hot: not for module probe (only relief)" {
		t.Errorf("apply hot on probe: %v, want refused before it is sent", err)
	}
	out, err = ctl("", "delete", "flowopt", "probe")
	if err != nil || !strings.HasPrefix(out, "flowopt probe deleted\ngeneration 9 (committed in ") {
		t.Errorf("delete flowopt probe: %q, %v", out, err)
	}
	_, err = ctl("", "get", "flowopt", "probe")
	if err == nil || err.Error() != `get flowopt probe: NotFound: no flowopt "probe"` {
		t.Errorf("get flowopt probe after delete: %v", err)
	}
	if c := agent.Config(); len(c.FlowOpt) != 2 || c.FlowOpt[1].Module != config.ModuleRelief || c.FlowOpt[1].Off {
		t.Errorf("agent's flowopt: %+v", c.FlowOpt)
	}

	// Strategies: get shows what each matches and its policy with the
	// defaults; apply adds one, a CPU another has is refused before it
	// is sent, delete takes one out.
	out, err = ctl("", "get", "strategies")
	if err != nil || out != strategiesTable+strategiesStatus {
		t.Errorf("get strategies: %q, %v", out, err)
	}
	out, err = ctl("strategies:\n  - {id: 3, command_regex: upf, selectors: {user: upf}, priority: true, policy: deadline, execution_time: 200us, cpus: 4}\n", "apply", "-f", "-")
	if err != nil || !strings.HasPrefix(out, "strategy 3 created\ngeneration 10 (committed in ") {
		t.Errorf("apply strategy 3: %q, %v", out, err)
	}
	out, err = ctl("", "get", "strategy", "3")
	if err != nil || out != "ID  NAME  MATCH               POLICY              CPUS\n3   -     regex upf user upf  deadline 200µs/1ms  4\n\nSTRATEGY  PID  COMM  THREADS  APPLIED  RAN ON\n3         -    -     0        -        -\n" {
		t.Errorf("get strategy 3: %q, %v", out, err)
	}
	_, err = ctl("strategies:\n  - {id: 4, command_regex: ue, selectors: {user: ue}, cpus: 3-4}\n", "apply", "-f", "-")
	// The file's strategy is checked first, so the clash is reported at
	// the agent's strategies, which the message names.
	if err == nil || err.Error() != "strategies[1].cpus: cpu 3 is already dedicated to strategies[0] (strategies[1] is the agent's strategy 1, not in the file)\n"+
		"strategies[3].cpus: cpu 4 is already dedicated to strategies[0] (strategies[3] is the agent's strategy 3, not in the file)" {
		t.Errorf("apply cpus 3-4: %v, want refused before it is sent", err)
	}
	_, err = ctl("strategies:\n  - {id: 4, command_regex: ue, selectors: {user: ue}, priority: true, execution_time: 1ms}\n", "apply", "-f", "-")
	if err == nil || err.Error() != "strategies[0].execution_time: not for policy fifo (FIFO and RR have no budget: a task runs until it blocks or yields; use deadline)" {
		t.Errorf("apply execution_time on fifo: %v, want refused before it is sent", err)
	}
	out, err = ctl("", "delete", "strategy", "3")
	if err != nil || !strings.HasPrefix(out, "strategy 3 deleted\ngeneration 11 (committed in ") {
		t.Errorf("delete strategy 3: %q, %v", out, err)
	}
	_, err = ctl("", "get", "strategy", "3")
	if err == nil || err.Error() != "get strategy 3: NotFound: no strategy 3" {
		t.Errorf("get strategy 3 after delete: %v", err)
	}
	if c := agent.Config(); len(c.Strategies) != 2 || c.Strategies[0].Name != "gnb" || c.Strategies[0].Selectors.PodLabels["app"] != "gnb" {
		t.Errorf("agent's strategies: %+v", c.Strategies)
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
