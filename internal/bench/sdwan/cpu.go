// SPDX-License-Identifier: Apache-2.0

package sdwan

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/topo"
	"github.com/edgeplane/edgeplane/internal/wanem"
)

// CPU is the cpu scenario (issue 17): request/response latency from host
// A through both gateways to a userspace responder on host B, unloaded
// and with every CPU loaded, with no strategy and with each mechanism a
// strategy has, one after the other in one lab.
type CPU struct {
	Method string `json:"method"`
	Load   string `json:"load"`
	// RateHz is the requests a second of each probe (ping and echo).
	RateHz  int       `json:"rate_hz"`
	Seconds float64   `json:"seconds_per_mode"`
	Modes   []CPUMode `json:"modes"`
}

// CPUMode is one mode of the scenario: the load on or off and the
// strategy gateway B's agent applied to the responder ("" none).
type CPUMode struct {
	Name     string `json:"name"`
	Loaded   bool   `json:"loaded"`
	Strategy string `json:"strategy,omitempty"`
	// Applied is what the responder had while measured: its policy,
	// its CPUs, its cgroup.
	Applied string `json:"applied"`
	// Echo is the UDP echo's round trips (64 bytes, answered by the
	// responder process), Ping ICMP echo's (answered by host B's
	// kernel: no process on its path).
	Echo RoundTrips `json:"udp_echo"`
	Ping RoundTrips `json:"ping"`
}

// RoundTrips are the round trips of one probe in one mode, in ms.
type RoundTrips struct {
	Sent     int     `json:"sent"`
	Answered int     `json:"answered"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// CPUModes are the scenario's modes: what each asks gateway B's agent to
// apply to the responder (the regex is filled in).
var CPUModes = []struct {
	Name     string
	Loaded   bool
	Strategy *pb.Strategy
}{
	{"unloaded", false, nil},
	{"loaded", true, nil},
	{"fifo", true, &pb.Strategy{Priority: true, Policy: "fifo"}},
	{"deadline", true, &pb.Strategy{Priority: true, Policy: "deadline", ExecutionTime: "200us", Period: "1ms"}},
	{"weight", true, &pb.Strategy{Policy: "weight", OthersWeight: 1}},
	{"dedicated_cpu", true, nil}, // its cpus: the machine's last CPU
}

// cpuEchoScript is the responder: one thread (SCHED_DEADLINE refuses a
// task that forks), answering each datagram with itself.
const cpuEchoScript = `import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)
`

// cpuEchoPort is the responder's UDP port on host B (the lab's default
// PDR: path 1).
const cpuEchoPort = 9700

const methodCPU = "the SD-WAN lab with its links' delay and loss set to 0 and their emulator (a process here standing for a wire) under SCHED_FIFO 10 in every mode; host B runs the responder, a one-thread python3 UDP echo; from host A, at once, a UDP request " +
	"of 64 bytes and an ICMP echo (ping) every 1/rate s for each mode's seconds, round trips from the send to the kernel's receive timestamp " +
	"(SO_TIMESTAMPNS; ping's own), so host A's own wake-ups are not counted; the load is stress-ng --cpu 8 started before the loaded modes, in " +
	"the root cgroup as every other process; each strategy is applied through gateway B's API (an agent of this build) to the responder by " +
	"its command line and removed before the next mode, which starts once the agent has applied or given back (checked on the process): " +
	"fifo (SCHED_FIFO 50), deadline (200 us every 1 ms), weight (others_weight 1: the responder in a group of its own weighing 100 root tasks), " +
	"dedicated_cpu (the last CPU: every other process moved off it)"

// RunCPU brings up a lab of its own, runs each mode for d at rate
// requests a second and takes the lab down.
func RunCPU(ctx context.Context, o Options, d time.Duration, rate int) (c *CPU, err error) {
	if _, err := exec.LookPath("stress-ng"); err != nil {
		return nil, fmt.Errorf("the load needs stress-ng: %w", err)
	}
	l, err := ownLab(ctx, o, "bcpu")
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := l.Down(); derr != nil && err == nil {
			err = fmt.Errorf("lab down: %w", derr)
		}
	}()
	conn, err := dialGateway(l, l.GWB)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	gb := pb.NewGatewayClient(conn)

	tag := fmt.Sprintf("edgeplane-cpu-echo-%d", os.Getpid())
	echo := exec.Command("ip", "netns", "exec", l.B, "python3", "-c", cpuEchoScript, lab.AddrB, strconv.Itoa(cpuEchoPort), tag)
	if err := echo.Start(); err != nil {
		return nil, fmt.Errorf("responder: %w", err)
	}
	defer func() { _ = echo.Process.Kill(); _ = echo.Wait() }()
	pid := echo.Process.Pid // ip netns exec execs python3
	if err := echoReady(l, 5*time.Second); err != nil {
		return nil, err
	}
	// The emulated WAN links add no delay nor loss here (UDP takes
	// path 2, wan2, lossy by default), and their emulator (a
	// process of this host standing for a wire) runs SCHED_FIFO in every
	// mode: the round trips are the hosts', the gateways' and the
	// responder's.
	zero := "0"
	for _, link := range lab.LinkNames {
		if _, err := l.SetLink(link, wanem.Both, lab.LinkChange{Delay: &zero, Jitter: &zero, Loss: &zero}); err != nil {
			return nil, fmt.Errorf("link %s: %w", link, err)
		}
	}
	for _, p := range l.Status().Processes {
		if p.Kind != "wanem" {
			continue
		}
		for _, pid := range p.Pids {
			if err := fifoThreads(pid, 10); err != nil {
				return nil, fmt.Errorf("emulator %s: %w", p.Name, err)
			}
		}
	}

	var stress *exec.Cmd
	defer func() {
		if stress != nil {
			_ = stress.Process.Kill()
			_ = stress.Wait()
		}
	}()
	c = &CPU{Method: methodCPU, Load: "stress-ng --cpu 8", RateHz: rate, Seconds: d.Seconds()}
	last := strconv.Itoa(NumCPU() - 1)
	for i, m := range CPUModes {
		if m.Loaded && stress == nil {
			stress = exec.Command("stress-ng", "--cpu", "8", "--timeout", "3600")
			if err := stress.Start(); err != nil {
				return nil, fmt.Errorf("stress-ng: %w", err)
			}
			time.Sleep(time.Second) // its workers up
		}
		s := m.Strategy
		if m.Name == "dedicated_cpu" {
			s = &pb.Strategy{Cpus: last}
		}
		mode := CPUMode{Name: m.Name, Loaded: m.Loaded}
		if s != nil {
			// The responder runs as root: user 0 selects it, the
			// regex narrows it to this run's.
			s.Id, s.Name, s.CommandRegex = uint32(100+i), "bench-"+m.Name, regexp.QuoteMeta(tag)
			s.Selectors = &pb.Selectors{User: "0"}
			mode.Strategy = strategyText(s)
			if _, err := gb.Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{{Op: &pb.Operation_Create{
				Create: &pb.Object{Kind: &pb.Object_Strategy{Strategy: s}}}}}}); err != nil {
				return nil, fmt.Errorf("%s: apply: %w", m.Name, err)
			}
		}
		// The agent looks every second; wait until the responder has
		// what the mode asks.
		if err := waitApplied(pid, m.Name, last, 5*time.Second); err != nil {
			return nil, err
		}
		mode.Applied = responderState(pid)
		var wg sync.WaitGroup
		var perr error
		wg.Add(1)
		go func() { defer wg.Done(); mode.Ping, perr = pingLatency(ctx, l, d, rate) }()
		mode.Echo, err = echoLatency(l, d, rate)
		wg.Wait()
		if err = errors.Join(err, perr); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		o.Log("cpu %s: udp echo p50 %.3f p99 %.3f max %.3f ms (%d/%d); ping p50 %.3f p99 %.3f max %.3f ms; responder %s", m.Name,
			mode.Echo.P50Ms, mode.Echo.P99Ms, mode.Echo.MaxMs, mode.Echo.Answered, mode.Echo.Sent, mode.Ping.P50Ms, mode.Ping.P99Ms, mode.Ping.MaxMs, mode.Applied)
		c.Modes = append(c.Modes, mode)
		if s != nil {
			if _, err := gb.Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{{Op: &pb.Operation_Delete{
				Delete: &pb.Ref{Kind: pb.Kind_KIND_STRATEGY, Id: s.Id}}}}}); err != nil {
				return nil, fmt.Errorf("%s: remove: %w", m.Name, err)
			}
			if err := waitApplied(pid, "loaded", last, 5*time.Second); err != nil {
				return nil, fmt.Errorf("%s given back: %w", m.Name, err)
			}
		}
	}
	return c, nil
}

// echoReady waits until the responder answers a request from host A.
func echoReady(l *lab.SDWAN, within time.Duration) error {
	var c *net.UDPConn
	if err := topo.Do(l.A, func() (err error) {
		c, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(lab.AddrB), Port: cpuEchoPort})
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 64)
	for deadline := time.Now().Add(within); time.Now().Before(deadline); {
		_, _ = c.Write(buf[:8])
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(buf); err == nil {
			return nil
		}
	}
	return fmt.Errorf("the responder did not answer within %s", within)
}

// fifoThreads gives every thread of process pid SCHED_FIFO at prio.
func fifoThreads(pid, prio int) error {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return err
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		a := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
		if err := unix.SchedSetAttr(tid, &a, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// strategyText shows the settings of s a mode used.
func strategyText(s *pb.Strategy) string {
	var out []string
	if s.Policy != "" {
		out = append(out, "policy "+s.Policy)
	}
	if s.ExecutionTime != "" {
		out = append(out, "execution_time "+s.ExecutionTime+" period "+s.Period)
	}
	if s.OthersWeight != 0 {
		out = append(out, "others_weight "+strconv.FormatUint(uint64(s.OthersWeight), 10))
	}
	if s.Cpus != "" {
		out = append(out, "cpus "+s.Cpus)
	}
	return strings.Join(out, ", ")
}

// NumCPU is one more than the highest CPU this process may run on: the
// dedicated_cpu mode's CPU is the one below it.
func NumCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 1
	}
	n := 0
	for c := range 1024 {
		if set.IsSet(c) {
			n = c + 1
		}
	}
	return n
}

// responderState shows process pid's policy, CPUs and cpu cgroup.
func responderState(pid int) string {
	policy := "?"
	if a, err := unix.SchedGetAttr(pid, 0); err == nil {
		policy = map[uint32]string{unix.SCHED_NORMAL: "normal", unix.SCHED_FIFO: "fifo", unix.SCHED_RR: "rr", unix.SCHED_DEADLINE: "deadline"}[a.Policy]
		if a.Policy == unix.SCHED_FIFO || a.Policy == unix.SCHED_RR {
			policy += " " + strconv.FormatUint(uint64(a.Priority), 10)
		}
	}
	var set unix.CPUSet
	var cpus []string
	if unix.SchedGetaffinity(pid, &set) == nil {
		for c := range 1024 {
			if set.IsSet(c) {
				cpus = append(cpus, strconv.Itoa(c))
			}
		}
	}
	cg, err := sched.CPUCgroup(pid)
	if err != nil {
		cg = "?"
	}
	return fmt.Sprintf("%s, cpus %s, cgroup %s", policy, strings.Join(cpus, ","), cg)
}

// waitApplied waits until the responder has what mode asks: its policy,
// its CPUs, its group; "unloaded" and "loaded" ask none of them.
func waitApplied(pid int, mode, last string, within time.Duration) error {
	ok := func() bool {
		st := responderState(pid)
		switch mode {
		case "fifo":
			return strings.HasPrefix(st, "fifo ")
		case "deadline":
			return strings.HasPrefix(st, "deadline,")
		case "weight":
			return strings.Contains(st, "cgroup /edgeplane-strategy-") || (!strings.HasSuffix(st, "cgroup /") && strings.HasPrefix(st, "normal,"))
		case "dedicated_cpu":
			return strings.Contains(st, ", cpus "+last+", ")
		}
		return strings.HasPrefix(st, "normal,") && !strings.Contains(st, "edgeplane-strategy-") && !strings.Contains(st, ", cpus "+last+", ")
	}
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		if ok() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mode %s: the responder was not given it within %s: %s", mode, within, responderState(pid))
		}
	}
}

// echoLatency sends a 64-byte request to the responder every 1/rate s
// for d from host A and times each answer from its send to the kernel's
// receive timestamp.
func echoLatency(l *lab.SDWAN, d time.Duration, rate int) (RoundTrips, error) {
	var c *net.UDPConn
	if err := topo.Do(l.A, func() (err error) {
		c, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(lab.AddrB), Port: cpuEchoPort})
		return err
	}); err != nil {
		return RoundTrips{}, fmt.Errorf("echo client: %w", err)
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return RoundTrips{}, err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return RoundTrips{}, fmt.Errorf("SO_TIMESTAMPNS: %v %v", err, serr)
	}
	n := int(d.Seconds() * float64(rate))
	sentAt := make([]int64, n) // unix ns
	var mu sync.Mutex
	var rtts []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf, oob := make([]byte, 128), make([]byte, 128)
		for {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			m, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue // an ICMP error for an earlier request
			}
			if err != nil {
				return
			}
			if m < 8 {
				continue
			}
			seq := binary.BigEndian.Uint64(buf)
			at, ok := rxStamp(oob[:oobn])
			mu.Lock()
			if ok && seq < uint64(n) && sentAt[seq] != 0 {
				rtts = append(rtts, time.Duration(at-sentAt[seq]))
				sentAt[seq] = 0 // a duplicate counts once
			}
			mu.Unlock()
		}
	}()
	req := make([]byte, 64)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	sent := 0
	for seq := range n {
		<-tick.C
		binary.BigEndian.PutUint64(req, uint64(seq))
		mu.Lock()
		sentAt[seq] = time.Now().UnixNano()
		mu.Unlock()
		if _, err := c.Write(req); err == nil {
			sent++
		}
	}
	tick.Stop()
	<-done
	mu.Lock()
	defer mu.Unlock()

	return latencyOf(sent, rtts), nil
}

// rxStamp finds SCM_TIMESTAMPNS in a datagram's control messages.
func rxStamp(oob []byte) (int64, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data[:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			return sec*1e9 + nsec, true
		}
	}
	return 0, false
}

// pingTime is a ping reply's round trip.
var pingTime = regexp.MustCompile(`icmp_seq=\d+ .*time=([0-9.]+) ms`)

// pingLatency pings host B from host A every 1/rate s for d (ping times
// a reply by the kernel's receive timestamp).
func pingLatency(ctx context.Context, l *lab.SDWAN, d time.Duration, rate int) (RoundTrips, error) {
	n := int(d.Seconds() * float64(rate))
	iv := strconv.FormatFloat(1/float64(rate), 'f', 4, 64)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", l.A, "ping", "-n", "-i", iv, "-c", strconv.Itoa(n), "-W", "1", lab.AddrB)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return RoundTrips{}, err
	}
	if err := cmd.Start(); err != nil {
		return RoundTrips{}, fmt.Errorf("ping: %w", err)
	}
	var rtts []time.Duration
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := pingTime.FindStringSubmatch(sc.Text()); m != nil {
			if v, err := strconv.ParseFloat(m[1], 64); err == nil {
				rtts = append(rtts, time.Duration(v*float64(time.Millisecond)))
			}
		}
	}
	if err := cmd.Wait(); err != nil && len(rtts) == 0 {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).ExitStatus() != 1 { // 1: some lost
			return RoundTrips{}, fmt.Errorf("ping: %w", err)
		}
	}
	return latencyOf(n, rtts), nil
}

// latencyOf sums up round trips of sent requests.
func latencyOf(sent int, rtts []time.Duration) RoundTrips {
	s := measure.Sorted(rtts)
	lat := RoundTrips{Sent: sent, Answered: len(s)}
	if len(s) > 0 {
		lat.P50Ms, lat.P99Ms, lat.MaxMs = measure.Ms(measure.Pct(s, 50)), measure.Ms(measure.Pct(s, 99)), measure.Ms(s[len(s)-1])
	}
	return lat
}

// CPUGoals: each mechanism's loaded p99 of the echo within twice the
// unloaded one (the goal).
func CPUGoals(c *CPU) []measure.Goal {
	if c == nil || len(c.Modes) == 0 || c.Modes[0].Name != "unloaded" {
		return nil
	}
	base := c.Modes[0].Echo.P99Ms
	var g []measure.Goal
	for _, m := range c.Modes[1:] {
		g = append(g, measure.Goal{Name: fmt.Sprintf("cpu %s: udp echo p99 loaded (ms), within 2x unloaded (%.3f ms)", m.Name, base), Value: m.Echo.P99Ms, Limit: 2 * base})
	}
	return g
}
