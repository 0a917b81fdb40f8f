// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The weight mechanism (others_weight) needs no real-time privilege: the
// cgroups that hold none of a strategy's processes get a lower CPU
// weight, at every level on the way from the root to the ones that do.
// Processes in the root cgroup (a host without systemd, or cgroup v1 as
// on these machines) have no cgroup of their own to weigh against the
// root's other tasks, so the engine moves them into a group of the
// strategy's (groupPrefix + id) whose weight stands to a task's as the
// default 100 to others_weight.

// hier is the cgroup hierarchy the cpu controller is on.
type hier struct {
	mount string // its mount point
	v1    bool   // cgroup v1 (cpu.shares) rather than v2 (cpu.weight)
}

// groupPrefix names the groups the engine makes for root-level
// processes: edgeplane-strategy-ID.
const groupPrefix = "edgeplane-strategy-"

// cpuHier finds the cpu controller's hierarchy from mountinfo (a
// /proc/PID/mountinfo): a cgroup2 mount whose root offers cpu, else a
// cgroup v1 mount with the cpu option.
func cpuHier(mountinfo string) (hier, error) {
	m, err := cgroupMounts(mountinfo)
	if err != nil {
		return hier{}, err
	}
	if m.v2Offers("cpu") {
		return hier{mount: m.v2}, nil
	}
	if mnt := m.v1["cpu"]; mnt != "" {
		return hier{mount: mnt, v1: true}, nil
	}
	return hier{}, errors.New("no cgroup hierarchy has the cpu controller (cgroup v2 with cpu enabled, or v1 mounted with cpu)")
}

// mounts are where the cgroup hierarchies are mounted.
type mounts struct {
	v2 string            // the cgroup v2 hierarchy ("": none)
	v1 map[string]string // by controller (and name=...), its v1 hierarchy
}

// v2Offers reports whether the v2 hierarchy's root offers controller c.
func (m mounts) v2Offers(c string) bool {
	if m.v2 == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(m.v2, "cgroup.controllers"))
	return err == nil && slices.Contains(strings.Fields(string(b)), c)
}

// cgroupMounts reads the cgroup mounts of a /proc/PID/mountinfo (the
// first of each).
func cgroupMounts(mountinfo string) (mounts, error) {
	m := mounts{v1: map[string]string{}}
	f, err := os.Open(mountinfo)
	if err != nil {
		return m, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent dev root mountpoint options [optional...] - type source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 {
			continue
		}
		mnt := unescapeMount(fields[4])
		switch tail[0] {
		case "cgroup2":
			if m.v2 == "" {
				m.v2 = mnt
			}
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				if _, ok := m.v1[opt]; !ok {
					m.v1[opt] = mnt
				}
			}
		}
	}
	return m, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupOf returns process pid's cgroup in h ("/" for the root).
func (h hier) cgroupOf(root string, pid int) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", err
	}
	if g, ok := cgroupIn(b, h.v1); ok {
		return g, nil
	}
	return "", fmt.Errorf("process %d has no cgroup in the cpu hierarchy", pid)
}

// cgroupIn finds, in a /proc/PID/cgroup, the path in the v1 hierarchy
// with the cpu controller (v1) or the v2 one.
func cgroupIn(b []byte, v1 bool) (string, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-id:controllers:path
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if (!v1 && f[0] == "0" && f[1] == "") || (v1 && slices.Contains(strings.Split(f[1], ","), "cpu")) {
			return f[2], true
		}
	}
	return "", false
}

// CPUCgroup returns process pid's group where the cpu controller is: its
// cgroup v1 cpu hierarchy's, else its v2 one ("/" for the root).
func CPUCgroup(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", err
	}
	if g, ok := cgroupIn(b, true); ok {
		return g, nil
	}
	if g, ok := cgroupIn(b, false); ok {
		return g, nil
	}
	return "", fmt.Errorf("process %d is in no cgroup with the cpu controller", pid)
}

// weightFile is the file of a group's weight: cpu.weight (v2) or
// cpu.shares (v1).
func (h hier) weightFile(group string) string {
	if h.v1 {
		return filepath.Join(h.mount, group, "cpu.shares")
	}
	return filepath.Join(h.mount, group, "cpu.weight")
}

// value is cgroup v2 weight w (1-10000, default 100) in h's terms: v1
// shares are 1024 for the default, 2-262144.
func (h hier) value(w uint64) string {
	if h.v1 {
		return strconv.FormatUint(min(max(w*1024/100, 2), 262144), 10)
	}
	return strconv.FormatUint(min(max(w, 1), 10000), 10)
}

// raised is the weight of a strategy's group of root-level processes:
// to one of the root's tasks (weight 100) as 100 to others.
func raised(others uint32) uint64 { return 100 * 100 / uint64(max(others, 1)) }

// groupOf is the path of strategy id's group of root-level processes.
func groupOf(id uint32) string { return "/" + groupPrefix + strconv.FormatUint(uint64(id), 10) }

// ensureGroup makes strategy id's group with weight w, and lets
// real-time tasks in where the kernel has RT group scheduling (a v1
// group's cpu.rt_runtime_us starts at 0, where FIFO and RR are refused):
// it asks the root's runtime, then less.
func (h hier) ensureGroup(id uint32, w uint64) (string, error) {
	g := groupOf(id)
	dir := filepath.Join(h.mount, g)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("make cgroup %s: %w", dir, err)
	}
	if !h.v1 {
		// The root's children get cpu.weight only with cpu in its
		// subtree_control (systemd enables it; a bare host may not).
		_ = os.WriteFile(filepath.Join(h.mount, "cgroup.subtree_control"), []byte("+cpu"), 0)
	}
	if err := os.WriteFile(h.weightFile(g), []byte(h.value(w)), 0); err != nil {
		return g, fmt.Errorf("weight of %s: %w", dir, err)
	}
	if rt := filepath.Join(dir, "cpu.rt_runtime_us"); fileExists(rt) {
		if b, err := os.ReadFile(filepath.Join(h.mount, "cpu.rt_runtime_us")); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
				for v := n; v >= n/8; v /= 2 {
					if os.WriteFile(rt, []byte(strconv.Itoa(v)), 0) == nil {
						break
					}
				}
			}
		}
	}
	return g, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// moveTo moves process pid (every thread) into group g.
func (h hier) moveTo(g string, pid int) error {
	return os.WriteFile(filepath.Join(h.mount, g, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// dissolve moves every process of group g to the root and removes g.
func (h hier) dissolve(g string) error {
	b, err := os.ReadFile(filepath.Join(h.mount, g, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range strings.Fields(string(b)) {
		if err := os.WriteFile(filepath.Join(h.mount, "cgroup.procs"), []byte(pid), 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("move %s back to the root: %w", pid, err))
		}
	}
	if err := os.Remove(filepath.Join(h.mount, g)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// others returns the groups to lower so that the groups in protected
// (each a cgroup path) run ahead: at every level from the root down to
// each, the sibling groups holding none of them, and not a group of the
// engine's own.
func (h hier) others(protected []string) []string {
	onPath := map[string]bool{}
	for _, p := range protected {
		for q := p; ; q = filepath.Dir(q) {
			onPath[q] = true
			if q == "/" {
				break
			}
		}
	}
	var out []string
	for parent := range onPath {
		if onPath[parent] && slices.ContainsFunc(protected, func(p string) bool { return p == parent }) {
			continue // its children are the protected group's own
		}
		ents, err := os.ReadDir(filepath.Join(h.mount, parent))
		if err != nil {
			continue
		}
		for _, e := range ents {
			child := filepath.Join(parent, e.Name())
			if !e.IsDir() || onPath[child] || strings.HasPrefix(e.Name(), groupPrefix) {
				continue
			}
			if fileExists(h.weightFile(child)) {
				out = append(out, child)
			}
		}
	}
	slices.Sort(out)
	return out
}

// readWeight reads group g's weight file.
func (h hier) readWeight(g string) (string, error) {
	b, err := os.ReadFile(h.weightFile(g))
	return strings.TrimSpace(string(b)), err
}

// writeWeight writes v to group g's weight file.
func (h hier) writeWeight(g, v string) error {
	return os.WriteFile(h.weightFile(g), []byte(v), 0)
}
