// SPDX-License-Identifier: Apache-2.0

// Package packet is the bench's per-packet part: what one packet costs
// each path of the dataplane, timed through BPF_PROG_TEST_RUN beside an
// XDP_PASS floor measured in the same run, in one namespace of its own.
// Wrapper programs (testdata/bench.bpf.c) make every repeat see the same
// frame, and every figure is checked to take the path it names.
package packet

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// Options tune the part.
type Options struct {
	Repeat int  // BPF_PROG_TEST_RUN repeats per round
	Rounds int  // rounds per figure; the median is reported
	Quick  bool // only the 1-rule classifier set, no flood (for development)
	// OnlyLB measures the floor and the balancer's figures alone.
	OnlyLB bool
	// ScaleFlows are the sizes of the established ring timed beside
	// their baseline (nil: ScaleFlows; none in quick runs).
	ScaleFlows []int
	Log        measure.Logf
}

// Result is what the part measured.
type Result struct {
	FloorNs float64
	Figures []Figure
	// Flood is the established ring quiet and under a flood (nil in
	// quick runs).
	Flood *Flood
	// Scale is the established ring at each size beside its baseline
	// (nil in quick runs).
	Scale *Scale
	// Goals are the classifier's and the balancer's (none in quick
	// runs; the balancer's alone with OnlyLB).
	Goals []measure.Goal
}

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
	// OverBaseNs is, for figures timed round-robin with a baseline of
	// their own (FlowOpt's modules, over FlowOpt off), the median of the
	// per-round differences from it.
	OverBaseNs float64 `json:"ns_over_baseline,omitempty"`
	// InsertMultiple is, for the figures of new flows (names ending in
	// _new, the classifier's misses), AboveFloor over flow_insert_bare's:
	// how many bare LRU inserts a new flow costs.
	InsertMultiple float64 `json:"insert_multiple,omitempty"`
}

const (
	methodPlain   = "repeat on one buffer (program does not modify the packet)"
	methodWrapped = "wrapper restores TTL and checksum after each run; wrapper alone subtracted, floor added"
)

// bencher is one run of the part: its namespace, the dataplane shared
// by every figure (each rule set committed as a new generation) and the
// wrapper programs against its maps.
type bencher struct {
	o     Options
	ns    *topo.PacketNS
	dp    *loader.Dataplane
	progs *wrappers
	// limits are the dataplane's as asked for (sized for the largest
	// rule set), alloc the rule allocations of the live generation.
	limits bpf.Limits
	alloc  rules.Allocs
	// probe is the frame of the floor and the wrappers alone;
	// wrapHit and wrapMiss are those wrappers' medians.
	probe             []byte
	wrapHit, wrapMiss float64
	// grow is the resize wrappers' cost beyond the plain save/restore
	// (measureLB).
	grow float64
}

// step is one step of a run: what it says first ("" nothing) and what it
// measures.
type step struct {
	log string
	run func(r *Result) error
}

// Run measures the figures o asks for, in the order of steps.
func Run(o Options) (*Result, error) {
	if err := checkScaleFlows(o.ScaleFlows); err != nil {
		return nil, err
	}
	b, err := open(o)
	if err != nil {
		return nil, err
	}
	defer b.close()
	r := &Result{}
	for _, s := range b.steps() {
		if s.log != "" {
			o.Log("%s", s.log)
		}
		if err := s.run(r); err != nil {
			return nil, err
		}
	}
	r.Goals = b.goals(r)
	return r, nil
}

// steps are a run's steps: the floor and the wrappers alone first (every
// figure is set against them), the bare insert (new flows are set
// against it), then the figures o asks for.
func (b *bencher) steps() []step {
	first := []step{{"", b.measureFloor}, {"", b.measureInsert}, {"", b.measureStages}}
	scale := step{"established rings of 4,096 to a million flows, each beside a plain LRU hash", b.measureScale}
	if b.o.OnlyLB {
		return append(first, step{"", b.measureLB}, scale)
	}
	return append(first,
		step{"", b.measureClassify},
		step{"", b.measureMalformed},
		step{"GRE encap and decap", b.measureGRE},
		step{"GTP-U decap and encap: 1, 10,000 and 100,000 sessions", b.measureGTPU},
		step{"GTP-U decap and encap with N3 over IPv6", b.measureGTPU6},
		step{"path probes: a MAC, and a peer's request answered with and without one", b.measureProbes},
		step{"the keyed hash that places a new flow", b.measureFlowHash},
		step{"FlowOpt: each module on an encapsulated flow", b.measureFlowOpt},
		step{"L4 balancer: NAT and dsr-gre, established and new connections", b.measureLB},
		scale)
}

// goals are the run's goals: the classifier's, FlowOpt's, the
// balancer's and the user plane's; with OnlyLB the balancer's; none in a
// quick run.
func (b *bencher) goals(r *Result) []measure.Goal {
	switch {
	case b.o.OnlyLB:
		return lbGoals(r)
	case b.o.Quick:
		return nil
	}
	return append(append(append(append(classifyGoals(r), flowOptGoals(r)...), lbGoals(r)...), gtpuGoals(r)...), maGoals(r)...)
}

// open makes the namespace, a dataplane sized for the largest rule set
// with its program loaded, and the wrappers.
func open(o Options) (b *bencher, err error) {
	b = &bencher{o: o}
	made := b // b is nil by the time an error returns
	defer func() {
		if err != nil {
			made.close()
		}
	}()
	if b.ns, err = topo.NewPacketNS(fmt.Sprintf("epbench%d", os.Getpid())); err != nil {
		return nil, err
	}
	b.limits = bpf.Limits{Flows: 65536, Rules: 65536 + 1024, Sessions: 131072}
	if b.dp, err = loader.Open(b.limits, ""); err != nil {
		return nil, err
	}
	if _, err := b.dp.LoadProgram(); err != nil {
		return nil, err
	}
	if b.progs, err = loadWrappers(b.dp); err != nil {
		return nil, err
	}
	b.alloc = rules.NewAllocs(b.limits.Rules, nil, nil)
	ns := b.ns
	if err := ns.Do(func() error {
		if err := b.dp.SetTx([]uint32{ns.Ifindex["lan0"], ns.Ifindex["wan0"], ns.Ifindex["wan1"]}); err != nil {
			return err
		}
		return testbed.ShareNextHops(b.dp)
	}); err != nil {
		return nil, err
	}
	return b, nil
}

// close removes what open made, in reverse.
func (b *bencher) close() {
	if b.progs != nil {
		b.progs.Close()
	}
	if b.dp != nil {
		b.dp.Close()
	}
	if b.ns != nil {
		b.ns.Close()
	}
}

// measureFloor adds the XDP_PASS floor and times the wrappers alone.
func (b *bencher) measureFloor(r *Result) error {
	b.probe = testbed.UDPFrame(netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.3.0.0"), 5000)
	floor, err := b.median(b.progs.BenchPass, b.probe, bpf.XDPPass)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	r.FloorNs = floor
	r.add(Figure{Name: "xdp_pass_floor", NsPerPacket: floor, RawNs: floor, Method: methodPlain, Verdict: "pass"})
	if b.wrapHit, err = b.median(b.progs.BenchWrapPass, b.probe, bpf.XDPPass); err != nil {
		return err
	}
	if b.wrapMiss, err = b.median(b.progs.BenchWrapMiss, b.probe, bpf.XDPPass); err != nil {
		return err
	}
	b.o.Log("floor %.1f ns, wrapper %.1f ns (hit) %.1f ns (miss)", floor, b.wrapHit, b.wrapMiss)
	return nil
}

// stagesPerRun is BENCH_STAGES in testdata/bench.bpf.c.
const stagesPerRun = 4

// measureStages times the two ways a stage can join the pipeline, four
// stages of the same work each: global functions, tail calls, and the
// work inlined, which both are compared with.
func (b *bencher) measureStages(r *Result) error {
	inline, err := b.median(b.progs.BenchStagesInline, b.probe, bpf.XDPPass)
	if err != nil {
		return fmt.Errorf("stages inlined: %w", err)
	}
	r.add(Figure{Name: "stages_inline_4", RawNs: inline, NsPerPacket: inline, Method: methodPlain, Verdict: "pass"})
	for _, v := range []struct {
		name string
		prog *ebpf.Program
	}{{"stages_global_function_4", b.progs.BenchStagesGlobal}, {"stages_tail_call_4", b.progs.BenchStagesTail}} {
		ns, err := b.median(v.prog, b.probe, bpf.XDPPass)
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

// add adds f, with its cost above the floor and, for a new flow, as a
// multiple of the bare insert (measured first, after the floor).
func (r *Result) add(f Figure) {
	f.AboveFloor = f.NsPerPacket - r.FloorNs
	if r.FloorNs > 0 {
		f.RatioFloor = f.NsPerPacket / r.FloorNs
	}
	if bare := r.find("flow_insert_bare").AboveFloor; newFlow(f.Name) && bare > 0 {
		f.InsertMultiple = f.AboveFloor / bare
	}
	r.Figures = append(r.Figures, f)
}

func (r *Result) find(name string) Figure { return Find(r.Figures, name) }

// Find returns the figure named name ({} if none).
func Find(figures []Figure, name string) Figure {
	for _, f := range figures {
		if f.Name == name {
			return f
		}
	}
	return Figure{}
}
