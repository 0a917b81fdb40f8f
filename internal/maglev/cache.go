// SPDX-License-Identifier: Apache-2.0

package maglev

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// Cache builds tables as Build does, and keeps ahead of time the tables
// the likely next change needs, so that change costs a copy instead of a
// build (a build of 65,537 entries takes about a millisecond):
//
//   - for the backends it built last, the table without each one of
//     them: a backend taken out, drained (weight 0) or found down is the
//     same table (Build ignores backends of weight 0), and the one a
//     gateway must switch to fastest, to stop sending new connections to
//     a dead backend. As fast-reroute does for paths, the tables are
//     built before they are needed: in the background, once the backends
//     have not changed for Idle, one at a time, stopping when they change
//     again;
//   - then, for each backend, the table with its weight doubled, and
//     halved (of a weight of 2 or more): an operator moving load
//     towards a backend or away from it one step at a time;
//   - the table it built before those: the backend put back, or a change
//     undone.
//
// What a Cache returns is always what Build returns for the same
// backends and size: it only keeps tables by the backends' keys and
// weights. A change it does not have ahead (a new backend, another
// weight) costs a build. It holds, for the last two sets of backends, a
// table of one byte an entry (twice: its backends, and as the caller's
// codes) and, for each backend and change ahead, the
// entries that move (about size/n for a backend taken out, n the
// backends, up to twice that for a weight): some 1.5 MB for 10 backends
// and 65,537 entries. Sets of more than MaxAhead backends get no tables
// ahead (building them would take up to 3n builds).
type Cache struct {
	// Idle is how long the backends must stay unchanged before the
	// tables ahead are built: back-to-back changes build none.
	Idle time.Duration

	mu    sync.Mutex
	known [2]*known // newest first
	// stale is closed when a Build or Stop comes: the background work
	// started before it stops. idle is the timer that starts it.
	stale chan struct{}
	idle  *time.Timer
	// ahead counts the background work set to run or running (tests
	// wait for it).
	ahead sync.WaitGroup
	// renders counts the known tables Bytes wrote whole (tests).
	renders int
}

// MaxAhead is the most backends a Cache builds tables ahead for, and
// DefaultIdle the Idle of NewCache.
const (
	MaxAhead    = 64
	DefaultIdle = 20 * time.Millisecond
)

// NewCache returns an empty Cache.
func NewCache() *Cache {
	return &Cache{Idle: DefaultIdle}
}

// known is a table a Cache holds: of the backends of a weight above 0,
// in key order (keys, weights).
type known struct {
	size    uint32
	keys    []string
	weights []uint32
	// owner holds each entry's backend, an index into keys (empty when
	// there is none). A table given from another's with moves has none
	// at first: from says how to make it, which the background does
	// before it builds the tables ahead of this one.
	owner []uint8
	from  *view
	// bytes is the table as Bytes last wrote it whole, which the tables
	// given from this one copy (a backend taken out or reweighted moves
	// about size/n entries), and give as it is when it is asked for
	// again (the change undone).
	bytes *rendered
	// next[ch][i] lists the entries that change when change ch is made
	// to backend i, as entry<<8 | its new owner (an index into keys);
	// nil: not built yet.
	next [changes][][]uint32
}

// The changes to one backend that a Cache builds tables ahead for, in
// the order it builds them.
const (
	takenOut = iota // taken out, drained or down
	doubled         // its weight doubled
	halved          // its weight halved (rounded down), from 2 or more
	changes
)

// reweight returns backend i's weight after change ch, and whether ch
// applies to it (one that does not is never looked up).
func (k *known) reweight(i, ch int) (uint32, bool) {
	w := k.weights[i]
	switch ch {
	case doubled:
		return 2 * w, w <= math.MaxUint32/2
	case halved:
		return w / 2, w >= 2
	}
	return 0, true
}

// rendered is a known table written as bytes: backend j as by[j], but
// those of gone, which the caller lacked, as none.
type rendered struct {
	by    [maxKnown]uint8
	gone  [maxKnown]bool
	table []uint8
}

// serves says whether r's table, of a base of n backends, can be
// written as want: each backend want has is written the same way in
// both (those want lacks own no entry once its moves are made).
func (r *rendered) serves(want *rendered, n int) bool {
	for j := range n {
		if !want.gone[j] && (r.gone[j] || r.by[j] != want.by[j]) {
			return false
		}
	}
	return true
}

// view is how to give a table: base's entries with moves applied, each
// an index into base's keys.
type view struct {
	base  *known // its owner is set
	moves []uint32
}

// view returns how to give k's table. Called with c.mu held.
func (k *known) view() view {
	if k.owner != nil {
		return view{base: k}
	}
	return *k.from
}

// give writes v's table into out, backend j of v's base given as by[j]:
// one pass over the base's entries, then the moves.
func give[T int32 | uint8](out []T, v view, by *[maxKnown]T) {
	copyBase(out, v, by)
	move(out, v, by)
}

// copyBase writes the entries of v's base into out, backend j given as
// by[j].
func copyBase[T int32 | uint8](out []T, v view, by *[maxKnown]T) {
	for e, o := range v.base.owner {
		out[e] = by[o]
	}
}

// move writes v's moves into out, which holds v's base's entries.
func move[T int32 | uint8](out []T, v view, by *[maxKnown]T) {
	for _, m := range v.moves {
		out[m>>8] = by[uint8(m)]
	}
}

// maxKnown is the most backends a known table's one-byte entries name.
const maxKnown = 256

// Build returns what Build(backends, size) returns, from a table it
// holds when it holds one for these backends and size.
func (c *Cache) Build(backends []Backend, size uint32) ([]int32, error) {
	in, v, built, err := c.table(backends, size)
	if err != nil || built != nil {
		return built, err
	}
	table := make([]int32, size)
	if len(in.keys) == 0 { // no backend of a weight above 0
		for e := range table {
			table[e] = -1
		}
		return table, nil
	}
	var by [maxKnown]int32
	for j, i := range in.byBase(v.base) {
		by[j] = i
	}
	give(table, v, &by)
	return table, nil
}

// Bytes returns Build's table with each entry's backend i given as
// code[i], and none for an entry without one (code has an element for
// each backend): the table a caller that keeps a byte an entry needs,
// without a table of int32 between. The table returned must not be
// changed: the next may be made from it.
func (c *Cache) Bytes(backends []Backend, size uint32, code []uint8, none uint8) ([]uint8, error) {
	in, v, built, err := c.table(backends, size)
	if err != nil {
		return nil, err
	}
	switch {
	case built != nil:
		out := make([]uint8, size)
		for e, o := range built {
			out[e] = none
			if o >= 0 {
				out[e] = code[o]
			}
		}
		c.mu.Lock()
		c.renders++
		if v.base != nil { // held: the tables given from it copy it
			r := render(in, v, code, none)
			r.table = out
			v.base.bytes = r
		}
		c.mu.Unlock()
		return out, nil
	case len(in.keys) == 0: // no backend of a weight above 0
		out := make([]uint8, size)
		for e := range out {
			out[e] = none
		}
		return out, nil
	}
	r := render(in, v, code, none)
	c.mu.Lock()
	base := v.base.bytes
	if base == nil || !base.serves(r, len(v.base.keys)) {
		r.table = make([]uint8, size)
		copyBase(r.table, v, &r.by)
		base, v.base.bytes, c.renders = r, r, c.renders+1
	}
	c.mu.Unlock()
	if len(v.moves) == 0 {
		return base.table, nil
	}
	// The base's table, then the entries this view moves: a copy and
	// about size/n writes rather than a pass over every entry.
	out := slices.Clone(base.table)
	move(out, v, &r.by)
	return out, nil
}

// render returns how Bytes writes v's base for in's backends: each as
// its code, those in lacks as none. Its table is not set.
func render(in input, v view, code []uint8, none uint8) *rendered {
	r := &rendered{}
	for j, i := range in.byBase(v.base) {
		r.by[j], r.gone[j] = none, i < 0
		if i >= 0 {
			r.by[j] = code[i]
		}
	}
	return r
}

// table returns backends as an input and how to give their table; when
// it held none, also the table it built (and now holds), or Build's
// error.
func (c *Cache) table(backends []Backend, size uint32) (in input, v view, built []int32, err error) {
	in, ok := canonical(backends)
	if !ok {
		built, err = Build(backends, size) // duplicate keys, or too many: Build says what
		return in, v, built, err
	}
	c.mu.Lock()
	c.cancel()
	v, k := c.lookup(in, size)
	c.mu.Unlock()
	if k != nil {
		c.remember(k)
		return in, v, nil, nil
	}
	if built, err = Build(backends, size); err != nil {
		return in, v, nil, err
	}
	k = in.known(size)
	k.owner = []uint8{} // no backend: no entries to keep
	if len(in.keys) > 0 {
		k.owner = make([]uint8, size)
	}
	byInput := make([]uint8, len(backends))
	for j, i := range in.index {
		byInput[i] = uint8(j)
	}
	for e, o := range built {
		if o >= 0 {
			k.owner[e] = byInput[o]
		}
	}
	c.remember(k)
	return in, view{base: k}, built, nil
}

// input is a Build's backends of a weight above 0 in key order: their
// keys, weights and indexes in the caller's slice.
type input struct {
	keys    []string
	weights []uint32
	index   []int32
}

// canonical returns backends as an input; false when two share a key or
// there are more than maxKnown.
func canonical(backends []Backend) (input, bool) {
	if len(backends) > maxKnown {
		return input{}, false
	}
	// Three allocations of their final size, the order sorted in the
	// indexes' own: each slice grown by append took a dozen, and every
	// allocation on a change's way to the flip costs (tens of µs for
	// this function's, an agent woken after an idle spell).
	n := len(backends)
	in := input{keys: make([]string, 0, n), weights: make([]uint32, 0, n), index: make([]int32, n)}
	order := in.index
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(backends[a].Key, backends[b].Key) })
	// Those of a weight above 0, in order, into the same slice: the one
	// written is never ahead of the one read.
	in.index = order[:0]
	var prev string
	for j, i := range order {
		b := backends[i]
		if j > 0 && b.Key == prev {
			return input{}, false
		}
		prev = b.Key
		if b.Weight > 0 {
			in.keys, in.weights, in.index = append(in.keys, b.Key), append(in.weights, b.Weight), append(in.index, i)
		}
	}
	return in, true
}

func (in input) known(size uint32) *known {
	k := &known{size: size, keys: in.keys, weights: in.weights}
	for ch := range k.next {
		k.next[ch] = make([][]uint32, len(in.keys))
	}
	return k
}

// byBase returns, for each backend of base, its index in the caller's
// slice, -1 for one in lacks (both lists are in key order).
func (in input) byBase(base *known) []int32 {
	out := make([]int32, len(base.keys))
	i := 0
	for j, key := range base.keys {
		out[j] = -1
		if i < len(in.keys) && in.keys[i] == key {
			out[j] = in.index[i]
			i++
		}
	}
	return out
}

// lookup returns how to give the table of in's backends and size, and
// the known table it is; nil if it holds none. Called with c.mu held.
func (c *Cache) lookup(in input, size uint32) (view, *known) {
	// A table held for exactly these backends first, the older one too:
	// given from the newer's tables ahead instead (a change undone, as a
	// weight halved back), it would be a new table, its bytes rendered
	// whole again and every table ahead of it built anew, while the old
	// one has both.
	for _, k := range c.known {
		if k != nil && k.size == size && slices.Equal(k.keys, in.keys) && slices.Equal(k.weights, in.weights) {
			return k.view(), k
		}
	}
	for _, k := range c.known {
		if k == nil || k.size != size {
			continue
		}
		i, ch, ok := oneChange(k, in)
		if !ok || k.next[ch][i] == nil {
			continue
		}
		// The table with change ch to backend i: k's with its moves,
		// given as it is; its own copy is made in the background.
		v := view{base: k, moves: k.next[ch][i]}
		nk := in.known(size)
		nk.from = &v
		return v, nk
	}
	return view{}, nil
}

// oneChange returns the backend of k and the change made to it that
// give in, when in is k's backends with one change ahead made to one.
func oneChange(k *known, in input) (int, int, bool) {
	if gone, ok := oneLess(k, in); ok {
		return gone, takenOut, true
	}
	if !slices.Equal(in.keys, k.keys) {
		return 0, 0, false
	}
	i := -1
	for j := range in.weights {
		if in.weights[j] != k.weights[j] {
			if i >= 0 {
				return 0, 0, false
			}
			i = j
		}
	}
	if i < 0 {
		return 0, 0, false
	}
	for _, ch := range []int{doubled, halved} {
		if w, ok := k.reweight(i, ch); ok && w == in.weights[i] {
			return i, ch, true
		}
	}
	return 0, 0, false
}

// oneLess returns the index of the one backend of k that in lacks, when
// in is k's backends but one, with the same weights.
func oneLess(k *known, in input) (int, bool) {
	if len(in.keys) != len(k.keys)-1 {
		return 0, false
	}
	gone := len(k.keys) - 1
	for i := range in.keys {
		if in.keys[i] != k.keys[i] {
			gone = i
			break
		}
	}
	for i := range in.keys {
		j := i
		if i >= gone {
			j = i + 1
		}
		if in.keys[i] != k.keys[j] || in.weights[i] != k.weights[j] {
			return 0, false
		}
	}
	return gone, true
}

// remember makes k the newest known table, and starts building the
// tables ahead of it once the backends stay unchanged for Idle.
func (c *Cache) remember(k *known) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known[0] != k {
		c.known[1], c.known[0] = c.known[0], k
	}
	if len(k.keys) < 2 || len(k.keys) > MaxAhead || !k.missing() {
		return
	}
	c.cancel()
	stale := make(chan struct{})
	c.stale = stale
	c.ahead.Add(1)
	// A timer, not a goroutine that waits: starting a goroutine, and
	// waking it to stop at the next change, each woke the other CPU
	// while a change was being made (tens of µs here); a timer is
	// stopped without waking anything.
	c.idle = time.AfterFunc(c.Idle, func() {
		defer c.ahead.Done()
		if !stopped(stale) {
			c.buildAhead(k, stale)
		}
	})
}

// missing says whether a table ahead of k is not built yet. Called
// with c.mu held.
func (k *known) missing() bool {
	for ch := range k.next {
		for i, m := range k.next[ch] {
			if _, ok := k.reweight(i, ch); ok && m == nil {
				return true
			}
		}
	}
	return false
}

// cancel stops the background work under way. Called with c.mu held.
func (c *Cache) cancel() {
	if c.stale != nil {
		close(c.stale)
		c.stale = nil
	}
	if c.idle != nil && c.idle.Stop() { // it will not run
		c.ahead.Done()
	}
	c.idle = nil
}

// Stop stops the building of tables ahead (the service is gone); a
// later Build starts it again.
func (c *Cache) Stop() {
	c.mu.Lock()
	c.cancel()
	c.mu.Unlock()
}

// buildAhead makes k's own table if it has none, then builds, for each
// change ahead and each backend of k, the entries that move, until
// stale is closed.
func (c *Cache) buildAhead(k *known, stale chan struct{}) {
	c.mu.Lock()
	v, own := k.view(), k.owner != nil
	c.mu.Unlock()
	if !own {
		// Its base's entries renumbered to k's backends (the one taken
		// out owns none after the moves).
		var by [maxKnown]uint8
		for j, key := range v.base.keys {
			if i, ok := slices.BinarySearch(k.keys, key); ok {
				by[j] = uint8(i)
			}
		}
		owner := make([]uint8, k.size)
		give(owner, v, &by)
		c.mu.Lock()
		// Unless an earlier run, stopped after it got this far, set it
		// already: its table may be in use, read without the lock.
		if k.owner == nil {
			k.owner, k.from = owner, nil
		}
		c.mu.Unlock()
	}
	for ch := range k.next {
		for i := range k.keys {
			select {
			case <-stale:
				return
			default:
			}
			c.mu.Lock()
			done := k.next[ch][i] != nil
			c.mu.Unlock()
			if _, ok := k.reweight(i, ch); done || !ok {
				continue
			}
			moves, err := k.moves(i, ch, stale)
			if err != nil {
				return // stopped (k's backends built once: nothing else)
			}
			c.mu.Lock()
			k.next[ch][i] = moves
			c.mu.Unlock()
		}
	}
}

// moves builds the table of k's backends with change ch made to backend
// i and returns the entries that differ from k's own (set); errStopped
// when stop closed first.
func (k *known) moves(i, ch int, stop <-chan struct{}) ([]uint32, error) {
	bs := make([]Backend, 0, len(k.keys))
	for j := range k.keys {
		w := k.weights[j]
		if j == i {
			w, _ = k.reweight(i, ch)
		}
		bs = append(bs, Backend{Key: k.keys[j], Weight: w}) // weight 0: as taken out
	}
	table, err := build(bs, k.size, stop)
	if err != nil {
		return nil, err
	}
	moves := []uint32{}
	for e, o := range table {
		if uint8(o) != k.owner[e] {
			moves = append(moves, uint32(e)<<8|uint32(o))
		}
	}
	return moves, nil
}
