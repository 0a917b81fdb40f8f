// SPDX-License-Identifier: Apache-2.0

package maglev

import (
	"cmp"
	"math/bits"
	"slices"
)

// fill runs the paper's population loop (§3.4, Pseudocode 1) with weighted
// turns: each turn goes to the backend that is furthest behind its weight,
// which claims its next preferred entry that no one holds yet. The turn
// order is the Sainte-Laguë sequence: backend i's k-th turn (from 0) is due
// at (k+0.5)/w_i, so with equal weights it is exactly the paper's round
// robin, and with unequal ones every backend keeps claiming at its own pace
// throughout, rather than heavy backends taking their entries first. That
// keeps the paper's property that each backend's entries are mostly the
// front of its own permutation, so a change to one backend leaves the
// others' entries largely in place (the tests measure this).
// A backend leaves the rotation once it reaches its target, so the final
// counts are exactly the apportioned targets.
//
// The table is exactly what that loop gives (TestFillMatchesReference
// holds it to the loop as first written); three things make it several
// times cheaper. The turns come from groups of slots of equal weight,
// whose turns are due together, so a heap orders a few groups rather
// than every slot (turns). A walk tests several preferences at once
// (walk). And the last entries, where a walk would test size/free
// preferences for each claim, are handed out from each backend's free
// entries sorted by their rank in its permutation (claimTail).
//
// It gives up and returns false once stop is closed, looking every
// stopEvery claims (some 50-100 us apart here).
func fill(table []int32, slots []slot, stop <-chan struct{}) bool {
	size := uint32(len(table))
	f := filler{table: table, slots: slots, size: size, taken: make([]uint64, (size+63)/64)}
	for i := range slots {
		s := &slots[i]
		for k := range s.steps {
			s.steps[k] = uint32(uint64(k) * uint64(s.skip) % uint64(size))
		}
		s.stride = uint32(probes * uint64(s.skip) % uint64(size))
	}
	seq := newTurns(slots)
	for i := range size - tailEntries(size, len(slots)) {
		if i%stopEvery == 0 && stopped(stop) {
			return false
		}
		f.claim(&slots[seq.next()])
	}
	claimTail(table, slots, seq.rest(), f.taken)
	return true
}

// stopEvery is how many claims fill makes between two looks at stop.
const stopEvery = 4096

// stopped says whether stop is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// filler is the table being filled: who holds each entry, and a bit for
// each entry someone holds. The walks probe entries in permutation order,
// i.e. at random, and the bitset (8 KiB at 65537) stays in L1 where the
// 256 KiB table does not.
type filler struct {
	table []int32
	slots []slot
	size  uint32
	taken []uint64
}

// claim gives s its first preference no one holds: most claims while the
// table is emptier find it at once, without a call.
func (f *filler) claim(s *slot) {
	p := s.pos
	if f.taken[p/64]&(1<<(p%64)) != 0 {
		p = walk(s, f.taken, f.size)
	}
	f.taken[p/64] |= 1 << (p % 64)
	f.table[p] = s.index
	s.pos = reduce(p+s.skip, f.size)
}

// probes is how many preferences a walk tests at once.
const probes = 8

// walk returns s's first preference after s.pos that no one holds (s.pos
// itself is held). The permutation is a full cycle because size is prime,
// and the table still has free entries (targets sum to size), so the walk
// ends. It tests probes preferences at once, without a branch between
// them: once the table fills most walks are long, and each test's
// outcome is a coin toss a branch predictor cannot learn (so is a
// wrap past size: reduce does it without a branch too).
func walk(s *slot, taken []uint64, size uint32) uint32 {
	pos := reduce(s.pos+s.skip, size)
	st := &s.steps
	for {
		p0, p1, p2, p3 := pos, reduce(pos+st[1], size), reduce(pos+st[2], size), reduce(pos+st[3], size)
		p4, p5, p6, p7 := reduce(pos+st[4], size), reduce(pos+st[5], size), reduce(pos+st[6], size), reduce(pos+st[7], size)
		m := taken[p0/64]>>(p0%64)&1 | (taken[p1/64]>>(p1%64)&1)<<1 |
			(taken[p2/64]>>(p2%64)&1)<<2 | (taken[p3/64]>>(p3%64)&1)<<3 |
			(taken[p4/64]>>(p4%64)&1)<<4 | (taken[p5/64]>>(p5%64)&1)<<5 |
			(taken[p6/64]>>(p6%64)&1)<<6 | (taken[p7/64]>>(p7%64)&1)<<7
		if m != 1<<probes-1 {
			return reduce(pos+st[bits.TrailingZeros64(^m)], size)
		}
		pos = reduce(pos+s.stride, size)
	}
}

// reduce returns x mod size for x < 2*size <= 2^25, without a branch.
func reduce(x, size uint32) uint32 {
	return x - size&^uint32(int32(x-size)>>31)
}

// tailEntries is how many of the last entries claimTail hands out. A walk
// at k free entries tests size/k preferences on average, so walking the
// last f entries costs about size*ln(f) tests; sorting them in the
// permutation of each of n backends costs a few operations per entry and
// backend, n*f. The two are even near f = size/n; the sort's operations
// cost more than a test, hence a quarter of that.
func tailEntries(size uint32, n int) uint32 {
	return size / uint32(4*n)
}

// claimTail gives the remaining turns their entries: each backend's free
// entries in the order of its permutation, the first one still free at
// each of its turns, which is the one its walk would reach first (every
// entry it walked past is held, and entries are never given back).
func claimTail(table []int32, slots []slot, turns []int32, taken []uint64) {
	size := uint32(len(table))
	free := make([]uint32, 0, len(turns))
	for w, word := range taken {
		for f := ^word; f != 0; f &= f - 1 {
			if e := uint32(w*64 + bits.TrailingZeros64(f)); e < size {
				free = append(free, e)
			}
		}
	}
	left := make([]uint32, len(slots))
	for _, i := range turns {
		left[i]++
	}
	queues := make([][]uint64, len(slots))
	for i := range slots {
		if left[i] > 0 {
			queues[i] = byRank(&slots[i], free, size)
		}
	}
	for _, i := range turns {
		q := queues[i]
		for {
			e := uint32(q[0])
			q = q[1:]
			if taken[e/64]&(1<<(e%64)) == 0 {
				taken[e/64] |= 1 << (e % 64)
				table[e] = slots[i].index
				break
			}
		}
		queues[i] = q
	}
}

// byRank returns free as rank<<32 | entry, sorted by the entries' rank in
// s's permutation ((entry - offset) * skip⁻¹ mod size): a counting sort
// into as many buckets as entries, then an insertion sort, which has
// about nothing left to do.
func byRank(s *slot, free []uint32, size uint32) []uint64 {
	inv := uint64(invMod(s.skip, size))
	m := modulus{size: uint64(size), r: 1 / float64(size)}
	n := uint64(len(free))
	// bucket(rank) = rank * n / size without a division: rank < size <
	// 2^24 and the factor below is at most 2^32 * n / size.
	scale := (n << 32) / uint64(size)
	keys := make([]uint64, len(free))
	count := make([]uint32, n+1)
	for i, e := range free {
		d := uint64(e) + uint64(size) - uint64(s.offset)
		if d >= uint64(size) {
			d -= uint64(size)
		}
		r := m.mul(d, inv)
		keys[i] = r<<32 | uint64(e)
		count[(r*scale)>>32+1]++
	}
	for b := 1; b < len(count); b++ {
		count[b] += count[b-1]
	}
	out := make([]uint64, len(free))
	for _, k := range keys {
		b := ((k >> 32) * scale) >> 32
		out[count[b]] = k
		count[b]++
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// modulus reduces products of two residues modulo size (size <= MaxSize):
// a product is below 2^48, exact as a float64, so the quotient from a
// multiplication by 1/size is off by at most one.
type modulus struct {
	size uint64
	r    float64
}

func (m modulus) mul(a, b uint64) uint64 {
	x := a * b
	q := uint64(float64(x) * m.r)
	r := int64(x) - int64(q*m.size)
	if r < 0 {
		r += int64(m.size)
	} else if r >= int64(m.size) {
		r -= int64(m.size)
	}
	return uint64(r)
}

// invMod returns the inverse of a modulo the prime m (a in [1, m-1]), by
// the extended Euclidean algorithm.
func invMod(a, m uint32) uint32 {
	t, nt := int64(0), int64(1)
	r, nr := int64(m), int64(a)
	for nr != 0 {
		q := r / nr
		t, nt = nt, t-q*nt
		r, nr = nr, r-q*nr
	}
	if t < 0 {
		t += int64(m)
	}
	return uint32(t)
}

// turns gives the slots' turns in the order they are due: slot i's k-th
// turn at (2k+1)/w_i, ties to the lower slot, each slot until it has its
// target. Slots of one weight are due at the same times, so they make a
// group whose k-th round is its members' k-th turns in slot order; the
// groups are ordered by a heap on their next round's due time, and
// groups due at the same time give their rounds together, merged by
// slot. With equal weights there is one group: the paper's round robin.
type turns struct {
	slots  []slot
	groups []*group // a heap: the earliest round first
	round  []int32  // the turns of the round(s) being given
	at     int      // the next of them
}

type group struct {
	weight  uint64
	members []int32 // slots, ascending
	k       uint32  // the next round
	rounds  uint32  // the largest target of its members
}

func newTurns(slots []slot) *turns {
	t := &turns{slots: slots}
	byWeight := map[uint64]*group{}
	for i := range slots {
		s := &slots[i]
		g := byWeight[s.weight]
		if g == nil {
			g = &group{weight: s.weight}
			byWeight[s.weight] = g
			t.groups = append(t.groups, g)
		}
		g.members = append(g.members, int32(i))
		g.rounds = max(g.rounds, s.target)
	}
	t.groups = slices.DeleteFunc(t.groups, func(g *group) bool { return g.rounds == 0 })
	for i := len(t.groups)/2 - 1; i >= 0; i-- {
		t.down(i)
	}
	return t
}

// next returns the slot whose turn is next; there must be one.
func (t *turns) next() int32 {
	for t.at == len(t.round) {
		t.nextRounds()
	}
	i := t.round[t.at]
	t.at++
	return i
}

// rest returns the turns not given yet.
func (t *turns) rest() []int32 {
	out := slices.Clone(t.round[t.at:])
	for len(t.groups) > 0 {
		t.nextRounds()
		out = append(out, t.round...)
	}
	return out
}

// nextRounds makes round the turns of the earliest groups' next round:
// those members that have not reached their target, in slot order.
func (t *turns) nextRounds() {
	t.round, t.at = t.round[:0], 0
	first := *t.groups[0] // as it is before its round is given
	n := 0
	for len(t.groups) > 0 && (n == 0 || t.due(t.groups[0], &first) == 0) {
		g := t.groups[0]
		for _, i := range g.members {
			if g.k < t.slots[i].target {
				t.round = append(t.round, i)
			}
		}
		g.k++
		if g.k == g.rounds {
			last := len(t.groups) - 1
			t.groups[0] = t.groups[last]
			t.groups = t.groups[:last]
		}
		if len(t.groups) > 0 {
			t.down(0)
		}
		n++
	}
	if n > 1 {
		slices.Sort(t.round)
	}
}

// due compares when a's and b's next rounds are due: (2k_a+1)/w_a
// against (2k_b+1)/w_b, cross-multiplied to stay in integers ((2^25+1)
// * (2^32-1) < 2^64).
func (t *turns) due(a, b *group) int {
	return cmp.Compare((2*uint64(a.k)+1)*b.weight, (2*uint64(b.k)+1)*a.weight)
}

// down restores the heap below i after groups[i]'s round moved later.
func (t *turns) down(i int) {
	h := t.groups
	for {
		m, l := i, 2*i+1
		if l < len(h) && t.due(h[l], h[m]) < 0 {
			m = l
		}
		if r := l + 1; r < len(h) && t.due(h[r], h[m]) < 0 {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
