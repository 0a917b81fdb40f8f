// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
	"github.com/edgeplane/edgeplane/internal/fleet"
	"github.com/edgeplane/edgeplane/internal/lab"
)

// fleetGateway is one gateway of the fleet test: its topology, its
// management link to the host (where etcd listens) and its site, the
// label the operator gives it at the controller.
type fleetGateway struct {
	*gateway
	name string
	mgmt string // the host's end of the management veth
	site string
}

// controller runs `edgeplane controller` as a process of its own, so the
// test can kill it.
type controller struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	etcd string
	log  *os.File
}

func startController(t *testing.T, etcd, addr string, logf *os.File, extra ...string) *controller {
	t.Helper()
	c := &controller{t: t, addr: addr, etcd: etcd, log: logf}
	c.cmd = exec.Command(edgeplaneBin, append([]string{"controller", "--etcd", etcd, "--grpc-addr", addr, "--rest-addr", "", "--api-loopback-no-auth"}, extra...)...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.kill)
	if !waitFor(10*time.Second, func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}) {
		t.Fatalf("controller not serving on %s within 10s", addr)
	}
	return c
}

func (c *controller) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

func (c *controller) client(t *testing.T) pb.GatewayClient {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGatewayClient(conn)
}

// fleetBase is what every gateway of the fleet serves, given for all:
// the objects of fleetConfig.
func fleetBase(t *testing.T) []*pb.Operation {
	cfg, err := yamlcfg.Parse([]byte(fleetConfig))
	if err != nil {
		t.Fatal(err)
	}
	s := config.Builtin()
	var ops []*pb.Operation
	for _, k := range s.Kinds() {
		for _, o := range s.Objects(cfg, k) {
			ops = append(ops, createOp(api.Object(k, api.ToPB(k, o))))
		}
	}
	return ops
}

// fleetConfig is fleetBase as a config file: what each agent starts
// from, so joining the fleet changes nothing.
const fleetConfig = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: redirect, interface: lan0}
  - {id: 3, action: drop}
pdrs:
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.2.0.0/24}, far: 1}
  - {id: 21, precedence: 100, match: {in: lan0, dst: "fd02::/64"}, far: 1}
  - {id: 30, precedence: 100, match: {in: wan0, dst: 10.1.0.0/24}, far: 2}
  - {id: 31, precedence: 100, match: {in: wan0, dst: "fd01::/64"}, far: 2}
limits: {flows: 65536, rules: 1024}
`

// dropPDR drops UDP to port on the LAN side.
func dropPDR(id uint32, port int) *pb.Object {
	return pdrObj(&pb.Pdr{Id: id, Precedence: 5, Far: 3, Match: &pb.Match{In: "lan0", Proto: "udp", Dport: fmt.Sprint(port)}})
}

// TestFleet runs a fleet on one machine: a real 3-member etcd cluster,
// a controller process and three gateways in network namespaces whose
// agents reach etcd over a management link. Rules applied to a label
// group reach each member and traffic obeys them; the labels are the
// operator's, given at the controller (a gateway that names its own is
// refused); the fleet survives an etcd member killed, the controller
// killed, a gateway cut off, etcd restored to an older revision under it,
// and an agent restarted while etcd is down.
func TestFleet(t *testing.T) {
	etcd, err := fleetlab.StartCluster(t.TempDir(), 3, "0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	logf, err := os.Create(filepath.Join(t.TempDir(), "controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("controller log:\n%s", b)
		}
		logf.Close()
	}()
	gws := []*fleetGateway{{name: "gw1", site: "factory"}, {name: "gw2", site: "factory"}, {name: "gw3", site: "office"}}
	labelsFile := filepath.Join(t.TempDir(), "labels.yaml")
	writeLabels := func() {
		t.Helper()
		var b strings.Builder
		for _, fg := range gws {
			fmt.Fprintf(&b, "%s: {site: %s}\n", fg.name, fg.site)
		}
		if err := os.WriteFile(labelsFile, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeLabels()
	ctlAddr := "127.0.0.1:" + freeTCPPort(t)
	ctl := startController(t, etcd.Endpoints("127.0.0.1"), ctlAddr, logf, "--gateway-labels", labelsFile)
	cc := ctl.client(t)
	ctx := context.Background()
	if _, err := cc.Apply(ctx, &pb.ApplyRequest{Operations: fleetBase(t)}); err != nil {
		t.Fatalf("seed the fleet: %v", err)
	}

	for i, fg := range gws {
		fg.gateway = newGateway(t, fleetConfig)
		fg.mgmt = fg.Prefix + "m"
		host, peer := fmt.Sprintf("10.250.%d.1", i), fmt.Sprintf("10.250.%d.2", i)
		// A run killed before its cleanups left its link holding the
		// subnet: take it away.
		if out, _ := exec.Command("ip", "-o", "route", "show", fmt.Sprintf("10.250.%d.0/30", i)).Output(); len(out) > 0 {
			if f := strings.Fields(string(out)); len(f) > 2 && f[1] == "dev" {
				t.Logf("removing %s, a killed run's management link", f[2])
				_ = exec.Command("ip", "link", "del", f[2]).Run()
			}
		}
		if err := lab.LinkManagement(fg.GW, fg.mgmt, host, peer); err != nil {
			t.Fatal(err)
		}
		mgmt := fg.mgmt
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", mgmt).Run() })
		fg.start("--etcd", etcd.Endpoints(host), "--gateway", fg.name)
		fg.warmUp()
	}
	gateways := func() map[string]*pb.GatewayStatus {
		r, err := cc.ListGateways(ctx, &pb.ListRequest{})
		if err != nil {
			t.Fatalf("list gateways: %v", err)
		}
		out := map[string]*pb.GatewayStatus{}
		for _, g := range r.GetGateways() {
			out[g.GetName()] = g
		}
		return out
	}
	// converged waits until the gateways named have committed rev.
	converged := func(what string, rev uint64, names ...string) {
		t.Helper()
		var last map[string]*pb.GatewayStatus
		if !waitFor(15*time.Second, func() bool {
			last = gateways()
			for _, n := range names {
				g := last[n]
				if g == nil || !g.GetReachable() || g.GetCommittedRevision() < rev || g.GetState() != fleet.StateConverged {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("%s: %v did not all commit revision %d within 15s: %v", what, names, rev, last)
		}
	}
	apply := func(what string, target *pb.Target, ops ...*pb.Operation) uint64 {
		t.Helper()
		r, err := cc.Apply(ctx, &pb.ApplyRequest{Operations: ops, Target: target})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return r.GetRevision()
	}
	// dropped sends n datagrams to port from each gateway's site A and
	// reports, per gateway, whether its PDR id dropped them all.
	dropped := func(id uint32, port int, names ...string) map[string]bool {
		t.Helper()
		out := map[string]bool{}
		for _, fg := range gws {
			if !slicesContains(names, fg.name) {
				continue
			}
			before := fg.stats().pdr(int(id)).Packets
			mustSendUDP(t, fg.A, lab.AddrB, port, 20, 0, 16)
			out[fg.name] = waitFor(2*time.Second, func() bool { return fg.stats().pdr(int(id)).Packets-before == 20 })
		}
		return out
	}
	all := []string{"gw1", "gw2", "gw3"}
	converged("joined", 0, all...)

	// A gateway's own API refuses changes: they belong at the controller.
	local, err := grpc.NewClient(gws[0].APISocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = pb.NewGatewayClient(local).Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{createOp(dropPDR(49, 7009))}})
	wantCode(t, "apply at a fleet gateway's own API", err, codes.FailedPrecondition)
	local.Close()
	// Nor does SIGHUP apply its config file: it would drift from etcd.
	gws[0].signal(syscall.SIGHUP)
	if !waitFor(5*time.Second, func() bool { return strings.Contains(gws[0].log(), "config file not re-read") }) {
		t.Errorf("SIGHUP to a fleet agent: no word that its config file is not re-read")
	}

	// A gateway does not choose its labels: an agent that names its own
	// is refused before it starts.
	out, err := exec.Command(edgeplaneBin, "agent", "--config", filepath.Join(t.TempDir(), "none.yaml"), "--pin-dir", "/sys/fs/bpf/ep-none",
		"--etcd", "http://127.0.0.1:1", "--gateway", "gw3", "--labels", "site=factory").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "given at the controller") {
		t.Errorf("an agent with --labels site=factory: %v %s; want it refused", err, out)
	}

	// A rule for the factory gateways reaches both, and only them.
	factory := &pb.Target{Selector: map[string]string{"site": "factory"}}
	t0 := time.Now()
	rev := apply("drop 7001 at site=factory", factory, createOp(dropPDR(40, 7001)))
	converged("drop 7001 at site=factory", rev, all...)
	t.Logf("site=factory rule: revision %d, every gateway committed it within %s", rev, time.Since(t0).Round(time.Millisecond))
	if got := dropped(40, 7001, all...); !got["gw1"] || !got["gw2"] || got["gw3"] {
		t.Fatalf("PDR 40 (site=factory) dropped 7001 at %v; want gw1 and gw2, not gw3", got)
	}
	if g := gateways()["gw3"]; g.GetLabels()["site"] != "office" {
		t.Errorf("gw3 listed with labels %v, want the operator's site=office", g.GetLabels())
	}
	// The operator moves gw3 to the factory (the controller's labels
	// file, SIGHUP): it takes the factory's rule; moved back, it drops it.
	for _, site := range []string{"factory", "office"} {
		gws[2].site = site
		writeLabels()
		if err := ctl.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !waitFor(10*time.Second, func() bool {
			g := gateways()["gw3"]
			return g.GetLabels()["site"] == site && g.GetState() == fleet.StateConverged && !g.GetDrift()
		}) {
			t.Fatalf("gw3 relabelled site=%s at the controller: %v", site, gateways()["gw3"])
		}
		if got := dropped(40, 7001, "gw3"); got["gw3"] != (site == "factory") {
			t.Errorf("gw3 at site=%s: PDR 40 (site=factory) drops 7001: %v", site, got["gw3"])
		}
	}

	// One etcd member of three killed: the fleet keeps working.
	etcd.Stop(0)
	rev = apply("drop 7002 everywhere, one etcd member down", nil, createOp(dropPDR(41, 7002)))
	converged("one etcd member down", rev, all...)
	if got := dropped(41, 7002, all...); !got["gw1"] || !got["gw2"] || !got["gw3"] {
		t.Fatalf("PDR 41 (all) with an etcd member down dropped 7002 at %v; want every gateway", got)
	}
	if err := etcd.Restart(0); err != nil {
		t.Fatal(err)
	}

	// The controller killed: the gateways keep forwarding; back, it
	// serves and they converge.
	ctl.kill()
	for _, fg := range gws {
		if n := ping(fg.A, lab.AddrB, 3, "0.2"); n != 3 {
			t.Errorf("%s with the controller down: %d of 3 pings answered", fg.name, n)
		}
	}
	ctl = startController(t, etcd.Endpoints("127.0.0.1"), ctlAddr, logf, "--gateway-labels", labelsFile)
	cc = ctl.client(t)
	rev = apply("controller back: drop 7003 at gw2", &pb.Target{Gateway: "gw2"}, createOp(dropPDR(42, 7003)))
	converged("controller back", rev, all...)
	if got := dropped(42, 7003, all...); got["gw1"] || !got["gw2"] || got["gw3"] {
		t.Fatalf("PDR 42 (gw2) dropped 7003 at %v; want gw2 alone", got)
	}

	// gw3 cut off from etcd: the others take a change, gw3 keeps its
	// last state and is listed unreachable; reconnected, it converges.
	gw3 := gws[2]
	if out, err := exec.Command("ip", "link", "set", gw3.mgmt, "down").CombinedOutput(); err != nil {
		t.Fatalf("cut gw3 off: %v %s", err, out)
	}
	rev = apply("delete PDR 41 while gw3 is cut off", nil, deleteOp(pb.Kind_KIND_PDR, 41, ""))
	converged("gw3 cut off", rev, "gw1", "gw2")
	if got := dropped(41, 7002, all...); got["gw1"] || got["gw2"] || !got["gw3"] {
		t.Fatalf("after deleting PDR 41 with gw3 cut off, 7002 dropped at %v; want gw3 alone (its last state)", got)
	}
	var g3 *pb.GatewayStatus
	if !waitFor(10*time.Second, func() bool { g3 = gateways()["gw3"]; return !g3.GetReachable() }) {
		t.Errorf("gw3 cut off for 10s is still listed reachable: %v", g3)
	}
	if !g3.GetDrift() || g3.GetState() != fleet.StateDisconnected {
		t.Errorf("gw3 cut off: drift %v, state %s; want drift, disconnected", g3.GetDrift(), g3.GetState())
	}
	if v, _ := metricValue(gw3.scrape(), "edgeplane_fleet_connected", nil); v != 0 {
		t.Errorf("gw3 cut off: edgeplane_fleet_connected %v, want 0", v)
	}
	t0 = time.Now()
	if out, err := exec.Command("ip", "link", "set", gw3.mgmt, "up").CombinedOutput(); err != nil {
		t.Fatalf("reconnect gw3: %v %s", err, out)
	}
	converged("gw3 reconnected", rev, "gw3")
	t.Logf("gw3 reconnected: converged within %s", time.Since(t0).Round(time.Millisecond))
	if got := dropped(41, 7002, "gw3"); got["gw3"] {
		t.Errorf("gw3 reconnected still drops 7002 (PDR 41 deleted while it was away)")
	}

	// etcd restored to an older revision under the running fleet (its
	// members' data from a backup): every gateway reads everything again
	// and serves what etcd holds, PDR 43 (applied after the backup) gone;
	// none is listed converged while it still serves it.
	backup := filepath.Join(t.TempDir(), "etcd-backup")
	if err := etcd.Backup(backup); err != nil {
		t.Fatal(err)
	}
	rev = apply("drop 7004 everywhere, after the backup", nil, createOp(dropPDR(43, 7004)))
	converged("after the backup", rev, all...)
	if got := dropped(43, 7004, all...); !got["gw1"] || !got["gw2"] || !got["gw3"] {
		t.Fatalf("PDR 43 (all) dropped 7004 at %v; want every gateway", got)
	}
	t0 = time.Now()
	if err := etcd.Restore(backup); err != nil {
		t.Fatal(err)
	}
	serves43 := func(fg *fleetGateway) bool {
		conn, err := grpc.NewClient(fg.APISocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = pb.NewGatewayClient(conn).GetPdr(ctx, &pb.GetByIDRequest{Id: 43})
		return status.Code(err) != codes.NotFound
	}
	checked := map[string]bool{}
	if !waitFor(20*time.Second, func() bool {
		for name, g := range gateways() {
			if g.GetState() == fleet.StateConverged && !checked[name] {
				checked[name] = true
				for _, fg := range gws {
					if fg.name == name && serves43(fg) {
						t.Errorf("%s listed converged after the restore while it serves PDR 43, which etcd no longer has: %v", name, g)
					}
				}
			}
		}
		return len(checked) == len(all)
	}) {
		t.Fatalf("after etcd was restored, not every gateway was listed converged within 20s: %v", gateways())
	}
	t.Logf("etcd restored to an older revision: every gateway read everything again within %s", time.Since(t0).Round(time.Millisecond))
	if got := dropped(43, 7004, all...); got["gw1"] || got["gw2"] || got["gw3"] {
		t.Errorf("after the restore, 7004 still dropped at %v (PDR 43 went with the restore)", got)
	}
	for _, fg := range gws {
		if !strings.Contains(fg.log(), "reading everything again") {
			t.Errorf("%s's log does not say it read everything again after the restore", fg.name)
		}
	}
	rev = apply("after the restore: drop 7005 at site=factory", factory, createOp(dropPDR(44, 7005)))
	converged("after the restore", rev, all...)
	if got := dropped(44, 7005, all...); !got["gw1"] || !got["gw2"] || got["gw3"] {
		t.Errorf("PDR 44 (site=factory) after the restore dropped 7005 at %v; want gw1 and gw2", got)
	}

	// etcd down entirely; gw1's agent restarted: it serves its last
	// committed state, says it is not connected, and converges once etcd
	// is back.
	etcd.Close()
	gw1 := gws[0]
	if err := gw1.StopAgent(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	gw1.start("--etcd", etcd.Endpoints("10.250.0.1"), "--gateway", gw1.name)
	if got := dropped(40, 7001, "gw1"); !got["gw1"] {
		t.Errorf("gw1 restarted with etcd down does not drop 7001: it lost its last committed state")
	}
	if n := ping(gw1.A, lab.AddrB, 3, "0.2"); n != 3 {
		t.Errorf("gw1 restarted with etcd down: %d of 3 pings answered", n)
	}
	if v, _ := metricValue(gw1.scrape(), "edgeplane_fleet_connected", nil); v != 0 {
		t.Errorf("gw1 with etcd down: edgeplane_fleet_connected %v, want 0", v)
	}
	if err := etcd.Restart(0, 1, 2); err != nil {
		t.Fatal(err)
	}
	rev = apply("etcd back", factory, deleteOp(pb.Kind_KIND_PDR, 40, ""))
	converged("etcd back", rev, all...)
	if got := dropped(40, 7001, "gw1"); got["gw1"] {
		t.Errorf("gw1 after etcd came back still drops 7001 (PDR 40 deleted)")
	}
	if !strings.Contains(gw1.log(), "fleet: reached etcd") {
		t.Errorf("gw1's log does not say it reached etcd again")
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// freeTCPPort returns a port free on loopback now.
func freeTCPPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}
