// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// The service of TestBalanceLongLived: A connects to vip:80, the gateway
// NATs each connection to one of three backend hosts behind B (a plain
// kernel router), each serving on port 8080.
const (
	lbVIP      = "203.0.113.10"
	lbBackends = 3
	lbConns    = 100
)

func lbBackendAddr(i int) string { return fmt.Sprintf("10.30.%d.2", i) }

// connCensus says what g's dataplane holds of the service's connections,
// for a miscount to be told apart from a lost entry: the connection
// entries by counter index (closed ones apart), the client 5-tuples with
// more than one, each counter's per-CPU new connections, and the flow
// table's refusals and evictions.
func connCensus(t *testing.T, g *gateway) string {
	t.Helper()
	open := func(name string) *ebpf.Map {
		m, err := ebpf.LoadPinnedMap(filepath.Join(g.PinDir, name), nil)
		if err != nil {
			t.Logf("census: %v", err)
		}
		return m
	}
	ways, meta, lbNew := open("edge_ft"), open("edge_ft_meta"), open("edge_lb_new")
	for _, m := range []*ebpf.Map{ways, meta, lbNew} {
		if m == nil {
			return "(not read)"
		}
		defer m.Close()
	}
	ft, err := bpf.MapFlowTable(ways, meta, nil)
	if err != nil {
		return fmt.Sprintf("(flow table not read: %v)", err)
	}
	defer ft.Unmap()
	conns, closed, tuples := map[uint32]int{}, map[uint32]int{}, map[string]int{}
	ft.Each(func(w *bpf.FTWay, _ bool) bool {
		if w.F.Flags&bpf.FlowConn != 0 {
			idx := w.F.Stats &^ bpf.StatsLB
			conns[idx]++
			if w.F.Flags&bpf.FlowClosed != 0 {
				closed[idx]++
			}
			tuples[fmt.Sprintf("%v:%d", netip.AddrFrom4([4]byte(w.K.Src[:4])), w.K.Sport)]++
		}
		return true
	})
	var dup []string
	for k, n := range tuples {
		if n > 1 {
			dup = append(dup, fmt.Sprintf("%s x%d", k, n))
		}
	}
	perCPU := map[uint32][]uint64{}
	for idx := range conns {
		var v []uint64
		if err := lbNew.Lookup(idx, &v); err == nil {
			perCPU[idx] = v
		}
	}
	reasons := map[string]uint64{}
	if st, err := readStats(g.PinDir); err == nil {
		for _, r := range []string{"flow_full", "flow_busy", "flow_evict_cold", "flow_evict_idle"} {
			reasons[r] = st.Reasons[r].Packets
		}
	}
	return fmt.Sprintf("connection entries by counter index %v (closed %v), client 5-tuples with more than one %v, new connections per CPU %v, flow table %v",
		conns, closed, dup, perCPU, reasons)
}

const lbConfig = `
interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
fars:
  - {id: 1, action: nat, address: 10.30.1.2, port: 8080}
  - {id: 2, action: nat, address: 10.30.2.2, port: 8080}
lbrs:
  - {id: 1, algorithm: maglev, members: [{far: 1}, {far: 2}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1}
limits: {flows: 65536, rules: 1024}
`

// addBackends puts n backend hosts behind B: namespace Prefix+"beI" with
// eth0 10.30.I.2/24, linked to B (10.30.I.1), B routing between them and
// the gateway, and the gateway routing 10.30.0.0/16 to B. Each runs a TCP
// server on :8080 that greets with its name ("be2\n") and echoes.
func addBackends(t *testing.T, g *gateway, n int) []*atomic.Bool {
	t.Helper()
	var healthy []*atomic.Bool
	b := openNS(t, g.B)
	for i := 1; i <= n; i++ {
		ns := fmt.Sprintf("%sbe%d", g.Prefix, i)
		be := testutil.NetNS(t, ns)
		if err := topo.AddVeth(
			topo.End{NS: be, Name: "eth0", Addrs: []string{lbBackendAddr(i) + "/24"}},
			topo.End{NS: b, Name: fmt.Sprintf("be%d", i), Addrs: []string{fmt.Sprintf("10.30.%d.1/24", i)}},
		); err != nil {
			t.Fatal(err)
		}
		if err := be.AddRoute("default", fmt.Sprintf("10.30.%d.1", i), ""); err != nil {
			t.Fatal(err)
		}
		// Backends reply through the XDP gateway, which rewrites
		// their packets: full checksums, not offloaded partial ones.
		if err := be.SetTxChecksum("eth0", false); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("be%d", i)
		var ln net.Listener
		if err := topo.Do(ns, func() (err error) {
			ln, err = net.Listen("tcp4", ":8080")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go serveEcho(ln, name)
		ok := &atomic.Bool{}
		ok.Store(true)
		healthy = append(healthy, ok)
		var hl net.Listener
		if err := topo.Do(ns, func() (err error) {
			hl, err = net.Listen("tcp4", ":8081")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !ok.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})}
		t.Cleanup(func() { srv.Close() })
		go func() { _ = srv.Serve(hl) }()
	}
	if err := b.Sysctl("net.ipv4.ip_forward=1"); err != nil {
		t.Fatal(err)
	}
	if err := openNS(t, g.GW).AddRoute("10.30.0.0/16", lab.AddrB, ""); err != nil {
		t.Fatal(err)
	}
	return healthy
}

// serve runs handle on each connection ln accepts, in a goroutine of its
// own, and closes the connection after it; it returns when ln is closed.
func serve(ln net.Listener, handle func(c net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

func serveEcho(ln net.Listener, name string) {
	serve(ln, func(c net.Conn) {
		if _, err := io.WriteString(c, name+"\n"); err != nil {
			return
		}
		// Plain copies: TCPConn.ReadFrom would splice through a pooled
		// pipe pair that outlives the connection (and TestMain counts
		// leaked descriptors).
		_, _ = io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c})
	})
}

// lbConn is one client connection to the VIP and the backend that
// greeted it.
type lbConn struct {
	c       net.Conn
	r       *bufio.Reader
	backend string
}

// dialVIP opens n connections from A to vip:80 and reads each greeting.
func dialVIP(t *testing.T, g *gateway, vip string, n int) []*lbConn {
	t.Helper()
	var conns []*lbConn
	err := topo.Do(g.A, func() error {
		for i := 0; i < n; i++ {
			c, err := net.DialTimeout("tcp4", net.JoinHostPort(vip, "80"), 3*time.Second)
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			conns = append(conns, &lbConn{c: c, r: bufio.NewReader(c)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, lc := range conns {
		_ = lc.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, err := lc.r.ReadString('\n')
		if err != nil {
			t.Fatalf("connection %d: no greeting: %v", i, err)
		}
		lc.backend = strings.TrimSpace(line)
	}
	return conns
}

// spread opens n short connections and counts them by backend.
func spread(t *testing.T, g *gateway, n int) map[string]int {
	t.Helper()
	count := map[string]int{}
	for _, lc := range dialVIP(t, g, lbVIP, n) {
		count[lc.backend]++
		lc.c.Close()
	}
	return count
}

// talker exchanges a line with the backend every 20 ms on each
// connection, recording errors and the longest wait for an echo.
type talker struct {
	errors  atomic.Int64
	stalls  atomic.Int64
	rounds  atomic.Int64
	mu      sync.Mutex
	first   []string
	maxWait time.Duration
}

const stallAfter = time.Second

func (tk *talker) run(conns []*lbConn, stop <-chan struct{}, wg *sync.WaitGroup) {
	for i, lc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				msg := fmt.Sprintf("conn %d seq %d\n", i, seq)
				t0 := time.Now()
				_ = lc.c.SetDeadline(t0.Add(stallAfter))
				_, err := io.WriteString(lc.c, msg)
				var got string
				if err == nil {
					got, err = lc.r.ReadString('\n')
				}
				wait := time.Since(t0)
				switch {
				case err != nil && isTimeout(err):
					tk.stalls.Add(1)
					tk.note(fmt.Sprintf("conn %d (%s) seq %d: no echo within %s", i, lc.backend, seq, stallAfter))
					return
				case err != nil:
					tk.errors.Add(1)
					tk.note(fmt.Sprintf("conn %d (%s) seq %d: %v", i, lc.backend, seq, err))
					return
				case got != msg:
					tk.errors.Add(1)
					tk.note(fmt.Sprintf("conn %d: echo %q, want %q", i, got, msg))
					return
				}
				tk.rounds.Add(1)
				tk.mu.Lock()
				tk.maxWait = max(tk.maxWait, wait)
				tk.mu.Unlock()
			}
		}()
	}
}

func (tk *talker) note(s string) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if len(tk.first) < 10 {
		tk.first = append(tk.first, s)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func natFar(id uint32, addr string) *pb.Object {
	return farObj(&pb.Far{Id: id, Action: "nat", Address: addr, Port: 8080})
}

func lbrObj(weights ...uint32) *pb.Object {
	l := &pb.Lbr{Id: 1, Algorithm: "maglev"}
	for i, w := range weights {
		if w == ^uint32(0) {
			continue // not a member
		}
		l.Members = append(l.Members, &pb.Member{Far: uint32(i + 1), Weight: u32(w)})
	}
	return &pb.Object{Kind: &pb.Object_Lbr{Lbr: l}}
}

const notMember = ^uint32(0)

// TestBalanceLongLived runs 100 long-lived TCP connections through a
// Maglev service while backends are added, drained, removed and added back
// over the API, and the agent restarts: no connection errs, stalls or
// changes backend, new connections avoid drained and removed backends, and
// spread by weight.
func TestBalanceLongLived(t *testing.T) {
	a := newAPIGateway(t, lbConfig)
	addBackends(t, a.gateway, lbBackends)
	a.warmUp()

	conns := dialVIP(t, a.gateway, lbVIP, lbConns)
	start := map[string]int{}
	for _, lc := range conns {
		start[lc.backend]++
	}
	t.Logf("%d long-lived connections: %v", lbConns, start)
	// greeted counts every connection by the backend that greeted it,
	// to compare with each backend's counter.
	greeted := maps.Clone(start)
	if len(start) != 2 {
		t.Fatalf("connections went to %v, want both backends", start)
	}
	tk := &talker{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tk.run(conns, stop, &wg)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
		for _, lc := range conns {
			lc.c.Close()
		}
	}()

	settle := func() { time.Sleep(1500 * time.Millisecond) }
	settle()
	phases := []struct {
		name  string
		ops   []*pb.Operation
		avoid []string // backends new connections must not reach
	}{
		{"add be3", []*pb.Operation{createOp(natFar(3, lbBackendAddr(3))), updateOp(lbrObj(1, 1, 1))}, nil},
		{"drain be1", []*pb.Operation{updateOp(lbrObj(0, 1, 1))}, []string{"be1"}},
		{"remove be2", []*pb.Operation{updateOp(lbrObj(0, notMember, 1))}, []string{"be1", "be2"}},
		{"weights 1:2:1", []*pb.Operation{updateOp(lbrObj(1, 2, 1))}, nil},
	}
	for _, ph := range phases {
		if ph.name == "weights 1:2:1" {
			// Restart the agent while be1 is drained and be2 out of the
			// LBR: their connections are held only by the connection
			// table, which must still find their FARs where they were.
			a.restart(t)
			t.Logf("agent restarted")
			settle()
		}
		r := a.mustApply(t, ph.ops...)
		t.Logf("%s: generation %d, commit %d us", ph.name, r.GetGeneration(), r.GetCommitMicros())
		if len(ph.avoid) > 0 {
			got := spread(t, a.gateway, 60)
			for b, n := range got {
				greeted[b] += n
			}
			for _, b := range ph.avoid {
				if got[b] > 0 {
					t.Errorf("%s: %d new connections went to %s", ph.name, got[b], b)
				}
			}
		}
		settle()
	}

	const n = 2000
	got := spread(t, a.gateway, n)
	for b, n := range got {
		greeted[b] += n
	}
	want := map[string]float64{"be1": 0.25, "be2": 0.5, "be3": 0.25}
	for b, w := range want {
		share := float64(got[b]) / n
		t.Logf("new connections on %s: %.3f (weight share %.2f, relative error %+.1f %%)", b, share, w, 100*(share-w)/w)
		if share < w-0.05 || share > w+0.05 {
			t.Errorf("%s got %.3f of %d new connections, want %.2f +- 0.05", b, share, n, w)
		}
	}

	close(stop)
	wg.Wait()
	t.Logf("long-lived connections: %d echoes, longest wait %s, %d errors, %d stalls", tk.rounds.Load(), tk.maxWait, tk.errors.Load(), tk.stalls.Load())
	if tk.errors.Load() > 0 || tk.stalls.Load() > 0 {
		t.Errorf("long-lived connections broke: %d errors, %d stalls: %v", tk.errors.Load(), tk.stalls.Load(), tk.first)
	}
	if min := int64(lbConns) * 100; tk.rounds.Load() < min {
		t.Errorf("only %d echoes over the run, want at least %d", tk.rounds.Load(), min)
	}
	// The counters saw every connection, across the restart (a restarted
	// agent gives each backend its counter again); only the long-lived
	// ones are still open (the short ones ended with a FIN).
	opened := float64(lbConns + 2*60 + n)
	var newConns, active float64
	perFAR := map[string]float64{}
	ok := waitFor(3*time.Second, func() bool {
		fams := a.scrape()
		newConns, active = 0, 0
		for far := 1; far <= lbBackends; far++ {
			l := map[string]string{"service": "1", "far": fmt.Sprint(far)}
			v, _ := metricValue(fams, "edgeplane_service_backend_new_connections_total", l)
			newConns += v
			perFAR[fmt.Sprintf("be%d", far)] = v
			v, _ = metricValue(fams, "edgeplane_service_backend_active_connections", l)
			active += v
		}
		return newConns == opened && active == lbConns
	})
	t.Logf("metrics: %.0f new connections (opened %.0f), %.0f active", newConns, opened, active)
	if !ok {
		t.Errorf("metrics: %.0f new connections, want %.0f; %.0f active, want %d; by backend: counted %v, greeted %v", newConns, opened, active, lbConns, perFAR, greeted)
		t.Logf("what the dataplane holds: %s", connCensus(t, a.gateway))
	}

	// `edgeplane stats` from the pins, without the agent, says the same.
	var pinNew, pinActive uint64
	for _, b := range a.stats().Backends {
		if b.Service == 1 && b.FAR != 0 {
			pinNew += b.NewConns
			pinActive += b.Active
		}
	}
	if float64(pinNew) != opened || pinActive != lbConns {
		t.Errorf("edgeplane stats from pins: %d new connections, %d active; want %.0f, %d", pinNew, pinActive, opened, lbConns)
		if ok {
			t.Logf("what the dataplane holds: %s", connCensus(t, a.gateway))
		}
	}

	// Every connection still talks to the backend that greeted it.
	for i, lc := range conns {
		msg := fmt.Sprintf("final %d\n", i)
		_ = lc.c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(lc.c, msg); err != nil {
			t.Fatalf("connection %d (%s): %v", i, lc.backend, err)
		}
		if got, err := lc.r.ReadString('\n'); err != nil || got != msg {
			t.Fatalf("connection %d (%s): echo %q, %v", i, lc.backend, got, err)
		}
	}
}

// lbConfig3 is lbConfig with a third backend (10.30.3.2).
func lbConfig3() string {
	cfg := strings.Replace(lbConfig, "  - {id: 2, action: nat, address: 10.30.2.2, port: 8080}",
		"  - {id: 2, action: nat, address: 10.30.2.2, port: 8080}\n  - {id: 3, action: nat, address: 10.30.3.2, port: 8080}", 1)
	return strings.Replace(cfg, "members: [{far: 1}, {far: 2}]", "members: [{far: 1}, {far: 2}, {far: 3}]", 1)
}

// TestBalanceHealthChecks takes a backend whose HTTP health check fails
// out of the service (new connections avoid it, its gauge reads 0) and
// puts it back when the checks pass again.
func TestBalanceHealthChecks(t *testing.T) {
	cfg := strings.Replace(lbConfig3(), "lbr: 1}", "lbr: 1, health: {type: http, port: 8081, path: /healthz, interval: 200ms, timeout: 150ms, rise: 2, fall: 2}}", 1)
	g := newGateway(t, cfg)
	healthy := addBackends(t, g, lbBackends)
	g.start()
	g.warmUp()

	upGauge := func(far int) float64 {
		v, _ := metricValue(g.scrape(), "edgeplane_service_backend_up", map[string]string{"service": "1", "far": fmt.Sprint(far)})
		return v
	}
	if !waitFor(5*time.Second, func() bool { return upGauge(1) == 1 && upGauge(2) == 1 && upGauge(3) == 1 }) {
		t.Fatalf("backends not reported up: %v %v %v", upGauge(1), upGauge(2), upGauge(3))
	}
	if got := spread(t, g, 300); len(got) != 3 {
		t.Fatalf("300 connections with all backends up went to %v", got)
	}

	healthy[1].Store(false) // be2's checks fail from now on
	t0 := time.Now()
	if !waitFor(5*time.Second, func() bool { return upGauge(2) == 0 }) {
		t.Fatalf("be2 still up 5 s after its checks started failing")
	}
	t.Logf("be2 taken out %s after its checks started failing (interval 200ms, fall 2)", time.Since(t0).Round(10*time.Millisecond))
	if got := spread(t, g, 300); got["be2"] != 0 || got["be1"]+got["be3"] != 300 {
		t.Errorf("with be2 down, new connections went to %v", got)
	}

	healthy[1].Store(true)
	t0 = time.Now()
	if !waitFor(5*time.Second, func() bool { return upGauge(2) == 1 }) {
		t.Fatalf("be2 not back 5 s after its checks pass again")
	}
	t.Logf("be2 back %s after its checks passed again (rise 2)", time.Since(t0).Round(10*time.Millisecond))
	got := spread(t, g, 600)
	if share := float64(got["be2"]) / 600; share < 0.25 || share > 0.42 {
		t.Errorf("be2 back, it got %.3f of new connections (%v), want about 1/3", share, got)
	}
	if !strings.Contains(g.log(), "health check: backend down") || !strings.Contains(g.log(), "health check: backend up") {
		t.Errorf("the agent log does not say when be2 went down and came back")
	}
}

// backendAgent runs edgeplane on backend host i for dsr-gre: GRE from the
// gateway (10.2.0.1, key i) to the backend is decapsulated and the inner
// packet, to the VIP the backend holds on lo, delivered to its stack.
func backendAgent(t *testing.T, g *gateway, i int, vip string) {
	t.Helper()
	ns := fmt.Sprintf("%sbe%d", g.Prefix, i)
	cfg := fmt.Sprintf(`
interfaces:
  - {name: eth0, role: wan, xdp: native}
paths:
  - {id: 1, type: gre, interface: eth0, local: %s, remote: %s, key: %d, monitor: {insecure: true}}
fars:
  - {id: 1, action: decap}
pdrs:
  - {id: 1, precedence: 1, match: {proto: gre, dst: %s/32}, far: 1}
limits: {flows: 4096, rules: 64}
`, lbBackendAddr(i), lab.GWWan, i, lbBackendAddr(i))
	path := filepath.Join(g.dir, fmt.Sprintf("be%d.yaml", i))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	be := openNS(t, ns)
	if err := be.AddAddr("lo", vip+"/32"); err != nil {
		t.Fatal(err)
	}
	// The inner packet is addressed to the VIP but arrives on eth0: no
	// reverse-path filtering against that.
	if err := be.Sysctl("net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.eth0.rp_filter=0"); err != nil {
		t.Fatal(err)
	}
	pinDir := "/sys/fs/bpf/" + ns
	logf, err := os.Create(filepath.Join(g.dir, fmt.Sprintf("be%d.log", i)))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, edgeplaneBin, "agent", "--config", path,
		"--pin-dir", pinDir, "--metrics-addr", "", "--grpc-addr", "", "--rest-addr", "", "--api-socket", "none", "--rest-socket", "none")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = exec.Command(edgeplaneBin, "down", "--pin-dir", pinDir).Run()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("backend %d agent log:\n%s", i, b)
		}
	})
	if !waitFor(readyTO, func() bool {
		b, _ := os.ReadFile(logf.Name())
		return strings.Contains(string(b), "agent ready")
	}) {
		t.Fatalf("backend %d agent not ready", i)
	}
}

// TestBalanceDSRGRE runs a dsr-gre service end to end: the gateway
// encapsulates each connection toward one of three backend hosts, whose own
// edgeplane decapsulates it; the backend, holding the VIP, answers the
// client directly. Long-lived connections keep working while a backend is
// drained, new ones spread over the backends.
func TestBalanceDSRGRE(t *testing.T) {
	const vip = "203.0.113.20"
	var paths, fars, members string
	for i := 1; i <= lbBackends; i++ {
		paths += fmt.Sprintf("  - {id: %d, type: gre, interface: wan0, local: %s, remote: %s, key: %d, monitor: {insecure: true}}\n", i, lab.GWWan, lbBackendAddr(i), i)
		fars += fmt.Sprintf("  - {id: %d, action: encap, path: %d}\n", i, i)
		members += fmt.Sprintf("{far: %d}, ", i)
	}
	cfg := "interfaces:\n  - {name: lan0, role: lan, xdp: native}\n  - {name: wan0, role: wan, xdp: native}\npaths:\n" + paths +
		"fars:\n" + fars + "lbrs:\n  - {id: 1, algorithm: maglev, members: [" + members + "]}\n" +
		"services:\n  - {id: 1, vip: " + vip + ", port: 80, proto: tcp, lbr: 1}\nlimits: {flows: 65536, rules: 1024}\n"
	a := newAPIGateway(t, cfg)
	addBackends(t, a.gateway, lbBackends)
	for i := 1; i <= lbBackends; i++ {
		// The service listens on port 80 of the VIP the backend holds.
		ns := fmt.Sprintf("%sbe%d", a.Prefix, i)
		backendAgent(t, a.gateway, i, vip)
		var ln net.Listener
		if err := topo.Do(ns, func() (err error) {
			ln, err = net.Listen("tcp4", vip+":80")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go serveEcho(ln, fmt.Sprintf("be%d", i))
	}
	a.warmUp()

	conns := dialVIP(t, a.gateway, vip, 60)
	start := map[string]int{}
	for _, lc := range conns {
		start[lc.backend]++
	}
	t.Logf("60 long-lived dsr-gre connections: %v", start)
	if len(start) != lbBackends {
		t.Fatalf("connections went to %v, want all %d backends", start, lbBackends)
	}
	tk := &talker{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tk.run(conns, stop, &wg)
	time.Sleep(time.Second)
	drain := &pb.Lbr{Id: 1, Algorithm: "maglev", Members: []*pb.Member{{Far: 1, Weight: u32(0)}, {Far: 2}, {Far: 3}}}
	a.mustApply(t, updateOp(&pb.Object{Kind: &pb.Object_Lbr{Lbr: drain}}))
	fresh := dialVIP(t, a.gateway, vip, 90)
	count := map[string]int{}
	for _, lc := range fresh {
		count[lc.backend]++
		lc.c.Close()
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	for _, lc := range conns {
		lc.c.Close()
	}
	t.Logf("after draining be1, 90 new connections: %v; long-lived: %d echoes, longest wait %s, %d errors, %d stalls",
		count, tk.rounds.Load(), tk.maxWait, tk.errors.Load(), tk.stalls.Load())
	if count["be1"] != 0 || count["be2"] == 0 || count["be3"] == 0 {
		t.Errorf("new connections after draining be1: %v", count)
	}
	if tk.errors.Load() > 0 || tk.stalls.Load() > 0 || tk.rounds.Load() < 60*50 {
		t.Errorf("long-lived connections: %d echoes, %d errors, %d stalls: %v", tk.rounds.Load(), tk.errors.Load(), tk.stalls.Load(), tk.first)
	}
	// The gateway encapsulated every packet toward the backends: each
	// path sent, none received (replies go straight to the client).
	fams := a.scrape()
	for i := 1; i <= lbBackends; i++ {
		tx, _ := metricValue(fams, "edgeplane_path_packets_total", map[string]string{"path": fmt.Sprint(i), "dir": "tx"})
		rx, _ := metricValue(fams, "edgeplane_path_packets_total", map[string]string{"path": fmt.Sprint(i), "dir": "rx"})
		if tx == 0 || rx != 0 {
			t.Errorf("path %d: sent %.0f, received %.0f packets; want some sent, none received", i, tx, rx)
		}
	}
}

// TestBalanceStateless runs long-lived TCP connections through a
// stateless NAT service on real interfaces: every packet the per-CPU
// exact-match copy does not hold is hashed through the Maglev table, the
// replies' reverse entries bring the answers back from the VIP, and no
// connection is counted as new (nothing is recorded). New connections
// spread over the three backends; a drained backend gets none.
func TestBalanceStateless(t *testing.T) {
	cfg := strings.Replace(lbConfig3(), "lbr: 1}", "lbr: 1, stateless: true}", 1)
	a := newAPIGateway(t, cfg)
	addBackends(t, a.gateway, lbBackends)
	a.warmUp()

	conns := dialVIP(t, a.gateway, lbVIP, 60)
	tk := &talker{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tk.run(conns, stop, &wg)
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	for _, lc := range conns {
		lc.c.Close()
	}
	t.Logf("60 connections, %d echoes, longest wait %s, %d errors, %d stalls", tk.rounds.Load(), tk.maxWait, tk.errors.Load(), tk.stalls.Load())
	if tk.errors.Load() != 0 || tk.stalls.Load() != 0 || tk.rounds.Load() < 60*50 {
		t.Fatalf("stateless service: %d echoes, %d errors, %d stalls: %v", tk.rounds.Load(), tk.errors.Load(), tk.stalls.Load(), tk.first)
	}

	got := spread(t, a.gateway, 600)
	t.Logf("600 new connections: %v", got)
	for _, be := range []string{"be1", "be2", "be3"} {
		if share := float64(got[be]) / 600; share < 0.25 || share > 0.42 {
			t.Errorf("%s got %.3f of new connections (%v), want about 1/3", be, share, got)
		}
	}
	var packets, newConns float64
	for far := 1; far <= 3; far++ {
		l := map[string]string{"service": "1", "far": fmt.Sprint(far)}
		p, _ := metricValue(a.scrape(), "edgeplane_service_backend_packets_total", l)
		n, _ := metricValue(a.scrape(), "edgeplane_service_backend_new_connections_total", l)
		packets += p
		newConns += n
	}
	if packets < 60*50 || newConns != 0 {
		t.Errorf("backend counters: %v packets, %v new connections; want every packet counted and no connection recorded", packets, newConns)
	}

	a.mustApply(t, updateOp(lbrObj(1, 1, 0)))
	if got := spread(t, a.gateway, 120); got["be3"] != 0 {
		t.Errorf("be3 drained, new connections went to %v", got)
	}
}

// TestBalanceNATPMTU sends 256 KiB from A through the NAT service to a
// backend behind a narrower hop: B forwards to the backend over a link of
// MTU 1200 while both ends announce an MSS for 1500, so B answers the
// client's full-size segments with ICMP fragmentation needed, quoting
// them as they left the gateway (to the backend's address). The gateway
// translates the quote back to the VIP, the client's kernel lowers its
// path MTU and the transfer completes; untranslated, the client could not
// match the error to its connection and the transfer would stall.
func TestBalanceNATPMTU(t *testing.T) {
	cfg := strings.Replace(lbConfig, "lbr: 1}", "lbr: 1}\n  - {id: 2, vip: 203.0.113.10, port: 90, proto: tcp, lbr: 2}", 1)
	cfg = strings.Replace(cfg, "lbrs:\n", "lbrs:\n  - {id: 2, algorithm: maglev, members: [{far: 9}]}\n", 1)
	cfg = strings.Replace(cfg, "fars:\n", "fars:\n  - {id: 9, action: nat, address: 10.30.1.2, port: 9000}\n", 1)
	a := newAPIGateway(t, cfg)
	addBackends(t, a.gateway, 1)
	// A sink on the backend: reads to EOF, answers with the byte count.
	var ln net.Listener
	if err := topo.Do(a.Prefix+"be1", func() (err error) {
		ln, err = net.Listen("tcp4", ":9000")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serve(ln, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		n, _ := io.Copy(io.Discard, struct{ io.Reader }{c})
		fmt.Fprintf(c, "%d\n", n)
	})
	if err := openNS(t, a.B).SetMTU("be1", 1200); err != nil {
		t.Fatalf("narrow the backend link: %v", err)
	}
	a.warmUp()
	icmpBefore, _ := metricValue(a.scrape(), "edgeplane_reason_packets_total", map[string]string{"reason": "nat_icmp"})

	const size = 256 << 10
	var reply string
	start := time.Now()
	err := topo.Do(a.A, func() error {
		c, err := net.DialTimeout("tcp4", "203.0.113.10:90", 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(make([]byte, size)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		b, err := io.ReadAll(c)
		reply = strings.TrimSpace(string(b))
		return err
	})
	took := time.Since(start)
	icmp, _ := metricValue(a.scrape(), "edgeplane_reason_packets_total", map[string]string{"reason": "nat_icmp"})
	t.Logf("%d bytes through a 1200-byte hop in %s; %v ICMP errors translated", size, took, icmp-icmpBefore)
	if err != nil || reply != fmt.Sprint(size) {
		t.Fatalf("transfer: %v, backend counted %q of %d bytes", err, reply, size)
	}
	if icmp-icmpBefore < 1 {
		t.Errorf("no ICMP error translated: the transfer did not need path MTU discovery, the test shows nothing")
	}
}

// TestBalancePDRBeforeVIP puts a drop PDR in front of a NAT service's VIP
// for one of host A's two addresses: at the service's precedence, PDRs
// come first, so connections from that address are stopped at the
// gateway (counted by the PDR) while the other address connects through
// the service; deleting the PDR over the API lets both connect.
func TestBalancePDRBeforeVIP(t *testing.T) {
	cfg := strings.NewReplacer(
		"lbr: 1}\n", "lbr: 1, precedence: 10}\n",
		"limits:", `pdrs:
  - {id: 7, precedence: 10, match: {src: 10.1.0.3/32, dst: 203.0.113.10/32}, far: 9}
limits:`,
		"fars:\n", "fars:\n  - {id: 9, action: drop}\n").Replace(lbConfig)
	a := newAPIGateway(t, cfg)
	addBackends(t, a.gateway, 2)
	a.warmUp()
	const blocked = "10.1.0.3"
	if err := openNS(t, a.A).AddAddr("eth0", blocked+"/24"); err != nil {
		t.Fatal(err)
	}
	// connect opens a connection from src to the VIP and returns the
	// backend's greeting, or "" when it cannot within a second.
	connect := func(src string) string {
		t.Helper()
		var greeting string
		err := topo.Do(a.A, func() error {
			d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			c, err := d.Dial("tcp4", net.JoinHostPort(lbVIP, "80"))
			if err != nil {
				return nil
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return fmt.Errorf("connected from %s, no greeting: %w", src, err)
			}
			greeting = strings.TrimSpace(line)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return greeting
	}
	before := a.stats().pdr(7).Packets
	for i := 0; i < 5; i++ {
		if got := connect(lab.AddrA); got == "" {
			t.Errorf("connection %d from %s: none, want a backend", i, lab.AddrA)
		}
		if got := connect(blocked); got != "" {
			t.Errorf("connection %d from %s reached %s through the drop PDR", i, blocked, got)
		}
	}
	if n := a.stats().pdr(7).Packets - before; n < 5 {
		t.Errorf("the drop PDR counted %d packets, want a SYN of each of the 5 blocked connections at least", n)
	}
	a.mustApply(t, deleteOp(pb.Kind_KIND_PDR, 7, ""))
	if got := connect(blocked); got == "" {
		t.Errorf("from %s after the PDR's deletion: no connection", blocked)
	}
}
