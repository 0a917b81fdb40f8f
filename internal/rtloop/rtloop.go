// SPDX-License-Identifier: Apache-2.0

// Package rtloop runs latency-critical loops (the agent's, the lab's WAN
// emulator's) on real-time threads of their own.
package rtloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The agent's latency-critical loops (path probing and judging, steering,
// backend health) are what the gateway's load must not blind: under full
// CPU load a loop at the default policy wakes up to milliseconds late
// (DESIGN.md: p99 4.4 ms under stress-ng, against 88 µs at SCHED_FIFO),
// and a path monitor that looks late judges late. Each runs on an OS
// thread of its own at SCHED_FIFO Priority and sleeps with
// clock_nanosleep there, so the kernel, not the Go scheduler's ordinary
// threads, wakes it on time; with a P of its own, so it runs as soon as
// it wakes (Protect).

// Priority is the loops' SCHED_FIFO priority: above a CPU strategy's
// default (50), so the workloads the agent protects do not starve the
// loops that steer their traffic; below the kernel's watchdogs (99). A
// loop does a few map reads a tick.
const Priority = 60

// Run calls step every tick, on a locked OS thread at
// SCHED_FIFO Priority (or, without the privilege, the default
// policy, said once), until ctx ends. A step that overruns its tick is
// followed by the next at once, not by a burst of those missed.
func Run(ctx context.Context, log *slog.Logger, name string, tick time.Duration, step func(now time.Time)) {
	release, err := Protect(Priority)
	defer release()
	if err != nil {
		log.Warn("agent loop stays at the default scheduling policy: CPU load can delay it", "loop", name, "error", err)
	}
	next := Monotonic()
	for ctx.Err() == nil {
		next += int64(tick)
		if now := Monotonic(); next < now {
			next = now
		}
		ts := unix.NsecToTimespec(next)
		for {
			err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
		step(time.Now())
	}
}

// Protect makes the calling goroutine's thread a real-time one for
// good: locked to it (the runtime ends the thread with the goroutine
// instead of handing its policy to other goroutines), at SCHED_FIFO
// priority with a 1 ns timer slack (its sleeps end when asked, not up
// to 50 µs later), and with a P of its own (below). Threads it starts
// (the runtime may start one from it) begin at the default policy again
// (SCHED_FLAG_RESET_ON_FORK): only the loop runs real-time. The error
// says the policy was refused (no privilege); the thread is locked and
// has its P either way, until release.
//
// A goroutine runs only on one of the runtime's GOMAXPROCS Ps, and one
// that comes back from a blocking system call (every sleep and poll of
// a loop) needs a free P, or waits for the runtime's sysmon thread to
// take one back from another thread and for the thread that gets it to
// run: both at the default policy, which full CPU load delays by
// milliseconds. Measured in the lab under stress-ng --cpu 8: the WAN
// emulator's four real-time threads on 2 Ps held frames up to 26 ms
// while the gateways' loops ran on time, and gateway A took a clean
// path down. So each protected thread adds a P while it runs: one that
// wakes finds its P where it left it, or an idle one.
func Protect(priority int) (release func(), err error) {
	runtime.LockOSThread()
	addProcs(1)
	release = func() { addProcs(-1) }
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: uint32(priority), Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	if wholeProcess.Load() {
		attr.Flags = 0
	}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return release, fmt.Errorf("set SCHED_FIFO %d: %w", priority, err)
	}
	return release, nil
}

// wholeProcess says ProtectProcess made every thread real-time: Protect
// then keeps its thread's children real-time too.
var wholeProcess atomic.Bool

// ProtectProcess puts every thread of the calling process at SCHED_FIFO
// priority; threads started later inherit it. For a process whose every
// thread serves one real-time job, such as the lab's WAN emulator, which
// stands for a wire: a protected loop's thread (Protect) still waits for
// the runtime's other threads whenever it hands work to another
// goroutine or takes a P back, and at the default policy those wait
// behind the load (the emulator's real-time threads on 8 Ps still held
// frames up to 27 ms under stress-ng, alone among the lab's processes).
// Call it first thing: a thread the runtime starts meanwhile from one
// not yet set stays at the default policy.
func ProtectProcess(priority int) error {
	wholeProcess.Store(true)
	attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: uint32(priority)}
	set := map[int]bool{}
	// Twice over: threads started from one not yet set while the first
	// pass ran are found by the second.
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || set[tid] {
				continue
			}
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("set SCHED_FIFO %d on thread %d: %w", priority, tid, err)
			}
			set[tid] = true
		}
	}
	return nil
}

// procs counts the Ps protected threads added to what GOMAXPROCS was
// before the first.
var procs struct {
	sync.Mutex
	base, added int
}

// addProcs adds n Ps to GOMAXPROCS, or gives -n back.
func addProcs(n int) {
	procs.Lock()
	defer procs.Unlock()
	if procs.added == 0 {
		procs.base = runtime.GOMAXPROCS(0)
	}
	procs.added += n
	runtime.GOMAXPROCS(procs.base + procs.added)
}

// Monotonic is CLOCK_MONOTONIC in ns, the clock XDP's bpf_ktime_get_ns
// reads.
func Monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
