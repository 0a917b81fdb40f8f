// SPDX-License-Identifier: Apache-2.0

package stats

import (
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// TestPinnedMapsNamed: every map PinnedSnapshot opens by name is a map
// of the object, so a pin dir of this build has it.
func TestPinnedMapsNamed(t *testing.T) {
	spec, err := bpf.LoadSpec()
	if err != nil {
		t.Fatal(err)
	}
	for name := range pinnedFields(&bpf.Maps{}) {
		if spec.Maps[name] == nil {
			t.Errorf("PinnedSnapshot opens %s, which the object does not have", name)
		}
	}
	if spec.Maps[ifCPUMap] == nil {
		t.Errorf("PinnedSnapshot opens %s, which the object does not have", ifCPUMap)
	}
}
