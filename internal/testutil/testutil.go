// SPDX-License-Identifier: Apache-2.0

// Package testutil has helpers for tests that need root, network
// namespaces and veth pairs. A privileged test skips with a reason when not
// root; CI runs as root and fails any run that skipped.
package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netns"
)

// RequireRoot skips t unless the test runs as root.
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

// UniqueName returns prefix plus a short random suffix, for namespace
// and interface names that cannot clash between parallel tests.
func UniqueName(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// NetNS is a named network namespace (visible to `ip netns`).
type NetNS struct {
	Name   string
	Handle netns.NsHandle
}

// NewNetNS creates a named namespace with loopback up and removes it when
// t ends. The calling goroutine's namespace is left unchanged.
func NewNetNS(t testing.TB, prefix string) *NetNS {
	t.Helper()
	ns, err := CreateNetNS(UniqueName(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// CreateNetNS creates a named namespace with loopback up; Close removes it.
func CreateNetNS(name string) (*NetNS, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		return nil, fmt.Errorf("restore netns: %w", err)
	}
	ns := &NetNS{Name: name, Handle: h}
	if _, err := ns.Exec("ip", "link", "set", "lo", "up"); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// Close deletes the namespace.
func (n *NetNS) Close() error {
	n.Handle.Close()
	return netns.DeleteNamed(n.Name)
}

// Do runs fn on a thread switched into the namespace.
func (n *NetNS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never returned to the pool: it stays locked and
		// dies with the goroutine, so no other goroutine inherits the
		// namespace.
		runtime.LockOSThread()
		if err := netns.Set(n.Handle); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", n.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Exec runs a command inside the namespace and returns its combined output.
func (n *NetNS) Exec(name string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// MustExec runs a command in the namespace and fails t on error.
func (n *NetNS) MustExec(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := n.Exec(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Run runs a shell command line on the host and returns its output.
func Run(cmdline string) (string, error) {
	out, err := exec.Command("sh", "-c", cmdline).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", cmdline, err, out)
	}
	return string(out), nil
}
