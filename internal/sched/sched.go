// SPDX-License-Identifier: Apache-2.0

// Package sched applies CPU strategies (issue 17) to the processes they
// match, with the mechanisms every Linux kernel has: a real-time policy
// (SCHED_FIFO, SCHED_RR) or SCHED_DEADLINE on each of the process's
// threads, and CPU affinity. It keeps what each thread had before, so it
// can put it back when the strategy goes, the agent stops, or, from the
// state file it keeps, on the next start after a crash.
package sched

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config"
)

// Proc is what a strategy matches a process by.
type Proc struct {
	PID     int
	Start   uint64 // start time (clock ticks since boot): a PID reused is another process
	Comm    string
	Cmdline string // arguments joined by spaces
	UID     uint32
	Cgroup  string // the cgroup v2 path (the "0::" line), "" on a v1-only host
}

// ReadProc reads process pid's identity from /proc.
func ReadProc(root string, pid int) (Proc, error) {
	p := Proc{PID: pid}
	dir := filepath.Join(root, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return p, err
	}
	// comm is in parentheses and may hold spaces or parentheses: the
	// fields after it follow the last ')'.
	open, end := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
	if open < 0 || end < open {
		return p, fmt.Errorf("%s/stat: no comm", dir)
	}
	p.Comm = string(stat[open+1 : end])
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 20 {
		return p, fmt.Errorf("%s/stat: %d fields after comm", dir, len(fields))
	}
	if p.Start, err = strconv.ParseUint(fields[19], 10, 64); err != nil {
		return p, fmt.Errorf("%s/stat: start time: %w", dir, err)
	}
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return p, err
	}
	p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				uid, _ := strconv.ParseUint(f[0], 10, 32)
				p.UID = uint32(uid)
			}
		}
	}
	if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		for _, line := range strings.Split(string(cg), "\n") {
			if v, ok := strings.CutPrefix(line, "0::"); ok {
				p.Cgroup = v
			}
		}
	}
	return p, nil
}

// Procs reads every user process of /proc (kernel threads, which have no
// command line, left out), skipping those gone meanwhile.
func Procs(root string) ([]Proc, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := ReadProc(root, pid)
		if err != nil || p.Cmdline == "" {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// Matches tells whether strategy s takes process p: its command_regex
// matches the comm or the command line, and every selector given holds.
// Pod labels need the kubelet's view, which this build does not read: a
// strategy with them matches nothing (ErrPodLabels from Check).
func Matches(s config.Strategy, re *regexp.Regexp, root string, p Proc) bool {
	if re != nil && !re.MatchString(p.Comm) && !re.MatchString(p.Cmdline) {
		return false
	}
	sel := s.Selectors
	if sel == nil {
		return re != nil
	}
	if len(sel.PodLabels) > 0 {
		return false
	}
	if sel.Cgroup != "" && p.Cgroup != sel.Cgroup && !strings.HasPrefix(p.Cgroup, strings.TrimSuffix(sel.Cgroup, "/")+"/") {
		return false
	}
	if sel.User != "" && !userIs(sel.User, p.UID) {
		return false
	}
	if sel.Env != "" {
		env, err := os.ReadFile(filepath.Join(root, strconv.Itoa(p.PID), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), sel.Env) {
			return false
		}
	}
	return true
}

// userIs tells whether user (a name or a numeric uid) is uid.
func userIs(user string, uid uint32) bool {
	if n, err := strconv.ParseUint(user, 10, 32); err == nil {
		return uint32(n) == uid
	}
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(passwd), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 2 && f[0] == user {
			n, err := strconv.ParseUint(f[2], 10, 32)
			return err == nil && uint32(n) == uid
		}
	}
	return false
}

// Attr is a thread's scheduling as sched_getattr(2) gives it, and its
// CPU affinity.
type Attr struct {
	Policy   uint32 `json:"policy"`
	Priority uint32 `json:"priority,omitempty"`
	Nice     int32  `json:"nice,omitempty"`
	Runtime  uint64 `json:"runtime,omitempty"`
	Deadline uint64 `json:"deadline,omitempty"`
	Period   uint64 `json:"period,omitempty"`
	CPUs     []int  `json:"cpus,omitempty"`
}

// Held is a thread a strategy holds: what it had before.
type Held struct {
	Strategy uint32 `json:"strategy"`
	PID      int    `json:"pid"`
	TID      int    `json:"tid"`
	Start    uint64 `json:"start"`
	Before   Attr   `json:"before"`
	Applied  string `json:"applied"`
}

// Engine applies strategies and remembers what it changed.
type Engine struct {
	mu    sync.Mutex
	root  string // /proc
	state string // the state file ("" : none)
	held  map[int]*Held
	// Errors of the last Sync, by strategy: why a matching process was
	// not given what the strategy says.
	Errors map[uint32]string
}

// New returns an engine over /proc-like root keeping its state in the
// file state.
func New(root, state string) *Engine {
	return &Engine{root: root, state: state, held: map[int]*Held{}, Errors: map[uint32]string{}}
}

// Recover puts back what a previous engine (a crashed agent) held, from
// its state file, for the threads still the same processes; then clears
// the file.
func Recover(root, state string) (int, error) {
	b, err := os.ReadFile(state)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var held []Held
	if err := json.Unmarshal(b, &held); err != nil {
		return 0, fmt.Errorf("%s: %w", state, err)
	}
	n := 0
	for _, h := range held {
		if p, err := ReadProc(root, h.PID); err == nil && p.Start == h.Start && restore(h) == nil {
			n++
		}
	}
	return n, os.Remove(state)
}

// getAttr reads thread tid's scheduling and affinity.
func getAttr(tid int) (Attr, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return Attr{}, err
	}
	out := Attr{Policy: a.Policy, Priority: a.Priority, Nice: a.Nice, Runtime: a.Runtime, Deadline: a.Deadline, Period: a.Period}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err == nil {
		for c := range 1024 {
			if set.IsSet(c) {
				out.CPUs = append(out.CPUs, c)
			}
		}
	}
	return out, nil
}

// restore gives h's thread back what it had.
func restore(h Held) error {
	b := h.Before
	a := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: b.Policy, Priority: b.Priority, Nice: b.Nice,
		Runtime: b.Runtime, Deadline: b.Deadline, Period: b.Period}
	err := unix.SchedSetAttr(h.TID, &a, 0)
	if len(b.CPUs) > 0 {
		var set unix.CPUSet
		for _, c := range b.CPUs {
			set.Set(c)
		}
		err = errors.Join(err, unix.SchedSetaffinity(h.TID, &set))
	}
	if errors.Is(err, unix.ESRCH) {
		return nil // gone
	}
	return err
}

// apply gives thread tid strategy s's scheduling and CPUs.
func apply(s config.Strategy, tid int) (string, error) {
	s = s.Effective()
	var what []string
	if s.Priority {
		a := unix.SchedAttr{Size: unix.SizeofSchedAttr}
		switch s.Policy {
		case config.PolicyFIFO, config.PolicyRR:
			if rtThrottleOff() {
				return "", errRTUnbounded
			}
			a.Policy, a.Priority = unix.SCHED_FIFO, s.RTPriority
			if s.Policy == config.PolicyRR {
				a.Policy = unix.SCHED_RR
			}
			what = append(what, fmt.Sprintf("%s %d", s.Policy, s.RTPriority))
		case config.PolicyDeadline:
			a.Policy = unix.SCHED_DEADLINE
			a.Runtime, a.Deadline, a.Period = uint64(s.ExecutionTime.D), uint64(s.Period.D), uint64(s.Period.D)
			what = append(what, fmt.Sprintf("deadline %s/%s", s.ExecutionTime.D, s.Period.D))
		}
		if a.Policy != 0 {
			if err := unix.SchedSetAttr(tid, &a, 0); err != nil {
				return "", policyError(s, err)
			}
		}
	}
	if !s.CPUs.IsZero() {
		var set unix.CPUSet
		for c := range 1024 {
			if s.CPUs.Has(c) {
				set.Set(c)
			}
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return strings.Join(what, ", "), fmt.Errorf("cpus %s: %w", s.CPUs, err)
		}
		what = append(what, "cpus "+s.CPUs.String())
	}
	return strings.Join(what, ", "), nil
}

// errRTUnbounded refuses FIFO and RR while the kernel's real-time
// throttling is off: a runaway real-time task would hold its CPU for
// good.
var errRTUnbounded = errors.New("real-time throttling is off (kernel.sched_rt_runtime_us = -1): a runaway FIFO or RR task could lock its CPU; not applied (set it back, e.g. to 950000)")

// rtThrottleOff tells whether real-time throttling is off.
func rtThrottleOff() bool {
	b, err := os.ReadFile("/proc/sys/kernel/sched_rt_runtime_us")
	return err == nil && strings.TrimSpace(string(b)) == "-1"
}

// policyError says why the kernel refused a policy, in the terms an
// operator can act on.
func policyError(s config.Strategy, err error) error {
	switch {
	case errors.Is(err, unix.EPERM) && s.Policy != config.PolicyDeadline:
		return fmt.Errorf("%s refused (EPERM): with CONFIG_RT_GROUP_SCHED the process's cgroup needs a cpu.rt_runtime_us above 0: %w", s.Policy, err)
	case errors.Is(err, unix.EBUSY) || (errors.Is(err, unix.EPERM) && s.Policy == config.PolicyDeadline):
		return fmt.Errorf("deadline admission refused: runtime %s every %s does not fit the CPUs' deadline bandwidth (or the process's cpuset is not its root domain's): %w", s.ExecutionTime.D, s.Period.D, err)
	case errors.Is(err, unix.EINVAL) && s.Policy == config.PolicyDeadline:
		return fmt.Errorf("deadline refused (EINVAL): runtime %s, period %s: %w", s.ExecutionTime.D, s.Period.D, err)
	}
	return fmt.Errorf("%s: %w", s.Policy, err)
}

// Sync makes the holdings those of strategies now: every thread of every
// process a strategy matches (the first by id) gets it, those no longer
// matched (or of removed strategies) get back what they had; the state
// file follows. It returns how many threads were newly taken and given
// back.
func (e *Engine) Sync(strategies []config.Strategy) (taken, given int, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	procs, err := Procs(e.root)
	if err != nil {
		return 0, 0, err
	}
	// A copy: the caller's list is the serving config's, shared.
	strategies = slices.Clone(strategies)
	slices.SortFunc(strategies, func(a, b config.Strategy) int { return cmp.Compare(a.ID, b.ID) })
	res := make([]*regexp.Regexp, len(strategies))
	for i, s := range strategies {
		if s.CommandRegex != "" {
			res[i], _ = regexp.Compile(s.CommandRegex)
		}
	}
	e.Errors = map[uint32]string{}
	want := map[int]*Held{}
	self := os.Getpid()
	for _, p := range procs {
		if p.PID == self {
			continue
		}
		for i, s := range strategies {
			if !Matches(s, res[i], e.root, p) {
				continue
			}
			tasks, _ := os.ReadDir(filepath.Join(e.root, strconv.Itoa(p.PID), "task"))
			for _, t := range tasks {
				tid, err := strconv.Atoi(t.Name())
				if err != nil {
					continue
				}
				want[tid] = &Held{Strategy: s.ID, PID: p.PID, TID: tid, Start: p.Start}
			}
			break
		}
	}
	// Give back first: a CPU set or a deadline bandwidth another
	// strategy now wants may be freed by it.
	for tid, h := range e.held {
		if w, ok := want[tid]; ok && w.Strategy == h.Strategy && w.Start == h.Start {
			continue
		}
		if err := restore(*h); err != nil {
			e.Errors[h.Strategy] = fmt.Sprintf("give back thread %d: %v", tid, err)
		}
		delete(e.held, tid)
		given++
	}
	for tid, w := range want {
		if _, ok := e.held[tid]; ok {
			continue
		}
		before, err := getAttr(tid)
		if err != nil {
			continue // gone
		}
		var s config.Strategy
		for _, x := range strategies {
			if x.ID == w.Strategy {
				s = x
			}
		}
		w.Before = before
		applied, err := apply(s, tid)
		if err != nil {
			e.Errors[s.ID] = fmt.Sprintf("process %d: %v", w.PID, err)
			_ = restore(*w) // what was applied before the error
			continue
		}
		w.Applied = applied
		e.held[tid] = w
		taken++
	}
	return taken, given, e.save()
}

// RevertAll gives every thread back what it had, and removes the state
// file.
func (e *Engine) RevertAll() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for tid, h := range e.held {
		errs = append(errs, restore(*h))
		delete(e.held, tid)
	}
	if e.state != "" {
		if err := os.Remove(e.state); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Holdings returns the threads each strategy holds.
func (e *Engine) Holdings() map[uint32][]Held {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[uint32][]Held{}
	for _, h := range e.held {
		out[h.Strategy] = append(out[h.Strategy], *h)
	}
	return out
}

// save writes the holdings to the state file (atomically), or removes it
// when there are none.
func (e *Engine) save() error {
	if e.state == "" {
		return nil
	}
	if len(e.held) == 0 {
		if err := os.Remove(e.state); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	var held []Held
	for _, h := range e.held {
		held = append(held, *h)
	}
	b, err := json.Marshal(held)
	if err != nil {
		return err
	}
	tmp := e.state + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, e.state)
}
