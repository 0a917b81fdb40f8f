// SPDX-License-Identifier: Apache-2.0

package scx_test

import (
	"os"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestMain runs the guest roles (guest_test.go) instead of the tests
// when this binary is the init of TestSchedExtQEMU's kernel, or one of
// the processes it starts.
func TestMain(m *testing.M) {
	switch os.Getenv(guestRole) {
	case "hog":
		hogMain()
	case "waker":
		wakerMain()
		return
	}
	if os.Getenv("EDGEPLANE_SCX_GUEST") == "1" && os.Getpid() == 1 {
		testutil.GuestInit("edgeplane-scx: ", guestChecks)
		return
	}
	os.Exit(m.Run())
}
