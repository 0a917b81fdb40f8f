// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
