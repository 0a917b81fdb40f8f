// SPDX-License-Identifier: Apache-2.0

package sched_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestCpusetV2QEMU: on cgroup v2 (this machine's cpuset controller is on
// v1), a strategy's dedicated CPU is a partition root of its own: booted
// under qemu on a kernel whose only hierarchy is v2, with this test
// binary as init, the strategy's process is moved into
// /edgeplane-cpus-ID with cpuset.cpus.partition "root"; another process
// started before loses the CPU without being moved, and a process of
// nobody's started after asks for it and is refused (EINVAL); the
// strategy gone, the group is removed and the other process has every
// CPU again; a crash's state file is recovered the same way
// (guestCpusetChecks).
func TestCpusetV2QEMU(t *testing.T) {
	said, console := testutil.BootGuest(t, guestEnv+"=1", guestPrefix, 5*time.Minute)
	if len(said) == 0 || said[len(said)-1] != guestPrefix+"PASS" {
		t.Fatalf("the guest did not pass; its console:\n%s", console)
	}
}

// The guest side: guestEnv on the kernel's command line makes this
// binary, as PID 1, run guestCpusetChecks and power off; guestRole makes
// it one of the processes those start.
const (
	guestEnv    = "EDGEPLANE_SCHED_GUEST"
	guestRole   = "EDGEPLANE_SCHED_ROLE"
	guestCPU    = "EDGEPLANE_SCHED_CPU"
	guestPrefix = "edgeplane-sched: "
)

func TestMain(m *testing.M) {
	switch os.Getenv(guestRole) {
	case "sleep":
		time.Sleep(time.Hour)
		return
	case "ask":
		// What nobody asks for: the CPU in guestCPU (runtime.NumCPU
		// counts its own affinity's).
		cpu, _ := strconv.Atoi(os.Getenv(guestCPU))
		var set unix.CPUSet
		set.Set(cpu)
		fmt.Println(unix.SchedSetaffinity(0, &set))
		return
	}
	if os.Getenv(guestEnv) == "1" && os.Getpid() == 1 {
		testutil.GuestInit(guestPrefix, guestCpusetChecks)
		return
	}
	os.Exit(m.Run())
}

func guestSay(format string, a ...any) { fmt.Printf(guestPrefix+format+"\n", a...) }

// guestStart starts this binary in role as uid (argv[0] name).
func guestStart(name, role string, uid uint32) (*exec.Cmd, error) {
	cmd := exec.Command("/init")
	cmd.Args[0] = name
	cmd.Env = []string{guestRole + "=" + role}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd, cmd.Start()
}

func guestCPUs(pid int) unix.CPUSet {
	var set unix.CPUSet
	_ = unix.SchedGetaffinity(pid, &set)
	return set
}

func guestCpusetChecks() error {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	ctl, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	guestSay("kernel %s, %d CPUs, cgroup v2 controllers %q", unix.ByteSliceToString(uts.Release[:]), runtime.NumCPU(), strings.TrimSpace(string(ctl)))
	last := runtime.NumCPU() - 1
	if last < 1 {
		return errors.New("needs two CPUs")
	}
	mine, err := guestStart("edgeplane-v2-mine", "sleep", 0)
	if err != nil {
		return err
	}
	other, err := guestStart("edgeplane-v2-other", "sleep", 0)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range []*exec.Cmd{mine, other} {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	cfg, err := yamlcfg.Parse([]byte(fmt.Sprintf("interfaces: [{name: lo, role: lan}]\nstrategies:\n  - {id: 8, command_regex: '^edgeplane-v2-mine', selectors: {user: '0'}, cpus: '%d'}\n", last)))
	if err != nil {
		return err
	}
	const state = "/tmp/sched.json"
	e := sched.New("/proc", state)
	apply := func() error {
		if taken, _, err := e.Sync(cfg.Strategies); err != nil || taken == 0 || len(e.Errors) > 0 {
			return fmt.Errorf("sync: %d taken, %v, %v", taken, err, e.Errors)
		}
		return nil
	}
	if err := apply(); err != nil {
		return err
	}
	group := fmt.Sprintf("/edgeplane-cpus-%d", 8)
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", mine.Process.Pid))
	part, _ := os.ReadFile("/sys/fs/cgroup" + group + "/cpuset.cpus.partition")
	guestSay("the strategy's process in %q, partition %q", strings.TrimSpace(string(b)), strings.TrimSpace(string(part)))
	if !strings.Contains(string(b), "0::"+group) || strings.TrimSpace(string(part)) != "root" {
		return fmt.Errorf("the strategy's process in %q, its group's partition %q; want %s, root", b, part, group)
	}
	if c := guestCPUs(mine.Process.Pid); c.Count() != 1 || !c.IsSet(last) {
		return fmt.Errorf("the strategy's process may run on %v, want CPU %d alone", c, last)
	}
	if c := guestCPUs(other.Process.Pid); c.IsSet(last) {
		return fmt.Errorf("another process, not moved, may run on %v: the partition did not take CPU %d from the root", c, last)
	}
	// Started after the partition, by nobody, in the root group.
	nobody := exec.Command("/init")
	nobody.Args[0] = "edgeplane-v2-nobody"
	nobody.Env = []string{guestRole + "=ask", guestCPU + "=" + strconv.Itoa(last)}
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	said, _ := nobody.Output()
	guestSay("nobody asked for CPU %d: %s", last, strings.TrimSpace(string(said)))
	if !strings.Contains(string(said), "invalid argument") {
		return fmt.Errorf("nobody's sched_setaffinity to CPU %d: %q, want invalid argument", last, said)
	}
	if _, _, err := e.Sync(nil); err != nil {
		return err
	}
	if _, err := os.Stat("/sys/fs/cgroup" + group); !os.IsNotExist(err) {
		return fmt.Errorf("the strategy gone, its group is left: %v", err)
	}
	if c := guestCPUs(other.Process.Pid); c.Count() != runtime.NumCPU() {
		return fmt.Errorf("the strategy gone, another process may run on %v, want every CPU", c)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		return fmt.Errorf("the strategy gone, the state file is left: %v", err)
	}
	// A crash: the next start's recovery.
	if err := apply(); err != nil {
		return err
	}
	if _, err := sched.Recover("/proc", state); err != nil {
		return err
	}
	if _, err := os.Stat("/sys/fs/cgroup" + group); !os.IsNotExist(err) {
		return fmt.Errorf("after recovery, the group is left: %v", err)
	}
	if c := guestCPUs(mine.Process.Pid); c.Count() != runtime.NumCPU() {
		return fmt.Errorf("after recovery, the strategy's process may run on %v, want every CPU", c)
	}
	guestSay("given back: group removed, every CPU to both processes")
	return nil
}
