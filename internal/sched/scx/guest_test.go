// SPDX-License-Identifier: Apache-2.0

package scx_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/sched/scx"
)

// The guest side of TestSchedExtQEMU: this test binary is the init of a
// kernel with sched_ext booted under qemu (EDGEPLANE_SCX_GUEST=1 on its
// command line). It prints "edgeplane-scx: ..." lines the host test
// reads, and powers the machine off.

// guestRole is the environment variable that makes this binary a hog or
// the waker instead.
const guestRole = "EDGEPLANE_SCX_ROLE"

// wakerName is the waker's argv[0]: what the strategy matches.
const wakerName = "edgeplane-scx-waker"

func guestSay(format string, a ...any) { fmt.Printf("edgeplane-scx: "+format+"\n", a...) }

// guestChecks: the scheduler loads ("enabled", ops edgeplane), the
// engine applies a priority strategy to the waker through it, the
// waker's wake-ups beside CPU hogs are late by less than when it has no
// priority (under the scheduler and under the fair class), and the
// scheduler unloads ("disabled") with the hogs still running.
func guestChecks() error {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	guestSay("kernel %s, %d CPUs, sched_ext %q", unix.ByteSliceToString(uts.Release[:]), runtime.NumCPU(), scx.State())
	if err := scx.Available(); err != nil {
		return err
	}
	// No RemoveMemlock: the kernel charges BPF memory to the memory
	// cgroup (5.11 and later), and the check would have run before
	// /proc was mounted.
	var hogs []*exec.Cmd
	defer func() {
		for _, h := range hogs {
			_ = h.Process.Kill()
			_ = h.Wait()
		}
	}()
	for range 2 * runtime.NumCPU() {
		h := exec.Command("/proc/self/exe")
		h.Env = []string{guestRole + "=hog"}
		if err := h.Start(); err != nil {
			return fmt.Errorf("hog: %w", err)
		}
		hogs = append(hogs, h)
	}
	fair, err := waker(nil)
	if err != nil {
		return err
	}
	guestSay("fair class, no priority: waker late p50 %s p99 %s", fair[0], fair[1])

	s, err := scx.Load()
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			_ = s.Close()
		}
	}()
	if st, ops := scx.State(), scx.Ops(); st != "enabled" || ops != scx.Name {
		return fmt.Errorf("after Load: state %q, ops %q; want enabled, %s", st, ops, scx.Name)
	}
	rest, err := waker(nil)
	if err != nil {
		return err
	}
	guestSay("sched_ext, no priority: waker late p50 %s p99 %s", rest[0], rest[1])

	cfg, err := yamlcfg.Parse([]byte("interfaces: [{name: lo, role: lan}]\nstrategies:\n  - {id: 1, command_regex: '^" + wakerName + "$', selectors: {user: '0'}, priority: true, policy: deadline, execution_time: 2ms, period: 10ms}\n"))
	if err != nil {
		return err
	}
	e := sched.New("/proc", "")
	e.SetExt(s)
	prio, err := waker(func(pid int) error {
		taken, _, err := e.Sync(cfg.Strategies)
		if err == nil && (taken == 0 || len(e.Errors) > 0) {
			err = fmt.Errorf("the strategy took %d threads of the waker: %v", taken, e.Errors)
		}
		return err
	})
	if err != nil {
		return err
	}
	st, err := s.Stats()
	if err != nil {
		return err
	}
	guestSay("sched_ext, waker priority (strategy 1): waker late p50 %s p99 %s; enqueues priority %d, rest %d", prio[0], prio[1], st.Priority, st.Rest)
	if st.Priority == 0 || st.Rest == 0 || st.ExitKind != 0 {
		return fmt.Errorf("scheduler stats %+v: want priority and other enqueues, no exit", st)
	}
	// The median: under TCG, with both vCPUs on one host thread, a
	// p99 also holds the emulator's own stalls (27 ms in one run of a
	// loaded CI, against 54 without priority). The medians are ~1 ms
	// against ~50 ms.
	if prio[0]*4 > rest[0] {
		return fmt.Errorf("the priority waker's median lateness %s is not under a quarter of %s without priority", prio[0], rest[0])
	}
	if err := e.RevertAll(); err != nil {
		return err
	}
	closed = true
	if err := s.Close(); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); scx.State() != "disabled"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("after Close: state %q, want disabled", scx.State())
		}
	}
	for _, h := range hogs {
		if err := h.Process.Signal(unix.Signal(0)); err != nil {
			return fmt.Errorf("a hog did not survive the unload: %v", err)
		}
	}
	guestSay("unloaded: state %q, %d hogs still running", scx.State(), len(hogs))
	return nil
}

// waker starts the waker process (before, if set, runs on its pid
// before it measures) and returns its lateness p50 and p99.
func waker(before func(pid int) error) ([2]time.Duration, error) {
	var out [2]time.Duration
	w := exec.Command("/proc/self/exe")
	w.Args[0] = wakerName
	w.Env = []string{guestRole + "=waker"}
	stdin, err := w.StdinPipe()
	if err != nil {
		return out, err
	}
	stdout, err := w.StdoutPipe()
	if err != nil {
		return out, err
	}
	if err := w.Start(); err != nil {
		return out, err
	}
	defer func() { _ = w.Process.Kill(); _ = w.Wait() }()
	time.Sleep(100 * time.Millisecond) // exec'd
	if before != nil {
		if err := before(w.Process.Pid); err != nil {
			return out, err
		}
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		return out, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return out, fmt.Errorf("waker: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		return out, fmt.Errorf("waker said %q", line)
	}
	for i := range out {
		ns, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return out, err
		}
		out[i] = time.Duration(ns)
	}
	return out, nil
}

// wakerMain sleeps 2 ms 300 times, once told to go, and prints how late
// it woke: p50 and p99 in ns. Its one thread does the work.
func wakerMain() {
	runtime.LockOSThread()
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	const d = 2 * time.Millisecond
	var late []time.Duration
	for range 300 {
		t0 := time.Now()
		ts := unix.NsecToTimespec(int64(d))
		_ = unix.Nanosleep(&ts, nil)
		late = append(late, time.Since(t0)-d)
	}
	slices.Sort(late)
	fmt.Printf("%d %d\n", late[len(late)/2], late[len(late)*99/100])
}

// hogMain spins.
func hogMain() {
	for x := 0; ; x++ {
		_ = x
	}
}
