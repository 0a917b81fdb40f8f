// SPDX-License-Identifier: Apache-2.0

// Package bench measures edgeplane and assembles the report of
// `edgeplane-dev bench`: per-packet cost beside an XDP_PASS floor
// (package packet), Mpps end to end beside the kernel's forwarding
// (endtoend), the API's latency beside a gRPC floor (control), the
// failover, flowopt and cpu scenarios in an SD-WAN lab (sdwan) and the
// fleet scenario (fleetbench), each part measured in one run with its
// own baseline. Run picks the parts the options ask for and runs them
// in order.
package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf/rlimit"

	"github.com/edgeplane/edgeplane/internal/bench/control"
	"github.com/edgeplane/edgeplane/internal/bench/endtoend"
	"github.com/edgeplane/edgeplane/internal/bench/fleetbench"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/packet"
	"github.com/edgeplane/edgeplane/internal/bench/sdwan"
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
	// ControlConcurrentSeconds is the length of a round of the
	// concurrent Applies (0: 1 s, below 0: none).
	ControlConcurrentSeconds float64
	// N4Sessions is how many PFCP sessions the control part's N4
	// figures establish at once (0: 100,000); the agent's
	// limits.sessions follows it.
	N4Sessions int
	// OnlyControl measures the control part alone.
	OnlyControl bool
	// OnlyLB measures the floor and the balancer's per-packet figures
	// alone.
	OnlyLB bool
	// ScaleFlows are the sizes of the established ring timed beside a
	// plain LRU hash (nil: 4,096, 65,536 and 1,048,576).
	ScaleFlows []int
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
	// without a dataplane (0: 100), FleetMembersPerClient of them on each
	// etcd client (0: 25).
	// When "multiqueue", it runs the end-to-end paths with two-queue
	// veths at one and two queues (E2ESeconds, E2ERounds).
	Scenario       string
	FlowOptFlows   []int
	FlowOptSeconds float64
	CPUSeconds     float64
	CPURate        int
	FleetApplies   int
	FleetAgents    int
	// FleetMembersPerClient: see Scenario.
	FleetMembersPerClient int
	// EdgeplaneBin is the edgeplane binary the parts that run agents
	// (control, failover, flowopt, cpu, fleet) run them with; DevBin the
	// edgeplane-dev binary their labs' WAN emulators run.
	EdgeplaneBin string
	DevBin       string
	Log          func(format string, a ...any)
}

// Report is the output of `edgeplane-dev bench --json`.
type Report struct {
	Kernel  string          `json:"kernel"`
	CPUs    int             `json:"cpus"`
	Repeat  int             `json:"repeat"`
	Rounds  int             `json:"rounds"`
	FloorNs float64         `json:"xdp_pass_floor_ns"`
	Figures []packet.Figure `json:"figures"`
	Goals   []Goal          `json:"goals"`
	// EndToEnd is absent in quick runs.
	EndToEnd *endtoend.Result `json:"end_to_end,omitempty"`
	// Flood is the established ring timed quiet and under a flood of
	// new flows; absent in quick runs.
	Flood *packet.Flood `json:"flood,omitempty"`
	// Scale is the established ring of 4,096 to a million flows, each
	// size beside a plain LRU hash and the same encap in the same run.
	Scale *packet.Scale `json:"scale,omitempty"`
	// Control is absent in quick runs and with no control ops.
	Control *control.Result `json:"control,omitempty"`
	// N4 is the user plane's control figures (with the control part).
	N4 *control.N4Result `json:"n4,omitempty"`
	// Failover is absent in quick runs and with no failover rounds.
	Failover *sdwan.Failover `json:"failover,omitempty"`
	// FlowOpt is the flowopt scenario's (--scenario flowopt).
	FlowOpt *sdwan.FlowOpt `json:"flowopt,omitempty"`
	// CPU is the cpu scenario's (--scenario cpu).
	CPU *sdwan.CPU `json:"cpu,omitempty"`
	// Fleet is the fleet scenario's (--scenario fleet).
	Fleet *fleetbench.Fleet `json:"fleet,omitempty"`
	// MultiQueue is the multiqueue scenario's (--scenario multiqueue).
	MultiQueue *endtoend.MultiQueue `json:"multi_queue,omitempty"`
	Started    time.Time            `json:"started"`
	Seconds    float64              `json:"seconds"`
}

// Goal states one target against the measured figures.
type Goal = measure.Goal

// Run measures the parts o asks for, one after the other in one
// process, and assembles their figures and goals into one report.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	parts, err := o.parts()
	if err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}
	start := time.Now()
	r := &Report{CPUs: runtime.NumCPU(), Repeat: o.Repeat, Rounds: o.Rounds, Started: start}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		r.Kernel = strings.TrimSpace(string(b))
	}
	// Repeats and rounds are the per-packet part's; a run without it
	// reports none.
	if !slices.ContainsFunc(parts, func(p part) bool { return p.perPacket }) {
		r.Repeat, r.Rounds = 0, 0
	}
	for _, p := range parts {
		if err := p.run(ctx, o, r); err != nil {
			return nil, err
		}
	}
	r.judge()
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// part is one part of a run: what it measures into the report, its
// goals with it.
type part struct {
	// perPacket marks the part the repeats and rounds are for.
	perPacket bool
	run       func(ctx context.Context, o Options, r *Report) error
}

// The parts, in the order a full run measures them.
var (
	packetPart   = part{perPacket: true, run: runPacket}
	e2ePart      = part{run: runEndToEnd}
	controlPart  = part{run: runControl}
	failoverPart = part{run: runFailover}
	flowOptPart  = part{run: runFlowOpt}
	cpuPart      = part{run: runCPU}
	fleetPart    = part{run: runFleet}
	mqPart       = part{run: runMultiQueue}
)

// parts are the parts o asks for, in order: a scenario alone, the
// failover or the control part alone, the per-packet part alone (quick,
// or the balancer only), or the per-packet and end-to-end parts followed
// by the control and failover parts unless their counts are 0.
func (o Options) parts() ([]part, error) {
	switch o.Scenario {
	case "":
	case "flowopt":
		return []part{flowOptPart}, nil
	case "cpu":
		return []part{cpuPart}, nil
	case "fleet":
		return []part{fleetPart}, nil
	case "multiqueue":
		return []part{mqPart}, nil
	default:
		return nil, fmt.Errorf("unknown scenario %q (want flowopt, cpu, fleet or multiqueue)", o.Scenario)
	}
	switch {
	case o.OnlyFailover:
		if o.FailoverRounds <= 0 {
			return nil, errors.New("no failover rounds to measure")
		}
		return []part{failoverPart}, nil
	case o.OnlyControl:
		if o.ControlOps <= 0 {
			return nil, errNoControl
		}
		return []part{controlPart}, nil
	case o.OnlyLB || o.Quick:
		return []part{packetPart}, nil
	}
	parts := []part{packetPart, e2ePart}
	if o.ControlOps > 0 {
		parts = append(parts, controlPart)
	}
	if o.FailoverRounds > 0 {
		parts = append(parts, failoverPart)
	}
	return parts, nil
}

// errNoControl is returned when only the control part is asked for with
// no operations to time.
var errNoControl = errors.New("only the control part asked for, but control ops is 0")

// defaults fills in what o leaves zero.
func (o *Options) defaults() {
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
}

func runPacket(_ context.Context, o Options, r *Report) error {
	res, err := packet.Run(packet.Options{Repeat: o.Repeat, Rounds: o.Rounds, Quick: o.Quick, OnlyLB: o.OnlyLB, ScaleFlows: o.ScaleFlows, Log: o.Log})
	if err != nil {
		return err
	}
	r.FloorNs, r.Figures, r.Flood, r.Scale = res.FloorNs, res.Figures, res.Flood, res.Scale
	r.Goals = append(r.Goals, res.Goals...)
	return nil
}

func runEndToEnd(ctx context.Context, o Options, r *Report) (err error) {
	o.Log("end to end: %d rounds of %.1f s per figure", o.E2ERounds, o.E2ESeconds)
	if r.EndToEnd, err = endtoend.Run(ctx, endtoend.Options{Seconds: o.E2ESeconds, Rounds: o.E2ERounds, Log: o.Log}); err != nil {
		return fmt.Errorf("end to end: %w", err)
	}
	r.Goals = append(r.Goals, endtoend.Goals(r.EndToEnd)...)
	return nil
}

func runMultiQueue(ctx context.Context, o Options, r *Report) (err error) {
	o.Log("multi-queue: %d rounds of %.1f s per figure", o.E2ERounds, o.E2ESeconds)
	if r.MultiQueue, err = endtoend.RunMultiQueue(ctx, endtoend.Options{Seconds: o.E2ESeconds, Rounds: o.E2ERounds, Log: o.Log}); err != nil {
		return fmt.Errorf("multi-queue: %w", err)
	}
	r.Goals = append(r.Goals, endtoend.MultiQueueGoals(r.MultiQueue)...)
	return nil
}

// n4Sessions is how many sessions the N4 figures establish at once
// (and the agent's memory is measured with) by default.
const n4Sessions = 100_000

func runControl(ctx context.Context, o Options, r *Report) (err error) {
	o.Log("control: %d operations per kind over gRPC, batch of %d", o.ControlOps, o.ControlBatch)
	co := control.Options{Ops: o.ControlOps, Paced: o.ControlPaced, Batch: o.ControlBatch, ConcurrentSeconds: o.ControlConcurrentSeconds, Bins: o.bins(), Log: o.Log}
	if r.Control, err = control.Run(ctx, co); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	r.Goals = append(r.Goals, control.Goals(r.Control)...)
	// 63 SMFs at once and one alone: the 64 associations an N4
	// endpoint takes.
	n := o.N4Sessions
	if n <= 0 {
		n = n4Sessions
	}
	if r.N4, err = control.RunN4(ctx, co, n, min(1000, n), 63, 8); err != nil {
		return fmt.Errorf("n4: %w", err)
	}
	r.Goals = append(r.Goals, measure.Goal{Name: "PFCP session establishments/s, 63 SMFs with 8 requests in flight each",
		Value: r.N4.ConcurrentPerSec, Limit: 5000, AtLeast: true})
	return nil
}

func runFailover(ctx context.Context, o Options, r *Report) (err error) {
	o.Log("failover: %d rounds in the SD-WAN lab", o.FailoverRounds)
	if r.Failover, err = sdwan.RunFailover(ctx, o.sdwan(), o.FailoverRounds); err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	r.Goals = append(r.Goals, sdwan.FailoverGoals(r.Failover)...)
	return nil
}

func runFlowOpt(ctx context.Context, o Options, r *Report) (err error) {
	flows, secs := o.FlowOptFlows, o.FlowOptSeconds
	if len(flows) == 0 {
		flows = sdwan.FlowOptFlows
	}
	if secs <= 0 {
		secs = 10
	}
	if r.FlowOpt, err = sdwan.RunFlowOpt(ctx, o.sdwan(), flows, seconds(secs)); err != nil {
		return fmt.Errorf("flowopt: %w", err)
	}
	return nil
}

func runCPU(ctx context.Context, o Options, r *Report) (err error) {
	secs, rate := o.CPUSeconds, o.CPURate
	if secs <= 0 {
		secs = 5
	}
	if rate <= 0 {
		rate = 500
	}
	if r.CPU, err = sdwan.RunCPU(ctx, o.sdwan(), seconds(secs), rate); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	r.Goals = append(r.Goals, sdwan.CPUGoals(r.CPU)...)
	return nil
}

func runFleet(ctx context.Context, o Options, r *Report) (err error) {
	applies, agents := o.FleetApplies, o.FleetAgents
	if applies <= 0 {
		applies = 50
	}
	if agents <= 0 {
		agents = 100
	}
	if r.Fleet, err = fleetbench.Run(ctx, fleetbench.Options{Bins: o.bins(), Log: o.Log, MembersPerClient: o.FleetMembersPerClient}, applies, agents); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	r.Goals = append(r.Goals, fleetbench.Goals(r.Fleet)...)
	return nil
}

// bins are the binaries the parts that run agents start.
func (o Options) bins() measure.Binaries {
	return measure.Binaries{Edgeplane: o.EdgeplaneBin, Dev: o.DevBin}
}

// sdwan is what the parts in an SD-WAN lab take.
func (o Options) sdwan() sdwan.Options { return sdwan.Options{Bins: o.bins(), Log: o.Log} }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// judge tells which goals are met.
func (r *Report) judge() { measure.Judge(r.Goals) }

func (r *Report) find(name string) packet.Figure { return packet.Find(r.Figures, name) }
