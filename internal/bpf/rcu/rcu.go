// SPDX-License-Identifier: Apache-2.0

// Package rcu waits out the kernel's RCU grace periods from user space:
// what the rule writer does between a generation flip and the reuse of
// the slot it left, and what an upgrade does before it copies the last
// of what the old program wrote.
package rcu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Barrier waits for a grace period: updating an ARRAY_OF_MAPS slot makes
// the kernel call synchronize_rcu() before the syscall returns
// (maybe_wait_bpf_programs in kernel/bpf/syscall.c), and XDP programs run
// inside an RCU read-side section, so after Sync no program still uses
// what it looked up before.
type Barrier struct {
	outer, inner *ebpf.Map
	// expedite is /sys/kernel/rcu_expedited, kept open (a barrier reads
	// and writes it twice: open and close each time cost as much as the
	// writes); nil when it cannot be opened.
	expedite     *os.File
	mark         string
	markf        *os.File // the mark, kept open for the same reason
	expediteOnce sync.Once
}

// New creates a barrier: an ARRAY_OF_MAPS of one slot and the map it
// holds.
func New() (*Barrier, error) {
	inner := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	in, err := ebpf.NewMap(inner)
	if err != nil {
		return nil, fmt.Errorf("create barrier inner map: %w", err)
	}
	out, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1, InnerMap: inner})
	if err != nil {
		in.Close()
		return nil, fmt.Errorf("create barrier map: %w", err)
	}
	return &Barrier{outer: out, inner: in}, nil
}

// rcuExpeditedPath is the kernel's switch that makes synchronize_rcu()
// expedited (kernel/ksysfs.c; Documentation/RCU/Design/Expedited-Grace-
// Periods): it interrupts every CPU to end the grace period at once,
// ~10-150 us here instead of 5-20 ms.
const rcuExpeditedPath = "/sys/kernel/rcu_expedited"

// ExpediteGracePeriods makes commits wait for expedited grace periods:
// the switch is turned on around each barrier and back off after (unless
// it was on already), so the rest of the kernel keeps normal grace
// periods except for that instant. Correctness does not depend on it: a
// barrier waits a whole grace period either way. Where /sys is read-only
// the barrier takes a normal grace period.
var ExpediteGracePeriods = true

// rcuExpeditedMarks are files, one per agent process that may switch
// rcu_expedited on (named by its pid), removed when its dataplane closes.
// A mark says what the switch goes back to: "-" nothing (the process has
// not switched it), "0" off (it switched it on, from off, for a barrier).
// A process killed in the instant it had the switch on leaves it on for
// the whole kernel: the next barrier to start finds the mark of a process
// that no longer runs and, if that mark says so, switches it back off.
// An operator who set the switch on keeps it: no mark says to undo it.
// (An empty mark is one of a build that wrote no state: it only ever
// switched on from off, so off is what it restores.)
const rcuExpeditedMarks = "/run/edgeplane-rcu-expedited."

// openExpedite opens the switch for the barrier's life and cleans up
// after killed processes.
func (b *Barrier) openExpedite() {
	f, err := os.OpenFile(rcuExpeditedPath, os.O_RDWR, 0)
	if err != nil {
		return
	}
	marks, _ := filepath.Glob(rcuExpeditedMarks + "*")
	for _, m := range marks {
		pid, err := strconv.Atoi(strings.TrimPrefix(m, rcuExpeditedMarks))
		if err == nil && unix.Kill(pid, 0) == unix.ESRCH {
			if restore, err := os.ReadFile(m); err == nil && (len(restore) == 0 || restore[0] == '0') {
				f.WriteAt([]byte("0"), 0)
			}
			os.Remove(m)
		}
	}
	b.mark = rcuExpeditedMarks + strconv.Itoa(os.Getpid())
	mf, err := os.OpenFile(b.mark, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		if _, err = mf.WriteAt([]byte("-"), 0); err != nil {
			mf.Close()
		}
	}
	if err != nil {
		os.Remove(b.mark)
		f.Close() // without a mark, never switch it on
		return
	}
	b.markf = mf
	b.expedite = f
}

// Sync returns after an RCU grace period.
func (b *Barrier) Sync() error {
	return b.Expedited(func() error {
		if err := b.outer.Put(uint32(0), b.inner); err != nil {
			return fmt.Errorf("rcu barrier: %w", err)
		}
		return nil
	})
}

// Expedited runs fn with the kernel's grace periods expedited
// (ExpediteGracePeriods), as Sync waits for its own: for kernel paths
// that wait for one inside a syscall.
func (b *Barrier) Expedited(fn func() error) error {
	if ExpediteGracePeriods {
		b.expediteOnce.Do(b.openExpedite)
	}
	if f := b.expedite; ExpediteGracePeriods && f != nil {
		var cur [1]byte
		// The mark says "off" before the switch goes on, and "nothing"
		// only once it is off again: a kill in between is undone.
		if n, _ := f.ReadAt(cur[:], 0); n == 1 && cur[0] == '0' {
			if _, err := b.markf.WriteAt([]byte("0"), 0); err == nil {
				if _, err := f.WriteAt([]byte("1"), 0); err == nil {
					defer func() {
						if _, err := f.WriteAt([]byte("0"), 0); err == nil {
							b.markf.WriteAt([]byte("-"), 0)
						}
					}()
				}
			}
		}
	}
	return fn()
}

// Close releases the barrier's maps and its mark.
func (b *Barrier) Close() error {
	if b.expedite != nil {
		b.expedite.Close()
		b.markf.Close()
		os.Remove(b.mark)
	}
	return errors.Join(b.outer.Close(), b.inner.Close())
}
