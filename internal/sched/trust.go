// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// What a strategy never takes, whatever it matches: init (PID 1), the
// kernel's threads, the agent itself and the processes of its cgroup
// (when it has one of its own: under a service manager, its helpers).

// Reasons a strategy took nothing of a process it matched, or nothing at
// all, in Engine.Refused and the agent's edgeplane_strategy_refused.
const (
	// RefusedUntrusted: a strategy that changes something selected a
	// process by command_regex or env alone.
	RefusedUntrusted = "untrusted_selection"
	// RefusedDelegated: its cgroup selector matched a process in a
	// delegated group.
	RefusedDelegated = "delegated_cgroup"
	// RefusedHost: the host refuses the strategy (RT throttling off,
	// deadline bandwidth, no CPU left undedicated).
	RefusedHost = "host"
	// RefusedKernel: the kernel refused its policy or CPUs to a thread.
	RefusedKernel = "kernel"
)

// RefusedReasons are the reasons, in the order metrics list them.
var RefusedReasons = []string{RefusedUntrusted, RefusedDelegated, RefusedHost, RefusedKernel}

// pfKthread is PF_KTHREAD, the flag of a kernel thread in
// /proc/PID/stat (include/linux/sched.h).
const pfKthread = 0x00200000

// errUntrusted is the error of a strategy that changes something and
// selects only by what a process chooses itself (a config from before
// the rule, say): it takes nothing.
var errUntrusted = errors.New("selectors: it changes what processes get and selects by command_regex or env alone, " +
	"which any user's process can match: it takes nothing until it selects by user, cgroup or pod_labels")

// self is the agent's own process and, when it is not the root, its
// cgroup v2 group.
type self struct {
	pid    int
	cgroup string
}

// selfOf reads the agent's identity.
func selfOf(root string) self {
	s := self{pid: os.Getpid()}
	if p, err := ReadProc(root, s.pid); err == nil && p.Cgroup != "/" {
		s.cgroup = p.Cgroup
	}
	return s
}

// untouchable reports whether no strategy may take process p.
func (s self) untouchable(p Proc) bool {
	return p.PID == 1 || p.Kernel || p.PID == s.pid || (s.cgroup != "" && under(p.Cgroup, s.cgroup))
}

// under reports whether cgroup path g is group or one below it.
func under(g, group string) bool {
	return g == group || strings.HasPrefix(g, strings.TrimSuffix(group, "/")+"/")
}

// v2Mount finds where the cgroup v2 hierarchy is mounted, from
// mountinfo ("": none).
func v2Mount(mountinfo string) string {
	m, _ := cgroupMounts(mountinfo)
	return m.v2
}

// delegated says why cgroup v2 group g (a path under mount) may hold
// processes their owner put there, or "": every group from the root
// down to g must be root's and writable by root alone, its cgroup.procs
// too. Delegating a group (systemd's Delegate=, a container's own
// cgroup namespace) hands its directory and cgroup.procs to another
// user, who may then make groups of any name below it and move its
// processes in.
func delegated(mount, g string) string {
	if mount == "" {
		return "no cgroup v2 hierarchy is mounted"
	}
	dir := mount
	for _, seg := range append([]string{""}, strings.Split(strings.Trim(g, "/"), "/")...) {
		dir = filepath.Join(dir, seg)
		for _, f := range []string{dir, filepath.Join(dir, "cgroup.procs")} {
			fi, err := os.Lstat(f)
			if err != nil {
				return err.Error()
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return f + ": no owner"
			}
			if st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
				rel, _ := filepath.Rel(mount, dir)
				return fmt.Sprintf("cgroup /%s is delegated (%s: owner uid %d, mode %s): its processes may be anyone's choosing",
					strings.TrimPrefix(rel, "."), filepath.Base(f), st.Uid, fi.Mode().Perm())
			}
		}
	}
	return ""
}
