// SPDX-License-Identifier: Apache-2.0

package rtloop

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A CPU of a virtual machine stops now and then while the others run:
// the host runs another guest on it. Measured on the lab's 2-vCPU VMs
// under stress-ng, a SCHED_FIFO 80 thread pinned to each CPU and
// sleeping 1 ms woke 3-73 ms late on one CPU alone some 150 times in
// 100 s (stalls of 10 ms or more: 14), and every probe answer that came
// 3 ms or more late in that run came during such a stall. Whatever
// waits on the stopped CPU (a frame in its softirq, a thread whose timer
// is armed there, in the lab the WAN emulator's) waits with it, while a
// loop on another CPU runs on and sees the wait as loss. No priority in
// the guest helps; CPUWatch tells such a loop how long it was.

// WatchPriority is the SCHED_FIFO priority of CPUWatch's threads: the
// highest, so that no task of the guest can delay them, only a CPU that
// does not run at all (or runs with interrupts off). Each wakes once a
// tick for a few µs.
const WatchPriority = 99

// CPUWatch keeps a real-time thread on each CPU the process may run on,
// waking every tick, and remembers when one woke late: the CPU ran
// nothing meanwhile.
type CPUWatch struct {
	tick  int64
	beats []atomic.Int64 // per watched CPU: when its thread last woke (Monotonic)
	mu    sync.Mutex
	gaps  []gap // the last stalls seen, oldest first
}

// gap is a time no thread of a CPU woke in: [from, to) (Monotonic).
type gap struct{ from, to int64 }

// maxGaps bounds the stalls CPUWatch remembers: at 10 ms probes, the
// last second's many times over.
const maxGaps = 512

// maxLost bounds what Lost gives for one span: a watch thread stopped
// by anything but a stopped CPU (a bug, a CPU taken offline) delays a
// verdict by this at most.
const maxLost = int64(time.Second)

// WatchCPUs starts a CPUWatch of every CPU the calling process may run
// on, its threads waking every tick until ctx ends. It returns nil
// (Lost then says 0) when the threads cannot be made real-time: at the
// default policy the machine's load would delay them as much as a
// stopped CPU.
func WatchCPUs(ctx context.Context, log *slog.Logger, tick time.Duration) *CPUWatch {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		log.Warn("no CPU watch: read the CPU affinity", "error", err)
		return nil
	}
	var cpus []int
	for cpu := range 1024 {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	w := &CPUWatch{tick: int64(tick), beats: make([]atomic.Int64, len(cpus))}
	ready := make(chan error, len(cpus))
	for i, cpu := range cpus {
		go w.beat(ctx, i, cpu, ready)
	}
	for range cpus {
		if err := <-ready; err != nil {
			log.Warn("no CPU watch: a stopped CPU cannot be told from the load", "error", err)
			return nil
		}
	}
	return w
}

// beat is watch thread i, pinned to cpu: it wakes every tick and notes
// when, and any wake-up later than a tick past the one before.
func (w *CPUWatch) beat(ctx context.Context, i, cpu int, ready chan<- error) {
	release, err := Protect(WatchPriority)
	defer release()
	var set unix.CPUSet
	set.Set(cpu)
	if err == nil {
		err = unix.SchedSetaffinity(0, &set)
	}
	w.beats[i].Store(Monotonic())
	ready <- err
	if err != nil {
		return
	}
	prev := Monotonic()
	for ctx.Err() == nil {
		ts := unix.NsecToTimespec(prev + w.tick)
		_ = unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
		now := Monotonic()
		w.beats[i].Store(now)
		if now-prev > 2*w.tick {
			w.note(gap{prev + w.tick, now})
		}
		prev = now
	}
}

func (w *CPUWatch) note(g gap) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.gaps) == maxGaps {
		w.gaps = append(w.gaps[:0], w.gaps[1:]...)
	}
	w.gaps = append(w.gaps, g)
}

// Lost returns how much of [from, to) (Monotonic) some CPU ran nothing
// in, as far as its watch thread tells: the stalls seen, and one still
// going on (a thread more than two ticks late at to), overlapping
// counted once; at most maxLost. A nil CPUWatch loses nothing.
func (w *CPUWatch) Lost(from, to int64) int64 {
	if w == nil || to <= from {
		return 0
	}
	w.mu.Lock()
	spans := make([]gap, 0, len(w.gaps)+len(w.beats))
	for _, g := range w.gaps {
		if g.to > from && g.from < to {
			spans = append(spans, g)
		}
	}
	w.mu.Unlock()
	for i := range w.beats {
		if b := w.beats[i].Load(); to-b > 2*w.tick {
			spans = append(spans, gap{b + w.tick, to})
		}
	}
	return min(union(spans, from, to), maxLost)
}

// union is the length of the union of spans within [from, to).
func union(spans []gap, from, to int64) int64 {
	var total, end int64 = 0, from
	for {
		// The span that starts first among those reaching past end.
		next := -1
		for i, s := range spans {
			if s.to > end && (next < 0 || s.from < spans[next].from) {
				next = i
			}
		}
		if next < 0 {
			return total
		}
		s := spans[next]
		start := max(s.from, end)
		stop := min(s.to, to)
		if stop > start {
			total += stop - start
		}
		if stop >= to {
			return total
		}
		end = max(end, stop)
	}
}
