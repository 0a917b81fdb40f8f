// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// schemathesis is where `make deps` installs it: a venv of its own, so its
// pinned Python dependencies never meet Debian's.
const schemathesis = "/opt/edgeplane-venv/bin/schemathesis"

// openapiConfig is forwardConfig plus a GRE path with its optional
// fields (key, dscp) set and an encap FAR on it, so every kind of object
// the API serves exists and GET /v1/paths/{id} can answer 200, not only
// 404.
const openapiConfig = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
paths:
  - {id: 1, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.2.0.2, key: 7, dscp: 46, monitor: {insecure: true}}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: redirect, interface: lan0}
  - {id: 3, action: drop}
  - {id: 4, action: encap, path: 1}
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0, proto: udp, dport: 9999}, far: 3}
  - {id: 12, precedence: 20, match: {in: lan0, dst: 10.2.0.0/24, proto: udp, dport: 7777, dscp: 46}, far: 4}
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.2.0.0/24}, far: 1}
  - {id: 21, precedence: 100, match: {in: lan0, dst: "fd02::/64"}, far: 1}
  - {id: 30, precedence: 100, match: {in: wan0, dst: 10.1.0.0/24}, far: 2}
  - {id: 31, precedence: 100, match: {in: wan0, dst: "fd01::/64"}, far: 2}
limits: {flows: 65536, rules: 1024}
`

// TestOpenAPISchemathesis runs schemathesis against the agent's REST API,
// generating requests from the document the agent itself serves at
// /openapi.json: no request may get a 5xx, and every response must match
// the document's status codes, content types and schemas.
func TestOpenAPISchemathesis(t *testing.T) {
	testutil.RequireRoot(t)
	// Fail, not skip: `make deps` installs it, and a skip here would only
	// hide an install step that went missing.
	if _, err := os.Stat(schemathesis); err != nil {
		t.Fatalf("schemathesis not installed (run `make deps`): %v", err)
	}
	g := newGateway(t, openapiConfig)
	const token = "e2e-openapi-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Auth on, as a real deployment runs it; the listeners stay on the
	// namespace's loopback, where only schemathesis reaches them.
	g.start("--api-tokens", tokens, "--rest-addr", "127.0.0.1:8080", "--grpc-addr", "127.0.0.1:50051")

	dir := t.TempDir()
	junit := filepath.Join(dir, "junit.xml")
	args := []string{
		"netns", "exec", g.GW, schemathesis, "run", "http://127.0.0.1:8080/openapi.json",
		"--header", "Authorization: Bearer " + token,
		// Every response the API gives must be a documented status with
		// a documented content type and body. status_code_conformance
		// holds trivially today (every operation documents "default"),
		// but keeps holding the document to account if a status is
		// ever listed explicitly. Not positive_data_acceptance: the
		// document is looser than the API (uint32 ids are "int64",
		// an empty batch is schema-valid) and that check fails on the
		// 400s those rightly get.
		"--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
		// Bounded: at most 50 cases per operation and phase (about 1400
		// requests, 15 s), and a fixed seed so a failure in CI replays
		// the same way on a desk.
		"--max-examples", "50",
		"--seed", "20240601",
		"--workers", "1",
		"--request-timeout", "5",
		// No example database left in the working directory.
		"--generation-database", "none",
		"--no-color",
		"--report", "junit",
		"--report-junit-path", junit,
	}
	ctx, cancel := context.WithTimeout(context.Background(), stDeadline)
	defer cancel()
	// `ip netns exec` execs schemathesis, so the deadline kills it and
	// not only a wrapper.
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("schemathesis %s: %s (%s)", strings.Join(args[3:], " "), stSummary(out), time.Since(start).Round(time.Second))
	if ctx.Err() != nil {
		t.Fatalf("schemathesis did not finish within %s:\n%s", stDeadline, out)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run schemathesis: %v", err)
	}
	rep, rerr := readJUnit(junit)
	if rerr != nil {
		// It stopped before testing: the schema did not load, say.
		t.Fatalf("schemathesis: %v (%v)\n%s", rerr, err, out)
	}
	if err != nil || rep.Failures+rep.Errors > 0 {
		var b strings.Builder
		for _, c := range rep.Cases {
			for _, f := range append(c.Failures, c.Errors...) {
				fmt.Fprintf(&b, "  %s: %s\n", c.Name, f.Message)
			}
		}
		t.Fatalf("schemathesis found %d failures and %d errors in %d operations (%v):\n%s\n%s",
			rep.Failures, rep.Errors, rep.Tests, err, b.String(), stFailures(out))
	}
	// Exit 0 having tested less than the whole document would pass
	// vacuously: an operation schemathesis could not generate for, say.
	tested := map[string]bool{}
	for _, c := range rep.Cases {
		tested[c.Name] = true
	}
	for _, op := range openapiOperations(t) {
		if !tested[op] {
			t.Errorf("schemathesis did not test %s", op)
		}
	}
	if t.Failed() {
		t.Logf("schemathesis output:\n%s", out)
	}
}

// stDeadline bounds the whole schemathesis run; it takes about 15 s.
const stDeadline = 2 * time.Minute

// junitReport is the part of schemathesis's JUnit report the test reads:
// a testcase per API operation ("GET /v1/fars/{id}") and one for the
// stateful phase, each with a failure element per distinct problem
// whose message is the check's code (ST101 for a 5xx, ST108 for a body
// that violates the schema ...).
type junitReport struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Errors   int `xml:"errors,attr"`
	Cases    []struct {
		Name     string       `xml:"name,attr"`
		Failures []junitIssue `xml:"failure"`
		Errors   []junitIssue `xml:"error"`
	} `xml:"testsuite>testcase"`
}

type junitIssue struct {
	Message string `xml:"message,attr"`
}

func readJUnit(path string) (junitReport, error) {
	var r junitReport
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("no junit report: %w", err)
	}
	if err := xml.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("parse junit report %s: %w", path, err)
	}
	return r, nil
}

// openapiOperations lists the operations of the document the agent
// serves (the same bytes, embedded in the binary) as schemathesis names
// them: "GET /v1/fars/{id}".
func openapiOperations(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(pb.OpenAPI, &doc); err != nil {
		t.Fatalf("parse openapi document: %v", err)
	}
	var ops []string
	for path, item := range doc.Paths {
		for m := range item {
			if m != "parameters" && !strings.HasPrefix(m, "x-") {
				ops = append(ops, strings.ToUpper(m)+" "+path)
			}
		}
	}
	if len(ops) == 0 {
		t.Fatal("the openapi document has no operations")
	}
	return ops
}

// stSummary returns schemathesis's closing line ("=== 2 failures in
// 10.10s ===") without the rule around it.
func stSummary(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.Trim(lines[i], "= "); l != "" {
			return l
		}
	}
	return "(no output)"
}

// stFailures returns the part of schemathesis's output from its FAILURES
// section on (each failing case with the response it got and a curl
// line to replay it, then the summary), or all of it when there is no
// such section.
func stFailures(out []byte) string {
	s := string(out)
	if i := strings.Index(s, " FAILURES "); i >= 0 {
		if j := strings.LastIndexByte(s[:i], '\n'); j >= 0 {
			return s[j+1:]
		}
	}
	return s
}
