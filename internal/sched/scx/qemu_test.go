// SPDX-License-Identifier: Apache-2.0

package scx_test

import (
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestSchedExtQEMU: on a kernel with sched_ext, booted under qemu (TCG,
// this machine's kernel has no sched_ext) with this test binary as its
// init, the scheduler loads, the strategy engine applies a priority
// strategy through it, the priority task's wake-ups beside CPU hogs are
// less late than without priority (median under a quarter), and it
// unloads cleanly
// (guestChecks). Latency figures that count come from the host kernel
// (`edgeplane-dev bench --scenario cpu`): these are TCG's.
func TestSchedExtQEMU(t *testing.T) {
	said, console := testutil.BootGuest(t, "EDGEPLANE_SCX_GUEST=1", "edgeplane-scx: ", 8*time.Minute)
	if len(said) == 0 || said[len(said)-1] != "edgeplane-scx: PASS" {
		t.Fatalf("the guest did not pass; its console:\n%s", console)
	}
}
