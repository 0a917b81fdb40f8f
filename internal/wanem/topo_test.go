// SPDX-License-Identifier: Apache-2.0

package wanem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// Addresses of the test topology: one L2 segment through the emulator.
const (
	addrL = "10.99.0.1"
	addrR = "10.99.0.2"
)

var (
	macL = net.HardwareAddr{0x02, 0x99, 0, 0, 0, 0x01}
	macR = net.HardwareAddr{0x02, 0x99, 0, 0, 0, 0x02}
)

// testbed is
//
//	L: eth0 10.99.0.1/24 ══ W: a [emulator] b ══ R: eth0 10.99.0.2/24
//
// with the emulator running in-process in W, serving its control socket.
type testbed struct {
	L, W, R string
	link    *Link
	sock    string
}

// newTopo builds the topology and starts the emulator with imp in both
// directions. Everything is torn down in t.Cleanup.
func newTopo(t *testing.T, imp Impairment) *testbed {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	var ns [3]*topo.NS
	for i, prefix := range []string{"wanl", "wanw", "wanr"} {
		ns[i] = testutil.NetNS(t, testutil.UniqueName(prefix))
		// Only the test's own traffic crosses the link, so the emulator's
		// counters can be compared with what the hosts saw.
		if err := ns[i].Sysctl("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
			t.Fatal(err)
		}
	}
	l, w, r := ns[0], ns[1], ns[2]
	tp := &testbed{L: l.Name, W: w.Name, R: r.Name}
	if err := topo.AddVeth(topo.End{NS: l, Name: "eth0", MAC: macL, Addrs: []string{addrL + "/24"}}, topo.End{NS: w, Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := topo.AddVeth(topo.End{NS: w, Name: "b"}, topo.End{NS: r, Name: "eth0", MAC: macR, Addrs: []string{addrR + "/24"}}); err != nil {
		t.Fatal(err)
	}
	// Static neighbours: ARP through a lossy link would make the tests
	// flaky, and the hosts' counters would include it.
	if err := l.SetNeigh("eth0", addrR, macR); err != nil {
		t.Fatal(err)
	}
	if err := r.SetNeigh("eth0", addrL, macL); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fds := openFDs(t)
	err := w.Do(func() error {
		var err error
		tp.link, err = New("a", "b", log)
		return err
	})
	if err != nil {
		t.Fatalf("new link: %v", err)
	}
	// Native XDP ("xdp", not "xdpgeneric"): only a native program turns
	// on the veth's NAPI, which XDP redirects into it need.
	if out, err := nsOutput(tp.W, "ip", "link", "show", "dev", "a"); err != nil || !strings.Contains(out, " xdp ") {
		t.Errorf("no native xdp program on a: %v %s", err, out)
	}
	tp.link.Set(Both, imp)
	ctx, cancel := context.WithCancel(context.Background())
	tp.sock = filepath.Join(t.TempDir(), "wanem.sock")
	runErr, ctlErr := make(chan error, 1), make(chan error, 1)
	go func() { runErr <- tp.link.Run(ctx) }()
	go func() { ctlErr <- tp.link.ServeControl(ctx, tp.sock) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("run: %v", err)
		}
		if err := <-ctlErr; err != nil {
			t.Errorf("serve control: %v", err)
		}
		// Run closed its sockets and detached its XDP programs.
		for fd, what := range openFDs(t) {
			if fds[fd] != what {
				t.Errorf("fd %d (%s) left open", fd, what)
			}
		}
		if out, err := nsOutput(tp.W, "ip", "link", "show", "dev", "a"); err != nil || strings.Contains(out, " xdp") {
			t.Errorf("xdp still attached after run: %v %s", err, out)
		}
	})
	// The sockets were made in W and are used from other threads now:
	// a first ping proves they stayed bound to W's interfaces.
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := nsOutput(tp.L, "ping", "-c", "1", "-W", "1", addrR)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connectivity through the emulator: %v", err)
		}
	}
	return tp
}

// openFDs returns the sockets and BPF objects this process holds open,
// by fd. (The Go runtime's own epoll and eventfd come and go with the
// poller; they are not ours to count.)
func openFDs(t *testing.T) map[int]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	fds := map[int]string{}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the fd ReadDir itself used
		}
		if strings.HasPrefix(target, "socket:") || strings.Contains(target, "bpf") {
			fd, _ := strconv.Atoi(e.Name())
			fds[fd] = target
		}
	}
	return fds
}

// tlog sends slog output to the test log.
type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func nsOutput(ns string, name string, args ...string) (string, error) {
	return topo.Output(context.Background(), ns, name, args...)
}

// syncBuf collects a command's output while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// nsStart starts a command in namespace ns; the caller waits for it.
func nsStart(t *testing.T, ns string, name string, args ...string) (*exec.Cmd, *syncBuf) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	out := &syncBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, out
}

var errNoRTT = errors.New("no rtt summary in ping output")

// pingRTT pings R from L count times and returns the median and the
// smallest round trip, and ping's summary line. The median, not the
// average: one reply held up by the host (these VMs share their CPUs)
// moves an average of 20 by more than the emulator's own error.
func pingRTT(t *testing.T, tp *testbed, count int, interval string) (median, least time.Duration, summary string) {
	t.Helper()
	out, err := nsOutput(tp.L, "ping", "-c", fmt.Sprint(count), "-i", interval, addrR)
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	var rtts []time.Duration
	for _, m := range pingTime.FindAllStringSubmatch(out, -1) {
		d, err := time.ParseDuration(m[2] + "ms")
		if err != nil {
			t.Fatalf("parse rtt %q: %v", m[2], err)
		}
		rtts = append(rtts, d)
	}
	i := strings.Index(out, "min/avg/max/mdev = ")
	if i < 0 || len(rtts) == 0 {
		t.Fatalf("%v: %s", errNoRTT, out)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], rtts[0], strings.TrimSpace(out[i:])
}
