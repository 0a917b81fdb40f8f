// SPDX-License-Identifier: Apache-2.0

package sdwan

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/topo"
	"github.com/edgeplane/edgeplane/internal/wanem"
)

// FlowOpt is the flowopt scenario (issue 16): a mixed 5G workload through
// the lab's wan1, rate-limited so the emulator's queue is the bottleneck,
// at each count of eMBB flows, with FlowOpt off, each module alone and
// all on, one after the other in one lab. Gateway A has the three QoS
// classes the whole time (by PDR: eMBB's TCP ports, URLLC's and mMTC's
// UDP ports); the modes switch the modules through its API.
type FlowOpt struct {
	Method string `json:"method"`
	Rate   string `json:"bottleneck_rate"`
	// Classes is what gateway A's QoS classes were.
	Classes string       `json:"classes"`
	Runs    []FlowOptRun `json:"runs"`
}

// FlowOptRun is one run of the workload.
type FlowOptRun struct {
	Mode      string  `json:"mode"`
	EMBBFlows int     `json:"embb_flows"`
	Seconds   float64 `json:"seconds"`
	// eMBB: TCP streams (iperf3) A -> B; their aggregate goodput and
	// Jain's fairness index over the streams' goodputs.
	EMBBMbps float64 `json:"embb_mbps"`
	Jain     float64 `json:"jain"`
	// URLLC: 64-byte UDP requests at 1 kHz, answered by B; round trips.
	URLLCSent   int     `json:"urllc_sent"`
	URLLCAnswer int     `json:"urllc_answered"`
	URLLCMeanMs float64 `json:"urllc_mean_ms"`
	URLLCP50Ms  float64 `json:"urllc_p50_ms"`
	URLLCP99Ms  float64 `json:"urllc_p99_ms"`
	// mMTC: Poisson bursts of 64-byte UDP datagrams from many source
	// addresses.
	MMTCSources  int `json:"mmtc_sources"`
	MMTCSent     int `json:"mmtc_sent"`
	MMTCReceived int `json:"mmtc_received"`
	// SoftirqMs is each CPU's softirq time during the run (every
	// namespace's: the lab shares the machine's CPUs), SoftirqSpread the
	// largest over the smallest.
	SoftirqMs     []float64 `json:"softirq_ms"`
	SoftirqSpread float64   `json:"softirq_spread"`
	// Gateway is what gateway A's FlowOpt did meanwhile (its metrics).
	Gateway FlowOptGateway `json:"gateway"`
}

// FlowOptGateway is what gateway A's FlowOpt did in a run: the eMBB
// class's packets passed, marked CE and dropped over their share by the
// fairness stage, those carrying the probe's congestion hint, and the
// packets relief
// handed to another CPU.
type FlowOptGateway struct {
	EMBBPackets float64 `json:"embb_packets"`
	EMBBMarked  float64 `json:"embb_marked"`
	EMBBDropped float64 `json:"embb_dropped"`
	EMBBHinted  float64 `json:"embb_hinted"`
	// EMBBCongestionMarked: marked CE within their share, for the hint.
	EMBBCongestionMarked float64 `json:"embb_congestion_marked"`
	CPUMoved             float64 `json:"cpu_moved"`
}

// gatewayMetrics scrapes gateway A's metrics: each series (name and
// labels, as exposed) with its value; none when the scrape fails.
func gatewayMetrics(ctx context.Context, l *lab.SDWAN) map[string]float64 {
	out := map[string]float64{}
	body, err := topo.Output(ctx, l.GWA, "curl", "-sf", "http://"+lab.MetricsAddr+"/metrics")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(body, "\n") {
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				out[line[:i]] = v
			}
		}
	}
	return out
}

const methodFlowOpt = "ECN on at hosts A and B (net.ipv4.tcp_ecn=1) in every mode; measured after a warm-up of 2 s " +
	"(the eMBB streams' slow starts; iperf3 -O; URLLC and mMTC start after it); the SD-WAN lab (defaults: wan1 5 ms, wan2 30 ms one way) with wan1 held to the bottleneck rate both ways " +
	"(the emulator's queue); eMBB: iperf3 TCP streams from host A to B (default PDR: path 1, at most 100 a client); URLLC: 64-byte UDP " +
	"requests at 1 kHz from A (source port 7050) to an echo on B (port 7000), both ways over path 1 (the lab's steered ports), " +
	"round trips timed at A; mMTC: Poisson bursts (20 a second, 20 datagrams of 64 bytes each) from 100 addresses of host A to B " +
	"port 7001 (path 1); softirq time per CPU from /proc/stat"

// FlowOptFlows are the eMBB flow counts of the scenario.
var FlowOptFlows = []int{20, 50, 200}

// RunFlowOpt brings up a lab of its own, runs the workload at each count
// of eMBB flows for d and takes the lab down.
func RunFlowOpt(ctx context.Context, o Options, flows []int, d time.Duration) (f *FlowOpt, err error) {
	l, err := ownLab(ctx, o, "bo")
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := l.Down(); derr != nil && err == nil {
			err = fmt.Errorf("lab down: %w", derr)
		}
	}()
	const rate = "50mbit"
	r := rate
	if _, err := l.SetLink("wan1", wanem.Both, lab.LinkChange{Rate: &r}); err != nil {
		return nil, err
	}
	// mMTC's sources: addresses of host A.
	const sources = 100
	for i := range sources {
		if _, err := topo.Output(ctx, l.A, "ip", "addr", "add", fmt.Sprintf("10.1.0.%d/24", 100+i), "dev", lab.HostIf); err != nil {
			return nil, fmt.Errorf("mmtc source address: %w", err)
		}
	}
	for _, ns := range []string{l.A, l.B} {
		if _, err := topo.Output(ctx, ns, "sysctl", "-qw", "net.ipv4.tcp_ecn=1"); err != nil {
			return nil, fmt.Errorf("ecn on: %w", err)
		}
	}
	conn, err := dialGateway(l, l.GWA)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	gc := pb.NewGatewayClient(conn)
	if _, err := gc.Apply(ctx, &pb.ApplyRequest{Operations: flowOptClasses()}); err != nil {
		return nil, fmt.Errorf("qos classes: %w", err)
	}
	f = &FlowOpt{Method: methodFlowOpt, Rate: rate, Classes: classesFlowOpt}
	for _, n := range flows {
		for _, m := range FlowOptModes {
			if err := setModules(ctx, gc, m.Modules); err != nil {
				return nil, fmt.Errorf("mode %s: %w", m.Name, err)
			}
			// The agent's loop counts the flows of the classes and the
			// emulator's queue drains from the run before.
			time.Sleep(time.Second)
			before := gatewayMetrics(ctx, l)
			run, err := flowOptRun(ctx, l, n, sources, d)
			if err != nil {
				return nil, fmt.Errorf("%d eMBB flows, %s: %w", n, m.Name, err)
			}
			run.Mode = m.Name
			after := gatewayMetrics(ctx, l)
			run.Gateway = FlowOptGateway{
				EMBBPackets: after[`edgeplane_qos_class_packets_total{class="2"}`] - before[`edgeplane_qos_class_packets_total{class="2"}`],
				EMBBMarked:  after[`edgeplane_qos_class_marked_total{class="2"}`] - before[`edgeplane_qos_class_marked_total{class="2"}`],
				EMBBDropped: after[`edgeplane_qos_class_dropped_total{class="2"}`] - before[`edgeplane_qos_class_dropped_total{class="2"}`],
				EMBBHinted:  after[`edgeplane_qos_class_hinted_total{class="2"}`] - before[`edgeplane_qos_class_hinted_total{class="2"}`],
				EMBBCongestionMarked: after[`edgeplane_qos_class_congestion_marked_total{class="2"}`] -
					before[`edgeplane_qos_class_congestion_marked_total{class="2"}`],
				CPUMoved: after[`edgeplane_reason_packets_total{reason="cpu_moved"}`] - before[`edgeplane_reason_packets_total{reason="cpu_moved"}`],
			}
			o.Log("  gateway A: eMBB class %+v", run.Gateway)
			o.Log("flowopt %s, %d eMBB flows: %.1f Mbit/s, Jain %.3f; URLLC p50 %.2f ms p99 %.2f ms (%d/%d); mMTC %d/%d",
				m.Name, n, run.EMBBMbps, run.Jain, run.URLLCP50Ms, run.URLLCP99Ms, run.URLLCAnswer, run.URLLCSent, run.MMTCReceived, run.MMTCSent)
			f.Runs = append(f.Runs, *run)
		}
	}
	return f, setModules(ctx, gc, nil)
}

// FlowOptModes are the scenario's modes: FlowOpt off, each module alone,
// all on.
var FlowOptModes = []struct {
	Name    string
	Modules []string
}{
	{"off", nil},
	{"probe", []string{config.ModuleProbe}},
	{"fairness", []string{config.ModuleFairness}},
	{"relief", []string{config.ModuleRelief}},
	{"all", []string{config.ModuleProbe, config.ModuleFairness, config.ModuleRelief}},
}

// classesFlowOpt describes flowOptClasses.
const classesFlowOpt = "urllc (class 1: UDP to B port 7000), embb at 47 Mbit/s (class 2: TCP to B ports 5301-5500; " +
	"the 48 Mbit/s the emulator passes at its 50 (the off runs), less GRE's 28 bytes a packet, URLLC and mMTC), mmtc at 1 Mbit/s, dropped over its share (class 3: UDP to B port 7001)"

// flowOptClasses are the operations giving gateway A the scenario's QoS
// classes and the PDRs that put the workload's flows in them (before the
// lab's own, with their FARs).
func flowOptClasses() []*pb.Operation {
	lan := lab.LanB
	objs := []*pb.Object{
		{Kind: &pb.Object_QosClass{QosClass: &pb.QosClass{Id: 1, Name: "urllc", Type: config.QoSURLLC}}},
		{Kind: &pb.Object_QosClass{QosClass: &pb.QosClass{Id: 2, Name: "embb", Type: config.QoSEMBB, Rate: "47mbit"}}},
		{Kind: &pb.Object_QosClass{QosClass: &pb.QosClass{Id: 3, Name: "mmtc", Type: config.QoSMMTC, Rate: "1mbit", Over: config.OverDrop}}},
		{Kind: &pb.Object_Pdr{Pdr: &pb.Pdr{Id: 60, Precedence: 20, Far: 4, Qos: 1,
			Match: &pb.Match{In: "lan0", Dst: lan, Proto: "udp", Dport: "7000"}}}},
		{Kind: &pb.Object_Pdr{Pdr: &pb.Pdr{Id: 61, Precedence: 20, Far: 1, Qos: 2,
			Match: &pb.Match{In: "lan0", Dst: lan, Proto: "tcp", Dport: "5301-5500"}}}},
		{Kind: &pb.Object_Pdr{Pdr: &pb.Pdr{Id: 62, Precedence: 20, Far: 4, Qos: 3,
			Match: &pb.Match{In: "lan0", Dst: lan, Proto: "udp", Dport: "7001"}}}},
	}
	ops := make([]*pb.Operation, len(objs))
	for i, o := range objs {
		ops[i] = &pb.Operation{Op: &pb.Operation_Create{Create: o}}
	}
	return ops
}

// setModules makes gateway A's FlowOpt modules exactly mods (on), in one
// batch.
func setModules(ctx context.Context, gc pb.GatewayClient, mods []string) error {
	have, err := gc.ListFlowOpt(ctx, &pb.ListRequest{})
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, m := range mods {
		want[m] = true
	}
	var ops []*pb.Operation
	for _, m := range have.GetFlowopt() {
		if !want[m.GetModule()] {
			ops = append(ops, &pb.Operation{Op: &pb.Operation_Delete{Delete: &pb.Ref{Kind: pb.Kind_KIND_FLOWOPT, Name: m.GetModule()}}})
		}
		delete(want, m.GetModule())
	}
	for _, m := range mods {
		if want[m] {
			ops = append(ops, &pb.Operation{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Flowopt{Flowopt: &pb.FlowOptModule{Module: m}}}}})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	_, err = gc.Apply(ctx, &pb.ApplyRequest{Operations: ops})
	return err
}

// flowOptRun runs the workload once with n eMBB flows.
func flowOptRun(ctx context.Context, l *lab.SDWAN, n, sources int, d time.Duration) (*FlowOptRun, error) {
	run := &FlowOptRun{EMBBFlows: n, Seconds: d.Seconds(), MMTCSources: sources}
	rx, err := startReceivers(l)
	if err != nil {
		return nil, err
	}
	defer rx.close()
	// eMBB servers: one iperf3 per 100 flows.
	var chunks []int
	for left := n; left > 0; left -= 100 {
		chunks = append(chunks, min(left, 100))
	}
	for i := range chunks {
		srv := exec.CommandContext(ctx, "ip", "netns", "exec", l.B, "iperf3", "-s", "-1", "-p", strconv.Itoa(5301+i))
		if err := srv.Start(); err != nil {
			return nil, err
		}
		defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	}
	time.Sleep(300 * time.Millisecond) // the servers listen

	soft0, err := softirqMs()
	if err != nil {
		return nil, err
	}
	rates, rtts, err := flowOptWorkload(ctx, l, run, chunks, d)
	if err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond) // the last mMTC datagrams
	soft1, err := softirqMs()
	if err != nil {
		return nil, err
	}
	var all []float64
	for _, r := range rates {
		all = append(all, r...)
	}
	if len(all) != n {
		return nil, fmt.Errorf("iperf3 reported %d streams, want %d", len(all), n)
	}
	run.eMBB(all)
	run.uRLLC(rtts)
	run.MMTCReceived = rx.received()
	run.softirq(soft0, soft1)
	return run, nil
}

// flowOptWorkload runs the three kinds of traffic at once for d: the
// eMBB streams (chunks of them, a client each), URLLC and mMTC after the
// warm-up. It returns each client's streams' goodputs and URLLC's round
// trips, and sets what run sent.
func flowOptWorkload(ctx context.Context, l *lab.SDWAN, run *FlowOptRun, chunks []int, d time.Duration) ([][]float64, []time.Duration, error) {
	// The eMBB streams start together: their slow starts fill the
	// bottleneck's queue whatever the mode. What is measured is the
	// steady state after it (iperf3 -O: those seconds not counted).
	warm := flowOptWarmup(d)
	var wg sync.WaitGroup
	errs := make(chan error, len(chunks)+2)
	rates := make([][]float64, len(chunks))
	for i, c := range chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.CommandContext(ctx, "ip", "netns", "exec", l.A, "iperf3", "-c", lab.AddrB, "-p", strconv.Itoa(5301+i),
				"-P", strconv.Itoa(c), "-t", strconv.Itoa(int(d.Seconds())), "-O", strconv.Itoa(int(warm.Seconds())), "-J").Output()
			if err != nil {
				errs <- fmt.Errorf("iperf3: %w (%s)", err, firstLine(out))
				return
			}
			rates[i], err = iperfStreams(out)
			if err != nil {
				errs <- err
			}
		}()
	}
	var rtts []time.Duration
	wg.Add(2)
	go func() {
		defer wg.Done()
		time.Sleep(warm)
		var err error
		run.URLLCSent, rtts, err = urllc(l, d)
		if err != nil {
			errs <- err
		}
	}()
	go func() {
		defer wg.Done()
		time.Sleep(warm)
		var err error
		if run.MMTCSent, err = mmtc(l, run.MMTCSources, d); err != nil {
			errs <- err
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, nil, err
	}
	return rates, rtts, nil
}

// eMBB sets the eMBB streams' aggregate goodput and Jain's fairness
// index over them from each one's goodput (bits per second).
func (run *FlowOptRun) eMBB(all []float64) {
	sum, sq := 0.0, 0.0
	for _, x := range all {
		sum += x
		sq += x * x
	}
	run.EMBBMbps = sum / 1e6
	if sq > 0 {
		run.Jain = sum * sum / (float64(len(all)) * sq)
	}
}

// uRLLC sets the URLLC figures from the round trips of the requests
// answered.
func (run *FlowOptRun) uRLLC(rtts []time.Duration) {
	run.URLLCAnswer = len(rtts)
	if len(rtts) == 0 {
		return
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	var tot time.Duration
	for _, r := range rtts {
		tot += r
	}
	run.URLLCMeanMs = measure.Ms(tot / time.Duration(len(rtts)))
	run.URLLCP50Ms = measure.Ms(rtts[len(rtts)/2])
	run.URLLCP99Ms = measure.Ms(rtts[min(len(rtts)-1, len(rtts)*99/100)])
}

// softirq sets each CPU's softirq time over the run from /proc/stat's
// before and after, and the largest over the smallest.
func (run *FlowOptRun) softirq(before, after []float64) {
	lo, hi := math.Inf(1), 0.0
	for i := range after {
		v := after[i] - before[i]
		run.SoftirqMs = append(run.SoftirqMs, v)
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo > 0 {
		run.SoftirqSpread = hi / lo
	}
}

// receivers are host B's ends of the URLLC and mMTC traffic: the echo,
// and the sink that counts.
type receivers struct {
	echo, sink *net.UDPConn
	mu         sync.Mutex
	sunk       int
}

// startReceivers opens the URLLC echo (port 7000) and the mMTC sink
// (port 7001) on host B and serves them until close.
func startReceivers(l *lab.SDWAN) (*receivers, error) {
	rx := &receivers{}
	if err := topo.Do(l.B, func() (err error) {
		if rx.echo, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(lab.AddrB), Port: 7000}); err != nil {
			return err
		}
		rx.sink, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(lab.AddrB), Port: 7001})
		return err
	}); err != nil {
		rx.close()
		return nil, fmt.Errorf("receivers on B: %w", err)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			m, from, err := rx.echo.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = rx.echo.WriteToUDP(buf[:m], from)
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := rx.sink.Read(buf); err != nil {
				return
			}
			rx.mu.Lock()
			rx.sunk++
			rx.mu.Unlock()
		}
	}()
	return rx, nil
}

// received is the mMTC datagrams the sink counted so far.
func (rx *receivers) received() int {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return rx.sunk
}

func (rx *receivers) close() {
	for _, c := range []*net.UDPConn{rx.echo, rx.sink} {
		if c != nil {
			c.Close()
		}
	}
}

// flowOptWarmup is the warm-up before a run of d is measured: 2 s, at
// most a quarter of d, whole seconds (iperf3's -O).
func flowOptWarmup(d time.Duration) time.Duration {
	return min(2*time.Second, (d / 4).Truncate(time.Second))
}

// urllc sends a 64-byte request every millisecond for d from host A
// (source port 7050) to B's echo and returns the requests sent and the
// round trips of those answered.
func urllc(l *lab.SDWAN, d time.Duration) (int, []time.Duration, error) {
	var c *net.UDPConn
	if err := topo.Do(l.A, func() (err error) {
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(lab.AddrA), Port: 7050}, &net.UDPAddr{IP: net.ParseIP(lab.AddrB), Port: 7000})
		return err
	}); err != nil {
		return 0, nil, fmt.Errorf("urllc client: %w", err)
	}
	defer c.Close()
	start := time.Now()
	var mu sync.Mutex
	var rtts []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 128)
		for {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			m, err := c.Read(buf)
			if err != nil {
				return
			}
			if m >= 8 {
				sent := time.Duration(binary.BigEndian.Uint64(buf))
				mu.Lock()
				rtts = append(rtts, time.Since(start)-sent)
				mu.Unlock()
			}
		}
	}()
	req := make([]byte, 64)
	sent := 0
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < d {
		<-tick.C
		binary.BigEndian.PutUint64(req, uint64(time.Since(start)))
		if _, err := c.Write(req); err == nil {
			sent++
		}
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	return sent, rtts, nil
}

// mmtc sends Poisson bursts (20 a second on average) of 20 datagrams of
// 64 bytes, each from one of sources addresses of host A, to B's port
// 7001 for d, and returns the datagrams sent.
func mmtc(l *lab.SDWAN, sources int, d time.Duration) (int, error) {
	conns := make([]*net.UDPConn, sources)
	if err := topo.Do(l.A, func() error {
		for i := range conns {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(fmt.Sprintf("10.1.0.%d", 100+i))}, &net.UDPAddr{IP: net.ParseIP(lab.AddrB), Port: 7001})
			if err != nil {
				return err
			}
			conns[i] = c
		}
		return nil
	}); err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return 0, fmt.Errorf("mmtc senders: %w", err)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	rng := rand.New(rand.NewPCG(16, 5))
	msg := make([]byte, 64)
	sent := 0
	for start := time.Now(); time.Since(start) < d; {
		time.Sleep(time.Duration(rng.ExpFloat64() * float64(50*time.Millisecond)))
		for range 20 {
			if _, err := conns[rng.IntN(sources)].Write(msg); err == nil {
				sent++
			}
		}
	}
	return sent, nil
}

// iperfStreams returns each stream's goodput (bits per second at the
// receiver) from an iperf3 -J report.
func iperfStreams(out []byte) ([]float64, error) {
	var r struct {
		Error string `json:"error"`
		End   struct {
			Streams []struct {
				Receiver struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"receiver"`
			} `json:"streams"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("iperf3 report: %w", err)
	}
	if r.Error != "" {
		return nil, errors.New("iperf3: " + r.Error)
	}
	var v []float64
	for _, s := range r.End.Streams {
		v = append(v, s.Receiver.BitsPerSecond)
	}
	return v, nil
}

// softirqMs returns each CPU's softirq time so far, in ms (/proc/stat).
func softirqMs() ([]float64, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []float64
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 8 || !strings.HasPrefix(fs[0], "cpu") || fs[0] == "cpu" {
			continue
		}
		v, err := strconv.ParseFloat(fs[7], 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/stat %s: %w", fs[0], err)
		}
		out = append(out, v*1000/100) // USER_HZ is 100 on Linux
	}
	return out, s.Err()
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// Text renders the scenario's runs, a line each.
func (f *FlowOpt) Text() string {
	var sb strings.Builder
	for _, x := range f.Runs {
		fmt.Fprintf(&sb, "flowopt %s, %d eMBB flows through %s: %.1f Mbit/s, Jain %.3f; URLLC mean %.2f ms p50 %.2f ms p99 %.2f ms (%d of %d answered); mMTC %d of %d; softirq spread %.2f\n",
			x.Mode, x.EMBBFlows, f.Rate, x.EMBBMbps, x.Jain, x.URLLCMeanMs, x.URLLCP50Ms, x.URLLCP99Ms, x.URLLCAnswer, x.URLLCSent, x.MMTCReceived, x.MMTCSent, x.SoftirqSpread)
	}
	return sb.String()
}
