// SPDX-License-Identifier: Apache-2.0

// Package testutil has helpers shared by tests. A privileged test skips with
// a reason when not root; CI runs as root and fails any run that skipped.
// Network namespaces and topologies come from internal/topo; NetNS gives a
// test one that goes away with it.
package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/cilium/ebpf/rlimit"

	"github.com/edgeplane/edgeplane/internal/topo"
)

// RequireRoot skips t unless the test runs as root, and lifts the memlock
// rlimit for BPF maps.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF, network namespaces)")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("remove memlock rlimit: %v", err)
	}
}

// RequireTool skips t unless the named program is installed (`make deps`
// installs all of them).
func RequireTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("needs %s (run `make deps`)", name)
	}
}

// UniqueName returns prefix plus a short random suffix, for namespace and
// pin-dir names that cannot clash between tests.
func UniqueName(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// NetNS creates network namespace name for t (pass a UniqueName) and
// removes it in t.Cleanup, reporting a failure to.
func NetNS(t testing.TB, name string) *topo.NS {
	t.Helper()
	n, err := topo.NewNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Delete(); err != nil {
			t.Errorf("remove netns: %v", err)
		}
	})
	return n
}

// RunAs runs a program as uid (and its group, the same number) and
// returns its combined output: what an unprivileged local user could do.
func RunAs(uid uint32, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// GoTool finds the go command that runs this test: on PATH, else in
// GOROOT.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// BuildBinaries builds, from this tree into dir, edgeplane (what a
// gateway or a controller runs) and edgeplane-dev (the lab, the bench and
// the WAN emulator, which run edgeplane for their agents), and returns
// their paths. No VCS stamp: the binaries do not use it, and git refuses
// a checkout owned by another user.
func BuildBinaries(dir string) (edgeplane, dev string, err error) {
	out, err := exec.Command(GoTool(), "build", "-buildvcs=false", "-o", dir+string(filepath.Separator),
		"github.com/edgeplane/edgeplane/cmd/edgeplane", "github.com/edgeplane/edgeplane/cmd/edgeplane-dev").CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("build edgeplane and edgeplane-dev: %w\n%s", err, out)
	}
	return filepath.Join(dir, "edgeplane"), filepath.Join(dir, "edgeplane-dev"), nil
}
