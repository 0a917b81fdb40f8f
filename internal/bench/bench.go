// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/edgeplane/edgeplane/internal/bench/control"
	"github.com/edgeplane/edgeplane/internal/bench/endtoend"
	"github.com/edgeplane/edgeplane/internal/bench/fleetbench"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/sdwan"
	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// Options tune a run.
type Options struct {
	Repeat int  // BPF_PROG_TEST_RUN repeats per round (>= 1M for the report)
	Rounds int  // rounds per figure; the median is reported
	Quick  bool // only the floor, 1-rule and GRE figures, no end to end or control (for development)
	// E2ESeconds is the length of one end-to-end run, E2ERounds the
	// runs per end-to-end figure (the median is reported).
	E2ESeconds float64
	E2ERounds  int
	// ControlOps is the number of single-PDR creates, updates and deletes
	// (each) and of gRPC floor calls in the control part; 0 leaves the
	// control part out. ControlPaced is the number of paced creates,
	// ControlBatch the PDRs of the batch (defaults 200 and 10000).
	ControlOps   int
	ControlPaced int
	ControlBatch int
	// OnlyControl measures the control part alone.
	OnlyControl bool
	// OnlyLB measures the floor and the balancer's per-packet figures
	// alone.
	OnlyLB bool
	// FailoverRounds is the failovers the failover part measures in the
	// SD-WAN lab; 0 leaves it out.
	FailoverRounds int
	// OnlyFailover measures the failover part alone.
	OnlyFailover bool
	// Scenario, when "flowopt", runs the flowopt scenario alone:
	// FlowOptFlows eMBB flow counts (nil: 20, 50 and 200) for
	// FlowOptSeconds each (0: 10).
	// When "cpu", it runs the cpu scenario alone: CPUSeconds each mode
	// (0: 5) at CPURate requests a second (0: 500).
	// When "fleet", it runs the fleet scenario alone: FleetApplies
	// Applies (0: 50) to three real gateways, then to FleetAgents members
	// without a dataplane (0: 100).
	Scenario       string
	FlowOptFlows   []int
	FlowOptSeconds float64
	CPUSeconds     float64
	CPURate        int
	FleetApplies   int
	FleetAgents    int
	// EdgeplaneBin is the edgeplane binary the parts that run agents
	// (control, failover, flowopt, cpu, fleet) run them with; DevBin the
	// edgeplane-dev binary their labs' WAN emulators run.
	EdgeplaneBin string
	DevBin       string
	Log          func(format string, a ...any)
}

// bins are the binaries the parts that run agents start.
func (o Options) bins() measure.Binaries {
	return measure.Binaries{Edgeplane: o.EdgeplaneBin, Dev: o.DevBin}
}

// edgeplaneBin returns o.EdgeplaneBin, the gateway's binary a part that
// runs agents needs.
func (o Options) edgeplaneBin() (string, error) { return o.bins().Gateway() }

// control is what the control part takes.
func (o Options) control() control.Options {
	return control.Options{Ops: o.ControlOps, Paced: o.ControlPaced, Batch: o.ControlBatch, Bins: o.bins(), Log: o.Log}
}

// errNoControl is returned when only the control part is asked for with
// no operations to time.
var errNoControl = errors.New("only the control part asked for, but control ops is 0")

// sdwan is what the parts in an SD-WAN lab take.
func (o Options) sdwan() sdwan.Options { return sdwan.Options{Bins: o.bins(), Log: o.Log} }

// Figure is one measured scenario.
type Figure struct {
	Name string `json:"name"`
	// NsPerPacket is comparable to the floor: for wrapped paths it is
	// floor + (wrapped - wrapper alone).
	NsPerPacket float64 `json:"ns_per_packet"`
	AboveFloor  float64 `json:"ns_above_floor"`
	RatioFloor  float64 `json:"ratio_to_floor"`
	Rules       int     `json:"rules,omitempty"`
	Groups      int     `json:"groups,omitempty"`
	Method      string  `json:"method"`
	Verdict     string  `json:"verdict"`
	RawNs       float64 `json:"raw_ns"`
	// UndoNs is what was subtracted for a wrapper that undoes a resize.
	UndoNs float64 `json:"undo_ns,omitempty"`
	// PerStageNs is, for the stage mechanisms, what one stage costs
	// beyond its work inlined.
	PerStageNs float64 `json:"per_stage_ns,omitempty"`
	// InsertMultiple is, for the figures of new flows (names ending in
	// _new, the classifier's misses), AboveFloor over flow_insert_bare's:
	// how many bare LRU inserts a new flow costs.
	InsertMultiple float64 `json:"insert_multiple,omitempty"`
}

// Report is the output of `edgeplane-dev bench --json`.
type Report struct {
	Kernel  string   `json:"kernel"`
	CPUs    int      `json:"cpus"`
	Repeat  int      `json:"repeat"`
	Rounds  int      `json:"rounds"`
	FloorNs float64  `json:"xdp_pass_floor_ns"`
	Figures []Figure `json:"figures"`
	Goals   []Goal   `json:"goals"`
	// EndToEnd is absent in quick runs.
	EndToEnd *endtoend.Result `json:"end_to_end,omitempty"`
	// Flood is the established ring timed quiet and under a flood of
	// new flows; absent in quick runs.
	Flood *Flood `json:"flood,omitempty"`
	// Control is absent in quick runs and with no control ops.
	Control *control.Result `json:"control,omitempty"`
	// Failover is absent in quick runs and with no failover rounds.
	Failover *sdwan.Failover `json:"failover,omitempty"`
	// FlowOpt is the flowopt scenario's (--scenario flowopt).
	FlowOpt *sdwan.FlowOpt `json:"flowopt,omitempty"`
	// CPU is the cpu scenario's (--scenario cpu).
	CPU *sdwan.CPU `json:"cpu,omitempty"`
	// Fleet is the fleet scenario's (--scenario fleet).
	Fleet   *fleetbench.Fleet `json:"fleet,omitempty"`
	Started time.Time         `json:"started"`
	Seconds float64           `json:"seconds"`
}

// Goal states one target against the measured figures.
type Goal = measure.Goal

const (
	methodPlain   = "repeat on one buffer (program does not modify the packet)"
	methodWrapped = "wrapper restores TTL and checksum after each run; wrapper alone subtracted, floor added"
)

// Run measures every figure in one process: the per-packet figures in one
// namespace, the end-to-end ones in three more (generator, gateway, sink)
// and the control ones against an agent in one more.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Repeat <= 0 {
		o.Repeat = 1_000_000
	}
	if o.Rounds <= 0 {
		o.Rounds = 5
	}
	if o.E2ESeconds <= 0 {
		o.E2ESeconds = 3
	}
	if o.E2ERounds <= 0 {
		o.E2ERounds = 3
	}
	if o.ControlPaced <= 0 {
		o.ControlPaced = 200
	}
	if o.ControlBatch <= 0 {
		o.ControlBatch = 10_000
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}
	start := time.Now()
	r := &Report{CPUs: runtime.NumCPU(), Repeat: o.Repeat, Rounds: o.Rounds, Started: start}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		r.Kernel = strings.TrimSpace(string(b))
	}
	if o.Scenario == "cpu" {
		secs, rate := o.CPUSeconds, o.CPURate
		if secs <= 0 {
			secs = 5
		}
		if rate <= 0 {
			rate = 500
		}
		r.Repeat, r.Rounds = 0, 0
		var err error
		if r.CPU, err = sdwan.RunCPU(ctx, o.sdwan(), time.Duration(secs*float64(time.Second)), rate); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
		r.Goals = sdwan.CPUGoals(r.CPU)
		r.judge()
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	if o.Scenario == "fleet" {
		applies, agents := o.FleetApplies, o.FleetAgents
		if applies <= 0 {
			applies = 50
		}
		if agents <= 0 {
			agents = 100
		}
		r.Repeat, r.Rounds = 0, 0
		var err error
		if r.Fleet, err = fleetbench.Run(ctx, fleetbench.Options{Bins: o.bins(), Log: o.Log}, applies, agents); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		r.Goals = fleetbench.Goals(r.Fleet)
		r.judge()
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	if o.Scenario != "" {
		if o.Scenario != "flowopt" {
			return nil, fmt.Errorf("unknown scenario %q (want flowopt, cpu or fleet)", o.Scenario)
		}
		flows, secs := o.FlowOptFlows, o.FlowOptSeconds
		if len(flows) == 0 {
			flows = sdwan.FlowOptFlows
		}
		if secs <= 0 {
			secs = 10
		}
		r.Repeat, r.Rounds = 0, 0
		var err error
		if r.FlowOpt, err = sdwan.RunFlowOpt(ctx, o.sdwan(), flows, time.Duration(secs*float64(time.Second))); err != nil {
			return nil, fmt.Errorf("flowopt: %w", err)
		}
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	if o.OnlyFailover {
		if o.FailoverRounds <= 0 {
			return nil, errors.New("no failover rounds to measure")
		}
		r.Repeat, r.Rounds = 0, 0
		var err error
		if r.Failover, err = sdwan.RunFailover(ctx, o.sdwan(), o.FailoverRounds); err != nil {
			return nil, fmt.Errorf("failover: %w", err)
		}
		r.Goals = sdwan.FailoverGoals(r.Failover)
		r.judge()
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	if o.OnlyControl {
		if o.ControlOps <= 0 {
			return nil, errNoControl
		}
		r.Repeat, r.Rounds = 0, 0
		var err error
		if r.Control, err = control.Run(ctx, o.control()); err != nil {
			return nil, fmt.Errorf("control: %w", err)
		}
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	ns, err := topo.NewPacketNS(fmt.Sprintf("epbench%d", os.Getpid()))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	b := &bencher{o: o, ns: ns}

	// A shared dataplane sized for the largest rule set; each rule set is
	// committed as a new generation.
	limits := bpf.Limits{Flows: 65536, Rules: 65536 + 1024}
	dp, err := bpf.Open(limits, "")
	if err != nil {
		return nil, err
	}
	defer dp.Close()
	if _, err := dp.LoadProgram(); err != nil {
		return nil, err
	}
	progs, err := loadWrappers(dp)
	if err != nil {
		return nil, err
	}
	defer progs.Close()
	if err := ns.Do(func() error {
		if err := dp.SetTx([]uint32{ns.Ifindex["lan0"], ns.Ifindex["wan0"], ns.Ifindex["wan1"]}); err != nil {
			return err
		}
		return testbed.ShareNextHops(dp)
	}); err != nil {
		return nil, err
	}

	probe := testbed.UDPFrame(netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.3.0.0"), 5000)
	floor, err := b.median(progs.BenchPass, probe, bpf.XDPPass)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	r.FloorNs = floor
	r.add(Figure{Name: "xdp_pass_floor", NsPerPacket: floor, RawNs: floor, Method: methodPlain, Verdict: "pass"})
	wrapHit, err := b.median(progs.BenchWrapPass, probe, bpf.XDPPass)
	if err != nil {
		return nil, err
	}
	wrapMiss, err := b.median(progs.BenchWrapMiss, probe, bpf.XDPPass)
	if err != nil {
		return nil, err
	}
	o.Log("floor %.1f ns, wrapper %.1f ns (hit) %.1f ns (miss)", floor, wrapHit, wrapMiss)
	if err := b.measureInsert(r, progs, probe); err != nil {
		return nil, err
	}
	if err := b.measureStages(r, progs, probe); err != nil {
		return nil, err
	}

	alloc := rules.NewAllocs(limits.Rules, nil, nil)
	if o.OnlyLB {
		if err := b.measureLB(r, dp, progs, alloc); err != nil {
			return nil, err
		}
		r.Goals = lbGoals(r)
		r.judge()
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	measureSet := func(series string, n, shapes int) error {
		cfg, probeDst := ruleSet(n, shapes)
		gen, next, err := rules.Compile(cfg, ns.Resolve, alloc, limits)
		if err != nil {
			return fmt.Errorf("compile %d rules: %w", n, err)
		}
		if _, err := dp.Commit(gen); err != nil {
			return fmt.Errorf("commit %d rules: %w", n, err)
		}
		alloc = next
		frame := testbed.UDPFrame(netip.MustParseAddr("10.1.0.2"), probeDst, 5000)
		miss, err := b.median(progs.BenchMiss, frame, bpf.XDPRedirect)
		if err != nil {
			return fmt.Errorf("%s miss, %d rules: %w", series, n, err)
		}
		r.add(Figure{Name: fmt.Sprintf("%s_miss_%d", series, n), RawNs: miss, NsPerPacket: floor + miss - wrapMiss,
			Rules: n, Groups: len(gen.Groups), Method: methodWrapped, Verdict: "redirect"})
		if series != "classify_redirect" {
			return nil
		}
		hit, err := b.median(progs.BenchHit, frame, bpf.XDPRedirect)
		if err != nil {
			return fmt.Errorf("hit, %d rules: %w", n, err)
		}
		r.add(Figure{Name: fmt.Sprintf("%s_hit_%d", series, n), RawNs: hit, NsPerPacket: floor + hit - wrapHit,
			Rules: n, Groups: len(gen.Groups), Method: methodWrapped, Verdict: "redirect"})
		return nil
	}
	sizes, sizes8 := []int{1, 1024, 65536}, []int{8, 1024, 65536}
	if o.Quick {
		sizes, sizes8 = sizes[:1], nil
	}
	for _, n := range sizes {
		o.Log("classify+redirect, %d rules", n)
		if err := measureSet("classify_redirect", n, 1); err != nil {
			return nil, err
		}
	}
	for _, n := range sizes8 {
		o.Log("classify+redirect over 8 mask groups, %d rules", n)
		if err := measureSet("classify_redirect_8groups", n, 8); err != nil {
			return nil, err
		}
	}

	bad := testbed.UDPFrame(netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.3.0.1"), 5000)[:14+12] // truncated IPv4
	drop, err := b.median(dp.Prog, bad, bpf.XDPDrop)
	if err != nil {
		return nil, fmt.Errorf("malformed: %w", err)
	}
	r.add(Figure{Name: "malformed_drop", RawNs: drop, NsPerPacket: drop, Method: methodPlain, Verdict: "drop"})

	o.Log("GRE encap and decap")
	if err := b.measureGRE(r, dp, progs, alloc); err != nil {
		return nil, err
	}
	o.Log("path probes: a MAC, and a peer's request answered with and without one")
	if err := b.measureProbes(r, dp, progs); err != nil {
		return nil, err
	}
	o.Log("FlowOpt: each module on an encapsulated flow")
	if err := b.measureFlowOpt(r, dp, progs, alloc); err != nil {
		return nil, err
	}
	o.Log("L4 balancer: NAT and dsr-gre, established and new connections")
	if err := b.measureLB(r, dp, progs, alloc); err != nil {
		return nil, err
	}

	if o.Quick {
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	o.Log("end to end: %d rounds of %.1f s per figure", o.E2ERounds, o.E2ESeconds)
	if r.EndToEnd, err = endtoend.Run(ctx, endtoend.Options{Seconds: o.E2ESeconds, Rounds: o.E2ERounds, Log: o.Log}); err != nil {
		return nil, fmt.Errorf("end to end: %w", err)
	}
	if o.ControlOps > 0 {
		o.Log("control: %d operations per kind over gRPC, batch of %d", o.ControlOps, o.ControlBatch)
		if r.Control, err = control.Run(ctx, o.control()); err != nil {
			return nil, fmt.Errorf("control: %w", err)
		}
	}
	if o.FailoverRounds > 0 {
		o.Log("failover: %d rounds in the SD-WAN lab", o.FailoverRounds)
		if r.Failover, err = sdwan.RunFailover(ctx, o.sdwan(), o.FailoverRounds); err != nil {
			return nil, fmt.Errorf("failover: %w", err)
		}
	}
	missAt := func(name string) float64 { return r.find(name).NsPerPacket }
	r.Goals = []Goal{
		{Name: "miss cost at 65536 rules / at 1 rule", Value: missAt("classify_redirect_miss_65536") / missAt("classify_redirect_miss_1"), Limit: 1.5},
		{Name: "hit cost above the XDP_PASS floor (ns)", Value: r.find("classify_redirect_hit_65536").AboveFloor, Limit: 40},
		{Name: "classifier miss, 1 rule, / bare LRU insert", Value: r.find("classify_redirect_miss_1").InsertMultiple, Limit: 1.1},
	}
	r.Goals = append(r.Goals, lbGoals(r)...)
	r.Goals = append(r.Goals, endtoend.Goals(r.EndToEnd)...)
	r.Goals = append(r.Goals, sdwan.FailoverGoals(r.Failover)...)
	r.judge()
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// stagesPerRun is BENCH_STAGES in testdata/bench.bpf.c.
const stagesPerRun = 4

// measureStages times the two ways a stage can join the pipeline, four
// stages of the same work each: global functions, tail calls, and the
// work inlined, which both are compared with.
func (b *bencher) measureStages(r *Report, progs *wrappers, probe []byte) error {
	inline, err := b.median(progs.BenchStagesInline, probe, bpf.XDPPass)
	if err != nil {
		return fmt.Errorf("stages inlined: %w", err)
	}
	r.add(Figure{Name: "stages_inline_4", RawNs: inline, NsPerPacket: inline, Method: methodPlain, Verdict: "pass"})
	for _, v := range []struct {
		name string
		prog *ebpf.Program
	}{{"stages_global_function_4", progs.BenchStagesGlobal}, {"stages_tail_call_4", progs.BenchStagesTail}} {
		ns, err := b.median(v.prog, probe, bpf.XDPPass)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		r.add(Figure{Name: v.name, RawNs: ns, NsPerPacket: ns, Method: methodPlain, Verdict: "pass",
			PerStageNs: (ns - inline) / stagesPerRun})
	}
	return nil
}

// newFlow tells the figures of new flows, each of which records its
// flow: names ending in _new and the classifier's misses.
func newFlow(name string) bool {
	return strings.HasSuffix(name, "_new") || strings.HasPrefix(name, "classify_") && strings.Contains(name, "_miss_")
}

// judge tells which goals are met.
func (r *Report) judge() { measure.Judge(r.Goals) }

// add adds f, with its cost above the floor and, for a new flow, as a
// multiple of the bare insert (measured first, after the floor).
func (r *Report) add(f Figure) {
	f.AboveFloor = f.NsPerPacket - r.FloorNs
	if r.FloorNs > 0 {
		f.RatioFloor = f.NsPerPacket / r.FloorNs
	}
	if bare := r.find("flow_insert_bare").AboveFloor; newFlow(f.Name) && bare > 0 {
		f.InsertMultiple = f.AboveFloor / bare
	}
	r.Figures = append(r.Figures, f)
}

func (r *Report) find(name string) Figure {
	for _, f := range r.Figures {
		if f.Name == name {
			return f
		}
	}
	return Figure{}
}

type bencher struct {
	o  Options
	ns *topo.PacketNS
}

// median runs prog o.Rounds times with o.Repeat repeats on frame (received
// on lan0) and returns the median ns per run; it fails if the program's
// verdict is not want, so a figure never times the wrong path.
func (b *bencher) median(prog *ebpf.Program, frame []byte, want uint32) (float64, error) {
	var samples []float64
	for i := 0; i < b.o.Rounds; i++ {
		d, err := b.round(prog, frame, want)
		if err != nil {
			return 0, err
		}
		samples = append(samples, d)
	}
	return medianOf(samples), nil
}

// round runs prog once with o.Repeat repeats and returns ns per run.
func (b *bencher) round(prog *ebpf.Program, frame []byte, want uint32) (float64, error) {
	var ns float64
	err := b.ns.Do(func() (err error) {
		ns, err = timeRun(prog, frame, want, b.o.Repeat)
		return err
	})
	return ns, err
}

// timeRun runs prog once with repeat repeats on this thread (which must be
// in the benchmark's namespace) and returns ns per run; it fails if the
// verdict is not want.
func timeRun(prog *ebpf.Program, frame []byte, want uint32, repeat int) (float64, error) {
	// Rules in the benchmark do not match on the ingress interface, so
	// the plain Benchmark call (no xdp_md ctx, rx on loopback) takes the
	// same path.
	ret, d, err := prog.Benchmark(append([]byte(nil), frame...), repeat, nil)
	if err != nil {
		return 0, err
	}
	if ret != want {
		return 0, fmt.Errorf("verdict %d, want %d", ret, want)
	}
	return float64(d.Nanoseconds()), nil
}

// paired times prog and its wrapper alone (on the wrapper's frame,
// verdict pass) round after round, so both see the machine in the same
// state, and returns the medians of prog, of the wrapper, and of their
// per-round difference (what prog costs beyond the wrapper). On these
// shared machines the speed drifts over a run; pairing takes the drift
// out of the difference.
func (b *bencher) paired(prog *ebpf.Program, frame []byte, want uint32, wrap *ebpf.Program, wframe []byte) (raw, alone, diff float64, err error) {
	var rs, ws, ds []float64
	for i := 0; i < b.o.Rounds; i++ {
		w, err := b.round(wrap, wframe, bpf.XDPPass)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("wrapper: %w", err)
		}
		r, err := b.round(prog, frame, want)
		if err != nil {
			return 0, 0, 0, err
		}
		rs, ws, ds = append(rs, r), append(ws, w), append(ds, r-w)
	}
	return medianOf(rs), medianOf(ws), medianOf(ds), nil
}

func medianOf(s []float64) float64 {
	s = slices.Clone(s)
	sort.Float64s(s)
	return s[len(s)/2]
}

// wrappers are the benchmark wrapper programs and the map that makes the
// miss wrappers cycle through a set of flows.
type wrappers struct {
	benchobjPrograms
	Cycle  *ebpf.Map `ebpf:"bench_cycle"`
	Seq    *ebpf.Map `ebpf:"bench_seq"`
	Stages *ebpf.Map `ebpf:"bench_stage_progs"`
	LRU    *ebpf.Map `ebpf:"bench_lru"`
}

// Close closes the programs and the maps.
func (w *wrappers) Close() error {
	w.Cycle.Close()
	w.Seq.Close()
	w.Stages.Close()
	w.LRU.Close()
	return w.benchobjPrograms.Close()
}

// setCycle makes the miss wrappers cycle through mask + 1 flows (0: a
// new flow every run).
func (w *wrappers) setCycle(mask uint32) error {
	if err := w.Cycle.Put(uint32(0), mask); err != nil {
		return fmt.Errorf("set the wrappers' flow cycle: %w", err)
	}
	return nil
}

// loadWrappers loads the benchmark wrapper programs against dp's maps.
func loadWrappers(dp *bpf.Dataplane) (*wrappers, error) {
	spec, err := loadBenchobj()
	if err != nil {
		return nil, err
	}
	if err := dp.ApplyTo(spec); err != nil {
		return nil, err
	}
	var p wrappers
	if err := spec.LoadAndAssign(&p, &ebpf.CollectionOptions{MapReplacements: dp.MapReplacements()}); err != nil {
		return nil, fmt.Errorf("load benchmark wrappers: %w", err)
	}
	if err := p.Stages.Put(uint32(0), p.BenchStageTail); err != nil {
		p.Close()
		return nil, fmt.Errorf("tail-call stage: %w", err)
	}
	return &p, nil
}

// ruleSet builds n redirect rules toward 10.3.0.0/16 (routed via wan0) in
// the given number of match shapes (mask groups), and the destination of a
// probe that matches the last rule of the last-searched shape, so a miss
// walks every group.
func ruleSet(n, shapes int) (*config.Config, netip.Addr) {
	cfg := &config.Config{
		Interfaces: []config.Interface{{Name: "lan0", Role: "lan"}, {Name: "wan0", Role: "wan"}},
		FARs:       []config.FAR{{ID: 1, Action: "redirect", Interface: "wan0"}},
		Limits:     config.Limits{Flows: 65536, Rules: uint32(n) + 1024},
	}
	cfg.Normalize()
	udp := config.Proto{Num: 17, Set: true}
	var probe netip.Addr
	for i := 0; i < n; i++ {
		dst := netip.AddrFrom4([4]byte{10, 3, byte(i >> 8), byte(i)})
		m := config.Match{Proto: udp, Dport: config.PortRange{Lo: 5000, Hi: 5000, Set: true}}
		shape := i % shapes
		switch shape {
		case 0:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
		case 1:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 31).Masked()}
		case 2:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 30).Masked()}
		case 3:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
			m.Src = config.Prefix{P: netip.MustParsePrefix("10.1.0.0/24")}
		case 4:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
			m.Dport = config.PortRange{}
		case 5:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 29).Masked()}
		case 6:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
			m.Dport = config.PortRange{Lo: 4096, Hi: 8191, Set: true}
		case 7:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
			m.Proto = config.Proto{}
			m.Dport = config.PortRange{}
		}
		// Later rules have higher precedence values (worse), so the probe,
		// which matches the last rule, is found in the last group searched.
		cfg.PDRs = append(cfg.PDRs, config.PDR{ID: uint32(i + 1), Precedence: uint32(i + 1), Match: m, FAR: 1})
		probe = dst
	}
	return cfg, probe
}

// Text renders the report as a table.
func (r *Report) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "kernel %s, %d CPUs", r.Kernel, r.CPUs)
	if len(r.Figures) > 0 {
		fmt.Fprintf(&sb, ", %d repeats x %d rounds (median)\n", r.Repeat, r.Rounds)
		fmt.Fprintf(&sb, "%-36s %10s %10s %8s %7s\n", "figure", "ns/pkt", "+floor ns", "x floor", "groups")
	} else {
		sb.WriteString("\n")
	}
	for _, f := range r.Figures {
		fmt.Fprintf(&sb, "%-36s %10.1f %10.1f %8.2f %7d\n", f.Name, f.NsPerPacket, f.AboveFloor, f.RatioFloor, f.Groups)
	}
	if e := r.EndToEnd; e != nil {
		sb.WriteString(e.Text())
	}
	if c := r.Control; c != nil {
		sb.WriteString(c.Text())
	}
	if f := r.FlowOpt; f != nil {
		sb.WriteString(f.Text())
	}
	if f := r.Fleet; f != nil {
		sb.WriteString(f.Text())
	}
	if f := r.Failover; f != nil {
		sb.WriteString(f.Text())
	}
	for _, g := range r.Goals {
		bound := "limit"
		if g.AtLeast {
			bound = "at least"
		}
		fmt.Fprintf(&sb, "goal: %-44s %8.2f (%s %.2f) met=%v\n", g.Name, g.Value, bound, g.Limit, g.Met)
	}
	return sb.String()
}
