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
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// The strategy engine driven as an attacker would drive it: a local user
// (nobody, through setpriv) who names processes, makes cgroups where it
// is given them, plants files where it may write.

// nobodyUID is the unprivileged user the attacks run as.
const nobodyUID = 65534

// asNobody returns a command that runs name as nobody, with no
// supplementary groups.
func asNobody(name string, args ...string) *exec.Cmd {
	return exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", name}, args...)...)
}

// nobodyDir makes a directory nobody owns (as an operator's config
// directory the agent's state file sits beside), removed with the test.
func nobodyDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "edgeplane-attack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobodyUID, nobodyUID); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStateTempNoSymlink: whoever can write the directory of the state
// file plants a symlink at the name the engine used for its temporary
// file (STATE.tmp) pointing at a file of root's; the engine's next save
// must neither write through it nor leave the state file a link.
func TestStateTempNoSymlink(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "setpriv")
	dir := nobodyDir(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("root's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "gateway.yaml.sched")
	if out, err := asNobody("ln", "-s", victim, state+".tmp").CombinedOutput(); err != nil {
		t.Fatalf("nobody plants the link: %v\n%s", err, out)
	}
	tag := "edgeplane-tmp-" + testutil.UniqueName("t")
	sleeper(t, tag)
	e := sched.New("/proc", state)
	s := strategy(t, `{id: 1, command_regex: "^`+tag+` ", selectors: {user: "0"}, priority: true, policy: fifo, rt_priority: 3}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
		t.Fatalf("sync: %d taken, %v (%v)", taken, err, e.Errors)
	}
	defer func() { _ = e.RevertAll() }()
	if b, _ := os.ReadFile(victim); string(b) != "root's own\n" {
		t.Errorf("the engine wrote through nobody's link: victim now %q", b)
	}
	fi, err := os.Lstat(state)
	if err != nil || !fi.Mode().IsRegular() {
		t.Errorf("state file %s: %v, %v; want a regular file", state, fi.Mode(), err)
	}
	if n, err := sched.Recover("/proc", state); err != nil || n != 1 {
		t.Errorf("recover from the state file: %d, %v", n, err)
	}
}

// renamed starts, as nobody when asNobody, a copy of sleep named name
// (its comm and argv[0] both) in dir, ended with the test; stdin is a
// pipe the process reads a line from first, after which it runs script
// (sh, $$ its pid) and execs the copy. It returns the process and the
// pipe's writing end.
func renamed(t *testing.T, nobody bool, dir, name, script string) (*exec.Cmd, *os.File) {
	t.Helper()
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err != nil {
		b, err := os.ReadFile("/bin/sleep")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sh := "read go; " + script + "; exec " + bin + " 60"
	cmd := exec.Command("sh", "-c", sh)
	if nobody {
		cmd = asNobody("sh", "-c", sh)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { w.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, w
}

// execd waits until process pid runs name (its comm).
func execd(t *testing.T, pid int, name string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p, err := sched.ReadProc("/proc", pid); err == nil && p.Comm == name {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not exec %s", pid, name)
		}
	}
}

// attackDir is a directory every user may read (the renamed copies of
// sleep live there), removed with the test.
func attackDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "edgeplane-attack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAttackRenamedProcess: the README's old example, a priority
// strategy selected by command_regex alone, is refused, naming the
// field; an engine given it anyway (a config from before the rule)
// takes nothing; nobody's copy of sleep named nr-gnb never gets
// SCHED_FIFO, while root's does under the fixed example (user 0, the
// regex narrowing it).
func TestAttackRenamedProcess(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "setpriv")
	const readme = `{id: 1, command_regex: "^nr-gnb$", priority: true}`
	if _, err := yamlcfg.Parse([]byte("interfaces: [{name: lo, role: lan}]\nstrategies:\n  - " + readme + "\n")); err == nil ||
		!strings.Contains(err.Error(), "strategies[0].selectors: a strategy that raises priority") {
		t.Errorf("the README's old example: %v, want refused naming selectors", err)
	}
	dir := attackDir(t)
	attacker, w := renamed(t, true, dir, "nr-gnb", "true")
	w.WriteString("go\n")
	execd(t, attacker.Process.Pid, "nr-gnb")
	victim, w := renamed(t, false, dir, "nr-gnb", "true")
	w.WriteString("go\n")
	execd(t, victim.Process.Pid, "nr-gnb")

	e := sched.New("/proc", "")
	defer func() { _ = e.RevertAll() }()
	old := config.Strategy{ID: 1, CommandRegex: "^nr-gnb$", Priority: true}
	if _, _, err := e.Sync([]config.Strategy{old}); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{attacker.Process.Pid, victim.Process.Pid} {
		if p, _ := policyOf(t, pid); p != unix.SCHED_NORMAL {
			t.Errorf("command_regex alone: process %d (uid %d) got policy %d", pid, uidOf(t, pid), p)
		}
	}
	if msg := e.Errors[1]; !strings.Contains(msg, "selects by command_regex or env alone") {
		t.Errorf("command_regex alone: error %q, want it said why nothing is taken", msg)
	}
	if n := e.Refused[1][sched.RefusedUntrusted]; n < 2 {
		t.Errorf("command_regex alone: %d refusals counted as %s, want the two processes", n, sched.RefusedUntrusted)
	}
	fixed := strategy(t, `{id: 1, command_regex: "^nr-gnb$", selectors: {user: "0"}, priority: true}`)
	if _, _, err := e.Sync([]config.Strategy{fixed}); err != nil {
		t.Fatal(err)
	}
	if p, _ := policyOf(t, attacker.Process.Pid); p != unix.SCHED_NORMAL {
		t.Errorf("user 0: nobody's nr-gnb got policy %d", p)
	}
	if p, _ := policyOf(t, victim.Process.Pid); p != unix.SCHED_FIFO {
		t.Errorf("user 0: root's nr-gnb has policy %d, want FIFO (%v)", p, e.Errors)
	}
}

// uidOf reads process pid's real uid.
func uidOf(t *testing.T, pid int) uint32 {
	t.Helper()
	p, err := sched.ReadProc("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	return p.UID
}

// unifiedMount is the cgroup v2 hierarchy's mount point.
func unifiedMount(t *testing.T) string {
	t.Helper()
	for _, m := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if b, err := os.ReadFile(filepath.Join(m, "cgroup.controllers")); err == nil && b != nil {
			return m
		}
	}
	t.Fatal("no cgroup v2 hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup")
	return ""
}

// moveTo moves process pid into cgroup v2 group g (a directory).
func moveTo(t *testing.T, g string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(g, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
}

// TestAttackDelegatedCgroup: nobody is given a cgroup of its own (as
// systemd delegates one to a user's manager); inside it, it makes a
// kubepods/burstable/pod<UID> group carrying a real pod's UID, moves
// its own renamed process there and waits. A strategy with the real
// pod's labels takes the pod's process (in /kubepods, where the kubelet
// makes pods) and not nobody's; one selecting the delegated group by
// cgroup takes nothing in it, saying it is delegated, while one
// selecting a group of root's takes root's process in it.
func TestAttackDelegatedCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "setpriv")
	const uid = "6f0e9d8c-7b6a-4594-8372-615049382716"
	unified := unifiedMount(t)
	dir := attackDir(t)
	name := "edgeplane-deleg-" + testutil.UniqueName("g")
	deleg := filepath.Join(unified, name)
	if err := os.Mkdir(deleg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeGroups(unified, deleg) })
	// Delegation hands the directory and its interface files over.
	for _, f := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
		if err := os.Chown(filepath.Join(deleg, f), nobodyUID, nobodyUID); err != nil {
			t.Fatal(err)
		}
	}
	fake := filepath.Join(deleg, "kubepods", "burstable", "pod"+uid, "ctr")
	attacker, w := renamed(t, true, dir, "nr-gnb", "mkdir -p "+fake+" && echo $$ > "+fake+"/cgroup.procs")
	moveTo(t, deleg, attacker.Process.Pid) // what the delegation's owner is started in
	w.WriteString("go\n")
	execd(t, attacker.Process.Pid, "nr-gnb")
	if p, _ := sched.ReadProc("/proc", attacker.Process.Pid); p.Cgroup != strings.TrimPrefix(fake, unified) {
		t.Fatalf("nobody's process is in %q, want %q", p.Cgroup, strings.TrimPrefix(fake, unified))
	}

	victim, w := renamed(t, false, dir, "nr-gnb", "true")
	moveTo(t, kubepodsGroup(t, unified, uid), victim.Process.Pid)
	w.WriteString("go\n")
	execd(t, victim.Process.Pid, "nr-gnb")
	own := filepath.Join(unified, "edgeplane-own-"+testutil.UniqueName("g"))
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeGroups(unified, own) })
	rootOwn, w := renamed(t, false, dir, "nr-gnb", "true")
	moveTo(t, own, rootOwn.Process.Pid)
	w.WriteString("go\n")
	execd(t, rootOwn.Process.Pid, "nr-gnb")

	list := filepath.Join(t.TempDir(), "pods.json")
	if err := os.WriteFile(list, []byte(podList(uid, `"app":"gnb"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	pods, err := sched.NewPods(list, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, strategy string
		taken          []int
		err            string
	}{
		{"pod labels", `{id: 1, selectors: {pod_labels: {app: gnb}}, priority: true}`, []int{victim.Process.Pid}, ""},
		{"delegated cgroup", `{id: 1, selectors: {cgroup: /` + name + `}, priority: true}`, nil, "is delegated"},
		{"root's cgroup", `{id: 1, selectors: {cgroup: ` + strings.TrimPrefix(own, unified) + `}, priority: true}`, []int{rootOwn.Process.Pid}, ""},
	} {
		e := sched.New("/proc", "")
		e.SetPods(pods)
		if _, _, err := e.Sync([]config.Strategy{strategy(t, c.strategy)}); err != nil {
			t.Fatal(err)
		}
		for _, pid := range []int{attacker.Process.Pid, victim.Process.Pid, rootOwn.Process.Pid} {
			p, _ := policyOf(t, pid)
			if want := slices.Contains(c.taken, pid); want != (p == unix.SCHED_FIFO) {
				t.Errorf("%s: process %d (uid %d) has policy %d, want taken %v", c.name, pid, uidOf(t, pid), p, want)
			}
		}
		if !strings.Contains(e.Errors[1], c.err) {
			t.Errorf("%s: error %q, want %q", c.name, e.Errors[1], c.err)
		}
		want := 0 // nobody's process, refused for its delegated group
		if c.err != "" {
			want = 1
		}
		if n := e.Refused[1][sched.RefusedDelegated]; n != want {
			t.Errorf("%s: %d refusals counted as %s", c.name, n, sched.RefusedDelegated)
		}
		if err := e.RevertAll(); err != nil {
			t.Fatal(err)
		}
	}
}

// removeGroups moves the processes of cgroup v2 group g and those below
// it to the root and removes them.
func removeGroups(unified, g string) {
	var dirs []string
	_ = filepath.WalkDir(g, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		b, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
		for _, pid := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(unified, "cgroup.procs"), []byte(pid), 0)
		}
		_ = os.Remove(dirs[i])
	}
}

// setSysctl writes v to /proc/sys/NAME and puts back what it was when
// the test ends.
func setSysctl(t *testing.T, name, v string) {
	t.Helper()
	p := filepath.Join("/proc/sys", name)
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(v), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(p, old, 0); err != nil {
			t.Errorf("put %s back to %s: %v", name, strings.TrimSpace(string(old)), err)
		}
	})
}

// TestAttackDeadlineUnthrottled: with the kernel's RT throttling off
// (kernel.sched_rt_runtime_us -1) its deadline admission is off too, and
// a runtime of the whole period is admitted: a strategy must not give
// SCHED_DEADLINE (nor FIFO) then. A config from before the rules (a
// runtime equal to its period, which the config now refuses) is refused
// by the engine all the same.
func TestAttackDeadlineUnthrottled(t *testing.T) {
	testutil.RequireRoot(t)
	tag := "edgeplane-unthr-" + testutil.UniqueName("t")
	pid := sleeper(t, tag)
	whole := config.Strategy{ID: 2, CommandRegex: "^" + tag, Selectors: &config.Selectors{User: "0"}, Priority: true,
		Policy: config.PolicyDeadline, ExecutionTime: config.Duration{D: time.Millisecond}, Period: config.Duration{D: time.Millisecond}}
	e := sched.New("/proc", "")
	defer func() { _ = e.RevertAll() }()
	if _, _, err := e.Sync([]config.Strategy{whole}); err != nil {
		t.Fatal(err)
	}
	if p, _ := policyOf(t, pid); p != unix.SCHED_NORMAL || !strings.Contains(e.Errors[2], "execution_time") {
		t.Errorf("1ms of every 1ms: policy %d, error %q; want refused", p, e.Errors[2])
	}
	setSysctl(t, "kernel/sched_rt_runtime_us", "-1")
	for _, s := range []config.Strategy{whole,
		strategy(t, `{id: 2, command_regex: "^`+tag+`", selectors: {user: "0"}, priority: true, policy: deadline, execution_time: 100us}`),
		strategy(t, `{id: 2, command_regex: "^`+tag+`", selectors: {user: "0"}, priority: true, policy: rr}`),
	} {
		if _, _, err := e.Sync([]config.Strategy{s}); err != nil {
			t.Fatal(err)
		}
		if p, _ := policyOf(t, pid); p != unix.SCHED_NORMAL || !strings.Contains(e.Errors[2], "throttling is off") || e.Refused[2][sched.RefusedHost] != 1 {
			t.Errorf("%s %s/%s with throttling off: policy %d, error %q, refusals %v; want refused, saying why, counted", s.Effective().Policy, s.ExecutionTime, s.Period, p, e.Errors[2], e.Refused[2])
		}
	}
}

// TestHostProblems: what a host refuses of a set of strategies, by its
// CPUs and RT limits: every CPU dedicated, fifo or rr without a CPU but
// the housekeeping one, deadline runtimes past what real-time tasks may
// have of a CPU, any real-time policy with throttling off.
func TestHostProblems(t *testing.T) {
	two := sched.Host{RTRuntime: 950000, RTPeriod: 1000000, Online: []int{0, 1}}
	one := sched.Host{RTRuntime: 950000, RTPeriod: 1000000, Online: []int{0}}
	off := sched.Host{RTRuntime: -1, RTPeriod: 1000000, Online: []int{0, 1}}
	for _, c := range []struct {
		name string
		host sched.Host
		list string
		want []string // "id field"
	}{
		{"fifo on 2 CPUs", two, `{id: 1, selectors: {user: a}, priority: true}`, nil},
		{"fifo on 1 CPU", one, `{id: 1, selectors: {user: a}, priority: true}`, []string{"1 priority"}},
		{"deadline on 1 CPU", one, `{id: 1, selectors: {user: a}, priority: true, policy: deadline, execution_time: 500us}`, nil},
		{"every CPU dedicated", two, `{id: 1, selectors: {user: a}, cpus: 0-1}`, []string{"1 cpus"}},
		{"every CPU dedicated by two", two, `{id: 1, selectors: {user: a}, cpus: 0}, {id: 2, selectors: {user: b}, cpus: 1}`, []string{"2 cpus"}},
		{"every CPU dedicated, then fifo", two, `{id: 1, selectors: {user: a}, cpus: 0-1}, {id: 2, selectors: {user: b}, priority: true}`, []string{"1 cpus"}},
		{"offline CPUs", two, `{id: 1, selectors: {user: a}, cpus: 1-7}`, nil},
		{"rr with only the housekeeping CPU left", two, `{id: 1, selectors: {user: a}, cpus: 1}, {id: 2, selectors: {user: b}, priority: true, policy: rr}`, []string{"2 policy"}},
		{"deadline past a CPU's", two, `{id: 1, selectors: {user: a}, priority: true, policy: deadline, execution_time: 600us}, {id: 2, selectors: {user: b}, priority: true, policy: deadline, execution_time: 300us}, {id: 3, selectors: {user: c}, priority: true, policy: deadline, execution_time: 100us}`, []string{"3 execution_time"}},
		{"throttling off", off, `{id: 1, selectors: {user: a}, priority: true}, {id: 2, selectors: {user: b}, priority: true, policy: deadline, execution_time: 100us}, {id: 3, selectors: {user: c}, others_weight: 1}`, []string{"1 priority", "2 policy"}},
	} {
		cfg, err := yamlcfg.Parse([]byte("interfaces: [{name: lo, role: lan}]\nstrategies: [" + c.list + "]\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, p := range c.host.Problems(cfg.Strategies) {
			got = append(got, strconv.Itoa(int(p.ID))+" "+p.Field)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: problems %q, want %q", c.name, got, c.want)
		}
	}
	if hk, rt := two.Housekeeping(nil), two.RTCPUs(nil); hk != 0 || !slices.Equal(rt, []int{1}) {
		t.Errorf("2 CPUs: housekeeping %d, fifo and rr on %v; want 0 and [1]", hk, rt)
	}
	four := sched.Host{RTRuntime: 950000, RTPeriod: 1000000, Online: []int{0, 1, 2, 3}}
	cpus, _ := config.ParseCPUList("0,2")
	ded := []config.Strategy{{ID: 1, CPUs: cpus}}
	if hk, rt := four.Housekeeping(ded), four.RTCPUs(ded); hk != 1 || !slices.Equal(rt, []int{3}) {
		t.Errorf("4 CPUs, 0 and 2 dedicated: housekeeping %d, fifo and rr on %v; want 1 and [3]", hk, rt)
	}
}

// TestAgentGroupNotLowered: others_weight lowers every group that holds
// none of the strategy's processes — but never the agent's own (the
// engine's process, here the test, in a cpu group of its own): the agent
// that gives everything back must not starve itself.
func TestAgentGroupNotLowered(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(mnt, "cpu.shares")); err != nil {
		t.Fatalf("this test needs cgroup v1's cpu controller at %s (these machines'): %v", mnt, err)
	}
	// Started before the agent (the test) moves: in the root group.
	tag := "edgeplane-aw-" + testutil.UniqueName("t")
	sleeper(t, tag)
	agentGroup := filepath.Join(mnt, "edgeplane-agent-"+testutil.UniqueName("g"))
	if err := os.Mkdir(agentGroup, 0o755); err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(mnt, "cgroup.procs"), []byte(self), 0)
		_ = os.Remove(agentGroup)
	})
	if err := os.WriteFile(filepath.Join(agentGroup, "cgroup.procs"), []byte(self), 0); err != nil {
		t.Fatal(err)
	}
	e := sched.New("/proc", "")
	defer func() { _ = e.RevertAll() }()
	s := strategy(t, `{id: 7, command_regex: "^`+tag+`", selectors: {user: "0"}, policy: weight, others_weight: 2}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
		t.Fatalf("sync: %d taken, %v (%v)", taken, err, e.Errors)
	}
	if b, _ := os.ReadFile(filepath.Join(agentGroup, "cpu.shares")); strings.TrimSpace(string(b)) != "1024" {
		t.Errorf("the agent's own group's cpu.shares: %s, want 1024 (not lowered)", strings.TrimSpace(string(b)))
	}
}

// TestUntouchable: init, kernel threads, the agent and the processes of
// its own group (when it has one) are never taken; a process that
// emptied its command line is still a process.
func TestUntouchable(t *testing.T) {
	testutil.RequireRoot(t)
	e := sched.New("/proc", "")
	defer func() { _ = e.RevertAll() }()
	// No config takes these (the system's names are refused); the
	// engine holds to it whatever it is given.
	kthreads := config.Strategy{ID: 1, CommandRegex: "^(ksoftirqd|kthreadd|rcu_)", Selectors: &config.Selectors{User: "0"}, Priority: true}
	if taken, _, err := e.Sync([]config.Strategy{kthreads}); err != nil || taken != 0 {
		t.Errorf("a strategy naming kernel threads: %d taken, %v", taken, err)
	}
	// perl run with an empty argv[0] and no arguments: an empty
	// /proc/PID/cmdline, reading its program from stdin.
	testutil.RequireTool(t, "perl")
	tag := "edgeplane-empty-" + testutil.UniqueName("t")
	cmd := exec.Command("perl", "-e", `exec {"/usr/bin/perl"} ""`)
	cmd.Env = []string{"EDGEPLANE_TAG=" + tag}
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		// Empty, and asleep reading its program with the tag in its
		// environment: a process in the middle of its exec reads as
		// empty for a moment too, its environment with it.
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		_, state, _ := strings.Cut(string(stat), ") ")
		if err == nil && strings.Trim(string(b), "\x00") == "" && strings.Contains(string(env), tag) && strings.HasPrefix(state, "S") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("perl did not empty its command line and wait for its program")
		}
	}
	s := strategy(t, `{id: 2, command_regex: "^perl$", selectors: {user: "0", env: EDGEPLANE_TAG=`+tag+`}, priority: true, rt_priority: 2}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
		t.Errorf("a process with an empty command line: %d taken, %v (%v), want it taken", taken, err, e.Errors)
	}
}

// TestAttackDedicatedSetaffinity: a strategy dedicates the last CPU;
// nobody, whose processes were moved off it, asks for it back
// (sched_setaffinity through taskset, on a process of its own started
// before and one started after) and is refused by the kernel; a process
// that emptied its command line is moved off it like any other.
func TestAttackDedicatedSetaffinity(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "setpriv")
	testutil.RequireTool(t, "taskset")
	testutil.RequireTool(t, "perl")
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	last := strconv.Itoa(runtime.NumCPU() - 1)
	tag := "edgeplane-dedatk-" + testutil.UniqueName("t")
	dir := attackDir(t)
	// The attacker's process, started before the strategy: when told,
	// it asks for the dedicated CPU and says what it has.
	out := filepath.Join(dir, "before.out")
	before, w := renamed(t, true, dir, "attacker", "taskset -pc "+last+" $$ > "+out+" 2>&1; grep Cpus_allowed_list /proc/$$/status >> "+out)
	empty := exec.Command("perl", "-e", `exec {"/usr/bin/perl"} ""`)
	ew, err := empty.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ew.Close(); _ = empty.Process.Kill(); _ = empty.Wait() })
	mine := sleeper(t, tag)
	time.Sleep(50 * time.Millisecond) // perl exec'd
	e := sched.New("/proc", "")
	t.Cleanup(func() { _ = e.RevertAll() })
	s := strategy(t, `{id: 8, command_regex: "^`+tag+`", selectors: {user: "0"}, cpus: "`+last+`"}`)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
		t.Fatalf("sync: %d taken, %v (%v)", taken, err, e.Errors)
	}
	n, _ := strconv.Atoi(last)
	if c := cpusOf(t, mine); !c.IsSet(n) {
		t.Errorf("the strategy's process: CPUs %v, want %s", c, last)
	}
	if c := cpusOf(t, empty.Process.Pid); c.IsSet(n) {
		t.Errorf("a process with an empty command line may run on the dedicated CPU: %v", c)
	}
	w.WriteString("go\n")
	execd(t, before.Process.Pid, "attacker")
	b, _ := os.ReadFile(out)
	if c := cpusOf(t, before.Process.Pid); c.IsSet(n) || !strings.Contains(string(b), "Invalid argument") {
		t.Errorf("nobody's process started before the strategy asked for CPU %s: now %v, said:\n%s", last, c, b)
	}
	// Started after: it starts in the others' cpuset, and may not
	// leave it either.
	o, err := asNobody("taskset", "-c", last, "true").CombinedOutput()
	if err == nil {
		t.Errorf("nobody started a process on the dedicated CPU %s:\n%s", last, o)
	}
	t.Logf("nobody's taskset -c %s: %v: %s", last, err, strings.TrimSpace(string(o)))
}

// TestAttackPIDReuse: a strategy holds a process that had SCHED_RR 10
// before it; the process exits and nobody's new process gets its PID
// (as any process may, PIDs wrapping). The next scan gives back to
// nothing: nobody's process must not get RR 10.
func TestAttackPIDReuse(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "setpriv")
	tag := "edgeplane-reuse-" + testutil.UniqueName("t")
	e := sched.New("/proc", "")
	t.Cleanup(func() { _ = e.RevertAll() })
	s := strategy(t, `{id: 3, command_regex: "^`+tag+`", selectors: {user: "0"}, priority: true, rt_priority: 20}`)
	for try := 0; ; try++ {
		if try == 30 {
			t.Skip("no PID reused in 30 tries: the machine forks too much meanwhile")
		}
		cmd := exec.Command("bash", "-c", "exec -a "+tag+" sleep 60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		time.Sleep(30 * time.Millisecond)
		rr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_RR, Priority: 10}
		if err := unix.SchedSetAttr(pid, &rr, 0); err != nil {
			t.Fatal(err)
		}
		if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 {
			t.Fatalf("sync: %d taken, %v (%v)", taken, err, e.Errors)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The next PID the kernel gives is ns_last_pid + 1.
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Fatal(err)
		}
		thief := asNobody("sleep", "60")
		if err := thief.Start(); err != nil {
			t.Fatal(err)
		}
		if thief.Process.Pid != pid {
			_ = thief.Process.Kill()
			_ = thief.Wait()
			_, _, _ = e.Sync(nil)
			continue
		}
		t.Cleanup(func() { _ = thief.Process.Kill(); _ = thief.Wait() })
		time.Sleep(30 * time.Millisecond) // setpriv exec'd sleep
		if _, _, err := e.Sync([]config.Strategy{s}); err != nil {
			t.Fatal(err)
		}
		if p, prio := policyOf(t, pid); p != unix.SCHED_NORMAL {
			t.Errorf("nobody's process with the held one's PID %d (try %d): policy %d priority %d, want nothing given", pid, try, p, prio)
		}
		return
	}
}
