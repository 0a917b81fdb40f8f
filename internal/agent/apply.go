// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/sched"
)

// Applies commit in groups. An Apply answers only once its batch is
// durable in the journal, and an fdatasync costs 200-400 µs on these
// disks whatever it flushes, so Applies that arrive while one commits
// wait and then commit together: one after the other into the store and
// the compiler (each checked alone against what the batches before it
// left: one that fails is refused alone, the others go on), then one
// generation flip for the group, one write(2) of their journal records
// and one fdatasync, shared by all. The flip runs while the journal
// syncs: both must be done before any of the group is answered.
//
// A packet sees the generation before the group or the one after it,
// never part of a batch. What fails the group as a whole (the flip, the
// journal's write or sync) rolls all of it back and is retried batch by
// batch, so each batch gets the answer it would have had alone.
//
// The first Apply to find no group committing leads: it takes every
// Apply waiting, commits them, answers them and hands the lead to the
// first that came meanwhile, then returns its own answer. No goroutine
// waits for Applies when there are none.

// applyReq is one Apply: its batch, and its answer once its group is done.
type applyReq struct {
	ops    []config.Op
	dryRun bool
	rec    []byte
	// wake says true when the Apply is to lead the next group, false
	// when it is answered.
	wake chan bool

	gen uint32
	// sync is the journal's fdatasync the batch waited for, shared by
	// its group.
	sync time.Duration
	err  error
}

// applyQueue is the Applies waiting for a group, and whether one of them
// leads now.
type applyQueue struct {
	mu      sync.Mutex
	waiting []*applyReq
	leading bool
}

// Apply checks a batch of operations against the config that serves,
// compiles what it changes into the next generation, commits it and
// appends the batch, rec, to the journal (api.Backend), so a restarted
// agent serves exactly what was last committed (see journal.go). Its
// cost follows the batch, not the config.
func (a *Agent) Apply(ops []config.Op, dryRun bool, rec []byte) (uint32, error) {
	gen, _, err := a.ApplySynced(ops, dryRun, rec)
	return gen, err
}

// ApplySynced is Apply, and also says how long the journal's sync took
// that made the batch durable (api.SyncedBackend): the part of the
// Apply's time the disk decides.
func (a *Agent) ApplySynced(ops []config.Op, dryRun bool, rec []byte) (uint32, time.Duration, error) {
	r := &applyReq{ops: ops, dryRun: dryRun, rec: rec, wake: make(chan bool, 1)}
	q := &a.applies
	q.mu.Lock()
	q.waiting = append(q.waiting, r)
	lead := !q.leading
	q.leading = true
	q.mu.Unlock()
	if !lead && !<-r.wake {
		return r.gen, r.sync, r.err
	}
	q.mu.Lock()
	group := q.waiting
	q.waiting = nil
	q.mu.Unlock()
	a.commitGroup(group)
	q.mu.Lock()
	if len(q.waiting) == 0 {
		q.leading = false
		q.mu.Unlock()
	} else {
		next := q.waiting[0]
		q.mu.Unlock()
		next.wake <- true
	}
	return r.gen, r.sync, r.err
}

// commitGroup commits the Applies of group and answers each.
func (a *Agent) commitGroup(group []*applyReq) {
	a.commitMu.Lock()
	defer a.commitMu.Unlock()
	var batches []*applyReq
	a.mu.Lock()
	for _, r := range group {
		if r.dryRun {
			// Against what is committed, before the group.
			a.dryRun(r)
			r.wake <- false
			continue
		}
		batches = append(batches, r)
	}
	a.mu.Unlock()
	for len(batches) > 0 {
		n, whole := a.commitBatches(batches, false)
		if !whole {
			for i := range n {
				a.commitBatches(batches[i:i+1], true)
			}
		}
		for _, r := range batches[:n] {
			r.wake <- false
		}
		batches = batches[n:]
	}
}

// dryRun checks and compiles r's batch and undoes it; a.mu held.
func (a *Agent) dryRun(r *applyReq) {
	_, undo, err := a.stage(r.ops)
	if err != nil {
		r.err = err
		return
	}
	undo()
	r.gen = a.gen
}

// stage checks ops against the store and compiles them; a.mu held. On
// success undo takes both back.
func (a *Agent) stage(ops []config.Op) (*config.Changes, func(), error) {
	ch, undoStore, err := a.store.Apply(ops)
	if err != nil {
		return nil, nil, err
	}
	if err := sched.CheckChanges(a.store, ch); err != nil {
		undoStore()
		return nil, nil, err
	}
	undoComp, err := a.comp.Apply(ch)
	if err != nil {
		undoStore()
		return nil, nil, err
	}
	return ch, func() { undoComp(); undoStore() }, nil
}

// staged is a batch checked and compiled, not yet committed.
type staged struct {
	r    *applyReq
	ch   *config.Changes
	undo func()
}

// stagedGroup is the batches of a group, checked and compiled into the
// store and the compiler in order, not yet committed.
type stagedGroup struct {
	list    []staged
	changed groupChanges
	// ifaces says the group is one batch that changes interfaces;
	// undoIfaces puts them back (links and maps) once its rules are
	// gone.
	ifaces     bool
	undoIfaces func()
}

// undo takes the group's batches back out of the store and the
// compiler, the last first; a.mu held.
func (g *stagedGroup) undo() {
	for i := len(g.list) - 1; i >= 0; i-- {
		g.list[i].undo()
	}
}

// commitBatches commits batches from the head of batches as one group
// (only the first with alone) and returns how many it took. Each taken
// is answered (r.gen or r.err set), unless whole is false: the group
// failed as a whole (its flip or its journal), is rolled back, and each
// of the batches it took is to be committed alone. a.commitMu held.
func (a *Agent) commitBatches(batches []*applyReq, alone bool) (took int, whole bool) {
	t0 := time.Now()
	a.mu.Lock()
	g, took := a.stageGroup(batches, alone)
	if len(g.list) == 0 {
		a.mu.Unlock()
		return took, true
	}
	t1 := time.Now()
	gen, synced, err := a.commitStaged(g)
	if err != nil {
		if took > 1 && !alone {
			return took, false
		}
		g.list[0].r.err = err
		return took, true
	}
	t2 := time.Now()
	a.afterCommit(g)
	for _, s := range g.list {
		s.r.gen, s.r.sync = gen, synced
	}
	a.log.Debug("apply phases", "batches", len(g.list), "check_compile", t1.Sub(t0), "commit_and_journal", t2.Sub(t1), "sync", synced)
	return took, true
}

// stageGroup checks and compiles batches from the head of batches into
// the store and the compiler, one after the other, and returns the group
// of those that pass and how many it took (those that fail answered with
// their error). It stops after one with alone, before a batch that
// changes interfaces unless it is the first to pass (then the group is
// that batch, its interfaces' links and maps made ready). a.mu held.
func (a *Agent) stageGroup(batches []*applyReq, alone bool) (g *stagedGroup, took int) {
	g = &stagedGroup{undoIfaces: func() {}}
	oldIfaces := a.store.Interfaces()
	for _, r := range batches {
		if alone && took == 1 || g.ifaces {
			break
		}
		r.gen, r.sync, r.err = 0, 0, nil
		ch, undo, err := a.stage(r.ops)
		if err != nil {
			r.err = err
			took++
			continue
		}
		if len(ch.Interfaces) > 0 {
			if len(g.list) > 0 {
				undo()
				break
			}
			g.ifaces = true
		}
		g.changed.add(a.comp.Generation())
		g.list = append(g.list, staged{r, ch, undo})
		took++
	}
	if !g.ifaces {
		return g, took
	}
	now := a.store.Interfaces()
	added, err := a.links(oldIfaces, now)
	if err == nil {
		// From here going back includes the interfaces' transmit and
		// address maps and the links this change attached, restored
		// once the rules that may use them are gone. Interfaces it
		// removes keep theirs until it is committed and journalled.
		g.undoIfaces = func() { a.restoreInterfaces(oldIfaces, added) }
		err = a.setInterfaces(now)
	}
	if err != nil {
		g.undo()
		g.undoIfaces()
		g.list[0].r.err = err
		g.list = nil
	}
	return g, took
}

// commitStaged makes a staged group live and durable: one generation
// flip, one write(2) of the batches' journal records and one fdatasync.
// It returns the generation and how long the sync took. On failure
// nothing of the group is in force or in the journal. a.mu held on
// entry, released on return.
func (a *Agent) commitStaged(g *stagedGroup) (gen uint32, synced time.Duration, err error) {
	next := g.changed.generation(a.comp.Generation())
	lines, nrec, err := a.records(g.list)
	if err != nil {
		g.undo()
		g.undoIfaces()
		a.mu.Unlock()
		return 0, 0, fmt.Errorf("journal the change: %w", err)
	}
	// The flip runs beside the journal's write and sync, one of them in
	// a goroutine of its own; the flip releases a.mu once the group is
	// live (readers see it from then on, as packets do). On failure a.mu
	// stays held. A goroutine woken on the other CPU starts 50-150 µs
	// later on these VMs: more than most flips take, so the sync runs
	// here, at once, and the flip in the goroutine; but a flip that
	// rewrites Maglev tables (a backend change) takes as long as that
	// and is what new connections wait for, so it runs here and the
	// journal in the goroutine.
	flipped := make(chan error, 1)
	flip := func() {
		var err error
		if gen, err = a.dp.Commit(next); err == nil {
			a.gen = gen
			a.mu.Unlock()
		}
		flipped <- err
	}
	var start int64
	var werr, serr error
	journal := func() {
		if start, werr = a.journal.write(lines); werr == nil {
			ts := time.Now()
			serr = a.journal.sync()
			synced = time.Since(ts)
		}
	}
	switch {
	case nrec == 0:
		flip()
	case g.changed.tables():
		journaled := make(chan struct{})
		go func() { journal(); close(journaled) }()
		flip()
		<-journaled
	default:
		go flip()
		journal()
	}
	switch ferr := <-flipped; {
	case ferr != nil:
		g.undo()
		g.undoIfaces()
		a.mu.Unlock()
		err := commitError(ferr)
		if nrec > 0 && werr == nil {
			// The records may be on disk already: a restart must
			// not replay what was refused.
			err = a.journal.cutBack(start, err)
		}
		return 0, 0, err
	case werr != nil || serr != nil:
		// Nothing is acknowledged that is not durable, and the
		// dataplane must not serve what a restart would not: go back
		// to the generation before the group.
		a.mu.Lock()
		g.undo()
		if back, rerr := a.dp.Commit(g.changed.generation(a.comp.Generation())); rerr != nil {
			a.log.Error("roll back after failing to journal", "error", rerr)
		} else {
			a.gen = back
		}
		g.undoIfaces()
		a.mu.Unlock()
		err := werr // a failed write cut itself back
		if serr != nil {
			err = a.journal.cutBack(start, serr)
		}
		return 0, 0, fmt.Errorf("journal the change in %s (change rolled back): %w", a.journal.path, err)
	}
	if nrec > 0 {
		a.seq += uint64(nrec)
		a.syncSoon()
	}
	return gen, synced, nil
}

// records frames the journal records of a group's batches, numbered on
// from the last one journalled, as one write; nrec is how many (a
// batch without rec is not journalled).
func (a *Agent) records(group []staged) (lines []byte, nrec int, err error) {
	size := 0
	for _, s := range group {
		// A record: checksum, seq, base64 and newline.
		size += 64 + base64.StdEncoding.EncodedLen(len(s.r.rec))
	}
	lines = make([]byte, 0, size)
	for _, s := range group {
		if s.r.rec == nil {
			continue
		}
		if lines, err = appendRecord(lines, journalEntry{Seq: a.seq + uint64(nrec) + 1, PB: s.r.rec}); err != nil {
			return nil, 0, err
		}
		nrec++
	}
	return lines, nrec, nil
}

// afterCommit does what follows a committed, journalled group: interfaces
// a batch removed are detached, CPU strategies are woken.
func (a *Agent) afterCommit(g *stagedGroup) {
	if g.ifaces {
		a.mu.Lock()
		keep := ifacesOf(a.store.Interfaces())
		a.mu.Unlock()
		if err := loader.DetachExcept(a.opts.PinDir, keep, a.held, a.log); err != nil {
			a.log.Error("detach interfaces no longer in config", "error", err)
		}
	}
	for _, s := range g.list {
		if len(s.ch.Strategies) > 0 {
			a.strategies.Wake()
			return
		}
	}
}

// groupChanges is what the batches of a group changed, as the compiler
// told after each: it starts what it tells anew at every batch (the
// entries that may differ, the statistics indexes given out for the
// first time), and one commit must write what all of them changed.
type groupChanges struct {
	n     int
	dirty *commit.Dirty // nil: anything may differ
	reset [3][]uint32   // PDRs', paths', balancer members' indexes
}

// add takes in what the compiler's last Apply changed.
func (c *groupChanges) add(g *commit.Generation) {
	c.n++
	if c.n == 1 {
		c.dirty = g.Dirty
	} else if c.dirty != nil {
		if g.Dirty == nil {
			c.dirty = nil
		} else {
			if c.n == 2 {
				// The first batch's sets are the compiler's: copy
				// before adding to them.
				c.dirty = &commit.Dirty{Rules: maps.Clone(c.dirty.Rules), FARs: maps.Clone(c.dirty.FARs), Tables: maps.Clone(c.dirty.Tables)}
			}
			maps.Copy(c.dirty.Rules, g.Dirty.Rules)
			maps.Copy(c.dirty.FARs, g.Dirty.FARs)
			maps.Copy(c.dirty.Tables, g.Dirty.Tables)
		}
	}
	c.reset[0] = append(c.reset[0], g.ResetStats...)
	c.reset[1] = append(c.reset[1], g.ResetPathStats...)
	c.reset[2] = append(c.reset[2], g.ResetLBStats...)
}

// tables says whether the group's commit may rewrite a Maglev table:
// some changed, or anything may differ.
func (c *groupChanges) tables() bool {
	return c.dirty == nil || len(c.dirty.Tables) > 0
}

// generation is what to commit for the group: the compiler's tables as
// they are now, with what every batch of the group changed.
func (c *groupChanges) generation(g *commit.Generation) *commit.Generation {
	if c.n <= 1 {
		return g
	}
	out := *g
	out.Dirty = c.dirty
	out.ResetStats, out.ResetPathStats, out.ResetLBStats = c.reset[0], c.reset[1], c.reset[2]
	return &out
}

// commitCompiled commits what the compiler holds as the next generation;
// a.mu held. On failure it runs undo (the compile's), so the compiler
// goes back to what serves.
func (a *Agent) commitCompiled(undo func()) error {
	n, err := a.dp.Commit(a.comp.Generation())
	if err != nil {
		undo()
		return commitError(err)
	}
	a.gen = n
	return nil
}

// commitError says what a commit that failed while writing the spare
// slot means: nothing of it is in force (the next commit writes the
// slot whole). A hash map found full is named so: the kernel's E2BIG
// reads "key too big for map" through cilium/ebpf.
func commitError(err error) error {
	if errors.Is(err, unix.E2BIG) {
		return fmt.Errorf("%w (a BPF map is full: nothing of the change is in force, the rules before it keep serving)", err)
	}
	return err
}
