// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bench/control"
	"github.com/edgeplane/edgeplane/internal/bench/fleetbench"
	"github.com/edgeplane/edgeplane/internal/bench/sdwan"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestBenchControl keeps the control part of `edgeplane-dev bench` working
// with small counts: an agent built from this tree, every figure present,
// its percentiles in order and its method said, the batch applied in
// full. Like the other bench tests it asserts no speed.
func TestBenchControl(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "nsenter"} {
		testutil.RequireTool(t, tool)
	}
	bin, dev := buildEdgeplane(t)

	const ops, paced, batch = 50, 10, 1000
	// N4 figures at 2,000 sessions: 100,000 make maps whose teardown
	// right after can hold a CPU ~9 ms (the cpuwatch test's threads saw
	// it), and the figures' shape is what is checked here.
	r, err := Run(context.Background(), Options{OnlyControl: true, ControlOps: ops, ControlPaced: paced, ControlBatch: batch,
		N4Sessions: 2000, EdgeplaneBin: bin, DevBin: dev, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Control
	if c == nil {
		t.Fatal("no control figures")
	}
	if len(r.Figures) != 0 || r.EndToEnd != nil {
		t.Error("--only-control measured packet figures")
	}
	for _, tc := range []struct {
		l     control.Latency
		name  string
		ops   int
		ratio bool
		floor control.Latency
	}{
		{c.Floor, "grpc_floor", ops, false, control.Latency{}},
		{c.FloorPaced, "grpc_floor_paced", paced, false, control.Latency{}},
		{c.Create, "pdr_create", ops, true, c.Floor},
		{c.Update, "pdr_update", ops, true, c.Floor},
		{c.Delete, "pdr_delete", ops, true, c.Floor},
		{c.CreatePaced, "pdr_create_paced", paced, true, c.FloorPaced},
		{c.RemoveBackend, "lb_remove_backend", 50, true, c.Floor},
	} {
		l := tc.l
		if l.Name != tc.name || l.Ops != tc.ops || l.Method == "" {
			t.Errorf("figure %s: %+v", tc.name, l)
			continue
		}
		if !(l.P50Us > 0 && l.P50Us <= l.P90Us && l.P90Us <= l.P99Us && l.P99Us <= l.MaxUs && l.MeanUs > 0 && l.MeanUs <= l.MaxUs) {
			t.Errorf("%s: percentiles out of order or zero: %+v", tc.name, l)
		}
		if tc.ratio {
			if l.Ratios == nil || l.Ratios.P50 <= 0 || l.ServerCommitP50Us <= 0 || l.ServerCommitMaxUs < l.ServerCommitP99Us {
				t.Errorf("%s: no ratio to the floor or no commit time: %+v", tc.name, l)
			} else if got := l.P50Us / tc.floor.P50Us; got != l.Ratios.P50 {
				t.Errorf("%s: ratio %.3f, want p50 / floor p50 = %.3f", tc.name, l.Ratios.P50, got)
			}
		} else if l.Ratios != nil {
			t.Errorf("%s: the floor has a ratio to itself", tc.name)
		}
	}
	// The backend changes: each timed to the flip, to the grace period
	// after it and to the answer. What causality guarantees is checked,
	// not how late a reader starved of CPU saw the flip: the flip comes
	// before the answer, so every read that saw the old generation
	// started before the answer; a grace period starts after the flip.
	for _, b := range []struct {
		c    control.BackendChange
		name string
	}{{c.BackendRemove, "lb_backend_remove"}, {c.BackendAdd, "lb_backend_add"}, {c.BackendWeight, "lb_backend_weight"}} {
		if b.c.Name != b.name || b.c.Ops != 30 || b.c.Method == "" || !strings.Contains(b.c.Method, "100ms") || b.c.ReadGapP50Us <= 0 {
			t.Errorf("%s: %+v", b.name, b.c)
			continue
		}
		for _, l := range []control.Latency{b.c.Flip, b.c.Settled, b.c.Answer} {
			if l.Ops != 30 || !(l.P50Us > 0 && l.P50Us <= l.P90Us && l.P90Us <= l.P99Us && l.P99Us <= l.MaxUs) || l.Ratios == nil || l.ServerCommitP50Us <= 0 {
				t.Errorf("%s: %+v", l.Name, l)
			}
		}
		if b.c.OldReadBeforeAnswer != b.c.Ops || b.c.Flip.P50Us > b.c.Settled.P50Us {
			t.Errorf("%s: %d of %d changes had their last read of the old generation start before the answer; flip p50 %.0f µs, settled p50 %.0f µs",
				b.name, b.c.OldReadBeforeAnswer, b.c.Ops, b.c.Flip.P50Us, b.c.Settled.P50Us)
		}
	}
	if !strings.Contains(c.CreatePaced.Method, "20ms") {
		t.Errorf("paced method does not say its pace: %q", c.CreatePaced.Method)
	}
	for _, tc := range []struct {
		b         control.Batch
		name      string
		pdrsAfter int
	}{
		{c.BatchCreate, "batch_create", batch + 1},
		{c.BatchDelete, "batch_delete", 1},
	} {
		b := tc.b
		if b.Name != tc.name || b.Ops != batch || b.Ms <= 0 || b.ServerCommitMs <= 0 || b.ServerCommitMs > b.Ms || b.Method == "" {
			t.Errorf("%s: %+v", tc.name, b)
		}
		if b.PdrsAfter != tc.pdrsAfter {
			t.Errorf("%s: ListPdrs listed %d PDRs after it, want %d", tc.name, b.PdrsAfter, tc.pdrsAfter)
		}
	}

	// The journal's sync: its floor on this disk, and each single
	// Apply's, reported by the agent.
	if f := c.SyncFloor; f.Name != "journal_sync_floor" || f.Ops != ops || !(f.P50Us > 0 && f.P50Us <= f.P99Us) || f.Method == "" {
		t.Errorf("sync floor: %+v", f)
	}
	for _, l := range []control.Latency{c.Create, c.Update, c.Delete} {
		if !(l.ServerSyncP50Us > 0 && l.ServerNoSyncP50Us > 0 && l.ServerNoSyncP50Us <= l.ServerCommitP50Us && l.ServerNoSyncP50Us <= l.ServerNoSyncP99Us) {
			t.Errorf("%s: no journal sync reported, or the agent's time without it out of order: %+v", l.Name, l)
		}
	}
	checkConcurrency(t, c.Concurrency)
	var controlGoals int
	for _, g := range r.Goals {
		if strings.Contains(g.Name, "journal sync") || strings.Contains(g.Name, "Applies/s") {
			controlGoals++
		}
	}
	if controlGoals != 3 {
		t.Errorf("goals: %+v, want the control part's 3", r.Goals)
	}

	// The user plane's figures: both rates, a modification's
	// percentiles in order, the memory with the sessions held above the
	// memory without.
	if n := r.N4; n == nil {
		t.Error("no N4 figures")
	} else if n.Sessions != 2000 || n.SequentialPerSec <= 0 || n.ConcurrentPerSec <= 0 || n.DeletePerSec <= 0 ||
		n.Modify.Ops != 1000 || n.Modify.P50Us <= 0 || n.Modify.P50Us > n.Modify.P99Us || n.RSSMiB <= n.RSSBeforeMiB || n.Setup == "" {
		t.Errorf("N4 figures: %+v", n)
	}
	// The multi-access series: its rate, memory, and the agent's CPU
	// while it holds them (at most the machine's 2 CPUs).
	if n := r.N4; n != nil && (n.MAConcurrentPerSec <= 0 || n.MARSSMiB <= n.RSSBeforeMiB || n.MACPUPerSec < 0 || n.MACPUPerSec > 2) {
		t.Errorf("N4 multi-access figures: %+v", n)
	}

	// Neither namespace nor pins outlive the run (the temp dir's name is
	// random, and another bench may be running).
	name := fmt.Sprintf("epctl%d", os.Getpid())
	for _, p := range []string{"/run/netns/" + name, "/sys/fs/bpf/" + name} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left behind", p)
		}
	}
}

// checkConcurrency checks the concurrency figures are all there: one
// per series, a rate for each round, and the ratios of N clients to 1.
func checkConcurrency(t *testing.T, cc *control.Concurrency) {
	t.Helper()
	if cc == nil || cc.Clients != 64 || cc.Rounds != 3 || len(cc.Figures) != 6 || len(cc.Ratios) != 4 || cc.Method == "" {
		t.Fatalf("concurrency figures: %+v", cc)
	}
	for _, f := range cc.Figures {
		apply := strings.HasPrefix(f.Name, "pdr_update")
		if f.PerSec <= 0 || len(f.PerSecRounds) != cc.Rounds || f.Calls <= 0 || !(f.P50Us > 0 && f.P50Us <= f.P99Us) ||
			apply && !(f.ServerCommitP50Us > 0 && f.ServerSyncP50Us > 0) {
			t.Errorf("concurrency figure %+v", f)
		}
		if want := map[bool]int{true: 1, false: cc.Clients}[strings.HasSuffix(f.Name, "_1")]; f.Clients != want {
			t.Errorf("%s: %d clients, want %d", f.Name, f.Clients, want)
		}
	}
	for name, v := range cc.Ratios {
		if !(v > 0) {
			t.Errorf("ratio %s: %v", name, v)
		}
	}
}

// TestBenchFailover keeps the failover part of `edgeplane-dev bench` working:
// one round at each probe interval (100 and 10 ms) in a lab of its own
// with an agent built from this tree; the stream paused when wan1 was
// cut (the figure times a failover) and came through otherwise, and the
// goals are reported. It asserts no speed.
func TestBenchFailover(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "nsenter"} {
		testutil.RequireTool(t, tool)
	}
	bin, dev := buildEdgeplane(t)
	r, err := Run(context.Background(), Options{OnlyFailover: true, FailoverRounds: 1, EdgeplaneBin: bin, DevBin: dev, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	f := r.Failover
	if f == nil || f.Method == "" || len(f.Series) != 2 {
		t.Fatalf("failover figure: %+v", f)
	}
	if len(r.Goals) != 2 {
		t.Errorf("goals: %+v", r.Goals)
	}
	for i, want := range []struct{ interval, limit float64 }{{100, 300}, {10, 50}} {
		s := f.Series[i]
		if s.ProbeIntervalMs != want.interval || len(s.GapsMs) != 1 || s.GapMs <= 10 || s.GapMs != s.GapsMs[0] {
			t.Errorf("series %d, want %.0f ms probes: %+v", i, want.interval, s)
		}
		if s.Sent < 3000 || s.Received < s.Sent/2 || s.Received > s.Sent {
			t.Errorf("%.0f ms probes: %d of %d datagrams arrived", s.ProbeIntervalMs, s.Received, s.Sent)
		}
		if s.DelayDiffMs != 25 || s.SwitchMs != s.GapMs-25 {
			t.Errorf("%.0f ms probes: switch %.1f ms, delay difference %.1f ms (the lab's 30 - 5)", s.ProbeIntervalMs, s.SwitchMs, s.DelayDiffMs)
		}
		if i < len(r.Goals) && (r.Goals[i].Value != s.SwitchMs || r.Goals[i].Limit != want.limit) {
			t.Errorf("goal %d: %+v, want series %+v against %.0f", i, r.Goals[i], s, want.limit)
		}
	}
}

// TestBenchFlowOpt keeps the flowopt scenario working: one short run of
// the mixed workload (4 eMBB flows) in a lab of its own with an agent
// built from this tree; every measure is there and consistent (Jain's
// index within 1/n-1, percentiles in order, answers and receipts at most
// what was sent). It asserts no speed.
func TestBenchFlowOpt(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "nsenter", "iperf3"} {
		testutil.RequireTool(t, tool)
	}
	bin, dev := buildEdgeplane(t)
	r, err := Run(context.Background(), Options{Scenario: "flowopt", FlowOptFlows: []int{4}, FlowOptSeconds: 2, EdgeplaneBin: bin, DevBin: dev, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	f := r.FlowOpt
	if f == nil || f.Method == "" || f.Classes == "" || len(f.Runs) != len(sdwan.FlowOptModes) {
		t.Fatalf("flowopt: %+v", f)
	}
	for i, x := range f.Runs {
		if x.Mode != sdwan.FlowOptModes[i].Name {
			t.Errorf("run %d: mode %q, want %q", i, x.Mode, sdwan.FlowOptModes[i].Name)
		}
		checkFlowOptRun(t, x)
	}
}

// TestBenchCPU keeps the cpu scenario working: one short run of every
// mode in a lab of its own with an agent built from this tree; each mode
// measured both probes, the responder had what the mode's strategy asks
// while measured (and nothing in the unloaded and loaded modes), and a
// goal stands for each loaded mode. It asserts no speed.
func TestBenchCPU(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "nsenter", "stress-ng", "python3", "ping"} {
		testutil.RequireTool(t, tool)
	}
	bin, dev := buildEdgeplane(t)
	r, err := Run(context.Background(), Options{Scenario: "cpu", CPUSeconds: 1, CPURate: 200, EdgeplaneBin: bin, DevBin: dev, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	c := r.CPU
	if c == nil || c.Method == "" || c.RateHz != 200 || len(c.Modes) != len(sdwan.CPUModes) {
		t.Fatalf("cpu: %+v", c)
	}
	applied := map[string]string{"unloaded": "normal, cpus 0,", "loaded": "normal, cpus 0,", "fifo": "fifo 50,", "deadline": "deadline,",
		"weight": "cgroup /edgeplane-strategy-", "dedicated_cpu": fmt.Sprintf(", cpus %d,", sdwan.NumCPU()-1)}
	for i, m := range c.Modes {
		if m.Name != sdwan.CPUModes[i].Name || m.Loaded != (i > 0) || (m.Strategy == "") != (i < 2) {
			t.Errorf("mode %d: %+v", i, m)
		}
		if !strings.Contains(m.Applied, applied[m.Name]) {
			t.Errorf("%s: the responder had %q, want %q in it", m.Name, m.Applied, applied[m.Name])
		}
		for _, p := range []struct {
			name string
			rt   sdwan.RoundTrips
		}{{"udp echo", m.Echo}, {"ping", m.Ping}} {
			if p.rt.Sent != 200 || p.rt.Answered < 150 || p.rt.Answered > p.rt.Sent || p.rt.P50Ms <= 0 || p.rt.P99Ms < p.rt.P50Ms || p.rt.MaxMs < p.rt.P99Ms {
				t.Errorf("%s, %s: %+v", m.Name, p.name, p.rt)
			}
		}
	}
	if len(r.Goals) != len(sdwan.CPUModes)-1 || r.Goals[0].Limit != 2*c.Modes[0].Echo.P99Ms || r.Goals[0].Value != c.Modes[1].Echo.P99Ms {
		t.Errorf("goals: %+v", r.Goals)
	}
}

// checkFlowOptRun checks that a run of the flowopt scenario measured
// what it reports.
func checkFlowOptRun(t *testing.T, x sdwan.FlowOptRun) {
	t.Helper()
	if x.EMBBFlows != 4 || x.EMBBMbps <= 0 || x.Jain < 0.25 || x.Jain > 1.000001 {
		t.Errorf("eMBB: %+v", x)
	}
	if x.URLLCSent < 1000 || x.URLLCAnswer == 0 || x.URLLCAnswer > x.URLLCSent || x.URLLCP50Ms <= 0 || x.URLLCP99Ms < x.URLLCP50Ms {
		t.Errorf("URLLC: %+v", x)
	}
	if x.MMTCSent == 0 || x.MMTCReceived == 0 || x.MMTCReceived > x.MMTCSent || x.MMTCSources != 100 {
		t.Errorf("mMTC: %+v", x)
	}
	if len(x.SoftirqMs) == 0 || x.SoftirqSpread < 1 {
		t.Errorf("softirq: %v, spread %.2f", x.SoftirqMs, x.SoftirqSpread)
	}
}

// buildEdgeplane builds the edgeplane and edgeplane-dev binaries from
// this tree for the agents and the labs' emulators a part of the bench
// runs (the test binary is neither).
func buildEdgeplane(t *testing.T) (bin, dev string) {
	t.Helper()
	bin, dev, err := testutil.BuildBinaries(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin, dev
}

// TestBenchFleet keeps the fleet scenario working, small: ten Applies to
// three gateways whose agents are built from this tree, then to twenty
// members without a dataplane. Every Apply was seen committed by every
// member, the percentiles are in order, each Apply cost at least its
// transaction's writes and one status per member, the floor was
// measured, and nothing is left behind. It asserts no speed.
func TestBenchFleet(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "nsenter"} {
		testutil.RequireTool(t, tool)
	}
	bin, dev := buildEdgeplane(t)
	before := fleetLeftovers()
	const applies, agents = 10, 20
	r, err := Run(context.Background(), Options{Scenario: "fleet", FleetApplies: applies, FleetAgents: agents, EdgeplaneBin: bin, DevBin: dev, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	f := r.Fleet
	if f == nil || f.Method == "" || f.Etcd == "" {
		t.Fatalf("fleet: %+v", f)
	}
	if fl := f.Floor; fl.Puts != 200 || !(fl.P50Ms > 0 && fl.P50Ms <= fl.P99Ms && fl.P99Ms <= fl.MaxMs) || fl.Method == "" {
		t.Errorf("etcd floor: %+v", fl)
	}
	// Each Apply's transaction writes 3 keys: the PDR, the scope mark
	// and the revision key.
	const txnWrites = 3
	for _, tc := range []struct {
		s       fleetbench.Series
		name    string
		members int
	}{{f.Gateways, "gateways", 3}, {f.NoDataplane, "members_without_dataplane", agents}} {
		s := tc.s
		if s.Name != tc.name || s.What == "" || s.Members != tc.members || s.Applies != applies {
			t.Errorf("%s: %+v", tc.name, s)
			continue
		}
		if s.AppliesCommitted != applies || s.ListedConverged != tc.members {
			t.Errorf("%s: %d of %d Applies committed by all; %d of %d members listed converged", tc.name, s.AppliesCommitted, applies, s.ListedConverged, tc.members)
		}
		if !(s.P50Ms > 0 && s.P50Ms <= s.P99Ms && s.P99Ms <= s.MaxMs && s.MeanMs <= s.MaxMs) {
			t.Errorf("%s: percentiles out of order or zero: %+v", tc.name, s)
		}
		if s.ApplyCallP50Ms <= 0 || s.ApplyCallP50Ms > s.MaxMs {
			t.Errorf("%s: ApplyTo p50 %.2f ms, max until committed %.2f ms", tc.name, s.ApplyCallP50Ms, s.MaxMs)
		}
		if want := s.P50Ms / f.Floor.P50Ms; s.RatioFloor.P50 != want || s.RatioFloor.Max < s.RatioFloor.P99 {
			t.Errorf("%s: ratios %+v, want p50 %.3f", tc.name, s.RatioFloor, want)
		}
		if s.TxnWritesPerApply != txnWrites || s.StatusWritesPerApply < float64(tc.members) ||
			s.WritesPerApply != s.TxnWritesPerApply+s.StatusWritesPerApply+s.OtherWritesPerApply ||
			s.WritesPerApply < txnWrites+float64(tc.members) {
			t.Errorf("%s: etcd writes per Apply %.2f (transaction %.2f, statuses %.2f, other %.2f), want at least %d + %d",
				tc.name, s.WritesPerApply, s.TxnWritesPerApply, s.StatusWritesPerApply, s.OtherWritesPerApply, txnWrites, tc.members)
		}
		// One revision for the transaction, one for each status write.
		if s.RevisionsPerApply < 1+float64(tc.members) {
			t.Errorf("%s: %.2f etcd revisions per Apply, want at least %d", tc.name, s.RevisionsPerApply, 1+tc.members)
		}
	}
	// Nobody asking for statuses (members without a dataplane, whose
	// commits the bench sees): every member committed every Apply, and
	// the Applies cost etcd their transaction's writes alone, at any
	// member count. The costs were read for every process.
	if u := f.NoDataplane.Unasked; u == nil {
		t.Errorf("members_without_dataplane: no unasked figures")
	} else {
		if u.Applies != applies || !(u.P50Ms > 0 && u.P50Ms <= u.P99Ms && u.P99Ms <= u.MaxMs) || u.ListedConverged != agents || u.ListMs <= 0 {
			t.Errorf("unasked: %d Applies, percentiles %+v", u.Applies, u)
		}
		if u.WritesPerApply != txnWrites || u.TxnWritesPerApply != txnWrites || u.StatusWritesPerApply != 0 || u.RevisionsPerApply != 1 {
			t.Errorf("unasked: etcd writes per Apply %.2f (transaction %.2f, statuses %.2f, other %.2f), revisions %.2f; want the transaction's %d in one revision",
				u.WritesPerApply, u.TxnWritesPerApply, u.StatusWritesPerApply, u.OtherWritesPerApply, u.RevisionsPerApply, txnWrites)
		}
		for name, c := range map[string]fleetbench.Costs{"gateways": f.Gateways.Costs, "members": f.NoDataplane.Costs, "unasked": u.Costs} {
			if c.Method == "" || c.Seconds <= 0 || c.Etcd.CPUSeconds <= 0 || c.MembersAndBench.CPUSeconds <= 0 ||
				c.Controller.RSSMiB <= 0 || c.Etcd.RSSMiB <= 0 || c.MembersAndBench.RSSMiB <= 0 || c.Etcd.PeakRSSMiB < c.Etcd.RSSMiB {
				t.Errorf("%s: costs %+v", name, c)
			}
		}
	}
	if f.NoDataplane.MembersPerClient <= 0 {
		t.Errorf("members per etcd client: %d", f.NoDataplane.MembersPerClient)
	}
	if !strings.Contains(f.NoDataplane.What, "without a dataplane") || !strings.Contains(r.Text(), "members without a dataplane (reconcile loop against a no-op writer)") {
		t.Errorf("the members without a dataplane are not labelled so: %q", f.NoDataplane.What)
	}
	if len(r.Goals) != 0 {
		t.Errorf("goals at %d members (the goal is at 100): %+v", agents, r.Goals)
	}
	// Nothing outlives the run: no namespace, pin dir or link of its
	// gateways that was not there before it.
	for _, name := range fleetLeftovers() {
		if !slices.Contains(before, name) {
			t.Errorf("%s left behind", name)
		}
	}
}

// fleetLeftovers lists what the fleet scenario's gateways would leave
// behind: namespaces, pin dirs and links named bfl*.
func fleetLeftovers() []string {
	var out []string
	for _, dir := range []string{"/run/netns", "/sys/fs/bpf"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "bfl") {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	links, _ := net.Interfaces()
	for _, l := range links {
		if strings.HasPrefix(l.Name, "bfl") {
			out = append(out, "link "+l.Name)
		}
	}
	return out
}
