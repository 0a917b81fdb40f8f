// SPDX-License-Identifier: Apache-2.0

package maglev

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// refFill is the population loop as first written: one turn at a time
// from a heap of due times, each walk one preference at a time. It is
// the definition fill is held to (TestFillMatchesReference): the table
// is part of the wire contract between gateways (TestGolden), so a faster
// fill must give exactly the same one.
func refFill(table []int32, slots []slot) {
	size := uint32(len(table))
	// The walk below probes entries in permutation order, i.e. at random;
	// a bitset of taken entries (8 KiB at 65537) stays in L1 where the
	// 256 KiB table does not, which roughly halves Build's time.
	taken := make([]uint64, (size+63)/64)
	h := make(refHeap, 0, len(slots))
	for i := range slots {
		if slots[i].target > 0 {
			h = append(h, int32(i))
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(slots, i)
	}
	for len(h) > 0 {
		s := &slots[h[0]]
		// The permutation is a full cycle because size is prime, and the
		// table still has free entries (targets sum to size), so the
		// walk ends.
		for taken[s.pos/64]&(1<<(s.pos%64)) != 0 {
			s.pos += s.skip
			if s.pos >= size {
				s.pos -= size
			}
		}
		taken[s.pos/64] |= 1 << (s.pos % 64)
		table[s.pos] = s.index
		s.pos += s.skip
		if s.pos >= size {
			s.pos -= size
		}
		s.turns++
		if s.turns == s.target {
			last := len(h) - 1
			h[0] = h[last]
			h = h[:last]
		}
		// Either the root's due time moved later or the root was
		// replaced; both only need a sift down.
		if len(h) > 0 {
			h.down(slots, 0)
		}
	}
}

// refHeap is a binary min-heap of slot indices ordered by when their next
// turn is due. It is hand-written rather than container/heap so the hot
// loop does no interface calls or boxing.
type refHeap []int32

// before reports whether slot a's next turn is due before slot b's:
// (2*turns_a+1)/w_a < (2*turns_b+1)/w_b, cross-multiplied to stay in
// integers ((2^25+1) * (2^32-1) < 2^64). Ties go to the lower slot index,
// which is key order, so the result does not depend on the input order.
func refBefore(slots []slot, a, b int32) bool {
	sa, sb := &slots[a], &slots[b]
	da := (2*uint64(sa.turns) + 1) * sb.weight
	db := (2*uint64(sb.turns) + 1) * sa.weight
	if da != db {
		return da < db
	}
	return a < b
}

// down restores the heap property for the subtree at i after h[i]'s due
// time moved later (or h[i] was replaced). It is Floyd's bottom-up variant:
// it walks a hole down to a leaf along the earlier child, one comparison a
// level, then sifts the element up, which is usually short because the
// backend that just took its turn is due last, or nearly so.
func (h refHeap) down(slots []slot, i int) {
	n, top, x := len(h), i, h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && refBefore(slots, h[r], h[l]) {
			m = r
		}
		h[i] = h[m]
		i = m
	}
	for i > top {
		p := (i - 1) / 2
		if !refBefore(slots, x, h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = x
}

// refBuild is Build with the population loop as first written (refFill):
// what fill must give, found the slow way.
func refBuild(t testing.TB, backends []Backend, size uint32) []int32 {
	t.Helper()
	table, slots, err := plan(backends, size)
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) > 0 {
		refFill(table, slots)
	}
	return table
}

// TestFillMatchesReference checks that the fast population loop gives
// the table the loop as first written gives, entry for entry, for equal
// and unequal weights, drained backends and small and large tables.
func TestFillMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	sizes := []uint32{2, 3, 13, 251, 4099, DefaultSize}
	for i := range 300 {
		size := sizes[i%len(sizes)]
		n := 1 + rng.IntN(40)
		if i%7 == 0 {
			n = 1 + rng.IntN(256)
		}
		var w func(int) uint32
		switch i % 4 {
		case 1:
			w = func(int) uint32 { return uint32(rng.IntN(4)) }
		case 2:
			w = func(int) uint32 { return 1 + uint32(rng.IntN(1000)) }
		case 3:
			w = func(int) uint32 { return rng.Uint32() }
		}
		bs := backends(n, w)
		got := mustBuild(t, bs, size)
		if want := refBuild(t, bs, size); !slices.Equal(got, want) {
			t.Fatalf("case %d: %d backends, size %d: table differs from the reference loop's", i, n, size)
		}
	}
}

// BenchmarkRefBuild times the reference loop beside BenchmarkBuild.
func BenchmarkRefBuild(b *testing.B) {
	for _, n := range []int{10, 100} {
		bs := backends(n, nil)
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for b.Loop() {
				refBuild(b, bs, DefaultSize)
			}
		})
	}
}
