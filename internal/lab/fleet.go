// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

// FleetAPI is where the fleet lab's controller serves its gRPC API, on
// loopback without tokens.
const FleetAPI = "127.0.0.1:50061"

// mgmtAddr returns the host's (h) or the gateway's address on the
// management link of gateway side ('a' or 'b'): 10.252.0.0/30 for A,
// 10.252.1.0/30 for B.
func mgmtAddr(side byte, host bool) string {
	n := 1
	if !host {
		n = 2
	}
	return fmt.Sprintf("10.252.%d.%d", side-'a', n)
}

// Fleet is the SD-WAN lab run as a fleet: a 3-member etcd cluster in
// this process, a controller serving FleetAPI, and the lab's two
// gateways' agents joined to it over management links from the host
// (gateway=NAMEgwa with labels site=a, and NAMEgwb site=b). Each
// gateway's objects are in etcd for it alone, as its config file had
// them.
type Fleet struct {
	*SDWAN
	Etcd *fleetlab.Cluster
	Ctl  *fleet.Controller
	srv  *api.Listeners
}

// StartFleet starts etcd and the controller, writes the gateways'
// objects, and brings the lab up with its agents joined.
func StartFleet(ctx context.Context, l *SDWAN) (f *Fleet, err error) {
	f = &Fleet{SDWAN: l}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	// A fresh cluster each time: its members' ports are new.
	dir := l.RunDir + "-etcd"
	if err := os.RemoveAll(dir); err != nil {
		return f, err
	}
	l.step("starting a 3-member etcd cluster (data under %s)", dir)
	if f.Etcd, err = fleetlab.StartCluster(dir, 3, "0.0.0.0"); err != nil {
		return f, err
	}
	cli, err := fleet.NewClient(fleet.ClientOptions{Endpoints: strings.Split(f.Etcd.Endpoints("127.0.0.1"), ",")})
	if err != nil {
		return f, err
	}
	if f.Ctl, err = fleet.NewController(ctx, cli, "", nil); err != nil {
		return f, err
	}
	errc := make(chan error, 1)
	if f.srv, err = api.Serve(api.NewServer(f.Ctl), api.Options{GRPCAddr: FleetAPI, NoAuthLoopback: true}, errc); err != nil {
		return f, fmt.Errorf("controller API: %w", err)
	}
	l.step("controller serving %s (edgeplane get gateways --server %s)", FleetAPI, FleetAPI)
	// The gateways' labels are the operator's: given at the controller.
	if _, err := f.Ctl.SetLabels(ctx, map[string]map[string]string{
		l.GWA: {"site": "a", "lab": l.Name}, l.GWB: {"site": "b", "lab": l.Name}}); err != nil {
		return f, fmt.Errorf("gateway labels: %w", err)
	}
	l.AgentArgs = map[string][]string{}
	for _, side := range []byte{'a', 'b'} {
		gw := l.GWA
		if side == 'b' {
			gw = l.GWB
		}
		b, err := GatewayConfig(l.Name, side)
		if err != nil {
			return f, err
		}
		if err := f.seed(gw, b); err != nil {
			return f, err
		}
		l.AgentArgs[gw] = []string{"--etcd", f.Etcd.Endpoints(mgmtAddr(side, true)), "--gateway", gw}
	}
	l.AfterBuild = f.linkManagement
	// Agents joined with the flags above: a lab up without them is
	// rebuilt.
	if err := l.Down(); err != nil {
		return f, err
	}
	if _, err := l.Up(ctx); err != nil {
		return f, err
	}
	l.step("waiting for both gateways to commit the fleet's objects")
	return f, f.WaitConverged(ctx, 20*time.Second)
}

// seed writes a gateway's config file's objects to etcd, for it alone.
func (f *Fleet) seed(gw string, file []byte) error {
	cfg, err := yamlcfg.Parse(file)
	if err != nil {
		return err
	}
	s := config.Builtin()
	var ops []config.Op
	for _, k := range s.Kinds() {
		if !api.Carries(k) {
			continue
		}
		for _, o := range s.Objects(cfg, k) {
			ops = append(ops, config.Op{At: string(k), Verb: config.Create, Kind: k, Object: o})
		}
	}
	_, err = f.Ctl.ApplyTo(&pb.Target{Gateway: gw}, ops, false)
	return err
}

// linkManagement links each gateway namespace to the host, where etcd
// serves.
func (f *Fleet) linkManagement() error {
	for _, side := range []byte{'a', 'b'} {
		gw, host := f.GWA, f.Name+"mga"
		if side == 'b' {
			gw, host = f.GWB, f.Name+"mgb"
		}
		if err := LinkManagement(gw, host, mgmtAddr(side, true), mgmtAddr(side, false)); err != nil {
			return err
		}
	}
	return nil
}

// LinkManagement links gateway namespace gw to the host by a veth: host
// (the host's end, hostAddr/30) to mgmt0 (gwAddr/30) in gw. A link of
// that name an earlier run left is removed first (the kernel frees a
// deleted namespace, and the links into it, asynchronously).
func LinkManagement(gw, host, hostAddr, gwAddr string) error {
	_ = exec.Command("ip", "link", "del", host).Run()
	for _, c := range [][]string{
		{"ip", "link", "add", host, "type", "veth", "peer", "name", "mgmt0", "netns", gw},
		{"ip", "addr", "add", hostAddr + "/30", "dev", host},
		{"ip", "link", "set", host, "up"},
		{"ip", "-n", gw, "addr", "add", gwAddr + "/30", "dev", "mgmt0"},
		{"ip", "-n", gw, "link", "set", "mgmt0", "up"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("management link of %s: %v: %w: %s", gw, c, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// WaitConverged waits until both gateways are reachable and have
// committed everything meant for them.
func (f *Fleet) WaitConverged(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last []*pb.GatewayStatus
	for {
		gws, err := f.Ctl.Gateways(nil)
		ok := err == nil && len(gws) == 2
		for _, g := range gws {
			ok = ok && g.GetReachable() && !g.GetDrift() && g.GetState() == fleet.StateConverged
		}
		if ok {
			return nil
		}
		last = gws
		if time.Now().After(deadline) {
			return fmt.Errorf("gateways not converged within %s: %v (%v)", timeout, last, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops the controller and etcd; the lab stays up, its agents
// serving their last committed state (edgeplane-dev lab down removes it).
func (f *Fleet) Stop() {
	if f.srv != nil {
		f.srv.Close()
	}
	if f.Etcd != nil {
		f.Etcd.Close()
	}
}

// PrintGateways prints the controller's view of the gateways.
func (f *Fleet) PrintGateways(w io.Writer) error {
	gws, err := f.Ctl.Gateways(nil)
	if err != nil {
		return err
	}
	for _, g := range gws {
		fmt.Fprintf(w, "  %s: reachable %v, %s, committed revision %d, %d objects, labels %v\n",
			g.GetName(), g.GetReachable(), g.GetState(), g.GetCommittedRevision(), g.GetObjects(), g.GetLabels())
	}
	return nil
}
