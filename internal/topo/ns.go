// SPDX-License-Identifier: Apache-2.0

// Package topo builds network topologies on one machine for tests, the
// benchmarks and the lab: named network namespaces, veth pairs between
// them, addresses, routes, static neighbours, sysctls and offload
// settings, over netlink (and one ethtool ioctl) rather than `ip`
// commands, and runs Go code inside a namespace on a locked OS thread so
// the process's own namespace never changes. It imports nothing else of
// edgeplane, so a test that needs a namespace does not pull in the agent.
package topo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RunDir holds the named namespaces, as iproute2 keeps them: one bind
// mount of a namespace per file, so `ip netns exec` and nsenter find them.
const RunDir = "/run/netns"

// NS is a named network namespace with a netlink handle inside it.
// Close releases the handles and leaves the namespace; Delete removes it.
type NS struct {
	Name   string
	handle netns.NsHandle
	nl     *netlink.Handle
}

// NewNS creates the network namespace name (RunDir/name), with its
// loopback up, which every topology here wants. It fails if the name is
// taken.
func NewNS(name string) (*NS, error) {
	if err := shareRunDir(); err != nil {
		return nil, err
	}
	path := filepath.Join(RunDir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	f.Close()
	// A fresh thread unshares its network namespace and the namespace is
	// bind-mounted onto the file; the thread then ends with its goroutine.
	err = onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
		return nil
	})
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	n, err := OpenNS(name)
	if err == nil {
		err = n.Up("lo")
	}
	if err != nil {
		if n != nil {
			n.Close()
		}
		return nil, errors.Join(err, DeleteNS(name))
	}
	return n, nil
}

var runDirMu sync.Mutex

// shareRunDir makes RunDir a shared mount point, as `ip netns add` does,
// so that a namespace mounted or unmounted later reaches the mount
// namespaces made before (those of `ip netns exec` processes): a deleted
// namespace then disappears everywhere and is freed.
func shareRunDir() error {
	runDirMu.Lock()
	defer runDirMu.Unlock()
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", RunDir, err)
	}
	err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if !errors.Is(err, unix.EINVAL) {
		if err != nil {
			return fmt.Errorf("make %s shared: %w", RunDir, err)
		}
		return nil
	}
	// EINVAL: not a mount point yet. Make it one, then shared.
	if err := unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount %s: %w", RunDir, err)
	}
	if err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", RunDir, err)
	}
	return nil
}

// OpenNS opens the existing namespace name. Close releases it.
func OpenNS(name string) (*NS, error) {
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	n := &NS{Name: name, handle: h}
	// A netlink socket belongs to the namespace it was opened in, and
	// keeps it when used from other threads.
	err = n.Do(func() (err error) {
		n.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("netlink in netns %s: %w", name, err)
	}
	return n, nil
}

// Handle returns the namespace's handle, valid until Close.
func (n *NS) Handle() netns.NsHandle { return n.handle }

// Close releases the handles; the namespace stays.
func (n *NS) Close() error {
	if n.nl != nil {
		n.nl.Close()
		n.nl = nil
	}
	if n.handle.IsOpen() {
		return n.handle.Close()
	}
	return nil
}

// Delete releases the handles and removes the namespace.
func (n *NS) Delete() error {
	return errors.Join(n.Close(), DeleteNS(n.Name))
}

// DeleteNS removes the namespace name, as `ip netns del` does: the kernel
// frees it once no process, socket or mount holds it any more. A missing
// namespace is not an error.
func DeleteNS(name string) error {
	path := filepath.Join(RunDir, name)
	// EINVAL: not mounted (a file left by a failed create).
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// NSExists reports whether the namespace name exists.
func NSExists(name string) bool {
	_, err := os.Stat(filepath.Join(RunDir, name))
	return err == nil
}

// Do runs fn on a fresh OS thread inside the namespace. Sockets fn opens
// stay in the namespace after it returns. The thread is locked and never
// unlocked, so it ends with its goroutine and no other goroutine ever runs
// in the namespace by accident; the caller's namespace is untouched.
func (n *NS) Do(fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(n.handle); err != nil {
			return fmt.Errorf("enter netns %s: %w", n.Name, err)
		}
		return fn()
	})
}

// Do runs fn inside the namespace named name, as NS.Do does.
func Do(name string, fn func() error) error {
	n, err := openHandle(name)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Do(fn)
}

// openHandle opens name without a netlink handle, for Do.
func openHandle(name string) (*NS, error) {
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	return &NS{Name: name, handle: h}, nil
}

// onThread runs fn on an OS thread of its own that ends with it.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime ends the thread with the goroutine.
		runtime.LockOSThread()
		errc <- fn()
	}()
	return <-errc
}

// Output runs a program in namespace ns through `ip netns exec` (which
// also gives it the namespace's view of /sys) and returns its combined
// output; on failure the error carries the output too.
func Output(ctx context.Context, ns, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
