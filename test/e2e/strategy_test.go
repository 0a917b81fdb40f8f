// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/agent"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestAgentStrategy: an agent whose config has a CPU strategy gives the
// processes it matches SCHED_FIFO within a second of starting; a
// stopped agent (SIGTERM) gives them back what they had; a crashed one
// (SIGKILL) leaves them as they were, and the next start gives them back
// before it applies its config again — here one without the strategy.
func TestAgentStrategy(t *testing.T) {
	tag := "edgeplane-e2e-" + testutil.UniqueName("st")
	cmd := exec.Command("bash", "-c", "exec -a "+tag+" sleep 120")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	policy := func() uint32 {
		a, err := unix.SchedGetAttr(pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Policy
	}
	isFIFO := func() bool { return policy() == unix.SCHED_FIFO }
	withStrategy := forwardConfig + `strategies:
  - {id: 1, name: e2e, command_regex: "^` + tag + `", priority: true, policy: fifo, rt_priority: 10}
`
	g := newGateway(t, withStrategy)
	g.start()
	if !waitFor(3*time.Second, isFIFO) {
		t.Fatalf("the matching process's policy %d 3 s after the agent started, want FIFO", policy())
	}
	// It says what it holds — the process, what it applied, the CPUs
	// it ran on — in the CLI (over the API) and the metrics.
	held := regexp.MustCompile(fmt.Sprintf(`(?m)^1\s+%d\s+sleep\s+1\s+fifo 10\s+\d`, pid))
	var out []byte
	if !waitFor(3*time.Second, func() bool {
		out, _ = exec.Command(edgeplaneBin, "get", "strategies", "--server", "unix://"+agent.DefaultAPISocket(g.PinDir)).CombinedOutput()
		return held.Match(out)
	}) {
		t.Errorf("get strategies does not show process %d held with fifo 10 and its CPU:\n%s", pid, out)
	}
	t.Logf("get strategies:\n%s", out)
	fams := g.scrape()
	if n, _ := metricValue(fams, "edgeplane_strategy_threads", map[string]string{"strategy": "1"}); n != 1 {
		t.Errorf("edgeplane_strategy_threads{strategy=1} = %v, want 1", n)
	}
	if len(fams["edgeplane_strategy_ran_on"].GetMetric()) == 0 {
		t.Error("no edgeplane_strategy_ran_on series")
	}
	// A process started while the agent runs is taken at its exec (the
	// agent's BPF process events), not at the scan a second later:
	// five in a row each within 400 ms (by the scans alone, all five
	// would be about one chance in a hundred).
	for i := range 5 {
		late := exec.Command("bash", "-c", "exec -a "+tag+"-late"+strconv.Itoa(i)+" sleep 60")
		start := time.Now()
		if err := late.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = late.Process.Kill(); _ = late.Wait() })
		if !waitFor(3*time.Second, func() bool {
			a, err := unix.SchedGetAttr(late.Process.Pid, 0)
			return err == nil && a.Policy == unix.SCHED_FIFO
		}) {
			t.Fatalf("a process started after the agent: not FIFO within 3 s")
		}
		if took := time.Since(start); took > 400*time.Millisecond {
			t.Errorf("process %d started while the agent runs: FIFO after %s, want at its exec", i, took.Round(time.Millisecond))
		} else {
			t.Logf("process %d started while the agent runs: FIFO after %s", i, took.Round(time.Millisecond))
		}
	}
	if err := g.StopAgent(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if p := policy(); p != unix.SCHED_NORMAL {
		t.Errorf("after SIGTERM: policy %d, want given back (NORMAL)", p)
	}

	g.start()
	if !waitFor(3*time.Second, isFIFO) {
		t.Fatalf("restarted agent: policy %d, want FIFO again", policy())
	}
	if err := g.StopAgent(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !isFIFO() {
		t.Fatalf("a killed agent cannot give back: want FIFO still, got %d", policy())
	}
	g.writeConfig(forwardConfig)
	g.start()
	if p := policy(); p != unix.SCHED_NORMAL {
		t.Errorf("the next start after a crash: policy %d, want given back (NORMAL) by the time it is ready", p)
	}
}
