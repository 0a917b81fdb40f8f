// SPDX-License-Identifier: Apache-2.0

package maglev

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestCacheIsBuild changes a service's backends as an operator and health
// checks do (take one out, drain one, put one back, reweight one, add a
// new one, change the table's size, undo), in random order, with and
// without time for the tables ahead, and checks that every table the
// cache returns is exactly Build's, in the caller's order of backends.
// It counts the changes served by each kind of table held, so each path
// is seen taken.
func TestCacheIsBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	c := NewCache()
	c.Idle = 0
	pool := backends(14, nil)
	cur := slices.Clone(pool[:10])
	var prev []Backend
	size := uint32(4099)
	hits := map[string]int{}
	for step := range 400 {
		next := slices.Clone(cur)
		switch r := rng.IntN(9); {
		case r < 2 && len(next) > 1: // take one out
			i := rng.IntN(len(next))
			next = slices.Delete(next, i, i+1)
		case r < 3: // drain one
			next[rng.IntN(len(next))].Weight = 0
		case r < 4 && prev != nil: // undo the last change
			next = slices.Clone(prev)
		case r < 5: // reweight one
			next[rng.IntN(len(next))].Weight = uint32(1 + rng.IntN(3))
		case r < 6: // add one not in it
			for _, b := range pool {
				if !slices.ContainsFunc(next, func(x Backend) bool { return x.Key == b.Key }) {
					next = append(next, b)
					break
				}
			}
		case r < 7: // another size
			size = []uint32{4099, 4093, 251}[rng.IntN(3)]
		case r < 8: // the same backends in another order
			rng.Shuffle(len(next), func(i, j int) { next[i], next[j] = next[j], next[i] })
		}
		if rng.IntN(2) == 0 {
			c.ahead.Wait() // an idle agent: the tables ahead are built
		}
		c.mu.Lock()
		in, _ := canonical(next)
		_, k := c.lookup(in, size)
		kind := "build"
		if k != nil {
			kind = "held"
			if k != c.known[0] && k != c.known[1] {
				kind = "ahead"
			}
		}
		c.mu.Unlock()
		hits[kind]++
		want := mustBuild(t, next, size)
		if step%2 == 0 {
			got, err := c.Build(next, size)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d (%s, %d backends, size %d): the cache's table differs from Build's", step, kind, len(next), size)
			}
		} else {
			// As bytes: backend i as 3*i+1, no backend as 255.
			code := make([]uint8, len(next))
			for i := range code {
				code[i] = uint8(3*i + 1)
			}
			got, err := c.Bytes(next, size, code, 255)
			if err != nil {
				t.Fatal(err)
			}
			for e, o := range want {
				if w := uint8(255); o >= 0 && got[e] != code[o] || o < 0 && got[e] != w {
					t.Fatalf("step %d (%s, %d backends, size %d): entry %d is %d as bytes, Build's owner %d", step, kind, len(next), size, e, got[e], o)
				}
			}
		}
		prev, cur = cur, next
	}
	c.ahead.Wait()
	t.Logf("tables: %v", hits)
	for _, kind := range []string{"build", "held", "ahead"} {
		if hits[kind] < 20 {
			t.Errorf("only %d changes served by %q", hits[kind], kind)
		}
	}
}

// TestCacheBytesFromHeld changes backends at random, asking for bytes
// every time (each backend's code stays with its key, as a service's
// member index does, but now and then all change): a table given from
// a held one's bytes (as they are, or copied with its moves made) is
// exactly Build's, and that path is seen taken.
func TestCacheBytesFromHeld(t *testing.T) {
	rng, c := rand.New(rand.NewPCG(7, 8)), eagerCache()
	pool := backends(14, nil)
	codeOf := map[string]uint8{}
	for i, b := range pool {
		codeOf[b.Key] = uint8(2*i + 3)
	}
	takeOut := func(bs []Backend) []Backend {
		if len(bs) < 2 {
			return bs
		}
		i := rng.IntN(len(bs))
		return slices.Delete(bs, i, i+1)
	}
	reweight := func(w uint32) func([]Backend) []Backend {
		return func(bs []Backend) []Backend {
			bs[rng.IntN(len(bs))].Weight = w
			return bs
		}
	}
	putBack := func(bs []Backend) []Backend {
		for _, b := range pool {
			if !slices.ContainsFunc(bs, func(x Backend) bool { return x.Key == b.Key }) {
				return append(bs, b)
			}
		}
		return bs
	}
	renumber := func(bs []Backend) []Backend {
		for k := range codeOf {
			codeOf[k] = uint8(rng.IntN(200))
		}
		return bs
	}
	changes := []func([]Backend) []Backend{takeOut, takeOut, takeOut, reweight(0), reweight(2), reweight(1), putBack, putBack, renumber}
	cur := slices.Clone(pool[:10])
	const size = 4099
	fromHeld := 0
	for step := range 400 {
		next := changes[rng.IntN(len(changes))](slices.Clone(cur))
		if rng.IntN(4) > 0 {
			c.ahead.Wait()
		}
		code := make([]uint8, len(next))
		for i, b := range next {
			code[i] = codeOf[b.Key]
		}
		c.mu.Lock()
		renders := c.renders
		c.mu.Unlock()
		got, err := c.Bytes(next, size, code, 255)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		if c.renders == renders {
			fromHeld++
		}
		c.mu.Unlock()
		for e, o := range mustBuild(t, next, size) {
			if o >= 0 && got[e] != code[o] || o < 0 && got[e] != 255 {
				t.Fatalf("step %d (%d backends): entry %d is %d, Build's owner %d", step, len(next), e, got[e], o)
			}
		}
		cur = next
	}
	c.ahead.Wait()
	if fromHeld < 40 {
		t.Errorf("only %d of 400 tables given from held bytes", fromHeld)
	}
	t.Logf("%d of 400 tables given from held bytes", fromHeld)
}

// TestCacheReweightAhead doubles and halves backends' weights at random
// among other changes (one taken out, put back, set to any weight), the
// agent idle before most of them: every table is Build's, and most
// doublings and halvings found their table built ahead.
func TestCacheReweightAhead(t *testing.T) {
	rng, c := rand.New(rand.NewPCG(9, 10)), eagerCache()
	pool := backends(12, nil)
	cur := slices.Clone(pool[:8])
	const size = 4099
	reweights, ahead := 0, 0
	for step := range 300 {
		next := slices.Clone(cur)
		i := rng.IntN(len(next))
		r := rng.IntN(10)
		switch {
		case r < 4:
			next[i].Weight *= 2
		case r < 7 && next[i].Weight >= 2:
			next[i].Weight /= 2
		case r < 8 && len(next) > 2:
			next = slices.Delete(next, i, i+1)
		case r < 9:
			next[i].Weight = uint32(1 + rng.IntN(5))
		default:
			for _, b := range pool {
				if !slices.ContainsFunc(next, func(x Backend) bool { return x.Key == b.Key }) {
					next = append(next, b)
					break
				}
			}
		}
		if r < 7 && len(next) == len(cur) {
			reweights++
			if rng.IntN(5) > 0 {
				c.ahead.Wait()
			}
			c.mu.Lock()
			in, _ := canonical(next)
			if v, k := c.lookup(in, size); k != nil && len(v.moves) > 0 {
				ahead++
			}
			c.mu.Unlock()
		}
		got, err := c.Build(next, size)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, mustBuild(t, next, size)) {
			t.Fatalf("step %d: the cache's table differs from Build's", step)
		}
		cur = next
	}
	c.ahead.Wait()
	t.Logf("%d of %d doublings and halvings served from tables ahead", ahead, reweights)
	if ahead < reweights/2 {
		t.Errorf("only %d of %d doublings and halvings served from tables ahead", ahead, reweights)
	}
}

// eagerCache returns a Cache that builds its tables ahead at once.
func eagerCache() *Cache {
	c := NewCache()
	c.Idle = 0
	return c
}

// TestCacheErrors: what Build refuses, the cache refuses the same way,
// and backends all drained give the empty table, held or not.
func TestCacheErrors(t *testing.T) {
	c := NewCache()
	c.Idle = 0
	dup := append(backends(3, nil), Backend{Key: "10.0.0.2:8080", Weight: 0})
	for _, tc := range []struct {
		bs   []Backend
		size uint32
	}{{dup, DefaultSize}, {backends(3, nil), 4}, {backends(3, nil), 0}} {
		_, want := Build(tc.bs, tc.size)
		if _, got := c.Build(tc.bs, tc.size); want == nil || got == nil || got.Error() != want.Error() {
			t.Errorf("%d backends, size %d: cache error %v, Build's %v", len(tc.bs), tc.size, got, want)
		}
	}
	drained := weights(0, 0)
	for range 2 {
		got, err := c.Build(drained, 13)
		if err != nil || !slices.Equal(got, mustBuild(t, drained, 13)) {
			t.Fatalf("all drained: %v, %v", got, err)
		}
		b, err := c.Bytes(drained, 13, []uint8{1, 2}, 9)
		if err != nil || !slices.Equal(b, slices.Repeat([]uint8{9}, 13)) {
			t.Fatalf("all drained, as bytes: %v, %v", b, err)
		}
	}
	c.ahead.Wait()
}

// BenchmarkCacheTakeOut times a backend taken out of 10 whose tables
// ahead are built, beside BenchmarkBuild.
func BenchmarkCacheTakeOut(b *testing.B) {
	bs := backends(10, nil)
	c := NewCache()
	c.Idle = 0
	if _, err := c.Build(bs, DefaultSize); err != nil {
		b.Fatal(err)
	}
	c.ahead.Wait()
	// Back-to-back changes: no tables ahead of the one without.
	c.Idle = time.Hour
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if _, err := c.Build(bs, DefaultSize); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := c.Build(without(bs, i%10), DefaultSize); err != nil {
			b.Fatal(err)
		}
	}
	c.Stop()
}

// BenchmarkCacheTakeOutBytes is BenchmarkCacheTakeOut as a service's
// table is asked for (Bytes), a backend taken out and put back in turn
// (both held), beside BenchmarkBuild.
func BenchmarkCacheTakeOutBytes(b *testing.B) {
	bs := backends(10, nil)
	code := make([]uint8, len(bs))
	for i := range code {
		code[i] = uint8(i)
	}
	c := NewCache()
	c.Idle = 0
	if _, err := c.Bytes(bs, DefaultSize, code, 255); err != nil {
		b.Fatal(err)
	}
	c.ahead.Wait()
	c.Idle = time.Hour // no tables ahead of the one without: a build's worth of CPU beside the loop
	for i := 0; b.Loop(); i++ {
		next, nc := bs, code
		if i%2 == 0 {
			next, nc = without(bs, 3), slices.Delete(slices.Clone(code), 3, 4)
		}
		if _, err := c.Bytes(next, DefaultSize, nc, 255); err != nil {
			b.Fatal(err)
		}
	}
	c.Stop()
}

// TestCacheUndoGivesHeld changes one backend's weight and back, and takes
// one out and puts it back, the tables ahead built each time: the table
// going back is the one held for those backends, its bytes given as they
// were (none rendered again), not a new table made from the change's
// tables ahead, whose own tables ahead would all be built again.
func TestCacheUndoGivesHeld(t *testing.T) {
	c := eagerCache()
	bs := backends(10, nil)
	code := make([]uint8, len(bs))
	for i := range code {
		code[i] = uint8(i)
	}
	first, err := c.Bytes(bs, 4099, code, 255)
	if err != nil {
		t.Fatal(err)
	}
	c.ahead.Wait()
	c.mu.Lock()
	held := c.known[0]
	c.mu.Unlock()
	heavy := slices.Clone(bs)
	heavy[3].Weight = 2
	for _, change := range []struct {
		name string
		bs   []Backend
		code []uint8
	}{{"weight doubled", heavy, code}, {"taken out", without(bs, 3), slices.Delete(slices.Clone(code), 3, 4)}} {
		if _, err := c.Bytes(change.bs, 4099, change.code, 255); err != nil {
			t.Fatal(err)
		}
		c.ahead.Wait() // the change's tables ahead, the way back among them
		c.mu.Lock()
		renders := c.renders
		c.mu.Unlock()
		back, err := c.Bytes(bs, 4099, code, 255)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		k, rendered := c.known[0], c.renders-renders
		c.mu.Unlock()
		if k != held || rendered != 0 || &back[0] != &first[0] {
			t.Errorf("%s and back: held table kept %v, %d tables rendered, bytes the first's %v", change.name, k == held, rendered, &back[0] == &first[0])
		}
	}
	c.ahead.Wait()
}
