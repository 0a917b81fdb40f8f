// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"fmt"
	"slices"
	"sort"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
)

// median runs prog o.Rounds times with o.Repeat repeats on frame (received
// on lan0) and returns the median ns per run; it fails if the program's
// verdict is not want, so a figure never times the wrong path.
func (b *bencher) median(prog *ebpf.Program, frame []byte, want uint32) (float64, error) {
	var samples []float64
	for i := 0; i < b.o.Rounds; i++ {
		d, err := b.round(prog, frame, want)
		if err != nil {
			return 0, err
		}
		samples = append(samples, d)
	}
	return medianOf(samples), nil
}

// round runs prog once with o.Repeat repeats and returns ns per run.
func (b *bencher) round(prog *ebpf.Program, frame []byte, want uint32) (float64, error) {
	var ns float64
	err := b.ns.Do(func() (err error) {
		ns, err = timeRun(prog, frame, want, b.o.Repeat)
		return err
	})
	return ns, err
}

// timeRun runs prog once with repeat repeats on this thread (which must be
// in the benchmark's namespace) and returns ns per run; it fails if the
// verdict is not want.
func timeRun(prog *ebpf.Program, frame []byte, want uint32, repeat int) (float64, error) {
	// Rules in the benchmark do not match on the ingress interface, so
	// the plain Benchmark call (no xdp_md ctx, rx on loopback) takes the
	// same path.
	ret, d, err := prog.Benchmark(append([]byte(nil), frame...), repeat, nil)
	if err != nil {
		return 0, err
	}
	if ret != want {
		return 0, fmt.Errorf("verdict %d, want %d", ret, want)
	}
	return float64(d.Nanoseconds()), nil
}

// paired times prog and its wrapper alone (on the wrapper's frame,
// verdict pass) round after round, so both see the machine in the same
// state, and returns the medians of prog, of the wrapper, and of their
// per-round difference (what prog costs beyond the wrapper). On these
// shared machines the speed drifts over a run; pairing takes the drift
// out of the difference.
func (b *bencher) paired(prog *ebpf.Program, frame []byte, want uint32, wrap *ebpf.Program, wframe []byte) (raw, alone, diff float64, err error) {
	var rs, ws, ds []float64
	for i := 0; i < b.o.Rounds; i++ {
		w, err := b.round(wrap, wframe, bpf.XDPPass)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("wrapper: %w", err)
		}
		r, err := b.round(prog, frame, want)
		if err != nil {
			return 0, 0, 0, err
		}
		rs, ws, ds = append(rs, r), append(ws, w), append(ds, r-w)
	}
	return medianOf(rs), medianOf(ws), medianOf(ds), nil
}

func medianOf(s []float64) float64 {
	s = slices.Clone(s)
	sort.Float64s(s)
	return s[len(s)/2]
}

// wrappers are the benchmark wrapper programs and the map that makes the
// miss wrappers cycle through a set of flows.
type wrappers struct {
	benchobjPrograms
	Cycle  *ebpf.Map `ebpf:"bench_cycle"`
	Front  *ebpf.Map `ebpf:"bench_front"`
	Stages *ebpf.Map `ebpf:"bench_stage_progs"`
	LRU    *ebpf.Map `ebpf:"bench_lru"`
	UEBare *ebpf.Map `ebpf:"bench_ue_bare"`
}

// frameSave mirrors the wrappers' struct frame_save: the saved bytes
// and, in seq, the per-run counter the miss wrappers make flows of.
type frameSave struct {
	W           [(56 + 16 + 24) / 8]uint64
	More, More6 uint32
	Seq, _      uint32
}

// runSeqs reads each CPU's per-run counter from front (bench_front).
func runSeqs(front *ebpf.Map) ([]uint32, error) {
	var v []frameSave
	if err := front.Lookup(uint32(0), &v); err != nil {
		return nil, fmt.Errorf("read the wrappers' run counters: %w", err)
	}
	out := make([]uint32, len(v))
	for i := range v {
		out[i] = v[i].Seq
	}
	return out, nil
}

// Close closes the programs and the maps.
func (w *wrappers) Close() error {
	w.Cycle.Close()
	w.Front.Close()
	w.Stages.Close()
	w.LRU.Close()
	w.UEBare.Close()
	return w.benchobjPrograms.Close()
}

// setCycle makes the miss wrappers cycle through mask + 1 flows (0: a
// new flow every run).
func (w *wrappers) setCycle(mask uint32) error {
	if err := w.Cycle.Put(uint32(0), mask); err != nil {
		return fmt.Errorf("set the wrappers' flow cycle: %w", err)
	}
	return nil
}

// loadWrappers loads the benchmark wrapper programs against dp's maps.
func loadWrappers(dp *loader.Dataplane) (*wrappers, error) {
	spec, err := loadBenchobj()
	if err != nil {
		return nil, err
	}
	if err := dp.ApplyTo(spec); err != nil {
		return nil, err
	}
	var p wrappers
	if err := spec.LoadAndAssign(&p, &ebpf.CollectionOptions{MapReplacements: dp.MapReplacements()}); err != nil {
		return nil, fmt.Errorf("load benchmark wrappers: %w", err)
	}
	if err := p.Stages.Put(uint32(0), p.BenchStageTail); err != nil {
		p.Close()
		return nil, fmt.Errorf("tail-call stage: %w", err)
	}
	return &p, nil
}
