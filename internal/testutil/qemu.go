// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Guest kernels: KernelEnv names the kernel BootGuest boots;
// DefaultKernel is where `make scx-kernel` puts Debian's
// trixie-backports cloud kernel (sched_ext, cgroup v2 with cpusets),
// which this machine's kernel has not.
const (
	KernelEnv     = "EDGEPLANE_SCX_KERNEL"
	DefaultKernel = "/var/cache/edgeplane/scx/vmlinuz"
)

// BootGuest builds the calling package's test binary, boots the guest
// kernel under qemu (TCG, 2 vCPUs on one host thread) with it as init
// and env (NAME=VALUE words) on the kernel's command line, and returns
// the lines of its console that start with prefix ("edgeplane-scx: "),
// prefix kept, and the console's last lines for a failure's report. The
// guest powers itself off; timeout bounds the run.
func BootGuest(t *testing.T, env, prefix string, timeout time.Duration) (said []string, console string) {
	t.Helper()
	RequireRoot(t)
	RequireTool(t, "qemu-system-x86_64")
	kernel := os.Getenv(KernelEnv)
	if kernel == "" {
		kernel = DefaultKernel
	}
	if _, err := os.Stat(kernel); err != nil {
		t.Fatalf("no guest kernel at %s (make scx-kernel fetches one; or set %s): %v", kernel, KernelEnv, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "init")
	build := exec.Command(GoTool(), "test", "-c", "-buildvcs=false", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guest: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := writeInitramfs(initrd, bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// One host thread runs both vCPUs (thread=single): enabling
	// sched_ext patches kernel text while the other CPU runs, which
	// multi-threaded TCG once turned into an int3 oops in
	// update_rq_clock (1 run in 5 here).
	q := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "tcg,thread=single", "-m", "1024", "-smp", "2", "-nographic", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 loglevel=4 "+env)
	var out bytes.Buffer
	q.Stdout, q.Stderr = &out, &out
	start := time.Now()
	err := q.Run()
	for _, line := range strings.Split(out.String(), "\n") {
		if i := strings.Index(line, prefix); i >= 0 {
			said = append(said, strings.TrimRight(line[i:], "\r"))
		}
	}
	t.Logf("qemu ran %s (%v); the guest said:\n%s", time.Since(start).Round(time.Second), err, strings.Join(said, "\n"))
	lines := strings.Split(out.String(), "\n")
	return said, strings.Join(lines[max(0, len(lines)-60):], "\n")
}

// writeInitramfs writes an uncompressed cpio (newc) archive holding the
// directories the guest mounts on and bin as /init.
func writeInitramfs(path, bin string) error {
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var w bytes.Buffer
	ino := 1
	entry := func(name string, mode int, data []byte) {
		fmt.Fprintf(&w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		ino++
		w.WriteString(name)
		w.WriteByte(0)
		for w.Len()%4 != 0 {
			w.WriteByte(0)
		}
		w.Write(data)
		for w.Len()%4 != 0 {
			w.WriteByte(0)
		}
	}
	for _, d := range []string{"proc", "sys", "dev", "tmp"} {
		entry(d, 0o040755, nil)
	}
	entry("init", 0o100755, b)
	entry("TRAILER!!!", 0, nil)
	return os.WriteFile(path, w.Bytes(), 0o644)
}

// GuestInit is the guest side of BootGuest, for a test binary that is
// the guest's init: it mounts /proc, /sys, /dev and cgroup2 on
// /sys/fs/cgroup (when the kernel has no v1 hierarchy there, its only
// one) and runs itself again (cilium/ebpf reads /proc/self/mountinfo
// once, which the binary's packages may have done before /proc was
// there); then it runs checks, says PASS or FAIL and why (each line
// prefixed, as BootGuest reads them), and powers the machine off.
func GuestInit(prefix string, checks func() error) {
	say := func(format string, a ...any) { fmt.Printf(prefix+format+"\n", a...) }
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		for _, m := range []struct{ src, dst, fs string }{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
			{"cgroup2", "/sys/fs/cgroup", "cgroup2"}} {
			_ = os.MkdirAll(m.dst, 0o755)
			if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil {
				say("FAIL mount %s: %v", m.dst, err)
			}
		}
		err := unix.Exec("/init", os.Args, os.Environ())
		say("FAIL run again: %v", err)
	}
	defer func() {
		if r := recover(); r != nil {
			say("FAIL panic: %v", r)
		}
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	}()
	if err := checks(); err != nil {
		say("FAIL %v", err)
		return
	}
	say("PASS")
}
