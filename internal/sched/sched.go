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
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// Proc is what a strategy matches a process by.
type Proc struct {
	PID     int
	PPID    int
	Start   uint64 // start time (clock ticks since boot): a PID reused is another process
	Comm    string
	Cmdline string // arguments joined by spaces
	UID     uint32
	Cgroup  string // the cgroup v2 path (the "0::" line), "" on a v1-only host
	// Kernel: a kernel thread (PF_KTHREAD), which no strategy takes.
	Kernel bool
	// Pod is the UID of the pod the process is in, found where the
	// kubelet makes pods (PodUID) in any of its hierarchies, or "".
	Pod string
	// Cpuset is its group in the v1 cpuset hierarchy, else its v2
	// group.
	Cpuset string
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
	p.PPID, _ = strconv.Atoi(fields[1])
	flags, _ := strconv.ParseUint(fields[6], 10, 64)
	p.Kernel = flags&pfKthread != 0
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
		lines := strings.Split(string(cg), "\n")
		for _, line := range lines {
			if v, ok := strings.CutPrefix(line, "0::"); ok {
				p.Cgroup = v
			}
		}
		// The kubelet makes a pod's group in every hierarchy (v2, or
		// each v1 controller's): the v2 one first.
		p.Pod = PodUID(p.Cgroup)
		p.Cpuset = p.Cgroup
		for _, line := range lines {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			if p.Pod == "" {
				p.Pod = PodUID(f[2])
			}
			if slices.Contains(strings.Split(f[1], ","), "cpuset") {
				p.Cpuset = f[2]
			}
		}
	}
	return p, nil
}

// Procs reads every user process of /proc (kernel threads left out,
// known by their flag: a process may empty its own command line),
// skipping those gone meanwhile.
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
		if err != nil || p.Kernel {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// matches tells whether strategy s takes process p: its command_regex
// matches the comm or the command line, and every selector given holds.
// A strategy that changes anything must select by what a process cannot
// choose (config.Selectors.Trusted), and a cgroup selector holds only
// while the process's group is root's and not delegated. Pod labels
// need the engine's pod list (SetPods): without one, a strategy with
// them matches nothing, and says why.
func (e *Engine) matches(s config.Strategy, re *regexp.Regexp, p Proc) bool {
	if re != nil && !re.MatchString(p.Comm) && !re.MatchString(p.Cmdline) {
		return false
	}
	sel := s.Selectors
	if s.Changes() && !sel.Trusted() {
		e.Errors[s.ID] = errUntrusted.Error()
		e.refuse(s.ID, RefusedUntrusted)
		return false
	}
	if sel == nil {
		return re != nil
	}
	if sel.Cgroup != "" && !under(p.Cgroup, sel.Cgroup) {
		return false
	}
	if sel.User != "" && !userIs(sel.User, p.UID) {
		return false
	}
	if sel.Env != "" {
		env, err := os.ReadFile(filepath.Join(e.root, strconv.Itoa(p.PID), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), sel.Env) {
			return false
		}
	}
	if len(sel.PodLabels) > 0 {
		if e.pods == nil {
			e.Errors[s.ID] = errNoPods.Error()
			return false
		}
		if p.Pod == "" {
			return false
		}
		labels, err := e.pods.Labels(p.Pod)
		if err != nil {
			e.Errors[s.ID] = "pod_labels: " + err.Error()
		}
		for k, v := range sel.PodLabels {
			if have, ok := labels[k]; !ok || have != v {
				return false
			}
		}
	}
	if sel.Cgroup != "" {
		if e.v2 == nil {
			m := v2Mount(filepath.Join(e.root, "self", "mountinfo"))
			e.v2 = &m
		}
		if why := delegated(*e.v2, p.Cgroup); why != "" {
			e.Errors[s.ID] = fmt.Sprintf("process %d not taken: %s", p.PID, why)
			e.refuse(s.ID, RefusedDelegated)
			return false
		}
	}
	return true
}

// Ext is a sched_ext scheduler (internal/sched/scx): it runs the tasks of the
// processes given first, each with its slice.
type Ext interface {
	SetPriority(map[int]time.Duration) error
}

// SetExt makes the engine give priority strategies' processes to x
// instead of a real-time policy (nil: back to the policies). Set it
// before the first Sync.
func (e *Engine) SetExt(x Ext) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ext = x
}

// DefaultExtSlice is the sched_ext slice of a priority strategy that
// names no execution_time (fifo, rr): a quarter of the scheduler's
// default 20 ms.
const DefaultExtSlice = 5 * time.Millisecond

// ExtSlice is strategy s's slice under the sched_ext scheduler: its
// execution_time, else DefaultExtSlice.
func ExtSlice(s config.Strategy) time.Duration {
	if s.ExecutionTime.D > 0 {
		return s.ExecutionTime.D
	}
	return DefaultExtSlice
}

// syncExt gives the sched_ext scheduler the held processes of priority
// strategies.
func (e *Engine) syncExt(byID map[uint32]config.Strategy) {
	if e.ext == nil {
		return
	}
	prio := map[int]time.Duration{}
	for _, h := range e.held {
		if s, ok := byID[h.Strategy]; ok && s.Priority {
			prio[h.PID] = ExtSlice(s)
		}
	}
	if err := e.ext.SetPriority(prio); err != nil {
		for id, s := range byID {
			if s.Priority {
				e.addError(id, "sched_ext: "+err.Error())
			}
		}
	}
}

// SetPods gives the engine the pod list that strategies' pod_labels
// are matched against.
func (e *Engine) SetPods(p *Pods) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pods = p
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
	Flags    uint64 `json:"flags,omitempty"` // SCHED_FLAG_RESET_ON_FORK
	CPUs     []int  `json:"cpus,omitempty"`
}

// Held is a thread a strategy holds: what it had before.
type Held struct {
	Strategy uint32 `json:"strategy"`
	PID      int    `json:"pid"`
	TID      int    `json:"tid"`
	Start    uint64 `json:"start"`
	// ThreadStart is the thread's own start time: a thread id reused
	// (by a thread, or a process) is another thread, never given
	// anything back (0: not known, from an older state file).
	ThreadStart uint64 `json:"thread_start,omitempty"`
	Before      Attr   `json:"before"`
	Applied     string `json:"applied"`
}

// Moved is a thread of another process moved off a strategy's dedicated
// CPUs: the CPUs it had before.
type Moved struct {
	PID         int    `json:"pid"`
	TID         int    `json:"tid"`
	Start       uint64 `json:"start"`
	ThreadStart uint64 `json:"thread_start,omitempty"`
	Before      []int  `json:"before"`
	// Removed are the dedicated CPUs an older engine moved it off by
	// affinity (in its state file only): a child it made meanwhile
	// inherited its CPUs less those, and gets them back with it.
	Removed []int `json:"removed"`
}

// state is what the state file keeps: all the engine changed.
type state struct {
	Held []Held `json:"held,omitempty"`
	// Weights are the groups whose weight was lowered, with the value
	// they had; Groups those made for root-level processes.
	Weights map[string]string `json:"weights,omitempty"`
	Groups  []string          `json:"groups,omitempty"`
	Moved   []Moved           `json:"moved,omitempty"`
	// IRQs are the IRQs steered, with their affinity before.
	IRQs map[int]string `json:"irqs,omitempty"`
	// Cpuset is what dedicated CPUs changed of the cpusets.
	Cpuset *cpusetState `json:"cpuset,omitempty"`
}

// Engine applies strategies and remembers what it changed.
type Engine struct {
	mu sync.Mutex
	// regexps are the strategies' command_regex, compiled once each
	// (they changed only with the config; a scan a second and an exec
	// event each compiled them all again).
	regexps map[string]*regexp.Regexp
	root    string // /proc
	sys     string // /sys
	state   string // the state file ("" : none)
	held    map[int]*Held
	// The weight mechanism: the cpu hierarchy (found when first
	// needed), the groups lowered (their weight before) and the
	// strategies' groups of root-level processes.
	hier    *hier
	weights map[string]string
	groups  map[uint32]string
	lowered []uint32 // the strategies the lowered weights are for
	// moved are other processes' threads whose own affinity a move
	// into a cpuset may reset (or, in an older engine's state file,
	// that it moved off dedicated CPUs by affinity).
	moved map[int]*Moved
	// The cpusets of dedicated CPUs: the hierarchy (nil: not looked
	// for yet), the groups the engine made, the host's cpusets
	// narrowed (their CPUs before), the processes it moved into its
	// groups (where they were).
	cs       *cpusetHier
	csGroups map[string]bool
	shrunk   map[string]string
	placed   map[int]*Placed
	// irqs are the IRQs steered to strategies' CPUs, with their
	// affinity before.
	irqs  map[int]string
	irqBy map[uint32][]int // the IRQs each strategy steers
	// xdpSteer hands an interface's XDP work to a CPU (nil: none);
	// steered are the interfaces handed, steerBy what each strategy
	// steers, for Status.
	xdpSteer func(ifname string, cpu int) error
	steered  map[string]int
	steerBy  map[uint32][]string
	// pods gives pod labels (nil: none).
	pods *Pods
	// ext is the sched_ext scheduler priority strategies use instead of
	// a real-time policy (nil: none).
	ext Ext
	// ranOn is, by held process, the CPUs its threads were seen on at
	// the scans since it was taken.
	ranOn map[int]map[int]bool
	// v2 is where the cgroup v2 hierarchy is mounted ("": none; nil:
	// not looked for yet); me the agent (untouchable).
	v2 *string
	me *self
	// Errors of the last Sync, by strategy: why a matching process was
	// not given what the strategy says; Refused how many times, by
	// reason (RefusedReasons).
	Errors  map[uint32]string
	Refused map[uint32]map[string]int
}

// New returns an engine over /proc-like root keeping its state in the
// file state.
func New(root, state string) *Engine {
	return &Engine{root: root, sys: "/sys", state: state, held: map[int]*Held{}, weights: map[string]string{}, groups: map[uint32]string{},
		moved: map[int]*Moved{}, csGroups: map[string]bool{}, shrunk: map[string]string{}, placed: map[int]*Placed{}, irqs: map[int]string{}, irqBy: map[uint32][]int{}, steered: map[string]int{}, steerBy: map[uint32][]string{}, ranOn: map[int]map[int]bool{}, Errors: map[uint32]string{}}
}

// Recover puts back what a previous engine (a crashed agent) changed,
// from its state file: the threads still the same processes get their
// scheduling and CPUs back, lowered groups their weight, and its groups
// are dissolved. Then it clears the file. It returns how many threads of
// the strategies' processes it gave back.
func Recover(root, statePath string) (int, error) {
	b, err := readState(statePath)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		// The first engines kept the held threads alone, as a list.
		if lerr := json.Unmarshal(b, &st.Held); lerr != nil {
			return 0, fmt.Errorf("%s: %w", statePath, err)
		}
	}
	var errs []error
	// The cpusets first: a thread given back its own CPUs must be
	// where they are allowed. A child started while the agent was down
	// is in its parent's cpuset, and leaves it with it.
	if st.Cpuset != nil {
		errs = append(errs, recoverCpusets(root, st.Cpuset, st.Moved))
	} else {
		recoverMoved(root, st.Moved)
	}
	n := 0
	for _, h := range st.Held {
		if sameThread(root, h.PID, h.TID, h.Start, h.ThreadStart) && restore(h) == nil {
			n++
		}
	}
	for irq, before := range st.IRQs {
		errs = append(errs, restoreIRQ(root, irq, before))
	}
	if len(st.Weights) > 0 || len(st.Groups) > 0 {
		h, err := cpuHier(filepath.Join(root, "self", "mountinfo"))
		if err != nil {
			return n, err
		}
		errs = append(errs, h.undo(st.Weights, st.Groups))
	}
	errs = append(errs, os.Remove(statePath))
	return n, errors.Join(errs...)
}

// recoverMoved gives back what an older engine moved off dedicated
// CPUs by affinity: each thread its CPUs, and the threads of a process
// started meanwhile by a moved one, which inherited its CPUs less the
// dedicated ones, those CPUs.
func recoverMoved(root string, moved []Moved) {
	removedBy := map[int][]int{}
	for _, m := range moved {
		if sameThread(root, m.PID, m.TID, m.Start, m.ThreadStart) {
			_ = setCPUs(m.TID, m.Before)
		}
		if len(m.Removed) > 0 {
			removedBy[m.PID] = m.Removed
		}
	}
	if len(removedBy) == 0 {
		return
	}
	procs, _ := Procs(root)
	e := New(root, "")
	for _, p := range procs {
		r := removedBy[p.PPID]
		if r == nil || removedBy[p.PID] != nil {
			continue
		}
		for _, tid := range e.tasks(p.PID) {
			if cpus, err := cpusOf(tid); err == nil && !slices.ContainsFunc(cpus, func(c int) bool { return slices.Contains(r, c) }) {
				_ = setCPUs(tid, slices.Sorted(slices.Values(append(cpus, r...))))
			}
		}
	}
}

// sameThread tells whether thread tid of process pid is still the one
// that started at threadStart in the process that started at start (a
// threadStart of 0: the process alone is checked). Between a thread's
// exit and a give-back its id may go to a new thread or process, of
// any user's, which must get nothing.
func sameThread(root string, pid, tid int, start, threadStart uint64) bool {
	p, err := ReadProc(root, pid)
	if err != nil || p.Start != start {
		return false
	}
	if threadStart == 0 {
		return true
	}
	ts, err := taskStart(root, pid, tid)
	return err == nil && ts == threadStart
}

// taskStart reads thread tid's start time (field 22 of its stat, clock
// ticks since boot).
func taskStart(root string, pid, tid int) (uint64, error) {
	f, err := taskStat(root, pid, tid, 22)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f, 10, 64)
}

// taskStat reads field n (1-based, as proc(5) numbers them; n > 2) of
// thread tid's stat.
func taskStat(root string, pid, tid, n int) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "task", strconv.Itoa(tid), "stat"))
	if err != nil {
		return "", err
	}
	// The comm (field 2) is in parentheses and may hold either.
	end := strings.LastIndexByte(string(b), ')')
	if end < 0 {
		return "", fmt.Errorf("thread %d: no comm in its stat", tid)
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < n-2 {
		return "", fmt.Errorf("thread %d: %d fields in its stat", tid, len(f)+2)
	}
	return f[n-3], nil
}

// getAttr reads thread tid's scheduling and affinity.
// Its CPUs are kept only when narrower than its cpuset allows (online,
// without one): the thread chose them. Otherwise it had no affinity of
// its own, and gets none back (restore: every CPU its cpuset allows
// then), not the cpuset's CPUs of the moment, which would pin it there
// once its cpuset is given back.
func (e *Engine) getAttr(pid, tid int, online []int) (Attr, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return Attr{}, err
	}
	out := Attr{Policy: a.Policy, Priority: a.Priority, Nice: a.Nice, Runtime: a.Runtime, Deadline: a.Deadline, Period: a.Period,
		Flags: a.Flags & unix.SCHED_FLAG_RESET_ON_FORK}
	cpus, err := cpusOf(tid)
	if err != nil {
		return Attr{}, err
	}
	if allowed := e.allowedCPUs(pid, online); slices.ContainsFunc(allowed, func(c int) bool { return !slices.Contains(cpus, c) }) {
		out.CPUs = cpus
	}
	return out, nil
}

// allowedCPUs returns the CPUs process pid's cpuset allows (online:
// without cpusets).
func (e *Engine) allowedCPUs(pid int, online []int) []int {
	if e.cs == nil {
		c, err := findCpuset(filepath.Join(e.root, "self", "mountinfo"))
		if err != nil {
			return online
		}
		e.cs = &c
	}
	g, err := e.cs.groupOf(e.root, pid)
	if err != nil {
		return online
	}
	file := "cpuset.cpus.effective"
	if e.cs.V1 {
		file = "cpuset.effective_cpus"
	}
	v, err := e.cs.read(g, file)
	if err != nil {
		return online
	}
	l, err := config.ParseCPUList(v)
	if err != nil || l.IsZero() {
		return online
	}
	return l.CPUs()
}

// restore gives h's thread back what it had: its CPUs, or when it had
// none of its own every CPU (its cpuset bounds them).
func restore(h Held) error {
	b := h.Before
	a := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: b.Policy, Priority: b.Priority, Nice: b.Nice,
		Runtime: b.Runtime, Deadline: b.Deadline, Period: b.Period, Flags: b.Flags}
	err := unix.SchedSetAttr(h.TID, &a, 0)
	cpus := b.CPUs
	if len(cpus) == 0 {
		cpus = everyCPU
	}
	err = errors.Join(err, setCPUs(h.TID, cpus))
	if errors.Is(err, unix.ESRCH) {
		return nil // gone
	}
	return err
}

// everyCPU is an affinity of every CPU there may be: the kernel bounds
// it by the thread's cpuset and the CPUs online.
var everyCPU = func() []int {
	out := make([]int, config.MaxCPUs)
	for i := range out {
		out[i] = i
	}
	return out
}()

// setCPUs sets thread tid's affinity to cpus; a thread gone is no
// error.
func setCPUs(tid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// cpusOf reads thread tid's affinity.
func cpusOf(tid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return nil, err
	}
	var out []int
	for c := range 1024 {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// apply gives thread tid strategy s's scheduling and CPUs. A fifo or rr
// strategy without cpus runs on rtCPUs (every CPU but the housekeeping
// one, Host.RTCPUs).
func apply(s config.Strategy, tid int, ext bool, rtCPUs []int) (string, error) {
	s = s.Effective()
	var what []string
	if s.Priority && ext {
		// The sched_ext scheduler runs it first (syncExt): its policy
		// stays.
		what = append(what, "sched_ext priority, slice "+ExtSlice(s).String())
	} else if s.Priority {
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
			if s.CPUs.IsZero() {
				// Off the housekeeping CPU before it is real-time.
				if len(rtCPUs) == 0 {
					return "", errNoRTCPU
				}
				if err := setCPUs(tid, rtCPUs); err != nil {
					return "", fmt.Errorf("keep it off the housekeeping CPU: %w", err)
				}
				what[len(what)-1] += " (CPUs " + listText(rtCPUs) + ")"
			}
		case config.PolicyDeadline:
			if rtThrottleOff() {
				return "", errRTUnbounded
			}
			a.Policy = unix.SCHED_DEADLINE
			a.Runtime, a.Deadline, a.Period = uint64(s.ExecutionTime.D), uint64(s.Period.D), uint64(s.Period.D)
			what = append(what, fmt.Sprintf("deadline %s/%s", s.ExecutionTime.D, s.Period.D))
		}
		if a.Policy != 0 {
			// What a held thread makes (a thread, a child) starts
			// back at SCHED_OTHER: a real-time policy spreads only
			// to what the strategy matches (the next scan takes it),
			// and a deadline task may fork at all (without the flag
			// the kernel refuses a SCHED_DEADLINE task's fork with
			// EAGAIN).
			a.Flags = unix.SCHED_FLAG_RESET_ON_FORK
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

// refuse counts a refusal of strategy id's for reason.
func (e *Engine) refuse(id uint32, reason string) {
	if e.Refused == nil {
		e.Refused = map[uint32]map[string]int{}
	}
	if e.Refused[id] == nil {
		e.Refused[id] = map[string]int{}
	}
	e.Refused[id][reason]++
}

// keepOffHousekeeping puts a held thread of fifo or rr strategy s
// without cpus back on rtCPUs when it left them (a thread may set its
// own affinity): no real-time thread takes the housekeeping CPU.
func keepOffHousekeeping(s config.Strategy, tid int, ext bool, rtCPUs []int) {
	if ext || !s.Priority || !s.CPUs.IsZero() || (s.Policy != config.PolicyFIFO && s.Policy != config.PolicyRR) || len(rtCPUs) == 0 {
		return
	}
	if cpus, err := cpusOf(tid); err == nil && slices.ContainsFunc(cpus, func(c int) bool { return !slices.Contains(rtCPUs, c) }) {
		_ = setCPUs(tid, rtCPUs)
	}
}

// errRTUnbounded refuses every real-time policy while the kernel's
// real-time throttling is off: a runaway FIFO or RR task would hold its
// CPU for good, and deadline admission is off with it (a runtime of the
// whole period would be admitted).
var errRTUnbounded = errors.New("real-time throttling is off (kernel.sched_rt_runtime_us = -1): a runaway real-time task could lock its CPU; not applied (set it back, e.g. to 950000)")

// errNoRTCPU refuses fifo and rr without cpus where every CPU but the
// housekeeping one is dedicated.
var errNoRTCPU = errors.New("no CPU for it: every CPU but the housekeeping one, which no real-time thread takes, is dedicated to strategies")

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
// matched (or of removed strategies) get back what they had; the others'
// weight and the dedicated CPUs follow, and the state file. It returns
// how many threads were newly taken and given back.
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
	byID := map[uint32]config.Strategy{}
	res := e.compile(strategies)
	for i, s := range strategies {
		strategies[i] = s.Effective()
		byID[s.ID] = strategies[i]
	}
	e.Errors, e.Refused = map[uint32]string{}, map[uint32]map[string]int{}
	// What the host refuses now (RT throttling switched off, CPUs gone
	// offline since the config was checked) takes nothing: a strategy
	// with a problem holds no thread.
	host, herr := ReadHost(e.root, e.sys)
	refused := map[uint32]bool{}
	if herr != nil {
		for _, s := range strategies {
			if s.RealTime() || !s.CPUs.IsZero() {
				refused[s.ID] = true
				e.addError(s.ID, "read the host's real-time limits and CPUs: "+herr.Error())
			}
		}
	}
	for _, pr := range host.Problems(strategies) {
		if !refused[pr.ID] {
			e.refuse(pr.ID, RefusedHost)
		}
		refused[pr.ID] = true
		e.addError(pr.ID, pr.Field+": "+pr.Reason)
	}
	// A refused strategy changes nothing: its CPUs are not dedicated,
	// its IRQs not steered, its threads given back.
	active := slices.DeleteFunc(slices.Clone(strategies), func(s config.Strategy) bool { return refused[s.ID] })
	rtCPUs := host.RTCPUs(active)
	if e.me == nil {
		me := selfOf(e.root)
		e.me = &me
	}
	want := map[int]*Held{}
	pids := map[uint32][]int{}
	for _, p := range procs {
		if e.me.untouchable(p) {
			continue
		}
		for i, s := range strategies {
			if refused[s.ID] || !e.matches(s, res[i], p) {
				continue
			}
			pids[s.ID] = append(pids[s.ID], p.PID)
			for _, tid := range e.tasks(p.PID) {
				ts, err := taskStart(e.root, p.PID, tid)
				if err != nil {
					continue // gone
				}
				want[tid] = &Held{Strategy: s.ID, PID: p.PID, TID: tid, Start: p.Start, ThreadStart: ts}
			}
			break
		}
	}
	// Give back first: a CPU set or a deadline bandwidth another
	// strategy now wants may be freed by it.
	var again []Held
	for tid, h := range e.held {
		if w, ok := want[tid]; ok && w.Strategy == h.Strategy && w.Start == h.Start && w.ThreadStart == h.ThreadStart {
			keepOffHousekeeping(byID[h.Strategy], tid, e.ext != nil, rtCPUs)
			continue
		}
		if sameThread(e.root, h.PID, tid, h.Start, h.ThreadStart) {
			if err := restore(*h); errors.Is(err, unix.EINVAL) {
				// Its own CPUs, outside the strategy's cpuset it is
				// still in: once it has left it.
				again = append(again, *h)
			} else if err != nil {
				e.Errors[h.Strategy] = fmt.Sprintf("give back thread %d: %v", tid, err)
			}
		}
		delete(e.held, tid)
		given++
	}
	// What the new threads have is written down before anything is
	// applied to them: an agent killed in between leaves a state file
	// its next start gives back from (restoring what a thread still
	// has is harmless).
	var fresh []*Held
	for tid, w := range want {
		if _, ok := e.held[tid]; ok {
			continue
		}
		before, err := e.getAttr(w.PID, tid, host.Online)
		if err != nil {
			continue // gone
		}
		w.Before = before
		e.held[tid] = w
		fresh = append(fresh, w)
	}
	if len(fresh) > 0 {
		if err := e.save(); err != nil {
			return taken, given, err
		}
	}
	// The dedicated CPUs' cpusets before the policies: a process takes
	// its strategy's CPUs once in its cpuset (outside it, they are not
	// its to set), and the others leave them.
	e.syncDedicated(active, procs, pids, host)
	for _, h := range again {
		if err := restore(h); err != nil {
			e.addError(h.Strategy, fmt.Sprintf("give back thread %d: %v", h.TID, err))
		}
	}
	for _, w := range fresh {
		s := byID[w.Strategy]
		applied, err := apply(s, w.TID, e.ext != nil, rtCPUs)
		if err != nil {
			e.Errors[s.ID] = fmt.Sprintf("process %d: %v", w.PID, err)
			e.refuse(s.ID, RefusedKernel)
			_ = restore(*w) // what was applied before the error
			delete(e.held, w.TID)
			continue
		}
		w.Applied = applied
		taken++
	}
	e.syncWeights(active, pids)
	e.syncIRQs(active)
	e.syncExt(byID)
	e.sampleCPUs()
	return taken, given, e.save()
}

// sampleCPUs notes the CPU each held thread last ran on, and forgets
// the processes no longer held.
func (e *Engine) sampleCPUs() {
	live := map[int]bool{}
	for tid, h := range e.held {
		live[h.PID] = true
		cpu, err := lastCPU(e.root, h.PID, tid)
		if err != nil {
			continue
		}
		if e.ranOn[h.PID] == nil {
			e.ranOn[h.PID] = map[int]bool{}
		}
		e.ranOn[h.PID][cpu] = true
	}
	for pid := range e.ranOn {
		if !live[pid] {
			delete(e.ranOn, pid)
		}
	}
}

// lastCPU reads the CPU thread tid of process pid last ran on (field 39
// of its stat).
func lastCPU(root string, pid, tid int) (int, error) {
	f, err := taskStat(root, pid, tid, 39)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f)
}

// Status returns what the engine holds for each strategy of the last
// Sync (those with processes, an error or changes to others), by id.
func (e *Engine) Status() []dataplane.StrategyStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	by := map[uint32]*dataplane.StrategyStatus{}
	get := func(id uint32) *dataplane.StrategyStatus {
		if by[id] == nil {
			by[id] = &dataplane.StrategyStatus{Strategy: id}
		}
		return by[id]
	}
	procs := map[int]*dataplane.StrategyProcess{}
	for _, h := range e.held {
		p := procs[h.PID]
		if p == nil {
			p = &dataplane.StrategyProcess{PID: h.PID, Applied: h.Applied, RanOn: slices.Sorted(maps.Keys(e.ranOn[h.PID]))}
			if pr, err := ReadProc(e.root, h.PID); err == nil {
				p.Comm = pr.Comm
			}
			procs[h.PID] = p
			st := get(h.Strategy)
			st.Procs = append(st.Procs, *p)
		}
		p.Threads++
	}
	for id, msg := range e.Errors {
		get(id).Error = msg
	}
	for id, g := range e.groups {
		get(id).Others = "its root-level processes in group " + g
	}
	for id := range e.irqBy {
		get(id)
	}
	for id := range e.steerBy {
		get(id)
	}
	for g := range e.csGroups {
		if id, err := strconv.ParseUint(strings.TrimPrefix(g, "/"+cpusPrefix), 10, 32); err == nil {
			get(uint32(id))
		}
	}
	var out []dataplane.StrategyStatus
	for _, id := range slices.Sorted(maps.Keys(by)) {
		st := by[id]
		for i := range st.Procs {
			st.Procs[i] = *procs[st.Procs[i].PID]
		}
		slices.SortFunc(st.Procs, func(a, b dataplane.StrategyProcess) int { return cmp.Compare(a.PID, b.PID) })
		var others []string
		if st.Others != "" {
			others = append(others, st.Others)
		}
		if len(e.weights) > 0 && slices.Contains(e.lowered, id) {
			others = append(others, fmt.Sprintf("%d groups' weight lowered", len(e.weights)))
		}
		if g := cpusGroup(id); e.csGroups[g] {
			others = append(others, "its CPUs its own: cpuset "+g+", every other process kept off them")
		}
		if irqs := e.irqBy[id]; len(irqs) > 0 {
			var n []string
			for _, irq := range slices.Sorted(slices.Values(irqs)) {
				n = append(n, strconv.Itoa(irq))
			}
			others = append(others, "IRQs "+strings.Join(n, ",")+" on its CPUs")
		}
		if s := e.steerBy[id]; len(s) > 0 {
			others = append(others, "XDP work of "+strings.Join(s, ", "))
		}
		st.Others = strings.Join(others, "; ")
		out = append(out, *st)
	}
	return out
}

// tasks lists process pid's threads.
func (e *Engine) tasks(pid int) []int {
	ents, _ := os.ReadDir(filepath.Join(e.root, strconv.Itoa(pid), "task"))
	out := make([]int, 0, len(ents))
	for _, t := range ents {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

// syncWeights lowers the weight of the groups holding none of the
// processes of strategies with others_weight (pids, by strategy), moving
// root-level ones into a group of their strategy's first, and undoes
// what no strategy wants any more.
func (e *Engine) syncWeights(strategies []config.Strategy, pids map[uint32][]int) {
	var weighted []config.Strategy
	for _, s := range strategies {
		if s.OthersWeight > 0 && len(pids[s.ID]) > 0 {
			weighted = append(weighted, s)
		}
	}
	e.lowered = nil
	for _, s := range weighted {
		e.lowered = append(e.lowered, s.ID)
	}
	if len(weighted) == 0 && len(e.weights) == 0 && len(e.groups) == 0 {
		return
	}
	if e.hier == nil {
		h, err := cpuHier(filepath.Join(e.root, "self", "mountinfo"))
		if err != nil {
			for _, s := range weighted {
				e.Errors[s.ID] = "others_weight: " + err.Error()
			}
			return
		}
		e.hier = &h
	}
	h := *e.hier
	var protected []string
	lowest := uint32(config.MaxCPUWeight)
	keep := map[uint32]bool{}
	for _, s := range weighted {
		lowest = min(lowest, s.OthersWeight)
		for _, pid := range pids[s.ID] {
			cg, err := h.cgroupOf(e.root, pid)
			if err != nil {
				continue // gone
			}
			if cg == "/" || strings.HasPrefix(cg, "/"+groupPrefix) {
				// Written down before it is made (see Sync).
				if _, ok := e.groups[s.ID]; !ok {
					e.groups[s.ID] = groupOf(s.ID)
					if err := e.save(); err != nil {
						e.Errors[s.ID] = "state file: " + err.Error()
						continue
					}
				}
				g, err := h.ensureGroup(s.ID, raised(s.OthersWeight))
				if err == nil && cg != g {
					err = h.moveTo(g, pid)
				}
				if g != "" {
					e.groups[s.ID], keep[s.ID] = g, true
				}
				if err != nil && !errors.Is(err, unix.ESRCH) {
					e.Errors[s.ID] = fmt.Sprintf("process %d: others_weight: %v", pid, err)
					continue
				}
				cg = g
			}
			protected = append(protected, cg)
		}
	}
	// Never the agent's own group (nor those above it): the agent that
	// gives everything back must not starve itself. At the root it is
	// a root task, which no weight lowers.
	if len(protected) > 0 {
		if cg, err := h.cgroupOf(e.root, e.me.pid); err == nil && cg != "/" {
			protected = append(protected, cg)
		}
	}
	var errs []error
	for id, g := range e.groups {
		if !keep[id] {
			errs = append(errs, h.dissolve(g))
			delete(e.groups, id)
		}
	}
	lower := map[string]bool{}
	if len(protected) > 0 {
		v := h.value(uint64(lowest))
		others := h.others(protected)
		added := false
		for _, g := range others {
			lower[g] = true
			if _, ok := e.weights[g]; !ok {
				old, err := h.readWeight(g)
				if err != nil {
					continue // gone
				}
				e.weights[g], added = old, true
			}
		}
		// Written down before they are lowered (see Sync).
		if added {
			errs = append(errs, e.save())
		}
		for _, g := range others {
			if _, ok := e.weights[g]; !ok {
				continue
			}
			if cur, _ := h.readWeight(g); cur != v {
				errs = append(errs, h.writeWeight(g, v))
			}
		}
	}
	for g, old := range e.weights {
		if !lower[g] {
			if err := h.writeWeight(g, old); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			delete(e.weights, g)
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, s := range weighted {
			e.Errors[s.ID] = "others_weight: " + err.Error()
		}
	}
}

// undo gives the groups in weights their weight back and dissolves the
// groups.
func (h hier) undo(weights map[string]string, groups []string) error {
	var errs []error
	for g, old := range weights {
		if err := h.writeWeight(g, old); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, g := range groups {
		errs = append(errs, h.dissolve(g))
	}
	return errors.Join(errs...)
}

// RevertAll gives every thread back what it had, the lowered groups
// their weight, dissolves the engine's groups and removes the state
// file.
func (e *Engine) RevertAll() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	// The cpusets first: a thread given back its own CPUs must be
	// where they are allowed.
	errs := []error{e.undoCpusets()}
	e.undoMoved()
	for tid, h := range e.held {
		if sameThread(e.root, h.PID, tid, h.Start, h.ThreadStart) {
			errs = append(errs, restore(*h))
		}
		delete(e.held, tid)
	}
	for irq, before := range e.irqs {
		errs = append(errs, restoreIRQ(e.root, irq, before))
		delete(e.irqs, irq)
	}
	if e.ext != nil {
		errs = append(errs, e.ext.SetPriority(nil))
	}
	for name := range e.steered {
		errs = append(errs, e.xdpSteer(name, -1))
		delete(e.steered, name)
	}
	if e.hier != nil {
		errs = append(errs, e.hier.undo(e.weights, slices.Collect(maps.Values(e.groups))))
		e.weights, e.groups = map[string]string{}, map[uint32]string{}
	}
	if e.state != "" {
		if err := os.Remove(e.state); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Wanted tells whether any of processes pids is one a scan would change:
// held (its new threads), or matched by a strategy. It reads only those
// processes, so an exec that no strategy wants costs no scan.
func (e *Engine) Wanted(strategies []config.Strategy, pids []int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	held := map[int]bool{}
	for _, h := range e.held {
		held[h.PID] = true
	}
	// What a look at an event's processes refuses is counted at the
	// scan, not twice.
	errs, refused := e.Errors, e.Refused
	defer func() { e.Errors, e.Refused = errs, refused }()
	e.Errors, e.Refused = map[uint32]string{}, nil
	res := e.compile(strategies)
	for _, pid := range pids {
		if held[pid] {
			return true
		}
		p, err := ReadProc(e.root, pid)
		if err != nil || p.Kernel {
			continue
		}
		// Started in the v1 root cpuset (by init): it may run on
		// dedicated CPUs until a scan moves it.
		if e.csGroups[othersGroup] && p.Cpuset == "/" && p.PID != 1 {
			return true
		}
		for i, s := range strategies {
			if e.matches(s, res[i], p) {
				return true
			}
		}
	}
	return false
}

// Changed reports whether the engine has anything to give back: threads
// held or noted, weights lowered, cpusets, IRQs or XDP work moved.
func (e *Engine) Changed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.held) > 0 || len(e.weights) > 0 || len(e.groups) > 0 || len(e.moved) > 0 || len(e.irqs) > 0 ||
		len(e.steered) > 0 || e.cpusetsChanged()
}

// HeldPIDs returns the processes the strategies hold.
func (e *Engine) HeldPIDs() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []int
	for _, h := range e.held {
		if !slices.Contains(out, h.PID) {
			out = append(out, h.PID)
		}
	}
	return out
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

// save writes what the engine changed to the state file (atomically), or
// removes it when it changed nothing.
func (e *Engine) save() error {
	if e.state == "" {
		return nil
	}
	if len(e.held) == 0 && len(e.weights) == 0 && len(e.groups) == 0 && len(e.moved) == 0 && len(e.irqs) == 0 && !e.cpusetsChanged() {
		if err := os.Remove(e.state); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	st := state{Weights: e.weights, Groups: slices.Sorted(maps.Values(e.groups)), IRQs: e.irqs, Cpuset: e.cpusetState()}
	for _, h := range e.held {
		st.Held = append(st.Held, *h)
	}
	for _, m := range e.moved {
		st.Moved = append(st.Moved, *m)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeState(e.state, b)
}

// writeState writes b to path atomically: into a temporary file of a
// name nobody can guess, made with O_EXCL (os.CreateTemp), so a symlink
// planted at a predictable name ("CONFIG.sched.tmp") by whoever can write
// the config's directory is never followed, then renamed over path
// (rename replaces a link at path itself, not its target).
func writeState(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// readState reads the state file at path, not through a symlink: what
// it says is given back as root, so it must be the file the engine
// wrote.
func readState(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 64<<20))
}

// compile returns each strategy's command_regex compiled (nil: none),
// from the engine's cache; e.mu held. Patterns no strategy has any more
// are dropped. The config checked them, so none fails here.
func (e *Engine) compile(strategies []config.Strategy) []*regexp.Regexp {
	if e.regexps == nil {
		e.regexps = map[string]*regexp.Regexp{}
	}
	res := make([]*regexp.Regexp, len(strategies))
	used := map[string]bool{}
	for i, s := range strategies {
		if s.CommandRegex == "" {
			continue
		}
		used[s.CommandRegex] = true
		re, ok := e.regexps[s.CommandRegex]
		if !ok {
			re, _ = regexp.Compile(s.CommandRegex)
			e.regexps[s.CommandRegex] = re
		}
		res[i] = re
	}
	for pat := range e.regexps {
		if !used[pat] {
			delete(e.regexps, pat)
		}
	}
	return res
}
