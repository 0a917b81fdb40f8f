// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// Events tells the agent that a process may have appeared for a
// strategy to take: an exec anywhere, or a fork or clone by a process it
// holds (Watch). From BPF on the scheduler's raw tracepoints
// (bpf/sched_events.bpf.c), so the agent need not wait for its next scan.
type Events struct {
	// C has a value when an event came since it was last read; events
	// in between are one.
	C <-chan struct{}

	c       chan struct{}
	pending map[uint32]bool // processes of the events since Take
	objs    schedevObjects
	links   []link.Link
	rd      *ringbuf.Reader
	done    chan struct{}
	mu      sync.Mutex
	watched map[uint32]bool
}

// OpenEvents loads the event programs and attaches them.
func OpenEvents() (*Events, error) {
	ev := &Events{c: make(chan struct{}, 1), done: make(chan struct{}), watched: map[uint32]bool{}, pending: map[uint32]bool{}}
	ev.C = ev.c
	if err := loadSchedevObjects(&ev.objs, nil); err != nil {
		return nil, fmt.Errorf("load the process event programs: %w", err)
	}
	for name, prog := range map[string]*ebpf.Program{"sched_process_exec": ev.objs.EdgeSchedExec, "sched_process_fork": ev.objs.EdgeSchedFork} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("attach to %s: %w", name, err), ev.Close())
		}
		ev.links = append(ev.links, l)
	}
	rd, err := ringbuf.NewReader(ev.objs.EdgeSchedEvents)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("read the process events: %w", err), ev.Close())
	}
	ev.rd = rd
	go ev.read()
	return ev, nil
}

// read passes each event on as a value of C until the reader is closed.
func (ev *Events) read() {
	defer close(ev.done)
	for {
		rec, err := ev.rd.Read()
		if err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			continue
		}
		if len(rec.RawSample) < 8 {
			continue
		}
		// struct edge_sched_event: what, tgid (host order).
		ev.mu.Lock()
		if len(ev.pending) < maxPending {
			ev.pending[binary.NativeEndian.Uint32(rec.RawSample[4:8])] = true
		}
		ev.mu.Unlock()
		select {
		case ev.c <- struct{}{}:
		default: // one is pending already
		}
	}
}

// maxPending bounds the processes kept between two Takes; past it, the
// next scan finds the rest.
const maxPending = 4096

// Take returns the processes of the events since the last Take.
func (ev *Events) Take() []int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	out := make([]int, 0, len(ev.pending))
	for t := range ev.pending {
		out = append(out, int(t))
	}
	clear(ev.pending)
	return out
}

// Watch makes tgids the processes whose forks and clones are reported.
func (ev *Events) Watch(tgids []int) error {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	want := map[uint32]bool{}
	for _, t := range tgids {
		want[uint32(t)] = true
	}
	var errs []error
	for _, t := range slices.Sorted(maps.Keys(ev.watched)) {
		if !want[t] {
			if err := ev.objs.EdgeSchedWatch.Delete(t); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
			}
			delete(ev.watched, t)
		}
	}
	for t := range want {
		if !ev.watched[t] {
			if err := ev.objs.EdgeSchedWatch.Put(t, uint8(1)); err != nil {
				errs = append(errs, fmt.Errorf("watch process %d: %w", t, err))
				continue
			}
			ev.watched[t] = true
		}
	}
	return errors.Join(errs...)
}

// Close detaches the programs and stops reading.
func (ev *Events) Close() error {
	var errs []error
	for _, l := range ev.links {
		errs = append(errs, l.Close())
	}
	if ev.rd != nil {
		errs = append(errs, ev.rd.Close())
		<-ev.done
	}
	return errors.Join(append(errs, ev.objs.Close())...)
}
