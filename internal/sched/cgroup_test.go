// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestOthers: the groups lowered for protected groups are the siblings
// of every group on the way from the root to each, holding none of them,
// and never the engine's own groups nor a protected group's children.
func TestOthers(t *testing.T) {
	root := t.TempDir()
	h := hier{mount: root}
	for _, g := range []string{
		"/system.slice/upf.service", "/system.slice/ssh.service", "/system.slice/gnb.service/worker",
		"/user.slice/user-0.slice", "/init.scope", "/kubepods.slice/pod1", "/" + groupPrefix + "3",
	} {
		if err := os.MkdirAll(filepath.Join(root, g), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			err = os.WriteFile(filepath.Join(p, "cpu.weight"), []byte("100"), 0o644)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got := h.others([]string{"/system.slice/upf.service", "/system.slice/gnb.service"})
	want := []string{"/init.scope", "/kubepods.slice", "/system.slice/ssh.service", "/user.slice"}
	if !slices.Equal(got, want) {
		t.Errorf("others of upf and gnb: %q, want %q", got, want)
	}
	if got := h.others([]string{"/" + groupPrefix + "3"}); !slices.Equal(got, []string{"/init.scope", "/kubepods.slice", "/system.slice", "/user.slice"}) {
		t.Errorf("others of a root-level group: %q", got)
	}
	if h.value(1) != "1" || h.value(100) != "100" || h.value(20000) != "10000" {
		t.Errorf("v2 values: %s %s %s", h.value(1), h.value(100), h.value(20000))
	}
	v1 := hier{mount: root, v1: true}
	if v1.value(1) != "10" || v1.value(100) != "1024" || v1.value(0) != "2" || v1.value(10000) != "102400" || v1.value(1<<20) != "262144" {
		t.Errorf("v1 shares: %s %s %s %s", v1.value(1), v1.value(100), v1.value(0), v1.value(10000))
	}
	if raised(1) != 10000 || raised(100) != 100 || raised(0) != 10000 {
		t.Errorf("raised: %d %d %d", raised(1), raised(100), raised(0))
	}
}

// TestCPUHier: the cpu controller's hierarchy from mountinfo — cgroup v2
// where its root offers cpu, else the v1 mount with the cpu option (also
// joined with cpuacct), its path unescaped.
func TestCPUHier(t *testing.T) {
	dir := t.TempDir()
	v2 := filepath.Join(dir, "unified")
	if err := os.MkdirAll(v2, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := write("v1", "30 25 0:26 / /sys/fs/cgroup/cpu\\040x rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct\n"+
		"31 25 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"+
		"32 25 0:28 / "+v2+" rw - cgroup2 cgroup2 rw\n")
	write("unified/cgroup.controllers", "memory pids\n")
	h, err := cpuHier(v1)
	if err != nil || h != (hier{mount: "/sys/fs/cgroup/cpu x", v1: true}) {
		t.Errorf("hybrid host: %+v %v", h, err)
	}
	write("unified/cgroup.controllers", "cpuset cpu io memory\n")
	if h, err := cpuHier(v1); err != nil || h != (hier{mount: v2}) {
		t.Errorf("cpu on v2: %+v %v", h, err)
	}
	none := write("none", "22 1 0:5 / /proc rw - proc proc rw\n")
	if _, err := cpuHier(none); err == nil {
		t.Error("no cgroup mounts: no error")
	}
}
