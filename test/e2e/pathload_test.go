// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// cpuStalled returns the time gateway gw's CPUs ran nothing, as its
// path monitor's CPU watch saw it (all CPUs summed), from its metrics.
func cpuStalled(t *testing.T, gw string) time.Duration {
	t.Helper()
	fams := scrapeIn(t, gw, lab.MetricsAddr)
	f, ok := fams["edgeplane_cpu_stalled_seconds_total"]
	if !ok {
		t.Fatalf("%s exports no edgeplane_cpu_stalled_seconds_total: its path monitor has no CPU watch", gw)
	}
	var s float64
	for _, m := range f.GetMetric() {
		s += m.GetCounter().GetValue()
	}
	return time.Duration(s * float64(time.Second))
}

// startStress runs `stress-ng --cpu n` (every CPU busy, at the default
// policy, as a gateway's 5G load is) until the test ends.
func startStress(t *testing.T, n string) {
	t.Helper()
	testutil.RequireTool(t, "stress-ng")
	cmd := exec.Command("stress-ng", "--cpu", n, "--timeout", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
}

// TestLabPathMonitorUnderLoad: with `stress-ng --cpu 8` on the lab's two
// CPUs, gateway A's monitor still judges its paths right. At 100 ms and
// at 10 ms probes, a clean path is never declared down while a steered
// stream of one datagram a millisecond runs, and when wan1 is cut the
// stream fails over to path 2 within three probe intervals (at the
// receiver, plus path 2's longer one-way delay, the stream's spacing and
// a look of the monitor: 6 ms), path 1 going
// down once, path 2 staying up throughout; the probes' RTTs stay those
// of the links, not of the load. Before, the probe's send time was taken
// in userspace before sendto and the monitor's loop competed with the
// load: at 10 ms probes clean paths went down and up again every few
// seconds.
func TestLabPathMonitorUnderLoad(t *testing.T) {
	st := newSteeredLab(t)
	l, gc, ctx := st.sdwanLab, st.gc, st.ctx
	startStress(t, "8")
	time.Sleep(2 * time.Second) // the load takes the CPUs
	logFile := filepath.Join(l.RunDir, "gwa.log")
	changes := func() (down1, down2 int) {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), `msg="path down" path=1 `), strings.Count(string(b), `msg="path down" path=2 `)
	}
	// The goal is 3 probe intervals to declare path 1 down; at the
	// receiver the gap is that, plus path 2's longer one-way delay (3
	// ms), the stream's own spacing (1 ms) and the monitor's look at the
	// record after a timeout (every 2 ms). Each phase runs clean for at
	// least a window of probes (100) first: the judge estimates a path's
	// random loss over its window, and a path with a lost probe in a
	// window not yet full counts as lossy (down after 3, not 2). At 10
	// ms probes it runs 30 s clean: before, a clean path went down
	// about every 10 s there.
	for _, c := range []struct {
		interval time.Duration
		clean    time.Duration
		goal     float64 // ms
	}{{100 * time.Millisecond, 10 * time.Second, 306}, {10 * time.Millisecond, 30 * time.Second, 36}} {
		probeEvery(t, gc, ctx, c.interval.String(), 10*time.Second)
		d1, d2 := changes()
		stalled := cpuStalled(t, l.GWA)
		// The stream's sender and receiver stand for the traffic the
		// gateway protects: real-time, so the load does not pause them
		// (their pauses would be gaps the failover did not make).
		recv := startProc(t, l.B, pyGaps, lab.AddrB, "7000")
		if out, err := exec.Command("chrt", "-f", "-p", "20", strconv.Itoa(recv.cmd.Process.Pid)).CombinedOutput(); err != nil {
			t.Fatalf("chrt the receiver: %v %s", err, out)
		}
		n, rate := int(c.clean/time.Millisecond)+3000, 1000
		sent := make(chan error, 1)
		go func() {
			out, err := exec.CommandContext(ctx, "chrt", "-f", "20", "ip", "netns", "exec", l.A, "python3", "-c", pySend,
				lab.AddrB, "7000", strconv.Itoa(n), strconv.Itoa(rate), "64").CombinedOutput()
			if err != nil {
				err = fmt.Errorf("sender: %w (%s)", err, out)
			}
			sent <- err
		}()
		// Clean, then wan1 cut for 1.5 s: the monitor samples the paths'
		// RTTs meanwhile.
		var maxRTT, maxClean time.Duration
		deadline := time.Now().Add(c.clean)
		for time.Now().Before(deadline) {
			if r, err := gc.ListPathStatus(ctx, &pb.ListRequest{}); err == nil {
				for _, p := range r.GetPaths() {
					maxRTT = max(maxRTT, time.Duration(p.GetRttUs())*time.Microsecond)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		c1, c2 := changes()
		maxClean = maxRTT
		l.mustCLI("link", "wan1", "--loss", "100%")
		time.Sleep(1500 * time.Millisecond)
		l.mustCLI("link", "wan1", "--loss", "0")
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		var rep gapReport
		recv.finish(&rep)
		e1, e2 := changes()
		stalled = cpuStalled(t, l.GWA) - stalled

		worst := 0.0
		for _, g := range rep.Gaps {
			worst = max(worst, g.MS)
		}
		t.Logf("%s probes under stress-ng --cpu 8: clean for %s: path 1 down %d times, path 2 %d; largest smoothed RTT %s; "+
			"wan1 cut: %d of %d datagrams arrived, failover gap %.1f ms (goal < %.0f ms), path 1 down %d times, path 2 %d; "+
			"the machine's CPUs stopped %s meanwhile, by gateway A's watch (not counted against probes)",
			c.interval, c.clean, c1-d1, c2-d2, maxClean, rep.Distinct, n, worst, c.goal, e1-c1, e2-c2, stalled)
		if c1 != d1 || c2 != d2 {
			t.Errorf("%s probes: a clean path went down under load (path 1 %d times, path 2 %d)", c.interval, c1-d1, c2-d2)
		}
		if e2 != c2 {
			t.Errorf("%s probes: path 2, clean, went down %d times while wan1 was cut", c.interval, e2-c2)
		}
		if e1-c1 != 1 {
			t.Errorf("%s probes: path 1 went down %d times for one cut, want once", c.interval, e1-c1)
		}
		if worst > c.goal {
			t.Errorf("%s probes: failover gap %.0f ms, want within 3 probe intervals (< %.0f ms)", c.interval, worst, c.goal)
		}
		if maxClean > 50*time.Millisecond {
			t.Errorf("%s probes: smoothed RTT up to %s on 2 and 5 ms links: the load shows in the probes' times", c.interval, maxClean)
		}
	}
}
