// SPDX-License-Identifier: Apache-2.0

// Package cpuwatch tells how long a CPU of the machine ran nothing.
//
// A CPU of a virtual machine stops now and then while the others run:
// the host runs something else on it. Measured on the lab's 2-vCPU VMs
// under stress-ng, a SCHED_FIFO thread pinned to each CPU and sleeping
// 1 ms woke 3-73 ms late on one CPU alone some 150 times in 100 s
// (stalls of 10 ms or more: 14), and every probe answer that came 3 ms
// or more late in that run came during such a stall. Whatever waits on
// the stopped CPU (a frame in its softirq, a thread whose timer is
// armed there, in the lab the WAN emulator's) waits with it, while a
// loop on another CPU runs on and sees the wait as loss. No priority in
// the guest helps.
//
// A Watch arms a BPF timer pinned to each CPU that beats at a fixed
// period (an hrtimer, which fires in idle too and which no task of the
// guest can delay), and notes each beat that came more than two periods
// after the one before. Cost: one timer interrupt and a few dozen BPF
// instructions per CPU per period, where a real-time thread per CPU
// cost a context switch each way (5 % of a CPU per agent at 2 ms).
package cpuwatch

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config"
)

// DefaultPeriod is the beat period: stalls shorter than two of it go
// unseen, which at the 10 ms probes of the shortest probe interval
// users run is under half a probe's timeout. It costs about 0.5 % of
// a busy CPU on these VMs (a spinning thread's work, alternated with and
// without; 1.2 % at 1 ms): each beat takes the guest out of the VM and
// back.
const DefaultPeriod = 2 * time.Millisecond

// maxLost bounds what Lost gives for one span: a beat stopped by
// anything but a stopped CPU (a CPU taken offline, a bug) delays a
// verdict by this at most.
const maxLost = int64(time.Second)

// Watch is the beat armed on every online CPU.
type Watch struct {
	objs   cpuwatchObjects
	cpus   []uint32
	period int64

	// The records Lost read last, at readAt: a look of the path
	// monitor judges every probe at one time, and reads them once.
	mu     sync.Mutex
	readAt int64
	read   []cpuwatchEdgeCpuBeat
}

// Start arms the beat on every online CPU at period. It needs CAP_BPF
// (root) and Linux 6.7 (timers pinned to a CPU).
func Start(period time.Duration) (w *Watch, err error) {
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	possible, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	spec, err := loadCpuwatch()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[cpuwatchVarEdgeCpuPeriodNs].Set(uint64(period)); err != nil {
		return nil, err
	}
	spec.Maps[cpuwatchMapEdgeCpuBeats].MaxEntries = uint32(possible)
	w = &Watch{cpus: cpus, period: int64(period)}
	if err := spec.LoadAndAssign(&w.objs, nil); err != nil {
		return nil, fmt.Errorf("load the CPU watch: %w", err)
	}
	for _, cpu := range cpus {
		if err := w.arm(cpu); err != nil {
			w.Close()
			return nil, fmt.Errorf("arm CPU %d's beat: %w", cpu, err)
		}
	}
	return w, nil
}

// arm runs the start program on cpu, from a thread pinned there.
func (w *Watch) arm(cpu uint32) error {
	done := make(chan error, 1)
	go func() {
		// The thread stays locked and exits with the goroutine: its
		// affinity is not the process's.
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(int(cpu))
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- err
			return
		}
		ret, err := w.objs.EdgeCpuWatchStart.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
		if err == nil && ret != 2 { // XDP_PASS
			err = fmt.Errorf("the start program returned %d: no entry or timer", ret)
		}
		done <- err
	}()
	return <-done
}

// Close stops the beat: closing the map cancels its timers. A nil
// Watch closes nothing.
func (w *Watch) Close() error {
	if w == nil {
		return nil
	}
	return w.objs.Close()
}

// CPUs lists the CPUs watched.
func (w *Watch) CPUs() []uint32 { return w.cpus }

// beat reads CPU cpu's record.
func (w *Watch) beat(cpu uint32) (b cpuwatchEdgeCpuBeat, err error) {
	err = w.objs.EdgeCpuBeats.Lookup(cpu, &b)
	return b, err
}

// Beats returns CPU cpu's beats, stalls and their time so far.
func (w *Watch) Beats(cpu uint32) (beats, stalls uint64, stalled time.Duration, err error) {
	b, err := w.beat(cpu)
	return b.Beats, b.Gaps, time.Duration(b.Stalled), err
}

// Stalls lists the stalls CPU cpu had within [from, to) that it
// remembers (the last 32), the one going on at to included.
func (w *Watch) Stalls(cpu uint32, from, to int64) ([]Span, error) {
	b, err := w.beat(cpu)
	if err != nil {
		return nil, err
	}
	return stalls(&b, w.period, from, to), nil
}

// Lost returns how much of [from, to) (CLOCK_MONOTONIC ns) some CPU ran
// nothing in: the stalls noted, and one going on (a CPU whose last beat
// is more than two periods, and at most maxLost, before to), an instant counted once however
// many CPUs stopped in it; at most maxLost. A nil Watch loses nothing,
// as does one whose records cannot be read.
func (w *Watch) Lost(from, to int64) int64 {
	if w == nil || to <= from {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.readAt != to || w.read == nil {
		w.read = w.read[:0]
		for _, cpu := range w.cpus {
			b, err := w.beat(cpu)
			if err != nil {
				w.read = nil
				return 0
			}
			w.read = append(w.read, b)
		}
		w.readAt = to
	}
	var spans []Span
	for i := range w.read {
		spans = append(spans, stalls(&w.read[i], w.period, from, to)...)
	}
	return min(Union(spans, from, to), maxLost)
}

// stalls lists one CPU's stalls that reach into [from, to), the one
// going on at to included.
func stalls(b *cpuwatchEdgeCpuBeat, period, from, to int64) []Span {
	var out []Span
	n := b.Gaps
	for i := range min(n, uint64(len(b.Gap))) {
		g := b.Gap[(n-1-i)%uint64(len(b.Gap))]
		if s := (Span{int64(g.From), int64(g.To)}); s.To > from && s.From < to {
			out = append(out, s)
		}
	}
	// One going on, unless for longer than maxLost: no host stops a
	// vCPU that long; a CPU taken offline has no beat, and counting it
	// would delay every verdict by maxLost.
	if last := int64(b.Last); last != 0 && to-last > 2*period && to-last <= maxLost {
		out = append(out, Span{last + period, to})
	}
	return out
}

// Span is a time some CPU ran nothing in: [From, To) (CLOCK_MONOTONIC ns).
type Span struct{ From, To int64 }

// Union is the length of the union of spans within [from, to). It
// sorts spans.
func Union(spans []Span, from, to int64) int64 {
	slices.SortFunc(spans, func(a, b Span) int { return cmp.Compare(a.From, b.From) })
	var total, end int64 = 0, from // end: covered up to
	for _, s := range spans {
		if start, stop := max(s.From, end), min(s.To, to); stop > start {
			total += stop - start
			end = stop
		}
	}
	return total
}

// onlineCPUs reads the online CPUs.
func onlineCPUs() ([]uint32, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	l, err := config.ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	var cpus []uint32
	for _, c := range l.CPUs() {
		cpus = append(cpus, uint32(c))
	}
	return cpus, nil
}
