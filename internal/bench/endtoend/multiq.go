// SPDX-License-Identifier: Apache-2.0

package endtoend

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// MultiQueue is the multi-queue part of the report: the end-to-end
// topology with every veth given two queues, each path timed with one
// sender on one CPU, with two senders (one pinned to each CPU) into one
// queue, and with two senders into two queues, beside the kernel's
// forwarding at the same queue counts, in the same run.
type MultiQueue struct {
	Topology   string    `json:"topology"`
	CPUs       int       `json:"cpus"`
	FrameBytes int       `json:"frame_bytes"`
	RunSeconds float64   `json:"run_seconds"`
	Rounds     int       `json:"rounds"`
	Figures    []QFigure `json:"figures"`
	Scaling    []Scaling `json:"scaling"`
	// Relief is FlowOpt's relief with one receive CPU hot.
	Relief *Relief `json:"relief"`
	Note   string  `json:"note"`
}

// QFigure is one path at one queue count: medians over the rounds, and
// where the frames went (summed over the rounds).
type QFigure struct {
	Name string `json:"name"`
	// Path: xdp_redirect | xdp_gre_encap | xdp_gre_decap | xdp_nat_service | kernel_ip_forward.
	Path string `json:"path"`
	// Queues is the RX queues of every veth; Senders the live-frames
	// senders, pinned one to a CPU (CPUs 0 and 1).
	Queues  int `json:"queues"`
	Senders int `json:"senders"`
	// Mpps is frames received at the sink per second, OfferedMpps frames
	// generated per second of sending, Loss (generated - received) /
	// generated.
	Mpps        float64   `json:"mpps"`
	OfferedMpps float64   `json:"offered_mpps"`
	Loss        float64   `json:"loss"`
	Generated   uint64    `json:"generated"`
	Received    uint64    `json:"received"`
	MppsSamples []float64 `json:"mpps_samples"`
	// LanQueueXDP is the frames each RX queue of the gateway's lan0 took
	// (ethtool -S rx_queue_N_xdp_packets), SinkQueueXDP the same for the
	// sink's eth0 (or eth1, where the path leaves by wan1): which queue
	// the kernel picked.
	LanQueueXDP  []uint64 `json:"lan_queue_xdp_packets"`
	SinkQueueXDP []uint64 `json:"sink_queue_xdp_packets"`
	// GatewayCPU is the packets edgeplane's program handled on each CPU
	// (its verdict counters; absent for the kernel), SinkCPU the frames
	// the sink counted on each: on which CPU the work ran.
	GatewayCPU []uint64 `json:"gateway_cpu_packets,omitempty"`
	SinkCPU    []uint64 `json:"sink_cpu_packets"`
	// CPUTime is how each CPU spent the runs' sending (/proc/stat): the senders',
	// the gateway's and the sink's work is kernel time; user time is
	// other processes' (the senders spend next to none).
	CPUTime []CPUTime `json:"cpu_time"`
	// MppsPerKernelCPU is frames received per second of kernel time of
	// all CPUs (CPUTime's kernel), in millions, the median over the
	// rounds: what a CPU's time did, however much of it other processes
	// took.
	MppsPerKernelCPU float64 `json:"mpps_per_kernel_cpu"`
	Method           string  `json:"method"`
	// offered and loss are the rounds' (their medians reported); ticks
	// the /proc/stat ticks of their sending, summed.
	offered, loss, perCPU []float64
	ticks                 cpuTime
}

// CPUTime is the share of a CPU's time over a figure's runs.
type CPUTime struct {
	CPU int `json:"cpu"`
	// Kernel is system, irq and softirq time; User user and nice;
	// Steal what the host took; Idle idle and iowait.
	Kernel float64 `json:"kernel"`
	User   float64 `json:"user"`
	Steal  float64 `json:"steal"`
	Idle   float64 `json:"idle"`
}

// Scaling sets a path's two queues beside its one queue.
type Scaling struct {
	Path string `json:"path"`
	// OneQueueMpps is one sender into one queue (one CPU does all),
	// OneQueueTwoSendersMpps two senders into one queue, TwoQueuesMpps
	// two senders into two queues.
	OneQueueMpps           float64 `json:"one_queue_mpps"`
	OneQueueTwoSendersMpps float64 `json:"one_queue_two_senders_mpps"`
	TwoQueuesMpps          float64 `json:"two_queues_mpps"`
	// Ratio is two queues over one queue with one sender, the median of
	// the per-round ratios; RatioSameSenders over one queue with two
	// senders.
	Ratio            float64   `json:"ratio"`
	RatioSameSenders float64   `json:"ratio_same_senders"`
	Samples          []float64 `json:"ratio_samples"`
	// PerKernelCPURatio is two queues' Mpps per second of kernel time
	// over one queue's with one sender: 1 when a CPU's time forwards as
	// much with two queues as alone, whatever other processes took.
	PerKernelCPURatio float64 `json:"per_kernel_cpu_ratio"`
}

// mqQueues is the queues of the multi-queue topology's veths: one for
// each CPU of these machines.
const mqQueues = 2

const (
	mqTopology = "as end to end, every veth with " + "2 TX and 2 RX queues (ip link add ... type veth numtxqueues 2 numrxqueues 2); " +
		"the one-queue figures set every veth end to 1 RX and 1 TX queue with ethtool -L, except one sender alone, which uses queue 0 of two; " +
		"sender on CPU c sends its own flow (UDP source port 40000 + c; decap: of the inner packet), as a NIC's RSS spreads flows over queues"
	mqNote = "a veth puts a frame redirected into it on the peer RX queue of the sending CPU (modulo the queues) and schedules that queue's NAPI " +
		"on the sending CPU, so with two queues each CPU runs its sender, the gateway's and the sink's work for its own flow, " +
		"and with one queue the queue's NAPI runs where it was first scheduled while the other CPU only fills it; " +
		"the senders take CPU time of their own, so two queues can scale only as far as the sender's share allows (ceiling_* figures); " +
		"this is a 2-CPU VM shared with other work: the ratios move with the host's steal"
	mqMethod = "BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES (batch 64) of a generator (bench_gen_cpu) that stamps its CPU's frame from a template " +
		"every run and bpf_redirect()s it into the veth toward the gateway, one sender thread pinned (sched_setaffinity) to each CPU used; "
	mqPathDecap = "the edgeplane program (native XDP on lan0 and wan0, flow-cache hit) decapsulates GRE from path 1's remote (key 1) and forwards the inner " +
		"packet by the FIB to wan0 (no rule matches it); an XDP sink counts and drops"
	mqPathNAT = "the edgeplane program (native XDP on lan0 and wan0, flow-cache hit) balances a UDP service (203.0.113.10:80, Maglev over two NAT backends " +
		"10.3.1.1-2:8080 via wan0): an established connection, destination rewritten; an XDP sink counts and drops"
	mqPathCeiling = "an XDP program on the gateway's lan0 counts and drops: the most the senders offer"
)

// mqNATConfig is the gateway with a UDP service of two NAT backends
// behind wan0's neighbour.
const mqNATConfig = `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}]
fars: [{id: 1, action: nat, address: 10.3.1.1, port: 8080}, {id: 2, action: nat, address: 10.3.1.2, port: 8080}]
lbrs: [{id: 1, algorithm: maglev, members: [{far: 1}, {far: 2}]}]
services: [{id: 1, vip: 203.0.113.10, port: 80, proto: udp, lbr: 1}]
limits: {flows: 65536, rules: 1024}
`

// Addresses of the multi-queue figures.
var (
	mqVIP      = netip.MustParseAddr("203.0.113.10")
	mqDecapDst = netip.MustParseAddr("10.3.5.5") // routed via the sink, matched by no rule
)

// mqFrame is the frame the sender on cpu sends for path.
func mqFrame(path string, cpu int) []byte {
	sport := uint16(40000 + cpu)
	switch path {
	case "xdp_gre_decap":
		inner := testbed.FrameFrom(testbed.GRERemote, sport, mqDecapDst, 5000, 64, topo.MACHostA, topo.MACLan0)
		return testbed.GREFrame(topo.MACHostA, topo.MACLan0, testbed.GRERemote, testbed.GRELocal, testbed.GREKey, inner)
	case "xdp_nat_service":
		return testbed.FrameFrom(testbed.HostA, sport, mqVIP, 80, 64, topo.MACHostA, topo.MACLan0)
	}
	return testbed.FrameFrom(testbed.HostA, sport, testbed.EncapDst, 5000, 64, topo.MACHostA, topo.MACLan0)
}

// mqShape is one queue count and its senders.
type mqShape struct {
	suffix  string
	queues  int
	senders int
}

var mqShapes = []mqShape{{"1q_1cpu", 1, 1}, {"1q_2cpus", 1, 2}, {"2q_2cpus", 2, 2}}

// RunMultiQueue builds the end-to-end topology with two-queue veths,
// measures every path at one and two queues, round after round, and
// removes the topology.
func RunMultiQueue(ctx context.Context, o Options) (*MultiQueue, error) {
	e := &e2e{o: o, queues: mqQueues, curQueues: mqQueues}
	defer e.close()
	if err := e.setup(); err != nil {
		return nil, err
	}
	res := &MultiQueue{Topology: mqTopology, CPUs: mqQueues, FrameBytes: len(mqFrame("xdp_redirect", 0)), RunSeconds: o.Seconds, Rounds: o.Rounds, Note: mqNote}
	type path struct {
		path, prefix string
		setup        func() error
		kind         int
		method       string
	}
	paths := []path{
		{"xdp_redirect", "ours_redirect", e.attachOursRedirect, sinkUDP, pathRedir},
		{"xdp_gre_encap", "ours_encap", e.attachOurs, sinkGRE, pathOurs},
		{"xdp_gre_decap", "ours_decap", e.attachOurs, sinkUDP, mqPathDecap},
		{"xdp_nat_service", "ours_nat", e.attachOursNAT, sinkUDP, mqPathNAT},
		{"kernel_ip_forward", "kernel", e.kernelGRO, sinkUDP, pathKernLive},
		{"xdp_drop_on_lan", "ceiling", e.attachFloor, sinkUDP, mqPathCeiling},
	}
	// Every path at each shape, shape after shape in each round: a
	// path's shapes are measured within one round of each other, and the
	// queues change twice a round.
	figs := make([]*QFigure, len(paths)*len(mqShapes))
	for i, p := range paths {
		for j, sh := range mqShapes {
			figs[i*len(mqShapes)+j] = &QFigure{Name: p.prefix + "_" + sh.suffix, Path: p.path, Queues: sh.queues, Senders: sh.senders, Method: mqMethod + p.method}
		}
	}
	d := time.Duration(o.Seconds * float64(time.Second))
	for round := 1; round <= o.Rounds; round++ {
		for j, sh := range mqShapes {
			for i, p := range paths {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				f := figs[i*len(mqShapes)+j]
				if err := e.runShape(f, sh, p.setup, p.kind, d); err != nil {
					return nil, fmt.Errorf("%s: %w", f.Name, err)
				}
			}
		}
	}
	for _, f := range figs {
		f.Mpps, f.OfferedMpps, f.Loss = measure.Median(f.MppsSamples), measure.Median(f.offered), measure.Median(f.loss)
		f.CPUTime, f.MppsPerKernelCPU = cpuShares(f.ticks), measure.Median(f.perCPU)
		res.Figures = append(res.Figures, *f)
	}
	res.Scaling = mqScaling(res.Figures)
	var err error
	if res.Relief, err = e.relief(o.Rounds, d); err != nil {
		return nil, fmt.Errorf("relief: %w", err)
	}
	return res, nil
}

// runShape measures f's path once in shape sh: queues set, path set up,
// senders pinned, per-queue and per-CPU counters read around the run.
func (e *e2e) runShape(f *QFigure, sh mqShape, setup func() error, kind int, d time.Duration) error {
	if err := e.setQueues(sh.queues); err != nil {
		return err
	}
	if err := setup(); err != nil {
		return err
	}
	sinkDev := "eth0"
	before, err := e.mqCounters(sinkDev)
	if err != nil {
		return err
	}
	cpus := []int{0, 1}[:sh.senders]
	var t0, t1 [][cpuFields]uint64
	m, err := e.measure(timedSend(e.sendCPUs(f.Path, cpus), &t0, &t1), d, kind)
	if err != nil {
		return err
	}
	after, err := e.mqCounters(sinkDev)
	if err != nil {
		return err
	}
	e.o.Log("%s: %.3f Mpps received, %.3f offered, loss %.4f; lan0 queues %v, sink queues %v, gateway CPUs %v, sink CPUs %v",
		f.Name, m.mpps, m.offered, m.loss(), diff(after.lan, before.lan), diff(after.sink, before.sink), diff(after.gwCPU, before.gwCPU), diff(after.sinkCPU, before.sinkCPU))
	f.MppsSamples = append(f.MppsSamples, m.mpps)
	f.Generated += m.generated
	f.Received += m.received
	f.offered = append(f.offered, m.offered)
	f.loss = append(f.loss, m.loss())
	f.LanQueueXDP = addTo(f.LanQueueXDP, diff(after.lan, before.lan))
	f.SinkQueueXDP = addTo(f.SinkQueueXDP, diff(after.sink, before.sink))
	f.SinkCPU = addTo(f.SinkCPU, diff(after.sinkCPU, before.sinkCPU))
	kernel := f.ticks.add(t0, t1)
	if kernel > 0 {
		f.perCPU = append(f.perCPU, float64(m.received)/(float64(kernel)/clockTicks)/1e6)
	}
	if !strings.HasPrefix(f.Path, "kernel") && f.Path != "xdp_drop_on_lan" {
		f.GatewayCPU = addTo(f.GatewayCPU, diff(after.gwCPU, before.gwCPU))
	}
	return nil
}

// mqScaling sets each path's two queues beside its one queue.
func mqScaling(figs []QFigure) []Scaling {
	var out []Scaling
	for i := 0; i+len(mqShapes) <= len(figs); i += len(mqShapes) {
		one, oneTwo, two := figs[i], figs[i+1], figs[i+2]
		s := Scaling{Path: one.Path, OneQueueMpps: measure.Median(one.MppsSamples),
			OneQueueTwoSendersMpps: measure.Median(oneTwo.MppsSamples), TwoQueuesMpps: measure.Median(two.MppsSamples)}
		var same []float64
		for r := range two.MppsSamples {
			s.Samples = append(s.Samples, two.MppsSamples[r]/one.MppsSamples[r])
			same = append(same, two.MppsSamples[r]/oneTwo.MppsSamples[r])
		}
		s.Ratio, s.RatioSameSenders = measure.Median(s.Samples), measure.Median(same)
		if one.MppsPerKernelCPU > 0 {
			s.PerKernelCPURatio = two.MppsPerKernelCPU / one.MppsPerKernelCPU
		}
		out = append(out, s)
	}
	return out
}

// MultiQueueGoals: two queues should forward 1.8 times one queue's
// Mpps, on every path of ours.
func MultiQueueGoals(m *MultiQueue) []measure.Goal {
	var goals []measure.Goal
	for _, s := range m.Scaling {
		if strings.HasPrefix(s.Path, "xdp_") && s.Path != "xdp_drop_on_lan" {
			goals = append(goals, measure.Goal{Name: "two queues / one queue Mpps end to end, " + s.Path, Value: s.Ratio, Limit: 1.8, AtLeast: true})
		}
	}
	return goals
}

// attachOursNAT attaches the edgeplane program with the NAT service.
func (e *e2e) attachOursNAT() error {
	if err := e.use(mqNATConfig); err != nil {
		return err
	}
	return e.attachGateway(e.dp.Prog)
}

// setQueues gives every veth end n RX and TX queues (ethtool -L).
// A veth refuses channels that leave an end with XDP (or its peer's
// redirected frames) fewer RX queues than its peer has TX queues, so
// queues shrink TX first and grow RX first.
func (e *e2e) setQueues(n int) error {
	if e.curQueues == n {
		return nil
	}
	if err := e.detachAll(); err != nil {
		return err
	}
	order := []string{"tx", "rx"}
	if n > e.curQueues {
		order = []string{"rx", "tx"}
	}
	for _, dir := range order {
		for _, end := range []struct {
			ns   *topo.NS
			devs []string
		}{{e.gen, []string{"eth0"}}, {e.gw, []string{"lan0", "wan0", "wan1"}}, {e.sink, []string{"eth0", "eth1"}}} {
			for _, dev := range end.devs {
				if _, err := topo.Output(context.Background(), end.ns.Name, "ethtool", "-L", dev, dir, strconv.Itoa(n)); err != nil {
					return err
				}
			}
		}
	}
	e.curQueues = n
	return nil
}

// sendCPUs sends path's frames from one sender pinned to each of cpus,
// for d; it returns the frames generated.
func (e *e2e) sendCPUs(path string, cpus []int) func(time.Duration) (uint64, error) {
	return func(d time.Duration) (uint64, error) {
		var tmpl [mqQueues][64]byte
		for c := range tmpl {
			copy(tmpl[c][:], mqFrame(path, c))
		}
		if err := e.objs.GenFrameCpu.Set(tmpl); err != nil {
			return 0, fmt.Errorf("set the generator's frames: %w", err)
		}
		before, err := testbed.SumCounter(e.objs.GenCount, 0)
		if err != nil {
			return 0, err
		}
		errs := make([]error, len(cpus))
		var wg sync.WaitGroup
		for i, cpu := range cpus {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = e.gen.Do(func() error { return sendPinned(e.objs.BenchGenCpu, mqFrame(path, cpu), cpu, d) })
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		after, err := testbed.SumCounter(e.objs.GenCount, 0)
		return after - before, err
	}
}

// sendPinned pins the calling thread (locked to its goroutine, ended
// with it) to cpu and runs gen in live-frames mode for d.
func sendPinned(gen *ebpf.Program, frame []byte, cpu int, d time.Duration) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin sender to cpu %d: %w", cpu, err)
	}
	// At least one call: every sender's queue takes frames however late
	// its thread ran.
	for deadline := time.Now().Add(d); ; {
		if _, err := gen.Run(&ebpf.RunOptions{Data: frame, Repeat: liveChunk, Flags: bpfFTestXDPLiveFrames, BatchSize: liveBatch}); err != nil {
			return fmt.Errorf("live frames on cpu %d: %w", cpu, err)
		}
		if !time.Now().Before(deadline) {
			return nil
		}
	}
}

// mqCount is where the frames went: per RX queue of lan0 and of the
// sink's device, per CPU of the gateway's program and of the sink.
type mqCount struct {
	lan, sink, gwCPU, sinkCPU []uint64
}

func (e *e2e) mqCounters(sinkDev string) (mqCount, error) {
	var c mqCount
	var err error
	if c.lan, err = queueXDP(e.gw, "lan0"); err != nil {
		return c, err
	}
	if c.sink, err = queueXDP(e.sink, sinkDev); err != nil {
		return c, err
	}
	if c.gwCPU, err = e.dp.CPUPackets(); err != nil {
		return c, err
	}
	if err := e.objs.SinkCount.Lookup(uint32(sinkAll), &c.sinkCPU); err != nil {
		return c, fmt.Errorf("read the sink's counters: %w", err)
	}
	return c, nil
}

// The /proc/stat fields CPUTime sums: kernel (system, irq, softirq),
// user (user, nice), steal, idle (idle, iowait).
const (
	tickKernel = iota
	tickUser
	tickSteal
	tickIdle
	cpuFields
)

// clockTicks is USER_HZ, the unit of /proc/stat (100 on Linux, whatever
// the kernel's HZ).
const clockTicks = 100

// cpuTime is each CPU's /proc/stat ticks summed over runs.
type cpuTime [][cpuFields]uint64

// add adds each CPU's ticks from before to after and returns the kernel
// ticks of all CPUs among them.
func (t *cpuTime) add(before, after [][cpuFields]uint64) uint64 {
	var kernel uint64
	for c := range after {
		if c >= len(before) {
			break
		}
		if c >= len(*t) {
			*t = append(*t, [cpuFields]uint64{})
		}
		for k := range after[c] {
			(*t)[c][k] += after[c][k] - before[c][k]
		}
		kernel += after[c][tickKernel] - before[c][tickKernel]
	}
	return kernel
}

// timedSend wraps send to read each CPU's ticks just before and after
// it into *before and *after: a figure's CPU time is its sending's,
// not the counters' reading or the drain after it.
func timedSend(send func(time.Duration) (uint64, error), before, after *[][cpuFields]uint64) func(time.Duration) (uint64, error) {
	return func(d time.Duration) (uint64, error) {
		var err error
		if *before, err = cpuTicks(); err != nil {
			return 0, err
		}
		n, err := send(d)
		if err != nil {
			return n, err
		}
		*after, err = cpuTicks()
		return n, err
	}
}

// cpuTicks reads each CPU's ticks from /proc/stat.
func cpuTicks() ([][cpuFields]uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("read /proc/stat: %w", err)
	}
	var out [][cpuFields]uint64
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 9 || !strings.HasPrefix(fs[0], "cpu") || fs[0] == "cpu" {
			continue
		}
		var v [8]uint64 // user nice system idle iowait irq softirq steal
		for i := range v {
			if v[i], err = strconv.ParseUint(fs[i+1], 10, 64); err != nil {
				return nil, fmt.Errorf("/proc/stat %s: %w", fs[0], err)
			}
		}
		out = append(out, [cpuFields]uint64{
			tickKernel: v[2] + v[5] + v[6], tickUser: v[0] + v[1], tickSteal: v[7], tickIdle: v[3] + v[4]})
	}
	return out, nil
}

// cpuShares turns each CPU's ticks into shares of its time.
func cpuShares(ticks [][cpuFields]uint64) []CPUTime {
	var out []CPUTime
	for c, t := range ticks {
		var all uint64
		for _, v := range t {
			all += v
		}
		if all == 0 {
			all = 1
		}
		share := func(k int) float64 { return float64(t[k]) / float64(all) }
		out = append(out, CPUTime{CPU: c, Kernel: share(tickKernel), User: share(tickUser), Steal: share(tickSteal), Idle: share(tickIdle)})
	}
	return out
}

// queueXDP reads a veth's per-RX-queue XDP packet counters
// (rx_queue_N_xdp_packets of ethtool -S), for queues 0..mqQueues-1.
func queueXDP(ns *topo.NS, dev string) ([]uint64, error) {
	out, err := topo.Output(context.Background(), ns.Name, "ethtool", "-S", dev)
	if err != nil {
		return nil, err
	}
	q := make([]uint64, mqQueues)
	for _, line := range strings.Split(out, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "rx_queue_") || !strings.HasSuffix(name, "_xdp_packets") {
			continue
		}
		n, err1 := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "rx_queue_"), "_xdp_packets"))
		v, err2 := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err1 == nil && err2 == nil && n < len(q) {
			q[n] = v
		}
	}
	return q, nil
}

func diff(after, before []uint64) []uint64 {
	out := make([]uint64, len(after))
	for i := range after {
		if i < len(before) {
			out[i] = after[i] - before[i]
		}
	}
	return out
}

func addTo(sum, v []uint64) []uint64 {
	if sum == nil {
		sum = make([]uint64, len(v))
	}
	for i := range v {
		if i < len(sum) {
			sum[i] += v[i]
		}
	}
	return sum
}

// Text renders the multi-queue figures and the scaling, a line each.
func (m *MultiQueue) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "multi-queue end to end, %d-byte frames, %d x %.1f s (median):\n", m.FrameBytes, m.Rounds, m.RunSeconds)
	fmt.Fprintf(&sb, "%-24s %7s %7s %6s %8s  %-17s %-17s %s\n", "figure", "Mpps", "offered", "loss", "/kcpu", "lan0 queues", "sink CPUs", "CPU kernel/user/steal")
	for _, f := range m.Figures {
		var cpu []string
		for _, c := range f.CPUTime {
			cpu = append(cpu, fmt.Sprintf("%d: %.2f/%.2f/%.2f", c.CPU, c.Kernel, c.User, c.Steal))
		}
		fmt.Fprintf(&sb, "%-24s %7.3f %7.3f %6.3f %8.3f  %-17s %-17s %s\n", f.Name, f.Mpps, f.OfferedMpps, f.Loss, f.MppsPerKernelCPU,
			fmt.Sprint(f.LanQueueXDP), fmt.Sprint(f.SinkCPU), strings.Join(cpu, ", "))
	}
	for _, s := range m.Scaling {
		fmt.Fprintf(&sb, "%-18s 1 queue %.3f, 1 queue 2 senders %.3f, 2 queues %.3f Mpps: x%.2f (x%.2f same senders; per kernel CPU x%.2f)\n",
			s.Path, s.OneQueueMpps, s.OneQueueTwoSendersMpps, s.TwoQueuesMpps, s.Ratio, s.RatioSameSenders, s.PerKernelCPURatio)
	}
	if r := m.Relief; r != nil {
		sb.WriteString(r.Text())
	}
	return sb.String()
}
