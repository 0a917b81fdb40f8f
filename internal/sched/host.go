// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/internal/config"
)

// What a set of strategies may ask of this host, so that none can take
// it down: no real-time policy while the kernel's RT throttling is off;
// deadline runtimes that together fit what the kernel lets real-time
// tasks have of a CPU; at least one CPU no strategy dedicates; and one
// CPU (the housekeeping CPU, the lowest of those) where no fifo or rr
// thread runs.

// Host is what the checks read of the kernel.
type Host struct {
	// RTRuntime and RTPeriod are kernel.sched_rt_runtime_us and
	// kernel.sched_rt_period_us: real-time tasks may run RTRuntime of
	// every RTPeriod on a CPU; RTRuntime -1 is throttling off.
	RTRuntime, RTPeriod int64
	// Online are the CPUs online, ascending.
	Online []int
}

// ReadHost reads the host's RT throttling and online CPUs from proc and
// sys (/proc, /sys).
func ReadHost(proc, sys string) (Host, error) {
	var h Host
	for _, f := range []struct {
		name string
		v    *int64
	}{{"sched_rt_runtime_us", &h.RTRuntime}, {"sched_rt_period_us", &h.RTPeriod}} {
		b, err := os.ReadFile(filepath.Join(proc, "sys", "kernel", f.name))
		if err != nil {
			return h, err
		}
		if *f.v, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return h, fmt.Errorf("kernel.%s: %w", f.name, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(sys, "devices", "system", "cpu", "online"))
	if err != nil {
		return h, err
	}
	online, err := config.ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return h, fmt.Errorf("online CPUs: %w", err)
	}
	h.Online = online.CPUs()
	return h, nil
}

// ThrottleOff reports whether the kernel's RT throttling is off.
func (h Host) ThrottleOff() bool { return h.RTRuntime < 0 }

// Problem is what a host refuses of one strategy: the field and why.
type Problem struct {
	ID     uint32
	Field  string
	Reason string
}

// dedicated returns the online CPUs the strategies dedicate.
func (h Host) dedicated(strategies []config.Strategy) map[int]bool {
	out := map[int]bool{}
	for _, s := range strategies {
		for _, c := range h.Online {
			if s.CPUs.Has(c) {
				out[c] = true
			}
		}
	}
	return out
}

// Housekeeping returns the CPU no fifo or rr thread of a strategy runs
// on: the lowest online CPU no strategy dedicates (-1: none).
func (h Host) Housekeeping(strategies []config.Strategy) int {
	ded := h.dedicated(strategies)
	for _, c := range h.Online {
		if !ded[c] {
			return c
		}
	}
	return -1
}

// RTCPUs returns the CPUs the threads of a fifo or rr strategy without
// cpus run on: those online that no strategy dedicates, but the
// housekeeping CPU.
func (h Host) RTCPUs(strategies []config.Strategy) []int {
	ded := h.dedicated(strategies)
	hk := h.Housekeeping(strategies)
	var out []int
	for _, c := range h.Online {
		if !ded[c] && c != hk {
			out = append(out, c)
		}
	}
	return out
}

// Problems returns what h refuses of strategies, in their order. The
// dedicated CPUs first: a strategy whose cpus would leave no online CPU
// to the rest is refused, and its CPUs count for no other check (one
// bad strategy refuses no other).
func (h Host) Problems(strategies []config.Strategy) []Problem {
	var out []Problem
	add := func(id uint32, field, format string, a ...any) {
		out = append(out, Problem{ID: id, Field: field, Reason: fmt.Sprintf(format, a...)})
	}
	ded := map[int]bool{}
	refused := map[uint32]bool{}
	for _, s := range strategies {
		mine := h.dedicated([]config.Strategy{s})
		n := len(ded)
		for c := range mine {
			if !ded[c] {
				n++
			}
		}
		if len(mine) > 0 && n == len(h.Online) {
			add(s.ID, "cpus", "with the other strategies' cpus, every CPU this host has online (%s) is dedicated: leave at least one to the rest of the system",
				listText(h.Online))
			refused[s.ID] = true
			continue
		}
		for c := range mine {
			ded[c] = true
		}
	}
	free := len(h.Online) - len(ded)
	share := 0.0 // the deadline strategies' bandwidth so far
	limit := float64(h.RTRuntime) / float64(max(h.RTPeriod, 1))
	for _, s := range strategies {
		if refused[s.ID] || !s.RealTime() {
			continue
		}
		e := s.Effective()
		field := "policy"
		if s.Policy == "" {
			field = "priority"
		}
		switch {
		case h.ThrottleOff():
			add(s.ID, field, "%s refused while the kernel's real-time throttling is off (kernel.sched_rt_runtime_us = -1): "+
				"a runaway real-time task would hold its CPU; set it back (the default is 950000)", e.Policy)
		case e.Policy == config.PolicyDeadline:
			// Every deadline strategy's thread may run on one CPU at
			// once: together they must fit what real-time tasks may
			// have of a CPU.
			share += float64(e.ExecutionTime.D) / float64(e.Period.D)
			if share > limit {
				add(s.ID, "execution_time", "with the deadline strategies before it, %.1f%% of a CPU each period, over the %.1f%% the kernel lets "+
					"real-time tasks have (kernel.sched_rt_runtime_us / sched_rt_period_us)", 100*share, 100*limit)
			}
		case s.CPUs.IsZero() && free < 2:
			add(s.ID, field, "%s without cpus runs on the CPUs no strategy dedicates but the first, which no real-time thread may take: "+
				"this host has %d such CPU (online %s); name cpus", e.Policy, free, listText(h.Online))
		}
	}
	return out
}

// listText writes CPUs as a cpulist.
func listText(cpus []int) string {
	var l config.CPUList
	for _, c := range cpus {
		if c >= 0 && c < config.MaxCPUs {
			l.Bits[c/64] |= 1 << (c % 64)
		}
	}
	return l.String()
}
