// SPDX-License-Identifier: Apache-2.0

package packet

import "testing"

// TestCheckScaleFlows: a ring size that next_flow cannot cycle, or one
// that would allocate gigabytes past the largest, is refused before
// anything is measured; the defaults pass.
func TestCheckScaleFlows(t *testing.T) {
	if err := checkScaleFlows(ScaleFlows); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	for _, n := range []int{0, 1, -4, 3, 4095, maxScaleFlows * 2, 1 << 24} {
		if err := checkScaleFlows([]int{4096, n}); err == nil {
			t.Errorf("%d flows accepted", n)
		}
	}
	if _, err := Run(Options{ScaleFlows: []int{1 << 24}}); err == nil {
		t.Error("Run took a ring of 2^24 flows")
	}
}
