// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/agent"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestAgentStrategy: an agent whose config has a CPU strategy gives the
// processes it matches SCHED_FIFO within a second of starting; a
// stopped agent (SIGTERM) gives them back what they had; a crashed one
// (SIGKILL) leaves them as they were, and the next start gives them back
// before it applies its config again — here one without the strategy.
func TestAgentStrategy(t *testing.T) {
	tag := "edgeplane-e2e-" + testutil.UniqueName("st")
	cmd := exec.Command("bash", "-c", "exec -a "+tag+" sleep 120")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	policy := func() uint32 {
		a, err := unix.SchedGetAttr(pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Policy
	}
	isFIFO := func() bool { return policy() == unix.SCHED_FIFO }
	withStrategy := forwardConfig + `strategies:
  - {id: 1, name: e2e, command_regex: "^` + tag + `", selectors: {user: "0"}, priority: true, policy: fifo, rt_priority: 10}
  - {id: 9, name: every-cpu, command_regex: "^edgeplane-none$", selectors: {user: "0"}, cpus: "0-1023"}
`
	g := newGateway(t, withStrategy)
	// Asked for the sched_ext scheduler on a kernel without sched_ext
	// (this one), the agent says so once and uses FIFO.
	g.start("--sched-ext")
	if !waitFor(3*time.Second, isFIFO) {
		t.Fatalf("the matching process's policy %d 3 s after the agent started, want FIFO", policy())
	}
	if n := strings.Count(g.log(), "no sched_ext scheduler"); n != 1 {
		t.Errorf("the agent said %d times that it has no sched_ext scheduler, want once", n)
	}
	// It says what it holds — the process, what it applied, the CPUs
	// it ran on — in the CLI (over the API) and the metrics.
	held := regexp.MustCompile(fmt.Sprintf(`(?m)^1\s+%d\s+sleep\s+1\s+fifo 10 \(CPUs \d+\)\s+\d`, pid))
	var out []byte
	if !waitFor(3*time.Second, func() bool {
		out, _ = exec.Command(edgeplaneBin, "get", "strategies", "--server", "unix://"+agent.DefaultAPISocket(g.PinDir)).CombinedOutput()
		return held.Match(out)
	}) {
		t.Errorf("get strategies does not show process %d held with fifo 10 and its CPU:\n%s", pid, out)
	}
	t.Logf("get strategies:\n%s", out)
	fams := g.scrape()
	if n, _ := metricValue(fams, "edgeplane_strategy_threads", map[string]string{"strategy": "1"}); n != 1 {
		t.Errorf("edgeplane_strategy_threads{strategy=1} = %v, want 1", n)
	}
	if len(fams["edgeplane_strategy_ran_on"].GetMetric()) == 0 {
		t.Error("no edgeplane_strategy_ran_on series")
	}
	// Strategy 9 would dedicate every CPU: the host refuses it (at the
	// start, said and counted; it takes nothing).
	if n, _ := metricValue(fams, "edgeplane_strategy_refused", map[string]string{"strategy": "9", "reason": "host"}); n != 1 {
		t.Errorf("edgeplane_strategy_refused{strategy=9,reason=host} = %v, want 1", n)
	}
	// A process started while the agent runs is taken at its exec (the
	// agent's BPF process events), not at the scan a second later:
	// five in a row each within 400 ms (by the scans alone, all five
	// would be about one chance in a hundred).
	for i := range 5 {
		late := exec.Command("bash", "-c", "exec -a "+tag+"-late"+strconv.Itoa(i)+" sleep 60")
		start := time.Now()
		if err := late.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = late.Process.Kill(); _ = late.Wait() })
		if !waitFor(3*time.Second, func() bool {
			a, err := unix.SchedGetAttr(late.Process.Pid, 0)
			return err == nil && a.Policy == unix.SCHED_FIFO
		}) {
			t.Fatalf("a process started after the agent: not FIFO within 3 s")
		}
		if took := time.Since(start); took > 400*time.Millisecond {
			t.Errorf("process %d started while the agent runs: FIFO after %s, want at its exec", i, took.Round(time.Millisecond))
		} else {
			t.Logf("process %d started while the agent runs: FIFO after %s", i, took.Round(time.Millisecond))
		}
	}
	if err := g.StopAgent(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if p := policy(); p != unix.SCHED_NORMAL {
		t.Errorf("after SIGTERM: policy %d, want given back (NORMAL)", p)
	}

	g.start()
	if !waitFor(3*time.Second, isFIFO) {
		t.Fatalf("restarted agent: policy %d, want FIFO again", policy())
	}
	if err := g.StopAgent(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !isFIFO() {
		t.Fatalf("a killed agent cannot give back: want FIFO still, got %d", policy())
	}
	g.writeConfig(forwardConfig)
	g.start()
	if p := policy(); p != unix.SCHED_NORMAL {
		t.Errorf("the next start after a crash: policy %d, want given back (NORMAL) by the time it is ready", p)
	}
}

// TestXDPCPU: the dataplane counts, per interface, the packets its XDP
// work ran on each CPU, in `edgeplane stats` and the metrics — and on
// veth that CPU is the sender's: pings from host A pinned to one CPU
// (taskset) are handled, by lan0's XDP and on the way back wan0's, on
// that CPU, then on the other when pinned there.
func TestXDPCPU(t *testing.T) {
	testutil.RequireTool(t, "taskset")
	g := newGateway(t, forwardConfig)
	g.start()
	g.warmUp()
	for _, cpu := range []int{1, 0} {
		before := g.stats()
		out, err := nsRun(g.A, "taskset", "-c", strconv.Itoa(cpu), "ping", "-n", "-q", "-c", "50", "-i", "0.005", "-W", "1", lab.AddrB)
		if err != nil {
			t.Fatalf("ping from A on CPU %d: %v\n%s", cpu, err, out)
		}
		after := g.stats()
		for _, itf := range []string{lab.LanName, lab.WanName} {
			at := func(s stats, c int) uint64 {
				if per := s.XDPCPU[itf]; c < len(per) {
					return per[c]
				}
				return 0
			}
			on, off := at(after, cpu)-at(before, cpu), at(after, 1-cpu)-at(before, 1-cpu)
			t.Logf("pings sent from CPU %d: %s's XDP ran %d packets on CPU %d, %d on CPU %d", cpu, itf, on, cpu, off, 1-cpu)
			if on < 50 || off >= 10 {
				t.Errorf("pings sent from CPU %d: %s's XDP ran %d packets there and %d on CPU %d; want the 50 on the sender's CPU", cpu, itf, on, off, 1-cpu)
			}
		}
	}
	if v, ok := metricValue(g.scrape(), "edgeplane_xdp_cpu_packets_total", map[string]string{"interface": lab.LanName, "cpu": "1"}); !ok || v < 50 {
		t.Errorf("edgeplane_xdp_cpu_packets_total{interface=lan0,cpu=1} = %v (%v), want at least the 50 pings", v, ok)
	}
	out, err := exec.Command(edgeplaneBin, "stats", "--pin-dir", g.PinDir).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^\s*`+lab.LanName+`\s+cpu0 \d+ \(\d+%\), cpu1 \d+`).Match(out) {
		t.Errorf("edgeplane stats does not show lan0's XDP packets by CPU (%v):\n%s", err, out)
	}
}

// TestXDPSteer: a strategy's irq_affinity on a veth (no IRQs: its XDP
// work runs on the sender's CPU) hands the interface's XDP work to the
// strategy's CPU through the cpumap — pings sent from CPU 0 are handled
// by lan0's XDP on CPU 1, and still answered — and says so in get
// strategies; once the agent stops (giving everything back) lan0's work
// is on the sender's CPU again.
func TestXDPSteer(t *testing.T) {
	testutil.RequireTool(t, "taskset")
	g := newGateway(t, forwardConfig+`strategies:
  - {id: 2, command_regex: "^edgeplane-none$", selectors: {user: "0"}, cpus: "1", irq_affinity: [lan0]}
`)
	g.start()
	// Stopped, not killed, whatever happens: the strategy moved every
	// process of the machine off CPU 1, and only its agent gives that
	// back (a killed one's next start would, from a state file this
	// test's end removes).
	t.Cleanup(func() { _ = g.StopAgent(syscall.SIGTERM) })
	g.warmUp()
	pings := g.lanPingCPUs
	var out []byte
	if !waitFor(3*time.Second, func() bool {
		out, _ = exec.Command(edgeplaneBin, "get", "strategies", "--server", "unix://"+agent.DefaultAPISocket(g.PinDir)).CombinedOutput()
		return strings.Contains(string(out), "XDP work of lan0 on CPU 1")
	}) {
		t.Fatalf("get strategies does not show lan0's XDP work handed to CPU 1:\n%s", out)
	}
	on0, on1 := pings()
	t.Logf("steered: lan0's XDP ran %d of 50 pings on CPU 0, %d on CPU 1", on0, on1)
	if on1 < 50 || on0 >= 10 {
		t.Errorf("steered to CPU 1: lan0's XDP ran %d pings on CPU 0 and %d on CPU 1, want the 50 on CPU 1", on0, on1)
	}
	if err := g.StopAgent(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	on0, on1 = pings()
	t.Logf("given back: lan0's XDP ran %d of 50 pings on CPU 0, %d on CPU 1", on0, on1)
	if on0 < 50 || on1 >= 10 {
		t.Errorf("given back: lan0's XDP ran %d pings on CPU 0 and %d on CPU 1, want the 50 on the sender's CPU 0", on0, on1)
	}
}

// TestStrategyRecoverFirst: a crashed agent left a process at SCHED_FIFO
// (its state file says what the process had before); the next start has
// a config whose interface this host lacks, so it fails its start-up
// check — and still gives the process back first, and clears the state
// file, rather than leaving the policy applied for good.
func TestStrategyRecoverFirst(t *testing.T) {
	testutil.RequireRoot(t)
	tag := "edgeplane-e2e-" + testutil.UniqueName("rf")
	cmd := exec.Command("bash", "-c", "exec -a "+tag+" sleep 120")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	time.Sleep(50 * time.Millisecond) // exec'd
	p, err := sched.ReadProc("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	// What a strategy did before the crash, and wrote down first.
	fifo := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 7}
	if err := unix.SchedSetAttr(pid, &fifo, 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte("interfaces:\n  - {name: edgeplane-none0, role: lan}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := fmt.Sprintf(`{"held":[{"strategy":1,"pid":%d,"tid":%d,"start":%d,"before":{"policy":0},"applied":"fifo 7"}]}`, pid, pid, p.Start)
	if err := os.WriteFile(cfg+".sched", []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, edgeplaneBin, "agent", "--config", cfg, "--pin-dir", "/sys/fs/bpf/"+testutil.UniqueName("eprf")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "edgeplane-none0") {
		t.Fatalf("the agent with a missing interface: %v, want it to refuse naming the interface:\n%s", err, out)
	}
	a, err := unix.SchedGetAttr(pid, 0)
	if err != nil || a.Policy != unix.SCHED_NORMAL {
		t.Errorf("after the failed start: policy %d (%v), want given back (NORMAL)\n%s", a.Policy, err, out)
	}
	if _, err := os.Stat(cfg + ".sched"); !os.IsNotExist(err) {
		t.Errorf("state file left after the failed start: %v", err)
	}
}

// TestAPIStrategyRefusals: an API client asks for what would take the
// host down or hand real-time to processes that name themselves: FIFO
// 99 for every process by name, or for root's every process; every CPU
// dedicated; a deadline runtime of the whole period, or deadlines that
// together pass what real-time tasks may have of a CPU; any real-time
// policy while the kernel's RT throttling is off. Each is refused
// (400), naming the field and why, and nothing is applied.
func TestAPIStrategyRefusals(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	for _, c := range []struct {
		name, ops, path, reason string
	}{
		{"fifo 99 by name", `{"create":{"strategy":{"id":1,"command_regex":".*","priority":true,"rt_priority":99}}}`,
			"operations[0].create.strategy.selectors", "needs user, cgroup or pod_labels"},
		{"root's every process", `{"create":{"strategy":{"id":1,"command_regex":".*","selectors":{"user":"0"},"priority":true,"rt_priority":99}}}`,
			"operations[0].create.strategy.command_regex", "a system process's name"},
		{"root by uid alone", `{"create":{"strategy":{"id":1,"selectors":{"user":"root"},"cpus":"1"}}}`,
			"operations[0].create.strategy.selectors.user", "narrow them with command_regex"},
		{"every CPU", `{"create":{"strategy":{"id":1,"command_regex":"^gnb$","selectors":{"user":"0"},"cpus":"0-1023"}}}`,
			"operations[0].create.strategy.cpus", "leave at least one to the rest of the system"},
		{"deadline of the whole period", `{"create":{"strategy":{"id":1,"selectors":{"user":"gnb"},"priority":true,"policy":"deadline","execution_time":"1ms","period":"1ms"}}}`,
			"operations[0].create.strategy.execution_time", "up to below 1ms"},
		{"deadlines past a CPU", `{"create":{"strategy":{"id":1,"selectors":{"user":"gnb"},"priority":true,"policy":"deadline","execution_time":"500us"}}},` +
			`{"create":{"strategy":{"id":2,"selectors":{"user":"upf"},"priority":true,"policy":"deadline","execution_time":"500us"}}}`,
			"operations[1].create.strategy.execution_time", "over the 95.0% the kernel lets real-time tasks have"},
	} {
		code, body := a.rest(t, http.MethodPost, "/v1/apply", `{"operations":[`+c.ops+`]}`)
		if code != http.StatusBadRequest || !strings.Contains(body, c.path) || !strings.Contains(body, c.reason) {
			t.Errorf("%s: %d %s, want 400 with %s: ...%s", c.name, code, body, c.path, c.reason)
		}
	}
	rt := "/proc/sys/kernel/sched_rt_runtime_us"
	old, err := os.ReadFile(rt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rt, []byte("-1"), 0); err != nil {
		t.Fatal(err)
	}
	code, body := a.rest(t, http.MethodPost, "/v1/apply", `{"operations":[{"create":{"strategy":{"id":1,"selectors":{"user":"gnb"},"priority":true,"policy":"rr"}}}]}`)
	if err := os.WriteFile(rt, old, 0); err != nil {
		t.Errorf("put %s back: %v", rt, err)
	}
	if code != http.StatusBadRequest || !strings.Contains(body, "operations[0].create.strategy.policy") || !strings.Contains(body, "throttling is off") {
		t.Errorf("rr with RT throttling off: %d %s, want 400 naming policy and why", code, body)
	}
	if code, body := a.rest(t, http.MethodGet, "/v1/strategies", ""); code != http.StatusOK || strings.Contains(body, `"id"`) {
		t.Errorf("strategies after the refusals: %d %s, want none", code, body)
	}
}

// lanPingCPUs sends 50 pings from host A on CPU 0 and returns how many
// lan0's XDP ran on CPU 0 and on CPU 1.
func (g *gateway) lanPingCPUs() (on0, on1 uint64) {
	t := g.t
	t.Helper()
	at := func(s stats, c int) uint64 {
		if per := s.XDPCPU[lab.LanName]; c < len(per) {
			return per[c]
		}
		return 0
	}
	before := g.stats()
	out, err := nsRun(g.A, "taskset", "-c", "0", "ping", "-n", "-q", "-c", "50", "-i", "0.005", "-W", "1", lab.AddrB)
	if err != nil || !strings.Contains(out, " 50 received") {
		t.Fatalf("pings from A on CPU 0: %v\n%s", err, out)
	}
	after := g.stats()
	return at(after, 0) - at(before, 0), at(after, 1) - at(before, 1)
}

// ctl runs the CLI against the agent's API socket, stdin given.
func (g *gateway) ctl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(edgeplaneBin, append(args, "--server", "unix://"+agent.DefaultAPISocket(g.PinDir))...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestStrategyDeleteGivesBack: an API client adds a strategy that holds
// no process — it dedicates CPU 1 (every other process moved off) and
// hands lan0's XDP work to it — and deletes it: everything it changed is
// given back (the other processes' CPU, the hand-over) and the state
// file is cleared, though it never held a thread.
func TestStrategyDeleteGivesBack(t *testing.T) {
	testutil.RequireTool(t, "taskset")
	g := newGateway(t, forwardConfig)
	g.start()
	t.Cleanup(func() { _ = g.StopAgent(syscall.SIGTERM) })
	g.warmUp()
	other := exec.Command("sleep", "120")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	var set unix.CPUSet
	on1 := func() bool { return unix.SchedGetaffinity(other.Process.Pid, &set) == nil && set.IsSet(1) }
	if out, err := g.ctl("strategies:\n  - {id: 5, command_regex: \"^edgeplane-none$\", selectors: {user: \"0\"}, cpus: \"1\", irq_affinity: [lan0]}\n", "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	var out string
	if !waitFor(3*time.Second, func() bool {
		out, _ = g.ctl("", "get", "strategies")
		return !on1() && strings.Contains(out, "XDP work of lan0 on CPU 1")
	}) {
		t.Fatalf("strategy 5 applied: another process's CPUs %v, status:\n%s", set, out)
	}
	if n0, n1 := g.lanPingCPUs(); n1 < 50 {
		t.Fatalf("steered to CPU 1: lan0's XDP ran %d pings on CPU 0 and %d on CPU 1", n0, n1)
	}
	state := g.cfgPath + ".sched"
	if _, err := os.Stat(state); err != nil {
		t.Errorf("state file while strategy 5 dedicates CPU 1: %v", err)
	}
	if out, err := g.ctl("", "delete", "strategy", "5"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if !waitFor(3*time.Second, on1) {
		t.Errorf("strategy 5 deleted: another process's CPUs %v, want CPU 1 back", set)
	}
	if !waitFor(3*time.Second, func() bool { _, err := os.Stat(state); return os.IsNotExist(err) }) {
		t.Errorf("strategy 5 deleted: the state file %s is left", state)
	}
	if n0, n1 := g.lanPingCPUs(); n0 < 50 || n1 >= 10 {
		t.Errorf("strategy 5 deleted: lan0's XDP ran %d pings on CPU 0 and %d on CPU 1, want the 50 on the sender's CPU 0", n0, n1)
	}
}

// TestStrategyApplyAtOnce: a strategy added over the API to an agent
// that had none takes a process that runs already at once, not at the
// next scan a second later, and one started right after at its exec —
// three times over (by the scan alone, all three within 300 ms would
// be about one chance in forty).
func TestStrategyApplyAtOnce(t *testing.T) {
	g := newGateway(t, forwardConfig)
	g.start()
	t.Cleanup(func() { _ = g.StopAgent(syscall.SIGTERM) })
	fifo := func(pid int) bool {
		a, err := unix.SchedGetAttr(pid, 0)
		return err == nil && a.Policy == unix.SCHED_FIFO
	}
	start := func(tag string) int {
		cmd := exec.Command("bash", "-c", "exec -a "+tag+" sleep 60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	for i := range 3 {
		tag := "edgeplane-e2e-" + testutil.UniqueName("now")
		pid := start(tag)
		time.Sleep(50 * time.Millisecond) // exec'd
		id := strconv.Itoa(10 + i)
		if out, err := g.ctl("strategies:\n  - {id: "+id+", command_regex: \"^"+tag+"\", selectors: {user: \"0\"}, priority: true, rt_priority: 5}\n", "apply", "-f", "-"); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		applied := time.Now()
		if !waitFor(3*time.Second, func() bool { return fifo(pid) }) {
			t.Fatalf("round %d: the running process not FIFO within 3 s", i)
		}
		if took := time.Since(applied); took > 300*time.Millisecond {
			t.Errorf("round %d: the running process FIFO %s after the apply returned, want at once", i, took.Round(time.Millisecond))
		}
		later := start(tag + "-later")
		started := time.Now()
		if !waitFor(3*time.Second, func() bool { return fifo(later) }) {
			t.Fatalf("round %d: a process started after the apply not FIFO within 3 s", i)
		}
		if took := time.Since(started); took > 300*time.Millisecond {
			t.Errorf("round %d: a process started after the apply FIFO after %s, want at its exec", i, took.Round(time.Millisecond))
		}
		if out, err := g.ctl("", "delete", "strategy", id); err != nil {
			t.Fatalf("delete: %v\n%s", err, out)
		}
		if !waitFor(3*time.Second, func() bool { return !fifo(pid) && !fifo(later) }) {
			t.Fatalf("round %d: strategy deleted, processes still FIFO", i)
		}
	}
}

// TestStrategyChildRecovered: a strategy dedicates CPU 1; a process that
// was moved off it starts a child while the agent is down (killed: it
// gave nothing back); the next start, whose config has no strategy,
// gives the child every CPU too, not only what the state file names.
func TestStrategyChildRecovered(t *testing.T) {
	g := newGateway(t, forwardConfig+`strategies:
  - {id: 2, command_regex: "^edgeplane-none$", selectors: {user: "0"}, cpus: "1"}
`)
	dir := t.TempDir()
	flag, childFile := filepath.Join(dir, "go"), filepath.Join(dir, "child")
	parent := exec.Command("bash", "-c", "while [ ! -e "+flag+" ]; do sleep 0.05; done; sleep 60 & echo $! > "+childFile+"; wait")
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	var set unix.CPUSet
	on1 := func(pid int) bool { return unix.SchedGetaffinity(pid, &set) == nil && set.IsSet(1) }
	g.start()
	t.Cleanup(func() { _ = g.StopAgent(syscall.SIGTERM) })
	if !waitFor(3*time.Second, func() bool { return !on1(parent.Process.Pid) }) {
		t.Fatalf("the parent process still may run on CPU 1: %v", set)
	}
	if err := g.StopAgent(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Whatever happens next, CPU 1 is the machine's again at the end.
	t.Cleanup(func() { _, _ = sched.Recover("/proc", g.cfgPath+".sched") })
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var child int
	if !waitFor(3*time.Second, func() bool {
		b, err := os.ReadFile(childFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && child > 0
	}) {
		t.Fatal("the parent started no child")
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if on1(child) {
		t.Fatalf("the child started while the agent was down may run on CPU 1 already (%v): nothing to test", set)
	}
	g.writeConfig(forwardConfig)
	g.start()
	if !on1(child) {
		t.Errorf("the next start's recovery: the child may run on %v, want CPU 1 back", set)
	}
	if !on1(parent.Process.Pid) {
		t.Errorf("the next start's recovery: the parent may run on %v, want CPU 1 back", set)
	}
}
