// SPDX-License-Identifier: Apache-2.0

package control

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bpf/rcu"
	"github.com/edgeplane/edgeplane/internal/config"
)

// BackendChange is how long one kind of change to a service's backends
// takes to reach the dataplane, from the API call.
type BackendChange struct {
	Name string `json:"name"`
	Ops  int    `json:"ops"`
	// Flip is the time until the generation number in edge_global moved
	// (new connections go by the new table from then on): the midpoint
	// between the last read of the pinned map that saw the old number
	// and the end of the first that saw the new one. ReadGapP50Us is the
	// median time between those two reads, twice the most the midpoint
	// can be off.
	Flip         Latency `json:"to_flip"`
	ReadGapP50Us float64 `json:"to_flip_read_gap_p50_us"`
	// OldReadBeforeAnswer counts the changes whose last read that saw
	// the old generation started before the Apply answered. The agent
	// flips before it answers, so a read that still saw the old number
	// began before the flip: every change must count. (The flip as
	// timed, from a reader that may be starved, can come after the
	// answer; this cannot.)
	OldReadBeforeAnswer int `json:"old_read_before_answer"`
	// Settled is the time until a grace period after the flip had
	// passed: no packet still reads the old table.
	Settled Latency `json:"to_settled"`
	// Answer is the Apply's client wall time: after the flip, the
	// journal's sync and the way back.
	Answer Latency `json:"to_answer"`
	Method string  `json:"method"`
}

// ctlBackends is the size of the service the backend figures change,
// ctlRemovals how many back-to-back removals lb_remove_backend times,
// ctlChanges how many changes of each kind the paced figures time, and
// ctlChangePace the time from one of those changes to the next.
const (
	ctlBackends   = 10
	ctlRemovals   = 50
	ctlChanges    = 30
	ctlChangePace = 100 * time.Millisecond
)

// lbrOp is an update of LBR 1 to the service's backends (FARs 1001..)
// but skip, of weight 1 (unset) each but backend heavy, of weight 2.
func lbrOp(skip, heavy uint32) *pb.Operation {
	m := []*pb.Member{}
	for i := uint32(1); i <= ctlBackends; i++ {
		if i == skip {
			continue
		}
		mb := &pb.Member{Far: 1000 + i}
		if i == heavy {
			w := uint32(2)
			mb.Weight = &w
		}
		m = append(m, mb)
	}
	return &pb.Operation{Op: &pb.Operation_Update{Update: &pb.Object{Kind: &pb.Object_Lbr{Lbr: &pb.Lbr{Id: 1, Algorithm: "maglev", Members: m}}}}}
}

// setUpService creates the NAT service of ctlBackends backends the
// backend figures change.
func (l *ctlLab) setUpService(ctx context.Context) error {
	var ops []*pb.Operation
	for i := uint32(1); i <= ctlBackends; i++ {
		ops = append(ops, &pb.Operation{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Far{
			Far: &pb.Far{Id: 1000 + i, Action: "nat", Address: fmt.Sprintf("10.99.0.%d", i), Port: 8080}}}}})
	}
	ops = append(ops, &pb.Operation{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Lbr{Lbr: &pb.Lbr{Id: 1, Algorithm: "maglev"}}}}},
		lbrOp(0, 0),
		&pb.Operation{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Service{
			Service: &pb.Service{Id: 1, Vip: "198.51.100.80", Port: 80, Proto: "tcp", Lbr: 1}}}}})
	if _, err := l.apply(ctx, ops...); err != nil {
		return fmt.Errorf("set up the service: %w", err)
	}
	return nil
}

// removeBackend times Applies that take one backend out of the service
// (each followed by an untimed one putting it back), back to back. The
// answer comes after the new generation, Maglev table included, is live.
func (l *ctlLab) removeBackend(ctx context.Context, floorP50 float64) (Latency, error) {
	d, server := make([]time.Duration, ctlRemovals), make([]agentTime, ctlRemovals)
	for i := range d {
		t0 := time.Now()
		s, err := l.applyTimed(ctx, lbrOp(uint32(1+i%ctlBackends), 0))
		d[i], server[i] = time.Since(t0), s
		if err != nil {
			return Latency{}, fmt.Errorf("remove a backend: %w", err)
		}
		if _, err := l.apply(ctx, lbrOp(0, 0)); err != nil {
			return Latency{}, fmt.Errorf("put the backend back: %w", err)
		}
	}
	lat := latency("lb_remove_backend", d, server, floorP50)
	lat.Method = fmt.Sprintf("Apply updating the LBR of a NAT service of %d backends to leave one out (its Maglev table of %d entries rebuilt, "+
		"the changed entries written to the idle slot, then the flip), answered after the flip; each followed by an untimed Apply putting it back; %s",
		ctlBackends, config.DefaultMaglevTable, ctlTiming)
	return lat, nil
}

// backendChanges times, paced, the three changes an operator or a health
// check makes to a service's backends: one taken out, one added (the one
// taken out, back), one's weight changed (and, untimed, back), each to
// the flip, to the grace period after it and to the answer.
func (l *ctlLab) backendChanges(ctx context.Context, floorP50 float64) (remove, add, weight BackendChange, err error) {
	w, err := openGenWatch(l.pinDir)
	if err != nil {
		return remove, add, weight, err
	}
	defer w.close()
	kinds := []*changeTimes{{name: "lb_backend_remove"}, {name: "lb_backend_add"}, {name: "lb_backend_weight"}}
	pace := time.NewTicker(ctlChangePace)
	defer pace.Stop()
	step := func(ct *changeTimes, op *pb.Operation) error {
		select {
		case <-pace.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if ct == nil {
			_, err := l.apply(ctx, op)
			return err
		}
		return ct.time(w, func() (agentTime, error) { return l.applyTimed(ctx, op) })
	}
	for i := range ctlChanges {
		b := uint32(1 + i%ctlBackends)
		for _, s := range []struct {
			ct *changeTimes
			op *pb.Operation
		}{{kinds[0], lbrOp(b, 0)}, {kinds[1], lbrOp(0, 0)}, {kinds[2], lbrOp(0, b)}, {nil, lbrOp(0, 0)}} {
			if err := step(s.ct, s.op); err != nil {
				return remove, add, weight, fmt.Errorf("backend change %d: %w", i, err)
			}
		}
	}
	what := []string{"updating the LBR to leave one backend out", "updating the LBR to put the backend taken out back",
		"updating the LBR to give one backend weight 2 (the others 1)"}
	out := make([]BackendChange, len(kinds))
	for i, ct := range kinds {
		out[i] = ct.result(floorP50, fmt.Sprintf("Apply %s, of a NAT service of %d backends (Maglev table of %d entries); "+
			"one change started every %s on a ticker, in the order remove, add, weight, weight back (untimed), so each finds the agent idle; "+
			"to_flip: from the call until the generation number in the pinned edge_global moved, read every ~20 µs by a goroutine on its own OS thread "+
			"(nanosleep between reads, 1 µs timer slack): the midpoint between the last read that saw the old number and the end of the first that saw the new one "+
			"(to_flip_read_gap_p50_us: the median time between them; old_read_before_answer: how many changes' last read of the old number started before the answer, all of them when the flip comes first); "+
			"to_settled: until, after that, an expedited RCU grace period (an ARRAY_OF_MAPS update, as the agent's own barrier) returned, "+
			"after which no XDP program still runs on what it read before the flip; to_answer: the Apply's client wall time (after the journal's sync); "+
			"ratios to grpc_floor; %s", what[i], ctlBackends, config.DefaultMaglevTable, ctlChangePace, ctlTiming))
	}
	return out[0], out[1], out[2], nil
}

// changeTimes gathers the times of one kind of backend change.
type changeTimes struct {
	name                       string
	flip, gap, settled, answer []time.Duration
	server                     []agentTime
	oldBeforeAnswer            int
}

// time runs call, an Apply that makes one commit, and records when the
// generation flipped, when a grace period after it passed, when the call
// answered and what the agent reported as its own time.
func (ct *changeTimes) time(w *genWatch, call func() (agentTime, error)) error {
	g0, err := w.gen()
	if err != nil {
		return err
	}
	type seen struct {
		// before: the start of the last read that saw the old number,
		// after: the end of the first that saw the new one.
		before, after, settled time.Time
		err                    error
	}
	var stop atomic.Bool
	done := make(chan seen, 1)
	ready := make(chan struct{})
	go func() {
		// Its own OS thread, asleep between reads (20 µs, with a timer
		// slack of 1 µs instead of 50): a reader that kept one of the two
		// CPUs busy would delay the agent it times.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
		nap := unix.NsecToTimespec(int64(20 * time.Microsecond))
		close(ready)
		var before time.Time
		for {
			// Told to stop before this read started, that is after the
			// answer: a read that still sees the old number now is a
			// flip that did not happen, not a reader starved of CPU.
			late := stop.Load()
			start := time.Now()
			g, err := w.gen()
			if err != nil {
				done <- seen{err: err}
				return
			}
			if g != g0 {
				s := seen{before: before, after: time.Now()}
				s.err = w.barrier.Sync()
				s.settled = time.Now()
				done <- s
				return
			}
			if late {
				done <- seen{err: errors.New("the Apply answered, but the generation did not move")}
				return
			}
			before = start
			_ = unix.Nanosleep(&nap, nil)
		}
	}()
	<-ready
	t0 := time.Now()
	server, err := call()
	answered := time.Now()
	answer := answered.Sub(t0)
	var s seen
	select {
	case s = <-done:
	case <-time.After(time.Second):
		// Not seen a second after the answer: the reader's next read
		// decides (see late above).
		stop.Store(true)
		s = <-done
	}
	if err != nil {
		return err
	}
	if s.err != nil {
		return s.err
	}
	if s.before.Before(answered) {
		ct.oldBeforeAnswer++
	}
	if s.before.Before(t0) { // no read between the call and the flip
		s.before = t0
	}
	ct.flip = append(ct.flip, s.before.Sub(t0)+s.after.Sub(s.before)/2)
	ct.gap = append(ct.gap, s.after.Sub(s.before))
	ct.settled = append(ct.settled, s.settled.Sub(t0))
	ct.answer = append(ct.answer, answer)
	ct.server = append(ct.server, server)
	return nil
}

func (ct *changeTimes) result(floorP50 float64, method string) BackendChange {
	return BackendChange{Name: ct.name, Ops: len(ct.flip),
		Flip:                latency(ct.name+".to_flip", ct.flip, ct.server, floorP50),
		ReadGapP50Us:        measure.Us(measure.Pct(measure.Sorted(ct.gap), 50)),
		OldReadBeforeAnswer: ct.oldBeforeAnswer,
		Settled:             latency(ct.name+".to_settled", ct.settled, ct.server, floorP50),
		Answer:              latency(ct.name+".to_answer", ct.answer, ct.server, floorP50),
		Method:              method}
}

// genWatch reads the generation number the agent flips: the first field
// of edge_global, pinned in the agent's pin dir (read as bytes, so an
// agent of another build, whose state has other fields after it, is
// read the same).
type genWatch struct {
	m       *ebpf.Map
	val     []byte
	barrier *rcu.Barrier
}

func openGenWatch(pinDir string) (*genWatch, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, "edge_global"), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open the agent's edge_global: %w", err)
	}
	b, err := rcu.New()
	if err != nil {
		m.Close()
		return nil, err
	}
	return &genWatch{m: m, val: make([]byte, m.ValueSize()), barrier: b}, nil
}

func (w *genWatch) gen() (uint32, error) {
	if err := w.m.Lookup(uint32(0), &w.val); err != nil {
		return 0, fmt.Errorf("read the generation: %w", err)
	}
	return binary.NativeEndian.Uint32(w.val), nil
}

func (w *genWatch) close() {
	w.barrier.Close()
	w.m.Close()
}
