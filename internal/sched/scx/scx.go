// SPDX-License-Identifier: Apache-2.0

// Package scx loads edgeplane's sched_ext scheduler (bpf/scx_edge.bpf.c),
// which runs the CPU strategies' priority tasks ahead of every other task
// with the strategy's slice, and the rest round robin, where the kernel
// has sched_ext (Linux 6.12 and later built with CONFIG_SCHED_CLASS_EXT).
// Elsewhere the agent keeps to the policies every kernel has
// (internal/sched).
package scx

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// sysfs is sched_ext's directory in sysfs.
const sysfs = "/sys/kernel/sched_ext"

// ErrUnsupported is Available's error on a kernel without sched_ext.
var ErrUnsupported = errors.New("this kernel has no sched_ext (CONFIG_SCHED_CLASS_EXT, Linux 6.12 and later)")

// Available says whether the kernel has sched_ext (nil), or why not.
func Available() error {
	if _, err := os.Stat(sysfs + "/state"); err != nil {
		return ErrUnsupported
	}
	return nil
}

// State is sched_ext's state: "enabled" while a BPF scheduler runs,
// "disabled" without one ("" when the kernel has none).
func State() string {
	b, _ := os.ReadFile(sysfs + "/state")
	return strings.TrimSpace(string(b))
}

// Ops is the name of the BPF scheduler running ("" none).
func Ops() string {
	b, _ := os.ReadFile(sysfs + "/root/ops")
	return strings.TrimSpace(string(b))
}

// Name is the scheduler's name, as Ops shows it while it runs.
const Name = "edgeplane"

// Scheduler is the loaded scheduler.
type Scheduler struct {
	mu   sync.Mutex
	objs scxedgeObjects
	link link.Link
	prio map[uint32]time.Duration
}

// Load loads the scheduler and attaches it: from then on it schedules
// every task of the machine, until Close.
func Load() (*Scheduler, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	s := &Scheduler{prio: map[uint32]time.Duration{}}
	if err := loadScxedgeObjects(&s.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load the sched_ext scheduler: %+v", ve)
		}
		return nil, fmt.Errorf("load the sched_ext scheduler: %w", err)
	}
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: s.objs.EdgeScx})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("attach the sched_ext scheduler (is another one running? %s): %w", Ops(), err), s.objs.Close())
	}
	s.link = l
	return s, nil
}

// SetPriority makes prio, by process (tgid), the processes whose tasks
// run first, each with its slice.
func (s *Scheduler) SetPriority(prio map[int]time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for tgid := range s.prio {
		if _, ok := prio[int(tgid)]; !ok {
			if err := s.objs.EdgeScxPrio.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
			}
			delete(s.prio, tgid)
		}
	}
	for pid, slice := range prio {
		if s.prio[uint32(pid)] == slice {
			continue
		}
		if err := s.objs.EdgeScxPrio.Put(uint32(pid), uint64(slice)); err != nil {
			errs = append(errs, fmt.Errorf("process %d: %w", pid, err))
			continue
		}
		s.prio[uint32(pid)] = slice
	}
	return errors.Join(errs...)
}

// Stats are the scheduler's counts: tasks enqueued with priority and
// the rest, and the exit kind the kernel gave if it unloaded it (0: it
// runs).
type Stats struct {
	Priority, Rest, ExitKind uint64
}

// Stats reads the scheduler's counts.
func (s *Scheduler) Stats() (Stats, error) {
	var out Stats
	for i, dst := range []*uint64{&out.Priority, &out.Rest, &out.ExitKind} {
		if err := s.objs.EdgeScxStats.Lookup(uint32(i), dst); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Close unloads the scheduler: every task goes back to the fair class.
func (s *Scheduler) Close() error {
	var err error
	if s.link != nil {
		err = s.link.Close()
	}
	return errors.Join(err, s.objs.Close())
}
