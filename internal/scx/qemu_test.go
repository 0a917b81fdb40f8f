// SPDX-License-Identifier: Apache-2.0

package scx

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

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// KernelEnv names the kernel TestSchedExtQEMU boots; DefaultKernel is
// where `make scx-kernel` puts Debian's trixie-backports cloud kernel
// (built with CONFIG_SCHED_CLASS_EXT=y).
const (
	KernelEnv     = "EDGEPLANE_SCX_KERNEL"
	DefaultKernel = "/var/cache/edgeplane/scx/vmlinuz"
)

// TestSchedExtQEMU: on a kernel with sched_ext, booted under qemu (TCG,
// this machine's kernel has no sched_ext) with this test binary as its
// init, the scheduler loads, the strategy engine applies a priority
// strategy through it, the priority task's wake-ups beside CPU hogs are
// less late than without priority (median under a quarter), and it
// unloads cleanly
// (guestChecks). Latency figures that count come from the host kernel
// (`edgeplane bench --scenario cpu`): these are TCG's.
func TestSchedExtQEMU(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "qemu-system-x86_64")
	kernel := os.Getenv(KernelEnv)
	if kernel == "" {
		kernel = DefaultKernel
	}
	if _, err := os.Stat(kernel); err != nil {
		t.Fatalf("no kernel with sched_ext at %s (make scx-kernel fetches one; or set %s): %v", kernel, KernelEnv, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "init")
	build := exec.Command(testutil.GoTool(), "test", "-c", "-buildvcs=false", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guest: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := writeInitramfs(initrd, bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// One host thread runs both vCPUs (thread=single): enabling
	// sched_ext patches kernel text while the other CPU runs, which
	// multi-threaded TCG once turned into an int3 oops in
	// update_rq_clock (1 run in 5 here).
	q := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "tcg,thread=single", "-m", "1024", "-smp", "2", "-nographic", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 loglevel=4 EDGEPLANE_SCX_GUEST=1")
	var out bytes.Buffer
	q.Stdout, q.Stderr = &out, &out
	start := time.Now()
	err := q.Run()
	var said []string
	for _, line := range strings.Split(out.String(), "\n") {
		if i := strings.Index(line, "edgeplane-scx: "); i >= 0 {
			said = append(said, strings.TrimRight(line[i:], "\r"))
		}
	}
	t.Logf("qemu ran %s (%v); the guest said:\n%s", time.Since(start).Round(time.Second), err, strings.Join(said, "\n"))
	if len(said) == 0 || said[len(said)-1] != "edgeplane-scx: PASS" {
		t.Fatalf("the guest did not pass; its console:\n%s", tail(out.String(), 60))
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
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
