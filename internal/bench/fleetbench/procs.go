// SPDX-License-Identifier: Apache-2.0

package fleetbench

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a process of the scenario (etcd, a controller) whose CPU time
// and memory it reads from /proc.
type child struct {
	name string
	cmd  *exec.Cmd
	logf *os.File
}

// startChild starts bin with args, its stderr (and stdout unless
// stdout) to dir/name.log.
func startChild(name, dir, bin string, stdout bool, args ...string) (*child, *bufio.Reader, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, nil, fmt.Errorf("%s log: %w", name, err)
	}
	c := &child{name: name, cmd: exec.Command(bin, args...), logf: logf}
	c.cmd.Stderr = logf
	// No Pdeathsig: it fires when the thread that forked exits, and the
	// gateways' setup ends threads it moved into a namespace, which took
	// etcd with them. The scenario stops its children on every return.
	var out *bufio.Reader
	if stdout {
		p, err := c.cmd.StdoutPipe()
		if err != nil {
			logf.Close()
			return nil, nil, err
		}
		out = bufio.NewReader(p)
	} else {
		c.cmd.Stdout = logf
	}
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, fmt.Errorf("start %s: %w", name, err)
	}
	return c, out, nil
}

// stop stops the process (SIGTERM, SIGKILL after 10 s).
func (c *child) stop() {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	c.logf.Close()
}

// startEtcd runs `edgeplane-dev etcd`: a 3-member cluster in a process
// of its own, serving clients on every address (the gateways reach it
// from their namespaces), and returns its client URLs.
func startEtcd(dev, dir string) (*child, []string, error) {
	if dev == "" {
		return nil, nil, errors.New("the fleet scenario runs etcd with edgeplane-dev etcd: no edgeplane-dev binary given")
	}
	c, out, err := startChild("etcd", dir, dev, true, "etcd", "--dir", filepath.Join(dir, "etcd"), "--members", "3", "--host", "0.0.0.0")
	if err != nil {
		return nil, nil, err
	}
	line := make(chan string, 1)
	go func() {
		s, _ := out.ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		if s != "" {
			return c, strings.Split(s, ","), nil
		}
	case <-time.After(60 * time.Second):
	}
	c.stop()
	return nil, nil, fmt.Errorf("etcd did not start within 60 s: %s", logTail(c.logf.Name()))
}

// endpointsAt returns urls with their host replaced by host.
func endpointsAt(urls []string, host string) []string {
	out := make([]string, len(urls))
	for i, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			out[i] = s
			continue
		}
		u.Host = net.JoinHostPort(host, u.Port())
		out[i] = u.String()
	}
	return out
}

// usage is a process's CPU time and memory, as /proc says.
type usage struct {
	cpu      time.Duration // user and system, every thread
	rss, hwm int64         // bytes: resident now, and at most so far
}

// usageOf reads pid's usage. The CPU time is to the nanosecond: the
// clock ticks of /proc/PID/stat (10 ms each) made a short series of
// Applies cost a process no time at all. This process's comes from
// getrusage, which counts its exited threads too; another's is the
// sum of its threads' time on a CPU (/proc/PID/task/*/schedstat), which
// leaves out threads that exited (etcd and the controller keep theirs).
func usageOf(pid int) (usage, error) {
	var u usage
	var err error
	if pid == os.Getpid() {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return u, fmt.Errorf("getrusage: %w", err)
		}
		u.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	} else if u.cpu, err = threadsCPU(pid); err != nil {
		return u, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "VmRSS" && k != "VmHWM" {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if k == "VmRSS" {
			u.rss = kb << 10
		} else {
			u.hwm = kb << 10
		}
	}
	return u, nil
}

// threadsCPU returns the time pid's threads have spent on a CPU.
func threadsCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // exited meanwhile
		}
		// "time on a CPU (ns) waiting (ns) timeslices"
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s/%s/schedstat: %q", dir, t.Name(), b)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// Costs are what the scenario's processes spent over a series' timed
// Applies.
type Costs struct {
	Method string `json:"method"`
	// Seconds is the timed Applies' wall time.
	Seconds float64 `json:"seconds"`
	// Controller is the controller's process, Etcd the one of etcd's 3
	// members, MembersAndBench this process: the members without a
	// dataplane (when the series has them), their etcd clients and the
	// bench's own watches.
	Controller      Usage `json:"controller"`
	Etcd            Usage `json:"etcd"`
	MembersAndBench Usage `json:"members_and_bench"`
}

// Usage is one process's part of Costs.
type Usage struct {
	CPUSeconds    float64 `json:"cpu_seconds"`
	CPUMsPerApply float64 `json:"cpu_ms_per_apply"`
	// CPUShare is CPUSeconds over the wall time: 1 is a CPU busy
	// throughout.
	CPUShare float64 `json:"cpu_share"`
	// RSSMiB is resident memory at the end, PeakRSSMiB the most since
	// the process started.
	RSSMiB     float64 `json:"rss_mib"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

const methodCosts = "CPU time (user and system, every thread: getrusage for this process, the sum of /proc/PID/task/*/schedstat for the others) over the timed Applies, and resident memory " +
	"(VmRSS at the end, VmHWM the most since the process started): etcd is edgeplane-dev etcd (its 3 members in one process), " +
	"the controller edgeplane controller, and members_and_bench this process (the members without a dataplane and their etcd clients, " +
	"when the series has them, and the bench's watches)"

// meter reads the usage of the scenario's processes at the start and
// the end of a series' timed Applies.
type meter struct {
	pids  [3]int // controller, etcd, this process
	t0    time.Time
	start [3]usage
}

func newMeter(ctl, etcd *child) *meter {
	return &meter{pids: [3]int{ctl.cmd.Process.Pid, etcd.cmd.Process.Pid, os.Getpid()}}
}

func (m *meter) begin() error {
	m.t0 = time.Now()
	for i, pid := range m.pids {
		u, err := usageOf(pid)
		if err != nil {
			return err
		}
		m.start[i] = u
	}
	return nil
}

// end returns the costs since begin of applies Applies.
func (m *meter) end(applies int) (Costs, error) {
	wall := time.Since(m.t0)
	c := Costs{Method: methodCosts, Seconds: wall.Seconds()}
	out := [3]*Usage{&c.Controller, &c.Etcd, &c.MembersAndBench}
	for i, pid := range m.pids {
		u, err := usageOf(pid)
		if err != nil {
			return c, err
		}
		cpu := u.cpu - m.start[i].cpu
		*out[i] = Usage{CPUSeconds: cpu.Seconds(), CPUMsPerApply: cpu.Seconds() * 1000 / float64(applies),
			CPUShare: cpu.Seconds() / wall.Seconds(), RSSMiB: float64(u.rss) / (1 << 20), PeakRSSMiB: float64(u.hwm) / (1 << 20)}
	}
	return c, nil
}
