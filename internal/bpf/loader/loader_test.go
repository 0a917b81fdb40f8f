// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestStuckBucketUnlocked: an agent killed while it held a flow-table
// bucket's lock (an upgrade placing flows) leaves the bucket's version
// odd, and packets would never find or record a flow there again; the
// next start over the pins releases it, and leaves the others as they
// were.
func TestStuckBucketUnlocked(t *testing.T) {
	testutil.RequireRoot(t)
	pin := filepath.Join("/sys/fs/bpf", testutil.UniqueName("epstuck"))
	t.Cleanup(func() { os.RemoveAll(pin) })
	l := bpf.Limits{Flows: 1024, Rules: 64}
	dp, err := Open(l, pin)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := dp.FlowTable()
	if err != nil {
		t.Fatal(err)
	}
	tb.Bucket(5).Seq = 7 // locked, by nobody now
	tb.Bucket(6).Seq = 4
	tb.Unmap()
	dp.Close()

	dp, err = Open(l, pin)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if tb, err = dp.FlowTable(); err != nil {
		t.Fatal(err)
	}
	defer tb.Unmap()
	if s5, s6 := tb.Bucket(5).Seq, tb.Bucket(6).Seq; s5 != 8 || s6 != 4 {
		t.Errorf("after a start: bucket 5 at version %d (want 8, unlocked), bucket 6 at %d (want 4)", s5, s6)
	}
}
