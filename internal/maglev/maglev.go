// SPDX-License-Identifier: Apache-2.0

// Package maglev builds the lookup table of Maglev consistent hashing
// (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
// Balancer", NSDI'16, §3.4), extended with weights, for the XDP load
// balancer: the dataplane indexes the table with the flow hash modulo the
// table size and forwards to the backend stored there.
//
// The table is a pure function of the backends' keys, their weights and the
// table size; the order of the backends slice does not matter. Every gateway
// given the same backends therefore builds the same table, and a flow keeps
// its backend when it moves between gateways (paper §3.4: "consistent
// hashing ... across all Maglev machines").
package maglev

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// DefaultSize is the default table size. It is prime, as the permutation
// requires, and about 650 entries per backend at 100 backends, which the paper
// (§3.4, §5.3) shows keeps imbalance and disruption small (M ≫ N).
const DefaultSize = 65537

// MaxSize is the largest table Build accepts. 1<<24 int32 entries are 64 MiB;
// anything bigger is a configuration mistake rather than a useful table, and
// the bound keeps the uint32/uint64 arithmetic below far from overflow.
const MaxSize = 1 << 24

var (
	// ErrInvalidSize is returned by Build when the table size is not a
	// prime in [2, MaxSize].
	ErrInvalidSize = errors.New("invalid table size")
	// ErrDuplicateKey is returned by Build when two backends share a Key.
	ErrDuplicateKey = errors.New("duplicate backend key")
)

// Backend is one member of a table.
type Backend struct {
	// Key identifies the backend across rebuilds, agents and gateways (the
	// agent passes e.g. "10.0.1.11:8080" or the tunnel address); the
	// permutation depends only on it, so every gateway with the same
	// backends builds the same table.
	Key string
	// Weight is the backend's relative share of the table; 0 means drained:
	// the backend gets no entries.
	Weight uint32
}

// Build returns a table of size entries: entry i holds the index into
// backends of the backend that owns it, or -1 when no backend has a weight
// above 0. size must be a prime in [2, MaxSize] and keys must be unique.
//
// Each backend gets a share of entries equal to size*Weight/sum(Weight)
// rounded up or down (largest-remainder apportionment), so shares are exact
// to within one entry.
func Build(backends []Backend, size uint32) ([]int32, error) {
	return build(backends, size, nil)
}

// errStopped is build's error when stop closed before it was done.
var errStopped = errors.New("build stopped")

// build is Build, giving up with errStopped once stop is closed (a nil
// stop never is): a build in the background must not hold a CPU for a
// millisecond after the change that needs the foreground came.
func build(backends []Backend, size uint32, stop <-chan struct{}) ([]int32, error) {
	table, slots, err := plan(backends, size)
	if err != nil || len(slots) == 0 {
		return table, err
	}
	if !fill(table, slots, stop) {
		return nil, errStopped
	}
	return table, nil
}

// plan checks Build's arguments and returns the table, every entry -1,
// and a slot for each backend with a weight above 0, in key order, with
// its permutation and its target number of entries.
func plan(backends []Backend, size uint32) ([]int32, []slot, error) {
	if size < 2 || size > MaxSize {
		return nil, nil, fmt.Errorf("table size %d outside [2, %d]: %w", size, MaxSize, ErrInvalidSize)
	}
	if !IsPrime(size) {
		// The permutation (offset + j*skip) mod size only visits every
		// entry when skip and size are coprime, which a prime size
		// guarantees for every skip in [1, size-1] (paper §3.4).
		return nil, nil, fmt.Errorf("table size %d is not prime: %w", size, ErrInvalidSize)
	}
	if len(backends) > math.MaxInt32 {
		return nil, nil, fmt.Errorf("%d backends do not fit int32 table entries", len(backends))
	}

	// Work in key order, not slice order, so that ties between backends
	// (equal due time, equal remainder) are broken the same way on every
	// gateway whatever order the agent listed the backends in.
	order := make([]int32, len(backends))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		return cmp.Compare(backends[a].Key, backends[b].Key)
	})
	for i := 1; i < len(order); i++ {
		a, b := order[i-1], order[i]
		if backends[a].Key == backends[b].Key {
			return nil, nil, fmt.Errorf("backends %d and %d both have key %q: %w",
				min(a, b), max(a, b), backends[a].Key, ErrDuplicateKey)
		}
	}

	table := make([]int32, size)
	for i := range table {
		table[i] = -1
	}

	slots := make([]slot, 0, len(backends))
	var total uint64
	for _, i := range order {
		b := backends[i]
		if b.Weight == 0 {
			continue
		}
		total += uint64(b.Weight)
		offset := uint32(hashKey(b.Key, saltOffset) % uint64(size))
		slots = append(slots, slot{
			index:  i,
			weight: uint64(b.Weight),
			pos:    offset,
			offset: offset,
			skip:   uint32(hashKey(b.Key, saltSkip)%uint64(size-1)) + 1,
		})
	}
	if len(slots) > 0 {
		apportion(slots, size, total)
	}
	return table, slots, nil
}

// slot is the filling state of one backend with a weight above 0.
type slot struct {
	index  int32  // index into the caller's backends
	weight uint64 // Backend.Weight, widened for the due-time comparison
	pos    uint32 // next preference to try: (offset + j*skip) mod size
	skip   uint32 // permutation stride, in [1, size-1]
	offset uint32 // first preference
	// steps[k] is k*skip mod size and stride probes*skip mod size, for
	// walks that test several preferences at once (fill.go).
	steps  [probes]uint32
	stride uint32
	target uint32 // entries the backend ends with
	turns  uint32 // entries claimed so far
}

// apportion sets each slot's target to floor(size*w/total) and hands the
// leftover entries, fewer than len(slots), to the largest remainders
// (Hamilton's method), so every target is within one of its exact quota.
// Ties go to the earlier slot, which is key order.
func apportion(slots []slot, size uint32, total uint64) {
	// size*w < 2^24 * 2^32 fits uint64, and all remainders share the
	// denominator total, so comparing them as integers is exact.
	rems := make([]uint64, len(slots))
	left := uint64(size)
	for i := range slots {
		q := uint64(size) * slots[i].weight
		slots[i].target = uint32(q / total)
		rems[i] = q % total
		left -= uint64(slots[i].target)
	}
	if left == 0 {
		return
	}
	byRem := make([]int, len(slots))
	for i := range byRem {
		byRem[i] = i
	}
	slices.SortStableFunc(byRem, func(a, b int) int {
		return cmp.Compare(rems[b], rems[a])
	})
	for _, i := range byRem[:left] {
		slots[i].target++
	}
}

// Salts that turn one hash into the paper's two independent ones, h1 for
// the offset and h2 for the skip. They, fnv1a and mix64 are part of the
// table format: changing any of them reshuffles every table, so gateways
// running different versions would disagree on where flows go.
const (
	saltOffset = 0x6f // 'o'
	saltSkip   = 0x73 // 's'
)

// FNV-1a 64-bit parameters (Fowler, Noll, Vo; draft-eastlake-fnv).
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// hashKey hashes key with a one-byte salt. It is written out rather than
// taken from maphash, which is seeded per process, so that every gateway
// and every Go version computes the same permutation.
func hashKey(key string, salt byte) uint64 {
	h := (fnvOffset64 ^ uint64(salt)) * fnvPrime64
	return mix64(fnv1a(h, key))
}

// fnv1a continues an FNV-1a 64 hash h over s; it matches hash/fnv's New64a
// when h starts at fnvOffset64, without the allocation.
func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// mix64 is the SplitMix64 finalizer (Steele, Lea, Flood, OOPSLA'14). FNV's
// multiply only carries bits upward, so the low bits of an FNV hash depend
// only on the low bits of the key's bytes; the finalizer spreads every
// input bit over the whole word before Build reduces it modulo size.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// IsPrime reports whether n is prime. Trial division by 6k±1 up to √n is
// at most about 22,000 divisions for a uint32, fast enough for validating
// configuration and obviously correct.
func IsPrime(n uint32) bool {
	if n < 4 {
		return n >= 2
	}
	if n%2 == 0 || n%3 == 0 {
		return false
	}
	// uint64 so that d*d does not wrap for n near 2^32.
	m := uint64(n)
	for d := uint64(5); d*d <= m; d += 6 {
		if m%d == 0 || m%(d+2) == 0 {
			return false
		}
	}
	return true
}
