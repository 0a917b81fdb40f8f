// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Strategy policies: how a strategy's processes are kept fast when every
// CPU is loaded (issue 17, after Gthulhu's strategies).
const (
	// PolicyFIFO and PolicyRR run the processes under SCHED_FIFO or
	// SCHED_RR at RTPriority: ahead of every normal task, until they
	// block or yield.
	PolicyFIFO = "fifo"
	PolicyRR   = "rr"
	// PolicyDeadline runs them under SCHED_DEADLINE: ExecutionTime of
	// CPU every Period, guaranteed by the kernel's admission control.
	PolicyDeadline = "deadline"
	// PolicyWeight leaves their policy as it is and lowers everything
	// else's cpu.weight to OthersWeight: it needs no real-time
	// privilege.
	PolicyWeight = "weight"
)

// strategyPolicies are the policies in the order messages list them.
var strategyPolicies = []string{PolicyFIFO, PolicyRR, PolicyDeadline, PolicyWeight}

// Strategy is a set of processes (matched by CommandRegex and Selectors)
// and how the agent keeps them fast under full CPU load: a real-time
// policy, dedicated CPUs, the IRQs of named interfaces steered to those
// CPUs, a lower CPU weight for everything else.
type Strategy struct {
	// ID identifies the strategy; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Name is a label for people (optional).
	Name string `yaml:"name,omitempty"`
	// CommandRegex (RE2) is matched against a process's comm and its
	// full command line (arguments joined by spaces): either matching
	// selects it. A process names itself, so in a strategy that
	// changes anything it only narrows what Selectors choose.
	CommandRegex string `yaml:"command_regex,omitempty"`
	// Selectors a process must all match, besides CommandRegex. A
	// strategy has CommandRegex or a selector, or it would take every
	// process; one that changes anything has user, cgroup or
	// pod_labels, which a process cannot choose itself.
	Selectors *Selectors `yaml:"selectors,omitempty"`
	// Priority protects the processes with the real-time policy Policy
	// names.
	Priority bool `yaml:"priority,omitempty"`
	// Policy is PolicyFIFO, PolicyRR, PolicyDeadline or PolicyWeight;
	// empty: fifo with Priority, else weight. The real-time ones need
	// Priority.
	Policy string `yaml:"policy,omitempty"`
	// RTPriority (fifo, rr) is the real-time priority, 1-99
	// (DefaultRTPriority).
	RTPriority uint32 `yaml:"rt_priority,omitempty"`
	// ExecutionTime (deadline, required) is the runtime each Period:
	// MinExecutionTime up to the period. FIFO and RR have no budget, a
	// weight is a share: neither takes one.
	ExecutionTime Duration `yaml:"execution_time,omitempty"`
	// Period (deadline) is the period and the deadline
	// (DefaultPeriod): the runtime is due within the period it starts.
	Period Duration `yaml:"period,omitempty"`
	// CPUs are dedicated to the processes (a cpuset the others are
	// moved off); no two strategies share one.
	CPUs CPUList `yaml:"cpus,omitempty"`
	// IRQAffinity names the interfaces whose IRQs (on veth, whose XDP
	// work) go to CPUs: the packet path's CPU follows the process that
	// sends, so both are placed together.
	IRQAffinity []string `yaml:"irq_affinity,omitempty"`
	// OthersWeight is the cgroup v2 cpu.weight (1-10000; v1 cpu.shares
	// in proportion, 1024 for 100) of everything the strategy does not
	// protect: the groups holding none of its processes, at every level
	// above theirs. Its processes in the root group are moved into a
	// group of their own instead, weighing 100/OthersWeight root tasks.
	// 0 leaves the weights (with policy weight named:
	// DefaultOthersWeight).
	OthersWeight uint32 `yaml:"others_weight,omitempty"`
}

// Selectors choose processes by where and as whom they run; each one
// set must match.
type Selectors struct {
	// PodLabels are Kubernetes pod labels the process's pod has: the
	// pod whose UID names the process's cgroup where the kubelet makes
	// pods (/kubepods/..., /kubepods.slice/...), labels from the
	// kubelet's pod list.
	PodLabels map[string]string `yaml:"pod_labels,omitempty"`
	// Cgroup is the cgroup v2 path the process is in
	// ("/system.slice/open5gs-upfd.service"), or one above it. The agent takes a
	// process in it only while every group from the root down to the
	// process's is root's and not delegated.
	Cgroup string `yaml:"cgroup,omitempty"`
	// User is the user name or numeric uid the process runs as.
	User string `yaml:"user,omitempty"`
	// Env is NAME=VALUE, which the process's environment must hold.
	Env string `yaml:"env,omitempty"`
}

// Strategy settings' bounds and defaults. The period bounds are the
// kernel's defaults of sched_deadline_period_min_us and _max_us; a
// runtime under 10 us is mostly the scheduler's own overhead.
const (
	DefaultRTPriority = 50
	MaxRTPriority     = 99
	DefaultPeriod     = time.Millisecond
	MinPeriod         = 100 * time.Microsecond
	MaxPeriod         = 4194304 * time.Microsecond
	MinExecutionTime  = 10 * time.Microsecond
	MaxCPUWeight      = 10000
	// DefaultOthersWeight is the others' cpu.weight under policy
	// weight: 1 of the default 100 (measured here under stress-ng
	// --cpu 20, the others at cpu.shares 2: a 1 ms timer's wake-up p99
	// 125 us against 4.4 ms).
	DefaultOthersWeight = 1
)

// Effective returns s with its defaults filled: the policy, the
// real-time priority of fifo and rr, the period of deadline, the others'
// weight of a policy weight named (a strategy with no policy and no
// priority, only cpus say, changes no weight).
func (s Strategy) Effective() Strategy {
	if s.Policy == PolicyWeight && s.OthersWeight == 0 {
		s.OthersWeight = DefaultOthersWeight // asked for by name only
	}
	if s.Policy == "" {
		s.Policy = PolicyWeight
		if s.Priority {
			s.Policy = PolicyFIFO
		}
	}
	switch s.Policy {
	case PolicyFIFO, PolicyRR:
		if s.RTPriority == 0 {
			s.RTPriority = DefaultRTPriority
		}
	case PolicyDeadline:
		if s.Period.D == 0 {
			s.Period.D = DefaultPeriod
		}
	}
	return s
}

// realTime reports whether policy p is a real-time scheduling policy.
func realTime(p string) bool {
	return p == PolicyFIFO || p == PolicyRR || p == PolicyDeadline
}

// RealTime reports whether s runs its processes under a real-time
// policy (fifo, rr or deadline).
func (s Strategy) RealTime() bool { return s.Priority && realTime(s.Effective().Policy) }

// Changes reports whether s changes anything: it raises its processes'
// priority, dedicates CPUs to them or lowers the others' weight. Such a
// strategy must select by what a process cannot choose itself
// (Selectors.Trusted).
func (s Strategy) Changes() bool {
	return s.Priority || !s.CPUs.IsZero() || s.Effective().OthersWeight > 0
}

// Trusted reports whether sel selects by something a process cannot
// choose itself: the user it runs as, a cgroup (root-owned and not
// delegated, which the agent checks when it matches), or its pod (found
// where the kubelet puts pods). A process names itself (command_regex)
// and sets its own environment (env): those only narrow a selection.
func (sel *Selectors) Trusted() bool {
	return sel != nil && (sel.User != "" || sel.Cgroup != "" || len(sel.PodLabels) > 0)
}

// SystemProcesses are the names (as a comm and as a command line) of
// processes no strategy may take: init, the kernel's threads, the
// daemons a host is reached and run by, shells, container runtimes and
// the agent. A strategy that changes anything is refused when its
// command_regex matches one of them, or anyProcess: such a pattern
// would take the system's processes, with a real-time policy or its
// CPUs, once selected by root's uid or a broad cgroup.
var SystemProcesses = []string{
	"init", "/sbin/init", "systemd", "/lib/systemd/systemd --system --deserialize 30",
	"systemd-journald", "systemd-udevd", "systemd-logind", "systemd-networkd", "systemd-resolved", "systemd-timesyncd",
	"dbus-daemon", "dbus-broker", "polkitd", "udevd", "sshd", "/usr/sbin/sshd -D", "sshd: root@pts/0",
	"agetty", "login", "getty", "cron", "crond", "atd", "rsyslogd", "chronyd", "ntpd",
	"containerd", "dockerd", "crio", "kubelet", "kube-proxy", "containerd-shim-runc-v2", "runc",
	"bash", "-bash", "sh", "su", "sudo",
	"edgeplane", "/usr/local/bin/edgeplane agent --config /etc/edgeplane/gateway.yaml",
	"kthreadd", "ksoftirqd/0", "migration/0", "rcu_preempt", "kworker/0:1-events", "irq/24-eth0",
}

// anyProcess is a name no operator targets: a command_regex that
// matches it matches names at large ("." , "^", "[a-z]").
const anyProcess = "q7-unnamed-process"

// broadCgroups hold the system's processes, or many services or pods
// of it: selected by one of these (or by root's uid), a strategy must
// name its processes with a command_regex too.
var broadCgroups = []string{"/system.slice", "/user.slice", "/machine.slice", "/kubepods", "/kubepods/burstable", "/kubepods/besteffort",
	"/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice", "/kubepods.slice/kubepods-besteffort.slice"}

// MaxStrategies bounds the strategies: the agent's scan every second
// costs processes × strategies (their regexes and selectors), and a
// gateway protects a handful of processes, not hundreds.
const MaxStrategies = 64

var strategyKind = func() *KindOf[Strategy] {
	k := &KindOf[Strategy]{
		Kind:     KindStrategy,
		Plural:   "strategies",
		KeyField: "id",
		Check:    checkStrategy,
		Capacity: func(n int, _ Limits) string {
			if n > MaxStrategies {
				return fmt.Sprintf("%d strategies, at most %d", n, MaxStrategies)
			}
			return ""
		},
	}
	// A dedicated CPU belongs to one strategy.
	for cpu := range MaxCPUs {
		k.Unique = append(k.Unique, Unique[Strategy]{
			Field: "cpus",
			Key:   func(s *Strategy) (any, bool) { return cpu, s.CPUs.Has(cpu) },
			Clash: func(_ *Strategy, other string) string {
				return fmt.Sprintf("cpu %d is already dedicated to %s", cpu, other)
			},
		})
	}
	return k
}()

func checkStrategy(c *Check, s *Strategy) {
	if s.ID == 0 {
		c.Add("id", "required")
	}
	checkSelection(c, s)
	checkPrivilege(c, s)
	want := JoinWords(strategyPolicies, "or")
	switch {
	case s.Policy != "" && !slices.Contains(strategyPolicies, s.Policy):
		c.Add("policy", "unknown policy %q (want %s)", s.Policy, want)
	case realTime(s.Policy) && !s.Priority:
		c.Add("policy", "%s needs priority: true (a real-time policy is how a strategy protects)", s.Policy)
	}
	// The settings of an unknown policy are not also judged.
	if !c.bad["policy"] {
		checkPolicySettings(c, s.Effective())
	}
	if len(s.IRQAffinity) > 0 && s.CPUs.IsZero() {
		c.Add("irq_affinity", "needs cpus (the CPUs the IRQs go to)")
	}
	seen := map[string]int{}
	for i, name := range s.IRQAffinity {
		at := "irq_affinity[" + strconv.Itoa(i) + "]"
		if j, dup := seen[name]; dup {
			c.Add(at, "%s is already irq_affinity[%d]", name, j)
			continue
		}
		seen[name] = i
		if reason := ifnameProblem(name); reason != "" {
			c.Add(at, "%s", reason)
		}
	}
	if w := s.OthersWeight; w > MaxCPUWeight {
		c.Add("others_weight", "%d is outside 1-%d (cgroup v2 cpu.weight)", w, MaxCPUWeight)
	}
}

// checkPolicySettings checks the settings that belong to some policies
// only, against e's (effective) policy.
func checkPolicySettings(c *Check, e Strategy) {
	switch e.Policy {
	case PolicyFIFO, PolicyRR:
		if e.RTPriority > MaxRTPriority {
			c.Add("rt_priority", "%d is outside 1-%d", e.RTPriority, MaxRTPriority)
		}
		if e.ExecutionTime.D != 0 {
			c.Add("execution_time", "not for policy %s (FIFO and RR have no budget: a task runs until it blocks or yields; use deadline)", e.Policy)
		}
	case PolicyDeadline, PolicyWeight:
		if e.RTPriority != 0 {
			c.Add("rt_priority", "not for policy %s (only fifo and rr)", e.Policy)
		}
	}
	switch e.Policy {
	case PolicyDeadline:
		p, rt := e.Period.D, e.ExecutionTime.D
		if p < MinPeriod || p > MaxPeriod {
			c.Add("period", "%s is outside %s-%s", p, MinPeriod, MaxPeriod)
		}
		switch {
		case rt == 0:
			c.Add("execution_time", "required with policy deadline (the runtime each period)")
		case rt < MinExecutionTime || rt >= p:
			// A runtime of the whole period leaves the CPU to nothing
			// else while the task runs (with RT throttling off the
			// kernel admits it).
			c.Add("execution_time", "%s is outside %s up to below %s (the period: the rest of each period is the other tasks')", rt, MinExecutionTime, p)
		}
	case PolicyWeight:
		if e.ExecutionTime.D != 0 {
			c.Add("execution_time", "not for policy weight (a weight is a share, not a budget; use deadline)")
		}
		fallthrough
	default:
		if e.Period.D != 0 {
			c.Add("period", "not for policy %s (only deadline)", e.Policy)
		}
	}
}

// checkSelection checks what selects s's processes.
func checkSelection(c *Check, s *Strategy) {
	if s.CommandRegex != "" {
		if _, err := regexp.Compile(s.CommandRegex); err != nil {
			c.Add("command_regex", "invalid RE2 expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
	}
	sel := s.Selectors
	if sel == nil || (len(sel.PodLabels) == 0 && sel.Cgroup == "" && sel.User == "" && sel.Env == "") {
		if s.CommandRegex == "" {
			c.Add("command_regex", "required without selectors (a strategy would take every process)")
		}
		return
	}
	for _, k := range slices.Sorted(maps.Keys(sel.PodLabels)) {
		if reason := labelProblem(k, sel.PodLabels[k]); reason != "" {
			c.Add("selectors.pod_labels", "%s", reason)
		}
	}
	if g := sel.Cgroup; g != "" {
		switch {
		case !strings.HasPrefix(g, "/"):
			c.Add("selectors.cgroup", "%q must start with / (a cgroup v2 path)", g)
		case slices.Contains(strings.Split(g, "/"), ".."):
			c.Add("selectors.cgroup", "%q must not contain ..", g)
		case strings.ContainsRune(g, 0):
			c.Add("selectors.cgroup", "%q must not contain NUL", g)
		}
	}
	if u := sel.User; u != "" && !validUser(u) {
		c.Add("selectors.user", "%q is neither a user name nor a numeric uid", u)
	}
	if e := sel.Env; e != "" {
		if name, _, ok := strings.Cut(e, "="); !ok || !envName.MatchString(name) {
			c.Add("selectors.env", "%q: want NAME=VALUE (NAME letters, digits and _, not starting with a digit)", e)
		}
	}
}

// checkPrivilege checks what a strategy that changes something selects:
// processes that cannot name themselves into it, and none of the
// system's.
func checkPrivilege(c *Check, s *Strategy) {
	if !s.Changes() || c.bad["command_regex"] {
		return
	}
	sel := s.Selectors
	if !sel.Trusted() {
		c.Add("selectors", "a strategy that raises priority, dedicates cpus or lowers others_weight needs user, cgroup or pod_labels "+
			"(any user can name a process to match command_regex and set its env: those only narrow)")
		return
	}
	if s.CommandRegex != "" {
		re := regexp.MustCompile(s.CommandRegex) // checkSelection compiled it
		for _, name := range append(SystemProcesses, anyProcess) {
			if re.MatchString(name) {
				what := "a system process's name"
				if name == anyProcess {
					what = "a name nobody chose for it (it matches process names at large)"
				}
				c.Add("command_regex", "%q matches %q, %s: a strategy never takes the system's processes", s.CommandRegex, name, what)
				return
			}
		}
	}
	if sel.Cgroup != "" {
		switch g := path.Clean(sel.Cgroup); {
		case g == "/" || g == "/init.scope":
			c.Add("selectors.cgroup", "%q holds init or every process: name the group of the processes to protect", sel.Cgroup)
			return
		case slices.Contains(broadCgroups, g) && s.CommandRegex == "":
			c.Add("selectors.cgroup", "%q holds many services or pods, the system's among them: name one, or narrow it with command_regex", sel.Cgroup)
			return
		}
	}
	if isRoot(sel.User) && s.CommandRegex == "" {
		c.Add("selectors.user", "%s's processes are the system's (init, sshd, the agent): narrow them with command_regex", sel.User)
	}
}

// Patterns of names the selectors take: a Kubernetes label's name part
// and value (63 bytes at most, checked apart), a DNS subdomain (a label
// key's prefix), a user name as useradd takes it (32 bytes at most,
// checked apart), an environment variable's name.
var (
	labelName    = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	userName     = regexp.MustCompile(`^[A-Za-z_][-A-Za-z0-9_.]*\$?$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// labelProblem returns why key=value is not a Kubernetes label, or "".
// The rules are apimachinery's IsQualifiedName and IsValidLabelValue.
func labelProblem(key, value string) string {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		prefix, name = "", key
	}
	switch {
	case hasPrefix && (prefix == "" || len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)):
		return fmt.Sprintf("label key %q: the prefix must be a DNS subdomain (lowercase letters, digits, - and ., 253 bytes at most)", key)
	case name == "" || len(name) > 63 || !labelName.MatchString(name):
		return fmt.Sprintf("label key %q: the name must be 1-63 letters, digits, -, _ or ., starting and ending with a letter or digit", key)
	case value != "" && (len(value) > 63 || !labelName.MatchString(value)):
		return fmt.Sprintf("label %s value %q: want at most 63 letters, digits, -, _ or ., starting and ending with a letter or digit", key, value)
	}
	return ""
}

// isRoot reports whether user u (a name or a uid) is root.
func isRoot(u string) bool {
	id, err := strconv.ParseUint(u, 10, 32)
	return u == "root" || (err == nil && id == 0)
}

// validUser reports whether u is a user name or a uid ((uid_t)-1 is
// none).
func validUser(u string) bool {
	if id, err := strconv.ParseUint(u, 10, 32); err == nil {
		return id != 1<<32-1
	}
	return len(u) <= 32 && userName.MatchString(u)
}
