// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestBenchRuns keeps `edgeplane bench` working: a short run must produce
// every figure, each timed on the path it names (Run fails on a wrong
// verdict). It asserts no speed: timings on a shared machine are not
// test material.
func TestBenchRuns(t *testing.T) {
	testutil.RequireRoot(t)
	r, err := Run(context.Background(), Options{Repeat: 20000, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"xdp_pass_floor", "classify_redirect_miss_1", "classify_redirect_hit_1",
		"classify_redirect_miss_65536", "classify_redirect_hit_65536",
		"classify_redirect_8groups_miss_65536", "malformed_drop"}
	for _, name := range want {
		f := r.find(name)
		if f.Name == "" || f.NsPerPacket <= 0 {
			t.Errorf("figure %s missing or zero: %+v", name, f)
		}
	}
	if g := r.find("classify_redirect_8groups_miss_65536").Groups; g != 8 {
		t.Errorf("8-group series used %d groups", g)
	}
	if g := r.find("classify_redirect_miss_65536").Groups; g != 1 {
		t.Errorf("one-group series used %d groups", g)
	}
	if len(r.Goals) != 2 {
		t.Errorf("goals: %+v", r.Goals)
	}
}
