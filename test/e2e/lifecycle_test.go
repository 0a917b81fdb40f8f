// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// TestDetachOnExitAndDown checks both ways an agent can leave: with
// --detach-on-exit it takes XDP off and removes its pins; without it the
// pinned dataplane keeps forwarding and counting until `edgeplane down`.
func TestDetachOnExitAndDown(t *testing.T) {
	g := newGateway(t, forwardConfig)
	itfs := []string{lab.LanName, lab.WanName}

	// stopTerm sends SIGTERM and wants a clean exit.
	stopTerm := func(t *testing.T) {
		t.Helper()
		cmd := g.Agent()
		if err := g.StopAgent(syscall.SIGTERM); err != nil {
			t.Fatalf("stop agent: %v", err)
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("agent exited with code %d on SIGTERM, want 0", code)
		}
	}
	wantXDP := func(t *testing.T, want bool) {
		t.Helper()
		for _, itf := range itfs {
			if out, on := xdpOn(t, g.GW, itf); on != want {
				t.Errorf("%s: XDP attached %v, want %v:\n%s", itf, on, want, out)
			}
		}
	}
	wantPins := func(t *testing.T, want bool) {
		t.Helper()
		_, err := os.Stat(g.PinDir)
		if exists := err == nil; exists != want {
			entries, _ := os.ReadDir(g.PinDir)
			t.Errorf("pin dir %s exists %v, want %v (%d entries)", g.PinDir, exists, want, len(entries))
		}
	}

	t.Run("detach-on-exit", func(t *testing.T) {
		g.start("--detach-on-exit")
		wantXDP(t, true)
		wantPins(t, true)
		g.warmUp()
		stopTerm(t)
		wantXDP(t, false)
		wantPins(t, false)
		// The kernel forwards on its own again.
		if got := ping(g.A, lab.AddrB, 3, "0.1"); got != 3 {
			t.Errorf("ping A -> B after detach: %d of 3 replies", got)
		}
	})

	t.Run("stay-attached-then-down", func(t *testing.T) {
		g.start()
		wantXDP(t, true)
		g.warmUp()
		progs, _ := filepath.Glob(filepath.Join(g.PinDir, "prog_*"))
		links, _ := filepath.Glob(filepath.Join(g.PinDir, "link_*"))
		stopTerm(t)

		// No agent: still attached, still pinned, still forwarding in XDP
		// and counting.
		wantXDP(t, true)
		wantPins(t, true)
		for _, p := range append(progs, links...) {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("pin %s gone after the agent exited: %v", filepath.Base(p), err)
			}
		}
		if len(links) != 2 {
			t.Errorf("%d link pins, want 2 (lan0, wan0)", len(links))
		}
		before, err := readStats(g.PinDir)
		if err != nil {
			t.Fatalf("edgeplane stats without an agent: %v", err)
		}
		if got := ping(g.A, lab.AddrB, 5, "0.1"); got != 5 {
			t.Errorf("ping A -> B without an agent: %d of 5 replies", got)
		}
		after, err := readStats(g.PinDir)
		if err != nil {
			t.Fatalf("edgeplane stats without an agent: %v", err)
		}
		for _, id := range []int{20, 30} {
			if d := after.pdr(id).Packets - before.pdr(id).Packets; d != 5 {
				t.Errorf("PDR %d counted %d of 5 pings without an agent", id, d)
			}
		}
		if after.Generation != before.Generation || after.Generation == 0 {
			t.Errorf("generation %d -> %d without an agent", before.Generation, after.Generation)
		}

		out, err := exec.Command(edgeplaneBin, "down", "--pin-dir", g.PinDir).CombinedOutput()
		if err != nil {
			t.Fatalf("edgeplane down: %v\n%s", err, out)
		}
		wantXDP(t, false)
		wantPins(t, false)
		if _, err := readStats(g.PinDir); err == nil {
			t.Errorf("edgeplane stats still answers after edgeplane down")
		}
		if got := ping(g.A, lab.AddrB, 3, "0.1"); got != 3 {
			t.Errorf("ping A -> B after edgeplane down: %d of 3 replies", got)
		}
	})
}
