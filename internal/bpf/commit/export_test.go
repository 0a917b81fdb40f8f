// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// FailBlocksAfter makes the next writes of Maglev blocks write the first
// n of their batch for real and fail there, as the kernel fails a batch
// whose element n it cannot copy in (EFAULT); restore undoes it.
func FailBlocksAfter(n int) (restore func()) {
	real := updateBlocks
	updateBlocks = func(m *ebpf.Map, keys []uint32, blocks []bpf.MaglevBlk) (int, error) {
		w := min(n, len(keys))
		if w > 0 {
			if _, err := real(m, keys[:w], blocks[:w]); err != nil {
				return 0, err
			}
		}
		if w == len(keys) {
			return w, nil
		}
		return w, fmt.Errorf("batch update element %d: %w", w, unix.EFAULT)
	}
	return func() { updateBlocks = real }
}
