// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

// TestCommandsAgainstController drives a controller (over a 1-member
// etcd, with two members without a dataplane) with the CLI: apply to a
// selector, get by target, get gateways.
func TestCommandsAgainstController(t *testing.T) {
	etcd, err := fleetlab.StartCluster(t.TempDir(), 1, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := func() *fleet.ClientOptions {
		return &fleet.ClientOptions{Endpoints: strings.Split(etcd.Endpoints(""), ",")}
	}
	cli, err := fleet.NewClient(*client())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctl, err := fleet.NewController(ctx, cli, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := api.Serve(api.NewServer(ctl), api.Options{GRPCAddr: "127.0.0.1:0", NoAuthLoopback: true}, make(chan error, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gws := map[string]*fleetlab.NoDataplane{}
	if _, err := ctl.SetLabels(ctx, map[string]map[string]string{"gw1": {"site": "a"}, "gw2": {"site": "b"}}); err != nil {
		t.Fatal(err)
	}
	for name := range map[string]string{"gw1": "a", "gw2": "b"} {
		mc, err := fleet.NewClient(*client())
		if err != nil {
			t.Fatal(err)
		}
		defer mc.Close()
		gws[name] = fleetlab.NewNoDataplane()
		m := fleet.NewMember(mc, gws[name], fleet.MemberOptions{Name: name, TTL: 2 * time.Second})
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
	}
	run := func(stdin string, args ...string) (string, error) {
		t.Helper()
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetIn(strings.NewReader(stdin))
		root.SetArgs(append(args, "--server", l.GRPC.String(), "--timeout", "5s"))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("fars:\n  - {id: 3, action: drop}\n", "apply", "-f", "-", "--selector", "site=a")
	if err != nil || !strings.HasPrefix(out, "far 3 created\netcd revision ") {
		t.Fatalf("apply --selector site=a: %q, %v", out, err)
	}
	// Listed under its target, not under another.
	if out, err := run("", "get", "fars", "--selector", "site=a"); err != nil || !strings.Contains(out, "3   drop") {
		t.Errorf("get fars --selector site=a: %q, %v", out, err)
	}
	if out, err := run("", "get", "fars", "--gateway", "gw2"); err != nil || strings.Contains(out, "drop") {
		t.Errorf("get fars --gateway gw2: %q, %v", out, err)
	}
	if _, err := run("", "get", "fars", "--gateway", "gw2", "--selector", "site=a"); err == nil {
		t.Errorf("--gateway with --selector was taken")
	}
	var out2 string
	deadline := time.Now().Add(10 * time.Second)
	for {
		out2, err = run("", "get", "gateways")
		if err == nil && strings.Count(out2, "converged") == 2 && len(gws["gw1"].Config().FARs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("get gateways: %q, %v; gw1 FARs %v", out2, err, gws["gw1"].Config().FARs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(out2, "NAME  REACHABLE  STATE") || !strings.Contains(out2, "site=a") || !strings.Contains(out2, "site=b") {
		t.Errorf("get gateways: %q", out2)
	}
	if len(gws["gw2"].Config().FARs) != 0 {
		t.Errorf("gw2 (site=b) got %v", gws["gw2"].Config().FARs)
	}
	if out, err := run("", "get", "gateways", "--selector", "site=b", "-o", "json"); err != nil || !strings.Contains(out, `"name": "gw2"`) || strings.Contains(out, `"gw1"`) {
		t.Errorf("get gateways --selector site=b -o json: %q, %v", out, err)
	}
	// What a controller has no answer for says where to ask.
	if _, err := run("", "stats"); err == nil || !strings.Contains(err.Error(), "ask a gateway") {
		t.Errorf("stats at a controller: %v", err)
	}
}

// TestFleetLabelsAreTheOperators: an agent that names its own labels is
// refused (they are given at the controller), and a controller whose
// labels file does not read refuses to start.
func TestFleetLabelsAreTheOperators(t *testing.T) {
	for _, flag := range []string{"--labels", "--labels-from-node"} {
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"agent", "--config", t.TempDir() + "/none.yaml", "--etcd", "http://127.0.0.1:1", flag, "site=factory"})
		if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "given at the controller") {
			t.Errorf("agent %s site=factory: %v, want it refused", flag, err)
		}
	}
	etcd, err := fleetlab.StartCluster(t.TempDir(), 1, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	root := newRootCmd()
	root.SetArgs([]string{"controller", "--etcd", etcd.Endpoints(""), "--api-loopback-no-auth", "--grpc-addr", "127.0.0.1:0", "--rest-addr", "",
		"--gateway-labels", t.TempDir() + "/missing.yaml"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "gateway labels") {
		t.Errorf("controller with a labels file that does not read: %v, want it refused", err)
	}
}
