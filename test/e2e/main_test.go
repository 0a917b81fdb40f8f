// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/rlimit"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// nsPrefix starts every namespace (and so every pin dir) these tests
// create; TestMain reports any that outlive the run.
const nsPrefix = "e2"

// edgeplaneBin is the edgeplane binary built by TestMain (agent,
// controller, CLI), devBin edgeplane-dev beside it (lab, WAN emulator).
var edgeplaneBin, devBin string

func TestMain(m *testing.M) {
	// Re-executed as the bad clients of TestAPIBadClientsLoad.
	if addr := os.Getenv(badClientsEnv); addr != "" {
		os.Exit(badClients(addr))
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "edgeplane-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if edgeplaneBin, devBin, err = testutil.BuildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if os.Geteuid() == 0 {
		// Pinned maps are charged to memlock on kernels without memcg
		// accounting for BPF; the agent lifts its own limit, the test
		// process does it for agent.Down in cleanups.
		if err := rlimit.RemoveMemlock(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: remove memlock rlimit:", err)
			return 1
		}
	}

	nsBefore := ourNamespaces()
	pinsBefore := ourPins()
	fdsBefore := openFDs()
	code := m.Run()

	var leaks []string
	for _, ns := range newItems(nsBefore, ourNamespaces()) {
		leaks = append(leaks, "network namespace "+ns)
	}
	for _, p := range newItems(pinsBefore, ourPins()) {
		leaks = append(leaks, "pin dir "+p)
	}
	// Libraries close some of their sockets a moment after their Close
	// returns (etcd's members, gRPC's transports): an fd counts as
	// leaked only if it is still open a few seconds after the run.
	var fdLeaks []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		fdLeaks = nil
		for fd, target := range openFDs() {
			if _, ok := fdsBefore[fd]; !ok && !runtimeFD(target) {
				fdLeaks = append(fdLeaks, fmt.Sprintf("fd %s -> %s", fd, target))
			}
		}
		if len(fdLeaks) == 0 || time.Now().After(deadline) {
			break
		}
	}
	leaks = append(leaks, fdLeaks...)
	if len(leaks) > 0 {
		sort.Strings(leaks)
		fmt.Fprintf(os.Stderr, "e2e: leaked after the run:\n  %s\n", strings.Join(leaks, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	return code
}

func ourNamespaces() map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), nsPrefix) {
			out[e.Name()] = true
		}
	}
	return out
}

func ourPins() map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir("/sys/fs/bpf")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), nsPrefix) {
			out["/sys/fs/bpf/"+e.Name()] = true
		}
	}
	return out
}

func newItems(before, after map[string]bool) []string {
	var out []string
	for k := range after {
		if !before[k] {
			out = append(out, k)
		}
	}
	return out
}

// openFDs maps this process's open descriptors to what they point at.
func openFDs() map[string]string {
	out := map[string]string{}
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory handle ReadDir itself used
		}
		out[e.Name()] = target
	}
	return out
}

// runtimeFD reports descriptors the Go runtime opens lazily and keeps for
// the life of the process (netpoller), which are not leaks.
func runtimeFD(target string) bool {
	return target == "anon_inode:[eventpoll]" || target == "anon_inode:[eventfd]"
}
