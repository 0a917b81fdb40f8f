// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config"
)

// Dedicated CPUs (a strategy's cpus) are kept by the kernel's cpusets,
// not by affinity, which any process may set back between two scans:
//
//   - cgroup v2: each strategy's processes go into a group of their
//     own (cpusPrefix + id) made a partition root (cpuset.cpus.partition
//     = root) over the strategy's CPUs. The kernel takes a partition's
//     CPUs out of every other group, the root's tasks and kernel threads
//     included: no one else may set an affinity there.
//   - cgroup v1 (these machines): each strategy's processes go into a
//     cpuset of their own over its CPUs; every other process of the
//     root cpuset (but init and kernel threads) into othersGroup, over
//     the CPUs no strategy dedicates; every other cpuset of the host has
//     the dedicated CPUs taken out of cpuset.cpus. A task's affinity is
//     bounded by its cpuset (sched_setaffinity outside it is EINVAL),
//     and a child starts in its parent's cpuset. Init stays in the root
//     cpuset, and so does what it starts until the next scan or its
//     exec (the agent reads every exec).
//
// What was where is in the state file before anything moves, and goes
// back when the CPUs are no longer dedicated: groups made are dissolved
// (every task back where it was, or in the root), narrowed cpusets get
// their CPUs back.

// cpusetHier is the hierarchy with the cpuset controller.
type cpusetHier struct {
	Mount string `json:"mount"`
	V1    bool   `json:"v1,omitempty"`
}

// Names of the engine's cpusets.
const (
	cpusPrefix  = "edgeplane-cpus-"
	othersGroup = "/edgeplane-others"
)

// cpusGroup is the cpuset of strategy id's processes.
func cpusGroup(id uint32) string { return "/" + cpusPrefix + strconv.FormatUint(uint64(id), 10) }

// ours reports whether group g is one the engine makes.
func ours(g string) bool { return g == othersGroup || strings.HasPrefix(g, "/"+cpusPrefix) }

// findCpuset finds the cpuset hierarchy from mountinfo: the v1 one with
// the cpuset controller (bound there, it is on no other), else v2 when
// its root offers cpuset.
func findCpuset(mountinfo string) (cpusetHier, error) {
	m, err := cgroupMounts(mountinfo)
	if err != nil {
		return cpusetHier{}, err
	}
	if mnt := m.v1["cpuset"]; mnt != "" {
		return cpusetHier{Mount: mnt, V1: true}, nil
	}
	if m.v2Offers("cpuset") {
		return cpusetHier{Mount: m.v2}, nil
	}
	return cpusetHier{}, errors.New("no cgroup hierarchy has the cpuset controller (cgroup v1 mounted with cpuset, or v2 offering it): " +
		"dedicated cpus need the kernel's cpusets")
}

// groupOf returns process pid's cpuset ("/" the root), from its
// /proc/PID/cgroup.
func (c cpusetHier) groupOf(root string, pid int) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && ((c.V1 && slices.Contains(strings.Split(f[1], ","), "cpuset")) || (!c.V1 && f[0] == "0" && f[1] == "")) {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("process %d is in no cpuset", pid)
}

func (c cpusetHier) path(g, file string) string { return filepath.Join(c.Mount, g, file) }

func (c cpusetHier) read(g, file string) (string, error) {
	b, err := os.ReadFile(c.path(g, file))
	return strings.TrimSpace(string(b)), err
}

func (c cpusetHier) write(g, file, v string) error {
	if err := os.WriteFile(c.path(g, file), []byte(v), 0); err != nil {
		return fmt.Errorf("%s: %w", c.path(g, file), err)
	}
	return nil
}

// ensure makes group g a cpuset over cpus (a partition root on v2),
// or updates its CPUs.
func (c cpusetHier) ensure(g string, cpus []int) error {
	if err := os.Mkdir(c.path(g, ""), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("make cpuset %s: %w", g, err)
	}
	want := listText(cpus)
	if c.V1 {
		// A v1 cpuset starts with no memory node: none of its tasks
		// could run. It takes the root's.
		if cur, _ := c.read(g, "cpuset.mems"); cur == "" {
			mems, err := c.read("/", "cpuset.mems")
			if err != nil {
				return err
			}
			if err := c.write(g, "cpuset.mems", mems); err != nil {
				return err
			}
		}
		if cur, _ := c.read(g, "cpuset.cpus"); cur != want {
			return c.write(g, "cpuset.cpus", want)
		}
		return nil
	}
	// v2: the root's children get cpuset files only with cpuset in its
	// subtree_control.
	if err := c.write("/", "cgroup.subtree_control", "+cpuset"); err != nil {
		return err
	}
	if cur, _ := c.read(g, "cpuset.cpus"); cur != want {
		if err := c.write(g, "cpuset.cpus", want); err != nil {
			return err
		}
	}
	if cur, _ := c.read(g, "cpuset.cpus.partition"); cur != "root" {
		if err := c.write(g, "cpuset.cpus.partition", "root"); err != nil {
			return err
		}
		// An invalid partition says why in the same file.
		if cur, _ := c.read(g, "cpuset.cpus.partition"); cur != "root" {
			return fmt.Errorf("cpuset %s: partition %q (its CPUs %s must be the root's to give, and no other group's exclusively)", g, cur, want)
		}
	}
	return nil
}

// move moves process pid (every thread) into group g.
func (c cpusetHier) move(g string, pid int) error {
	err := c.write(g, "cgroup.procs", strconv.Itoa(pid))
	if errors.Is(err, unix.ESRCH) {
		return nil // gone
	}
	return err
}

// procs lists the processes of group g.
func (c cpusetHier) procs(g string) []int {
	b, _ := os.ReadFile(c.path(g, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// groups lists the cpusets below the root that are not the engine's,
// parents before their children.
func (c cpusetHier) groups() []string {
	var out []string
	_ = filepath.WalkDir(c.Mount, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == c.Mount {
			return nil
		}
		g := "/" + strings.TrimPrefix(p, c.Mount+"/")
		if ours(g) {
			return filepath.SkipDir
		}
		out = append(out, g)
		return nil
	})
	return out
}

// Placed is a process the engine moved into a cpuset of its own: where
// it was.
type Placed struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	From  string `json:"from"`
}

// cpusetState is what the engine changed of the cpusets.
type cpusetState struct {
	cpusetHier
	// Groups are the cpusets the engine made.
	Groups []string `json:"groups,omitempty"`
	// Shrunk are the host's v1 cpusets the dedicated CPUs were taken
	// out of, with their cpuset.cpus before.
	Shrunk map[string]string `json:"shrunk,omitempty"`
	// Placed are the strategies' processes moved into their cpusets.
	Placed []Placed `json:"placed,omitempty"`
}

// cpusetsChanged reports whether the engine changed any cpuset.
func (e *Engine) cpusetsChanged() bool {
	return len(e.csGroups) > 0 || len(e.shrunk) > 0 || len(e.placed) > 0
}

// cpusetState returns what to keep in the state file (nil: nothing).
func (e *Engine) cpusetState() *cpusetState {
	if e.cs == nil || !e.cpusetsChanged() {
		return nil
	}
	st := &cpusetState{cpusetHier: *e.cs, Groups: slices.Sorted(maps.Keys(e.csGroups)), Shrunk: e.shrunk}
	for _, p := range e.placed {
		st.Placed = append(st.Placed, *p)
	}
	slices.SortFunc(st.Placed, func(a, b Placed) int { return cmp.Compare(a.PID, b.PID) })
	return st
}

// syncDedicated keeps the strategies' dedicated CPUs (cpus) to their
// processes (pids, by strategy) with the kernel's cpusets, or gives
// back what it changed when no CPU is dedicated any more.
func (e *Engine) syncDedicated(strategies []config.Strategy, procs []Proc, pids map[uint32][]int, host Host) {
	ded := host.dedicated(strategies)
	var owners []uint32 // the strategies with dedicated CPUs, for messages
	for _, s := range strategies {
		if !s.CPUs.IsZero() {
			owners = append(owners, s.ID)
		}
	}
	fail := func(err error) {
		for _, id := range owners {
			e.addError(id, "cpus: "+err.Error())
		}
	}
	if len(ded) == 0 && len(e.moved) == 0 {
		if e.cpusetsChanged() {
			if err := e.undoCpusets(); err != nil {
				fail(err)
			}
		}
		return
	}
	if len(ded) == 0 {
		e.undoMoved() // an older engine's, by affinity
		return
	}
	if e.cs == nil {
		c, err := findCpuset(filepath.Join(e.root, "self", "mountinfo"))
		if err != nil {
			fail(err)
			return
		}
		e.cs = &c
	}
	pl := cpusetPlan{c: *e.cs, ded: ded, byPID: map[int]Proc{}}
	for _, cpu := range host.Online {
		if !ded[cpu] {
			pl.others = append(pl.others, cpu)
		}
	}
	if len(pl.others) == 0 {
		fail(errors.New("every online CPU is dedicated: none left to the rest of the system"))
		return
	}
	e.undoMoved()
	e.planCpusets(&pl, strategies, pids, host)
	for _, p := range procs {
		pl.byPID[p.PID] = p
	}
	// Written down before anything changes (see Sync).
	e.noteCpusets(&pl, procs, host)
	if err := e.save(); err != nil {
		fail(fmt.Errorf("state file: %w", err))
		return
	}
	errs := e.applyCpusets(pl, strategies, host)
	errs = append(errs, e.tidyCpusets(pl)...)
	if err := errors.Join(errs...); err != nil {
		fail(err)
	}
}

// cpusetPlan is where syncDedicated wants the dedicated CPUs and the
// processes.
type cpusetPlan struct {
	c      cpusetHier
	ded    map[int]bool // the dedicated CPUs
	others []int        // the online CPUs no strategy dedicates
	home   map[int]string
	want   map[string]bool // the engine's cpusets wanted
	byPID  map[int]Proc
	// toOthers are the v1 root's processes going to the others' cpuset.
	toOthers []Proc
}

// planCpusets makes each strategy's cpuset and says which process
// belongs in which (pl.home, by pid).
func (e *Engine) planCpusets(pl *cpusetPlan, strategies []config.Strategy, pids map[uint32][]int, host Host) {
	pl.home, pl.want = map[int]string{}, map[string]bool{}
	for _, s := range strategies {
		if s.CPUs.IsZero() {
			continue
		}
		var cpus []int
		for _, cpu := range host.Online {
			if s.CPUs.Has(cpu) {
				cpus = append(cpus, cpu)
			}
		}
		if len(cpus) == 0 {
			e.addError(s.ID, "cpus: "+s.CPUs.String()+" are not online on this host ("+listText(host.Online)+")")
			continue
		}
		g := cpusGroup(s.ID)
		pl.want[g] = true
		for _, pid := range pids[s.ID] {
			pl.home[pid] = g
		}
	}
	if pl.c.V1 {
		pl.want[othersGroup] = true
	}
}

// noteCpusets writes down in the engine, before anything changes, the
// cpusets it makes, the host's it narrows and the processes it moves
// (and the threads whose affinity a move may reset).
func (e *Engine) noteCpusets(pl *cpusetPlan, procs []Proc, host Host) {
	for g := range pl.want {
		e.csGroups[g] = true
	}
	if pl.c.V1 {
		e.noteShrunk(pl.c, pl.ded)
	}
	for pid, g := range pl.home {
		if p, ok := pl.byPID[pid]; ok && p.Cpuset != g {
			if _, ok := e.placed[pid]; !ok {
				from := p.Cpuset
				if ours(from) {
					from = "/"
				}
				e.placed[pid] = &Placed{PID: pid, Start: p.Start, From: from}
			}
		}
	}
	// The v1 root's processes going to the others' cpuset: their
	// threads narrowed to some CPUs by their own choice keep them
	// (kernels before 6.2 reset a moved task's affinity to its new
	// cpuset's).
	if pl.c.V1 {
		for _, p := range procs {
			if pl.home[p.PID] == "" && p.Cpuset == "/" && p.PID != 1 && !p.Kernel {
				pl.toOthers = append(pl.toOthers, p)
				e.noteAffinity(p, host.Online)
			}
		}
	}
}

// applyCpusets makes the plan so: narrowed first (a cpuset's CPUs must
// stay within its parent's), then the engine's cpusets, then the moves.
func (e *Engine) applyCpusets(pl cpusetPlan, strategies []config.Strategy, host Host) []error {
	var errs []error
	c := pl.c
	if c.V1 {
		errs = append(errs, e.shrink(c, pl.ded))
	}
	for g := range pl.want {
		cpus := pl.others
		if g != othersGroup {
			id, _ := strconv.ParseUint(strings.TrimPrefix(g, "/"+cpusPrefix), 10, 32)
			for _, s := range strategies {
				if s.ID == uint32(id) {
					cpus = s.CPUs.CPUs()
				}
			}
			cpus = slices.DeleteFunc(cpus, func(cpu int) bool { return !slices.Contains(host.Online, cpu) })
		}
		if err := c.ensure(g, cpus); err != nil {
			errs = append(errs, err)
		}
	}
	for pid, g := range pl.home {
		if p, ok := pl.byPID[pid]; ok && p.Cpuset != g {
			errs = append(errs, c.move(g, pid))
		}
	}
	for _, p := range pl.toOthers {
		errs = append(errs, c.move(othersGroup, p.PID))
		e.restoreAffinity(p.PID)
	}
	return errs
}

// tidyCpusets dissolves the engine's cpusets no strategy wants any
// more, gives back the processes in a strategy's cpuset it no longer
// holds, and forgets the placed processes that are gone.
func (e *Engine) tidyCpusets(pl cpusetPlan) []error {
	var errs []error
	c := pl.c
	for g := range e.csGroups {
		if !pl.want[g] {
			errs = append(errs, e.dissolveCpuset(c, g, othersGroupIf(c)))
			delete(e.csGroups, g)
		}
	}
	for g := range pl.want {
		if g == othersGroup {
			continue
		}
		for _, pid := range c.procs(g) {
			if pl.home[pid] != g {
				errs = append(errs, e.giveBackProcess(c, pid, othersGroupIf(c)))
			}
		}
	}
	for pid, p := range e.placed {
		if pl.home[pid] == "" {
			if cur, ok := pl.byPID[pid]; !ok || cur.Start != p.Start {
				delete(e.placed, pid) // gone
			}
		}
	}
	return errs
}

// othersGroupIf is where a process leaving a strategy's cpuset goes
// when it was in the root: the others' cpuset on v1, where the root
// may run on dedicated CPUs.
func othersGroupIf(c cpusetHier) string {
	if c.V1 {
		return othersGroup
	}
	return "/"
}

// giveBackProcess moves process pid out of a strategy's cpuset: where
// it was (when the same process), else to root (othersGroupIf for one
// that came from the root while CPUs are dedicated).
func (e *Engine) giveBackProcess(c cpusetHier, pid int, root string) error {
	to := "/"
	if pl, ok := e.placed[pid]; ok {
		if p, err := ReadProc(e.root, pid); err == nil && p.Start == pl.Start {
			to = pl.From
		}
		delete(e.placed, pid)
	}
	if to == "/" {
		to = root
	}
	if _, err := os.Stat(c.path(to, "")); err != nil {
		to = "/"
	}
	return c.move(to, pid)
}

// dissolveCpuset moves every process of the engine's cpuset g out (to
// where it was, else to root) and removes g.
func (e *Engine) dissolveCpuset(c cpusetHier, g, root string) error {
	var errs []error
	for _, pid := range c.procs(g) {
		if g == othersGroup {
			errs = append(errs, c.move("/", pid))
			e.restoreAffinity(pid)
			continue
		}
		errs = append(errs, e.giveBackProcess(c, pid, root))
	}
	if err := os.Remove(c.path(g, "")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove cpuset %s: %w", g, err))
	}
	return errors.Join(errs...)
}

// undoCpusets gives back every cpuset change: the engine's cpusets
// dissolved, the host's narrowed ones widened again.
func (e *Engine) undoCpusets() error {
	if e.cs == nil {
		return nil
	}
	c := *e.cs
	var errs []error
	// The strategies' first (their processes may go to the others'),
	// the others' last.
	for _, g := range slices.Sorted(maps.Keys(e.csGroups)) {
		if g != othersGroup {
			errs = append(errs, e.dissolveCpuset(c, g, "/"))
		}
	}
	if e.csGroups[othersGroup] {
		errs = append(errs, e.dissolveCpuset(c, othersGroup, "/"))
	}
	errs = append(errs, widen(c, e.shrunk))
	clear(e.csGroups)
	clear(e.placed)
	clear(e.moved)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.shrunk = map[string]string{}
	return nil
}

// noteShrunk writes down, before they change, the host's v1 cpusets
// whose CPUs the dedicated ones must leave.
func (e *Engine) noteShrunk(c cpusetHier, ded map[int]bool) {
	for _, g := range c.groups() {
		if _, ok := e.shrunk[g]; ok {
			continue
		}
		cur, err := c.read(g, "cpuset.cpus")
		if err != nil {
			continue
		}
		l, err := config.ParseCPUList(cur)
		if err == nil && slices.ContainsFunc(l.CPUs(), func(cpu int) bool { return ded[cpu] }) {
			e.shrunk[g] = cur
		}
	}
}

// shrink takes the dedicated CPUs out of the host's v1 cpusets noted in
// e.shrunk (children first: a cpuset's CPUs stay within its parent's),
// and gives back those no longer over dedicated ones.
func (e *Engine) shrink(c cpusetHier, ded map[int]bool) error {
	var errs []error
	var back map[string]string
	gs := slices.Sorted(maps.Keys(e.shrunk))
	for _, g := range slices.Backward(gs) {
		l, _ := config.ParseCPUList(e.shrunk[g])
		before := l.CPUs()
		left := slices.DeleteFunc(slices.Clone(before), func(cpu int) bool { return ded[cpu] })
		switch {
		case len(left) == len(before):
			if back == nil {
				back = map[string]string{}
			}
			back[g] = e.shrunk[g]
		case len(left) == 0:
			errs = append(errs, fmt.Errorf("cpuset %s has only dedicated CPUs (%s): left as it is, its tasks may run there", g, e.shrunk[g]))
		default:
			if cur, _ := c.read(g, "cpuset.cpus"); cur != listText(left) {
				errs = append(errs, c.write(g, "cpuset.cpus", listText(left)))
			}
		}
	}
	if back != nil {
		errs = append(errs, widen(c, back))
		for g := range back {
			delete(e.shrunk, g)
		}
	}
	return errors.Join(errs...)
}

// widen gives the cpusets in before their CPUs back, parents first.
func widen(c cpusetHier, before map[string]string) error {
	var errs []error
	for _, g := range slices.Sorted(maps.Keys(before)) {
		if err := c.write(g, "cpuset.cpus", before[g]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// noteAffinity writes down the threads of p whose affinity is narrower
// than the online CPUs: a move into a cpuset may reset it.
func (e *Engine) noteAffinity(p Proc, online []int) {
	for _, tid := range e.tasks(p.PID) {
		if _, ok := e.moved[tid]; ok {
			continue
		}
		cpus, err := cpusOf(tid)
		if err != nil || !slices.ContainsFunc(online, func(c int) bool { return !slices.Contains(cpus, c) }) {
			continue
		}
		ts, err := taskStart(e.root, p.PID, tid)
		if err != nil {
			continue
		}
		e.moved[tid] = &Moved{PID: p.PID, TID: tid, Start: p.Start, ThreadStart: ts, Before: cpus}
	}
}

// restoreAffinity gives the threads of process pid noted by
// noteAffinity their affinity back (within their cpuset), and forgets
// them.
func (e *Engine) restoreAffinity(pid int) {
	for tid, m := range e.moved {
		if m.PID != pid {
			continue
		}
		if sameThread(e.root, m.PID, tid, m.Start, m.ThreadStart) {
			_ = setCPUs(tid, m.Before)
		}
		delete(e.moved, tid)
	}
}

// undoMoved gives back what an older engine moved by affinity (Moved
// entries of no cpuset move), from a state file it left.
func (e *Engine) undoMoved() {
	if len(e.csGroups) > 0 {
		return // the engine's own notes, for restoreAffinity
	}
	for tid, m := range e.moved {
		if sameThread(e.root, m.PID, tid, m.Start, m.ThreadStart) {
			_ = setCPUs(tid, m.Before)
		}
		delete(e.moved, tid)
	}
}

// recoverCpusets gives back what a previous engine changed of the
// cpusets (st, from its state file): its cpusets dissolved, every task
// in them back where it was or in the root (the threads it noted with
// their affinity), the host's cpusets widened.
func recoverCpusets(root string, st *cpusetState, moved []Moved) error {
	e := New(root, "")
	e.cs = &st.cpusetHier
	for _, g := range st.Groups {
		e.csGroups[g] = true
	}
	if st.Shrunk != nil {
		e.shrunk = st.Shrunk
	}
	for _, p := range st.Placed {
		e.placed[p.PID] = &p
	}
	for _, m := range moved {
		e.moved[m.TID] = &m
	}
	return e.undoCpusets()
}
