// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// upgradeCfg is lbConfig with PDRs that forward A <-> B in XDP, so the
// ping stream goes through the program being replaced, not around it.
func upgradeCfg() string {
	cfg := strings.Replace(lbConfig, "lbrs:", `  - {id: 10, action: redirect, interface: wan0}
  - {id: 11, action: redirect, interface: lan0}
lbrs:`, 1)
	return strings.Replace(cfg, "limits:", `pdrs:
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.2.0.0/24}, far: 10}
  - {id: 30, precedence: 100, match: {in: wan0, dst: 10.1.0.0/24}, far: 11}
limits:`, 1)
}

var (
	layoutBinOnce sync.Once
	layoutBin     string
	layoutBinErr  error
)

// layoutBinary builds edgeplane from the same tree with the dataplane
// compiled with -DEDGE_LAYOUT_TEST, whose edge_conn and edge_flow have a
// member more, so every map holding them has another layout than the
// plain build's. The object and its Go bindings are generated for this
// test only (internal/bpf/gen.go's directive, into a directory of the
// test's) and put in place of the committed ones by go build -overlay.
func layoutBinary(t *testing.T) string {
	t.Helper()
	layoutBinOnce.Do(func() {
		layoutBin = filepath.Join(filepath.Dir(edgeplaneBin), "edgeplane-layout-test")
		layoutBinErr = buildLayout(filepath.Join(filepath.Dir(edgeplaneBin), "layout-gen"), layoutBin)
	})
	if layoutBinErr != nil {
		t.Fatal(layoutBinErr)
	}
	return layoutBin
}

// buildLayout generates the layout-test dataplane into dir and builds
// edgeplane with it as bin.
func buildLayout(dir, bin string) error {
	const pkg = "github.com/edgeplane/edgeplane/internal/bpf"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	gen := exec.Command(testutil.GoTool(), "generate", pkg)
	gen.Env = append(os.Environ(), "EDGE_GEN_CFLAGS=-DEDGE_LAYOUT_TEST", "EDGE_GEN_DIR="+dir)
	if out, err := gen.CombinedOutput(); err != nil {
		return fmt.Errorf("generate the layout-test dataplane: %w\n%s", err, out)
	}
	src, err := exec.Command(testutil.GoTool(), "list", "-f", "{{.Dir}}", pkg).Output()
	if err != nil {
		return fmt.Errorf("find %s: %w", pkg, err)
	}
	replace := map[string]string{}
	for _, f := range []string{"edge_bpfel.go", "edge_bpfel.o"} {
		replace[filepath.Join(strings.TrimSpace(string(src)), f)] = filepath.Join(dir, f)
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return err
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		return fmt.Errorf("write overlay: %w", err)
	}
	out, err := exec.Command(testutil.GoTool(), "build", "-buildvcs=false", "-overlay", overlayFile, "-o", bin,
		"github.com/edgeplane/edgeplane/cmd/edgeplane").CombinedOutput()
	if err != nil {
		return fmt.Errorf("build edgeplane with the layout-test dataplane: %w\n%s", err, out)
	}
	return nil
}

// pingStream pings dst from ns every 2 ms, in runs of 500, until stop is
// closed, and counts what it sent and what came back.
type pingStream struct {
	sent, received atomic.Int64
	done           chan struct{}
}

func startPings(ns, dst string, stop <-chan struct{}) *pingStream {
	ps := &pingStream{done: make(chan struct{})}
	go func() {
		defer close(ps.done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			const run = 500
			got := ping(ns, dst, run, "0.002")
			ps.sent.Add(run)
			ps.received.Add(int64(got))
		}
	}()
	return ps
}

// traffic is what runs through the gateway while it is upgraded: n
// long-lived connections from A through the NAT service, each echoing a
// line every 20 ms, and a ping stream from A to B every 2 ms.
type traffic struct {
	conns []*lbConn
	tk    *talker
	pings *pingStream
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

func startTraffic(t *testing.T, a *apiGateway, n int) *traffic {
	t.Helper()
	tr := &traffic{conns: dialVIP(t, a.gateway, lbVIP, n), tk: &talker{}, stop: make(chan struct{})}
	tr.tk.run(tr.conns, tr.stop, &tr.wg)
	tr.pings = startPings(a.A, lab.AddrB, tr.stop)
	t.Cleanup(func() {
		tr.end()
		for _, lc := range tr.conns {
			lc.c.Close()
		}
	})
	return tr
}

// end stops the echoes and the pings and waits for them.
func (tr *traffic) end() {
	tr.once.Do(func() {
		close(tr.stop)
		tr.wg.Wait()
		<-tr.pings.done
	})
}

// check ends the traffic and wants no ping lost, no connection broken.
func (tr *traffic) check(t *testing.T, what string) {
	t.Helper()
	tr.end()
	sent, got := tr.pings.sent.Load(), tr.pings.received.Load()
	t.Logf("pings at 2 ms through XDP: %d sent, %d lost", sent, sent-got)
	if got != sent {
		t.Errorf("ping stream across %s: %d of %d replies", what, got, sent)
	}
	tk := tr.tk
	t.Logf("long-lived connections: %d echoes, longest wait %s, %d errors, %d stalls", tk.rounds.Load(), tk.maxWait, tk.errors.Load(), tk.stalls.Load())
	if tk.errors.Load() > 0 || tk.stalls.Load() > 0 {
		t.Errorf("long-lived connections broke across %s: %d errors, %d stalls: %v", what, tk.errors.Load(), tk.stalls.Load(), tk.first)
	}
}

// upgradeLine is what an agent logs when it took a pinned dataplane of
// another layout over, with its figures.
var upgradeLine = regexp.MustCompile(`upgraded: .*took=(\S+) prepare=(\S+) switch=(\S+) interfaces=\d+ window=(\S+)`)

// counterOf sums a metric family's samples whose labels include want.
func counterOf(g *gateway, name string, want map[string]string) float64 {
	v, _ := metricValue(g.scrape(), name, want)
	return v
}

// TestUpgradeLayoutChange upgrades a gateway under traffic from a build
// to one whose map layouts differ (edge_conn and edge_flow gained a
// member: every connection, flow cache and exact-match cache map must be
// converted) and back with other limits (map sizes): SIGTERM, then the
// other build on the same pin dir and config. 100 long-lived connections through a NAT service keep
// their backend (they keep echoing without an error or a stall), a ping
// stream at 2 ms through XDP loses nothing, and the counters continue.
func TestUpgradeLayoutChange(t *testing.T) {
	binB := layoutBinary(t)
	a := newAPIGateway(t, upgradeCfg())
	addBackends(t, a.gateway, lbBackends)
	a.warmUp()
	tr := startTraffic(t, a, lbConns)

	type sample struct{ pdr, backends, newConns float64 }
	read := func() sample {
		var s sample
		s.pdr = counterOf(a.gateway, "edgeplane_pdr_packets_total", map[string]string{"pdr": "20"})
		for far := 1; far <= 2; far++ {
			l := map[string]string{"service": "1", "far": fmt.Sprint(far)}
			s.backends += counterOf(a.gateway, "edgeplane_service_backend_packets_total", l)
			s.newConns += counterOf(a.gateway, "edgeplane_service_backend_new_connections_total", l)
		}
		return s
	}
	time.Sleep(time.Second)
	samples := []sample{read()}
	progs := []string{xdpProgID(t, a.GW, lab.LanName)}
	upgrades := 0
	switchTo := func(bin, name string) {
		t.Helper()
		if err := a.StopAgent(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		a.startBin(bin, a.args...)
		upgrades++
		m := upgradeLine.FindAllStringSubmatch(a.log(), -1)
		if len(m) != upgrades {
			t.Fatalf("to %s: %d \"upgraded\" log lines, want %d", name, len(m), upgrades)
		}
		f := m[upgrades-1]
		t.Logf("upgrade to %s: took %s (maps, first copy and program load %s), switch of both interfaces %s, from the commit to done %s", name, f[1], f[2], f[3], f[4])
		time.Sleep(1500 * time.Millisecond)
		samples = append(samples, read())
		progs = append(progs, xdpProgID(t, a.GW, lab.LanName))
	}
	switchTo(binB, "the layout-test build")
	// The pins are the layout-test build's now: the plain build's
	// `edgeplane stats` says so rather than reading its entries at the
	// wrong places; the layout-test build's reads them.
	if out, err := exec.Command(edgeplaneBin, "stats", "--json", "--pin-dir", a.PinDir).CombinedOutput(); err == nil || !strings.Contains(string(out), "another build") {
		t.Errorf("plain build's stats of the layout-test build's pins: %v\n%s", err, out)
	}
	if out, err := exec.Command(binB, "stats", "--json", "--pin-dir", a.PinDir).CombinedOutput(); err != nil {
		t.Errorf("layout-test build's stats of its pins: %v\n%s", err, out)
	}
	// Back, with the maps resized as well: more rules move every
	// service's reply rewrite to another FAR place, which the replies of
	// the established connections must follow.
	a.writeConfig(strings.Replace(upgradeCfg(), "limits: {flows: 65536, rules: 1024}", "limits: {flows: 32768, rules: 2048, connections: 131072}", 1))
	switchTo(edgeplaneBin, "the plain build again, limits resized")

	tr.check(t, "both upgrades")
	// Every connection still talks to the backend that greeted it.
	kept := 0
	for i, lc := range tr.conns {
		msg := fmt.Sprintf("final %d\n", i)
		_ = lc.c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(lc.c, msg); err != nil {
			t.Errorf("connection %d (%s): %v", i, lc.backend, err)
			continue
		}
		if r, err := lc.r.ReadString('\n'); err != nil || r != msg {
			t.Errorf("connection %d (%s): echo %q, %v", i, lc.backend, r, err)
			continue
		}
		kept++
	}
	t.Logf("%d of %d connections kept their backend across both upgrades", kept, len(tr.conns))

	for i := 1; i < len(samples); i++ {
		p, c := samples[i-1], samples[i]
		if c.pdr <= p.pdr || c.backends <= p.backends {
			t.Errorf("counters after upgrade %d did not continue: PDR 20 %.0f -> %.0f, backend packets %.0f -> %.0f", i, p.pdr, c.pdr, p.backends, c.backends)
		}
		if c.newConns != lbConns {
			t.Errorf("after upgrade %d: %.0f new connections counted, want %d (no connection opened again)", i, c.newConns, lbConns)
		}
	}
	t.Logf("counters (PDR 20 packets, backend packets): %v", samples)
	if progs[0] == progs[1] || progs[1] == progs[2] || progs[1] == "" {
		t.Errorf("lan0 ran programs %v: each upgrade must switch it", progs)
	}
	if _, err := os.Stat(filepath.Join(a.PinDir, "next")); err == nil {
		t.Errorf("the upgrade directory is left in %s", a.PinDir)
	}
	// The larger of flows 32768 and connections 131072.
	if m, err := ebpf.LoadPinnedMap(filepath.Join(a.PinDir, "edge_ft"), nil); err != nil || m.MaxEntries() != 131072 {
		t.Errorf("pinned flow table after the resize: %v entries (%v), want 131072", m, err)
	} else {
		m.Close()
	}
	// The plain build's pins again: `edgeplane stats` reads them.
	if s := a.stats(); s.pdr(20).Packets == 0 {
		t.Errorf("edgeplane stats after the round trip: PDR 20 counted nothing")
	}
}

// TestUpgradeCrashRecovery kills the agent (SIGKILL, from inside, at a
// chosen moment) in each state of an upgrade, then starts a build: the
// one upgraded to (which completes the upgrade) or the one upgraded from
// (which rolls it forward or back and then upgrades to itself). Through
// all of it the gateway forwards: a ping stream at 2 ms loses nothing and
// the long-lived connections keep their backends.
func TestUpgradeCrashRecovery(t *testing.T) {
	binB := layoutBinary(t)
	a := newAPIGateway(t, upgradeCfg())
	addBackends(t, a.gateway, lbBackends)
	a.warmUp()
	tr := startTraffic(t, a, 50)

	bins := map[string]string{"plain": edgeplaneBin, "layout": binB}
	running := "plain"
	for _, c := range []struct{ halt, to, then string }{
		{"prepared", "layout", "plain"},   // rolled back
		{"committed", "layout", "layout"}, // discarded, upgraded again
		{"switching", "plain", "layout"},  // one link switched: rolled forward, then upgraded back
		{"switched", "plain", "plain"},    // completed
		{"promoting", "layout", "plain"},  // completed, then upgraded back
	} {
		if err := a.StopAgent(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		os.Setenv("EDGEPLANE_UPGRADE_HALT", c.halt)
		err := a.StartAgent(bins[c.to], a.cfgPath, a.logf, a.args...)
		os.Unsetenv("EDGEPLANE_UPGRADE_HALT")
		if err != nil {
			t.Fatal(err)
		}
		// Signal 0 only waits for the agent, which kills itself.
		if err := a.StopAgent(syscall.Signal(0)); err != nil {
			t.Fatal(err)
		}
		for _, itf := range []string{lab.LanName, lab.WanName} {
			if out, on := xdpOn(t, a.GW, itf); !on {
				t.Fatalf("%s -> %s, killed when %s: no XDP on %s:\n%s", running, c.to, c.halt, itf, out)
			}
		}
		if got := ping(a.A, lab.AddrB, 50, "0.01"); got != 50 {
			t.Errorf("%s -> %s, killed when %s: %d of 50 pings through the gateway with no agent", running, c.to, c.halt, got)
		}
		a.startBin(bins[c.then], a.args...)
		t.Logf("%s -> %s killed when %s, then the %s build started: ready", running, c.to, c.halt, c.then)
		running = c.then
		if _, err := os.Stat(filepath.Join(a.PinDir, "next")); err == nil {
			t.Errorf("after %s: the upgrade directory is left", c.halt)
		}
	}

	tr.check(t, "the crashed upgrades")
	if log := a.log(); !strings.Contains(log, "ended before its switch") || !strings.Contains(log, "ended after its switch") {
		t.Errorf("the log does not show both recoveries (discard and completion)")
	}
}
