// SPDX-License-Identifier: Apache-2.0

package sched_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// sleeper starts `sleep 60` whose command line carries tag (exec -a),
// ended with the test.
func sleeper(t *testing.T, tag string) int {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec -a "+tag+" sleep 60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	time.Sleep(50 * time.Millisecond) // exec'd
	return cmd.Process.Pid
}

func policyOf(t *testing.T, pid int) (uint32, uint32) {
	t.Helper()
	a, err := unix.SchedGetAttr(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a.Policy, a.Priority
}

func strategy(t *testing.T, y string) config.Strategy {
	t.Helper()
	cfg, err := yamlcfg.Parse([]byte("interfaces: [{name: lo, role: lan}]\nstrategies:\n  - " + y + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Strategies[0]
}

// TestEngine: a strategy takes exactly the processes its regex matches —
// one started before it and one after — and gives each back what it had
// when the strategy goes; a dedicated CPU set is applied and given back;
// the state file lets a new engine (after a crash) give back what the old
// one held, and only to the same processes.
func TestEngine(t *testing.T) {
	testutil.RequireRoot(t)
	tag := "edgeplane-sched-" + testutil.UniqueName("t")
	before := sleeper(t, tag+"-a")
	other := sleeper(t, "edgeplane-unrelated-"+tag)
	state := filepath.Join(t.TempDir(), "sched.json")
	e := sched.New("/proc", state)
	t.Cleanup(func() { _ = e.RevertAll() })
	s := strategy(t, `{id: 1, command_regex: "^`+tag+`", selectors: {user: "0"}, priority: true, policy: fifo, rt_priority: 20, cpus: "0"}`)

	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
		t.Fatalf("sync: %d taken, %v; want the one process", taken, err)
	}
	if p, prio := policyOf(t, before); p != unix.SCHED_FIFO || prio != 20 {
		t.Errorf("matching process: policy %d priority %d, want FIFO 20", p, prio)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(before, &set); err != nil || set.Count() != 1 || !set.IsSet(0) {
		t.Errorf("matching process's CPUs: %v (%v), want only 0", set, err)
	}
	if p, _ := policyOf(t, other); p != unix.SCHED_NORMAL {
		t.Errorf("a process the regex does not match got policy %d", p)
	}
	after := sleeper(t, tag+"-b")
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
		t.Fatalf("sync after a new process: %d taken, %v", taken, err)
	}
	if p, _ := policyOf(t, after); p != unix.SCHED_FIFO {
		t.Errorf("a process started after the strategy: policy %d, want FIFO", p)
	}
	if h := e.Holdings()[1]; len(h) != 2 {
		t.Errorf("holdings: %+v, want two threads", h)
	}
	st := e.Status()
	if len(st) != 1 || st[0].Strategy != 1 || len(st[0].Procs) != 2 || !strings.Contains(st[0].Others, "every other process kept off them") {
		t.Fatalf("status: %+v, want strategy 1 holding two processes, the others moved off CPU 0", st)
	}
	for _, p := range st[0].Procs {
		// A sleeping thread's last CPU is where it last ran, which
		// may be before its CPUs were set.
		if p.Comm != "sleep" || p.Threads != 1 || p.Applied != "fifo 20, cpus 0" || len(p.RanOn) != 1 {
			t.Errorf("status of process %d: %+v, want sleep, one thread, fifo 20 with cpus 0, one CPU seen", p.PID, p)
		}
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("no state file: %v", err)
	}

	// The strategy removed: both given back.
	if _, given, err := e.Sync(nil); err != nil || given != 2 {
		t.Fatalf("sync without the strategy: %d given back, %v", given, err)
	}
	for _, pid := range []int{before, after} {
		if p, _ := policyOf(t, pid); p != unix.SCHED_NORMAL {
			t.Errorf("process %d after removal: policy %d, want OTHER", pid, p)
		}
		if err := unix.SchedGetaffinity(pid, &set); err != nil || set.Count() < 2 {
			t.Errorf("process %d after removal: CPUs %v, want all back", pid, set)
		}
	}

	// A crash: a new engine gives back what the state file says.
	if _, _, err := e.Sync([]config.Strategy{s}); err != nil {
		t.Fatal(err)
	}
	n, err := sched.Recover("/proc", state)
	if err != nil || n != 2 {
		t.Fatalf("recover: %d given back, %v; want 2", n, err)
	}
	if p, _ := policyOf(t, before); p != unix.SCHED_NORMAL {
		t.Errorf("after recovery: policy %d, want OTHER", p)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state file left after recovery: %v", err)
	}
}

// TestEngineDeadline: SCHED_DEADLINE with execution_time as runtime each
// period, given back on RevertAll; a runtime no CPU can give is refused
// with the admission error named.
func TestEngineDeadline(t *testing.T) {
	testutil.RequireRoot(t)
	tag := "edgeplane-dl-" + testutil.UniqueName("t")
	pid := sleeper(t, tag)
	e := sched.New("/proc", "")
	s := strategy(t, `{id: 2, command_regex: "^`+tag+`", selectors: {user: "0"}, priority: true, policy: deadline, execution_time: 100us, period: 1ms}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
		t.Fatalf("deadline: %d taken, %v (%v)", taken, err, e.Errors)
	}
	a, err := unix.SchedGetAttr(pid, 0)
	if err != nil || a.Policy != unix.SCHED_DEADLINE || a.Runtime != 100000 || a.Period != 1000000 {
		t.Fatalf("deadline: %+v (%v), want runtime 100us each 1ms", a, err)
	}
	if err := e.RevertAll(); err != nil {
		t.Fatal(err)
	}
	if p, _ := policyOf(t, pid); p != unix.SCHED_NORMAL {
		t.Errorf("after RevertAll: policy %d", p)
	}
	// A deadline process that forks: the kernel refuses a
	// SCHED_DEADLINE task's fork (EAGAIN) unless its children reset to
	// SCHED_OTHER, which the engine asks for; the children of a held
	// process run SCHED_OTHER until a scan takes those that match.
	forker := exec.Command("bash", "-c", "exec -a "+tag+"-forker bash -c 'while :; do /bin/sleep 0.05; done'")
	if err := forker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = forker.Process.Kill(); _ = forker.Wait() })
	time.Sleep(50 * time.Millisecond)
	s = strategy(t, `{id: 2, command_regex: "^`+tag+`-forker", selectors: {user: "0"}, priority: true, policy: deadline, execution_time: 100us, period: 1ms}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 || len(e.Errors) > 0 {
		t.Fatalf("deadline on a forking process: %d taken, %v, %v", taken, err, e.Errors)
	}
	if p, _ := policyOf(t, forker.Process.Pid); p != unix.SCHED_DEADLINE {
		t.Fatalf("forker: policy %d", p)
	}
	children := func() []int {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(forker.Process.Pid) + "/task/" + strconv.Itoa(forker.Process.Pid) + "/children")
		var out []int
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		return out
	}
	var child int
	for deadline := time.Now().Add(2 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c := children(); len(c) > 0 {
			child = c[0]
		}
	}
	if child == 0 {
		t.Fatal("the deadline process made no child in 2 s: its forks are refused")
	}
	if a, err := unix.SchedGetAttr(child, 0); err == nil && a.Policy != unix.SCHED_NORMAL {
		t.Errorf("a child of the deadline process runs policy %d, want SCHED_OTHER", a.Policy)
	}
	if err := forker.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the forking process died: %v", err)
	}
	if err := e.RevertAll(); err != nil {
		t.Fatal(err)
	}
	// 990 us of every 1 ms: past what real-time tasks may have of a CPU
	// (95 % by default), refused before the kernel is asked.
	s = strategy(t, `{id: 2, command_regex: "^`+tag+`", selectors: {user: "0"}, priority: true, policy: deadline, execution_time: 990us, period: 1ms}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 0 || !strings.Contains(e.Errors[2], "over the 95.0% the kernel lets real-time tasks have") {
		t.Errorf("990us/1ms: %d taken, %v, error %q; want refused for its bandwidth", taken, err, e.Errors[2])
	}
	// 900 us of every 1 ms for one process more than there are CPUs:
	// each fits a CPU, together they do not fit the CPUs (the kernel's
	// admission: 95 % of each), so at least one is refused, with the
	// admission named.
	s = strategy(t, `{id: 2, command_regex: "^`+tag+`", selectors: {user: "0"}, priority: true, policy: deadline, execution_time: 900us, period: 1ms}`)
	for i := range runtime.NumCPU() {
		sleeper(t, tag+"-"+strconv.Itoa(i))
	}
	if _, _, err := e.Sync([]config.Strategy{s}); err != nil {
		t.Fatal(err)
	}
	if msg := e.Errors[2]; !strings.Contains(msg, "deadline admission refused") {
		t.Errorf("%d processes at 900us/1ms on %d CPUs: error %q, want the admission refused", runtime.NumCPU()+1, runtime.NumCPU(), msg)
	}
	if err := e.RevertAll(); err != nil {
		t.Fatal(err)
	}
}

// cpuCgroup returns process pid's group in the cpu hierarchy.
func cpuCgroup(t *testing.T, pid int) string {
	t.Helper()
	g, err := sched.CPUCgroup(pid)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestEngineWeight: others_weight with a process in the root group (as
// on these machines) moves it into the strategy's group, weighing
// 100/others_weight root tasks, and only it; the strategy removed, it is
// back in the root and the group gone; after a crash, Recover does the
// same from the state file.
func TestEngineWeight(t *testing.T) {
	testutil.RequireRoot(t)
	tag := "edgeplane-weight-" + testutil.UniqueName("t")
	pid := sleeper(t, tag)
	other := sleeper(t, "edgeplane-unrelated-"+tag)
	before := cpuCgroup(t, pid)
	if before != "/" {
		t.Fatalf("this test needs processes in the root cpu group (as on these machines), not %q", before)
	}
	state := filepath.Join(t.TempDir(), "sched.json")
	e := sched.New("/proc", state)
	s := strategy(t, `{id: 7, command_regex: "^`+tag+`", selectors: {user: "0"}, policy: weight, others_weight: 2}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 || len(e.Errors) > 0 {
		t.Fatalf("sync: %d taken, %v, %v", taken, err, e.Errors)
	}
	if g := cpuCgroup(t, pid); g != "/edgeplane-strategy-7" {
		t.Fatalf("the protected process is in %q, want /edgeplane-strategy-7", g)
	}
	if g := cpuCgroup(t, other); g != "/" {
		t.Errorf("an unrelated process moved to %q", g)
	}
	dir := ""
	for _, d := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(d, "edgeplane-strategy-7")); err == nil {
			dir = filepath.Join(d, "edgeplane-strategy-7")
		}
	}
	for file, want := range map[string]string{"cpu.shares": "51200", "cpu.weight": "5000"} {
		if b, err := os.ReadFile(filepath.Join(dir, file)); err == nil && strings.TrimSpace(string(b)) != want {
			t.Errorf("%s/%s = %s, want %s (100/2 root tasks' weight)", dir, file, strings.TrimSpace(string(b)), want)
		}
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("no state file: %v", err)
	}
	if _, given, err := e.Sync(nil); err != nil || given != 1 {
		t.Fatalf("sync without the strategy: %d given back, %v", given, err)
	}
	if g := cpuCgroup(t, pid); g != "/" {
		t.Errorf("after removal the process is in %q, want the root", g)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the strategy's group %s is left: %v", dir, err)
	}
	// A crash: the next start's Recover moves it back.
	if _, _, err := e.Sync([]config.Strategy{s}); err != nil || cpuCgroup(t, pid) != "/edgeplane-strategy-7" {
		t.Fatalf("sync again: %v, in %q", err, cpuCgroup(t, pid))
	}
	if _, err := sched.Recover("/proc", state); err != nil {
		t.Fatal(err)
	}
	if g := cpuCgroup(t, pid); g != "/" {
		t.Errorf("after recovery the process is in %q", g)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the group %s is left after recovery: %v", dir, err)
	}
}

// TestEngineDedicated: a strategy's dedicated CPU is its processes'
// alone, kept by the kernel's cpusets — every other process is off it,
// one pinned to it alone too (it runs on the others' CPUs meanwhile), a
// process the test starts later starts off it — and each gets its CPUs
// back when the strategy goes (the pinned one its own CPU), or after a
// crash from the state file.
func TestEngineDedicated(t *testing.T) {
	testutil.RequireRoot(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	last := runtime.NumCPU() - 1
	tag := "edgeplane-ded-" + testutil.UniqueName("t")
	mine := sleeper(t, tag)
	other := sleeper(t, "edgeplane-unrelated-"+tag)
	pinned := sleeper(t, "edgeplane-pinned-"+tag)
	var one unix.CPUSet
	one.Set(last)
	if err := unix.SchedSetaffinity(pinned, &one); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "sched.json")
	e := sched.New("/proc", state)
	t.Cleanup(func() { _ = e.RevertAll() })
	s := strategy(t, `{id: 8, command_regex: "^`+tag+`", selectors: {user: "0"}, cpus: "`+strconv.Itoa(last)+`"}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 || len(e.Errors) > 0 {
		t.Fatalf("sync: %d taken, %v (%v)", taken, err, e.Errors)
	}
	if c := cpusOf(t, mine); c.Count() != 1 || !c.IsSet(last) {
		t.Errorf("the strategy's process runs on %v, want CPU %d alone", c, last)
	}
	for _, pid := range []int{other, pinned, os.Getpid()} {
		if c := cpusOf(t, pid); c.IsSet(last) || c.Count() != runtime.NumCPU()-1 {
			t.Errorf("process %d may run on %v, want every CPU but %d", pid, c, last)
		}
	}
	if st := e.Status(); len(st) != 1 || !strings.Contains(st[0].Others, "every other process kept off them") {
		t.Errorf("status: %+v, want the others kept off its CPUs", st)
	}
	// Started by a moved process (the test), it starts off the CPU.
	late := sleeper(t, "edgeplane-late-"+tag)
	if c := cpusOf(t, late); c.IsSet(last) {
		t.Errorf("a process the test started may run on %v", c)
	}
	if _, _, err := e.Sync([]config.Strategy{s}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Sync(nil); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{mine, other, late, os.Getpid()} {
		if c := cpusOf(t, pid); c.Count() != runtime.NumCPU() {
			t.Errorf("process %d after removal: CPUs %v, want all", pid, c)
		}
	}
	if c := cpusOf(t, pinned); c.Count() != 1 || !c.IsSet(last) {
		t.Errorf("the process pinned to CPU %d after removal: %v, want its CPU back", last, c)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state file after removal: %v, want none", err)
	}
	if _, _, err := e.Sync([]config.Strategy{s}); err != nil {
		t.Fatal(err)
	}
	if c := cpusOf(t, other); c.IsSet(last) {
		t.Fatalf("sync again: another process may run on %v", c)
	}
	if n, err := sched.Recover("/proc", state); err != nil || n != 1 {
		t.Fatalf("recover: %d threads, %v; want the strategy's one", n, err)
	}
	for _, pid := range []int{mine, other} {
		if c := cpusOf(t, pid); c.Count() != runtime.NumCPU() {
			t.Errorf("process %d after recovery: CPUs %v, want all", pid, c)
		}
	}
}

// cpusOf reads process pid's affinity.
func cpusOf(t *testing.T, pid int) unix.CPUSet {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		t.Fatal(err)
	}
	return set
}

// TestEvents: an exec anywhere is reported with its process, at once; a
// fork only by a watched process.
func TestEvents(t *testing.T) {
	testutil.RequireRoot(t)
	ev, err := sched.OpenEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	took := func(pid int) (time.Duration, bool) {
		start := time.Now()
		for time.Since(start) < 2*time.Second {
			select {
			case <-ev.C:
				if slices.Contains(ev.Take(), pid) {
					return time.Since(start), true
				}
			case <-time.After(100 * time.Millisecond):
			}
		}
		return 0, false
	}
	_ = ev.Take()
	tag := "edgeplane-ev-" + testutil.UniqueName("t")
	// bash execs sleep: the exec is reported in sleep's (bash's) pid.
	pid := sleeper(t, tag)
	if _, ok := took(pid); !ok {
		t.Fatalf("no exec event for process %d", pid)
	}
	// A process forking every 50 ms: its forks are reported once it
	// is watched, and not before.
	forker := exec.Command("bash", "-c", "while :; do /bin/true; sleep 0.05; done")
	if err := forker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = forker.Process.Kill(); _ = forker.Wait() })
	time.Sleep(100 * time.Millisecond)
	_ = ev.Take()
	time.Sleep(200 * time.Millisecond)
	// Its children exec (true, sleep) in their own pids; the forker's
	// own pid comes only from a fork.
	if slices.Contains(ev.Take(), forker.Process.Pid) {
		t.Error("an unwatched process's forks were reported")
	}
	if err := ev.Watch([]int{forker.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	if _, ok := took(forker.Process.Pid); !ok {
		t.Error("a watched process's forks are not reported")
	}
	if err := ev.Watch(nil); err != nil {
		t.Fatal(err)
	}
}

// TestEngineRTGroup: with CONFIG_RT_GROUP_SCHED (these machines'), a
// process in a cpu cgroup whose cpu.rt_runtime_us is 0 cannot be given
// FIFO: the strategy's error says so, naming the setting.
func TestEngineRTGroup(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(mnt, "cpu.rt_runtime_us")); err != nil {
		t.Fatalf("this test needs cgroup v1's cpu controller with RT group scheduling at %s (these machines'): %v", mnt, err)
	}
	group := filepath.Join(mnt, "edgeplane-rt-"+testutil.UniqueName("g"))
	if err := os.Mkdir(group, 0o755); err != nil {
		t.Fatal(err)
	}
	tag := "edgeplane-rtg-" + testutil.UniqueName("t")
	pid := sleeper(t, tag)
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(mnt, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		_ = os.Remove(group)
	})
	if b, err := os.ReadFile(filepath.Join(group, "cpu.rt_runtime_us")); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Fatalf("a new group's cpu.rt_runtime_us: %q, %v; want 0", b, err)
	}
	if err := os.WriteFile(filepath.Join(group, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
	e := sched.New("/proc", "")
	s := strategy(t, `{id: 3, command_regex: "^`+tag+`", selectors: {user: "0"}, priority: true, policy: fifo}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 0 {
		t.Fatalf("sync: %d taken, %v; want none", taken, err)
	}
	if msg := e.Errors[3]; !strings.Contains(msg, "cpu.rt_runtime_us above 0") {
		t.Errorf("error %q, want the cgroup's cpu.rt_runtime_us named", msg)
	}
	if p, _ := policyOf(t, pid); p != unix.SCHED_NORMAL {
		t.Errorf("policy %d, want unchanged", p)
	}
}

// TestSelectors: each selector takes exactly the processes it names,
// beside ones that differ only in it — env (NAME=VALUE in the
// environment), user (a name, here nobody), cgroup (a real cgroup v2
// group and those under it) — with a regex both match.
func TestSelectors(t *testing.T) {
	testutil.RequireRoot(t)
	tag := "edgeplane-sel-" + testutil.UniqueName("t")
	start := func(env []string, cred *syscall.Credential) int {
		t.Helper()
		cmd := exec.Command("bash", "-c", "exec -a "+tag+" sleep 60")
		cmd.Env = env
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	urllc := start([]string{"EDGEPLANE_CLASS=urllc"}, nil)
	embb := start([]string{"EDGEPLANE_CLASS=embb"}, nil)
	nobody := start(nil, &syscall.Credential{Uid: 65534, Gid: 65534})
	rootOne := start(nil, nil)
	unified := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(unified, "cgroup.procs")); err != nil {
		unified = "/sys/fs/cgroup"
	}
	name := "edgeplane-sel-" + testutil.UniqueName("g")
	group := filepath.Join(unified, name, "inner")
	if err := os.MkdirAll(group, 0o755); err != nil {
		t.Fatal(err)
	}
	inGroup := start(nil, nil)
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(unified, "cgroup.procs"), []byte(strconv.Itoa(inGroup)), 0)
		_ = os.Remove(group)
		_ = os.Remove(filepath.Dir(group))
	})
	if err := os.WriteFile(filepath.Join(group, "cgroup.procs"), []byte(strconv.Itoa(inGroup)), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // exec'd
	for _, c := range []struct {
		sel  string
		want []int
	}{
		{`env: EDGEPLANE_CLASS=urllc, user: "0"`, []int{urllc}},
		{`user: nobody`, []int{nobody}},
		{`user: "65534"`, []int{nobody}},
		{`cgroup: /` + name, []int{inGroup}},
	} {
		e := sched.New("/proc", "")
		s := strategy(t, `{id: 4, command_regex: "^`+tag+` ", selectors: {`+c.sel+`}, priority: true, policy: fifo, rt_priority: 3}`)
		if _, _, err := e.Sync([]config.Strategy{s}); err != nil {
			t.Fatal(err)
		}
		for _, pid := range []int{urllc, embb, nobody, rootOne, inGroup} {
			p, _ := policyOf(t, pid)
			if want := slices.Contains(c.want, pid); want != (p == unix.SCHED_FIFO) {
				t.Errorf("selector %s: process %d has policy %d, taken %v", c.sel, pid, p, want)
			}
		}
		if err := e.RevertAll(); err != nil {
			t.Fatal(err)
		}
	}
}
