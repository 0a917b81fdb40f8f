// SPDX-License-Identifier: Apache-2.0

// Package rtloop runs the agent's latency-critical loops on real-time
// threads of their own.
package rtloop

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
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
// threads, wakes it on time.

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
	// Locked for good: the runtime ends the thread with the goroutine
	// instead of handing its policy to other goroutines.
	runtime.LockOSThread()
	if err := protectThread(); err != nil {
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

// protectThread puts the calling thread at SCHED_FIFO Priority, with
// a 1 ns timer slack (its sleeps end when asked, not up to 50 µs later).
// Threads it starts (the runtime may start one from it) begin at the
// default policy again (SCHED_FLAG_RESET_ON_FORK): only the loop runs
// real-time.
func protectThread() error {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: Priority, Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	return unix.SchedSetAttr(0, &attr, 0)
}

// Monotonic is CLOCK_MONOTONIC in ns, the clock XDP's bpf_ktime_get_ns
// reads.
func Monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
