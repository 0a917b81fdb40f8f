// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// insertTable is the bare insert's table size (bench_lru in
// testdata/bench.bpf.c), the dataplane's default flow cache.
const insertTable = 65536

const methodInsert = "a fresh IPv4 flow-cache key (source address from a per-CPU counter, the CPU in the ingress ifindex) inserted into a bench-local " +
	"LRU hash shaped as edge_flows4 (65,536 entries, BPF_F_NO_COMMON_LRU), filled past capacity on every CPU first so every insert evicts; " +
	"the wrapper that makes the key and value without inserting and the insert timed in alternating rounds, the median per-round difference added to the floor"

// measureInsert adds flow_insert_bare: one insert of a fresh key into a
// full LRU, the least any recorded new flow costs. With per-CPU LRU
// lists an insert evicts only from its own CPU's list, so the table is
// filled from every CPU before timing.
func (b *bencher) measureInsert(r *Result) error {
	cpus, err := allowedCPUs()
	if err != nil {
		return err
	}
	for _, cpu := range cpus {
		err := b.ns.Do(func() error {
			if err := pinTo(cpu); err != nil {
				return err
			}
			_, err := timeRun(b.progs.BenchFlowInsert, b.probe, bpf.XDPPass, 2*insertTable)
			return err
		})
		if err != nil {
			return fmt.Errorf("fill the bare insert's table on cpu %d: %w", cpu, err)
		}
	}
	// An LRU shrink frees a few entries ahead, so a full table holds a
	// few less than its size.
	if n, err := countEntries(b.progs.LRU); err != nil {
		return err
	} else if n < insertTable*99/100 {
		return fmt.Errorf("bare insert's table holds %d entries after the fill, want about %d", n, insertTable)
	}
	raw, alone, diff, err := b.paired(b.progs.BenchFlowInsert, b.probe, bpf.XDPPass, b.progs.BenchWrapFlowInsert, b.probe)
	if err != nil {
		return fmt.Errorf("bare insert: %w", err)
	}
	b.o.Log("flow_insert_bare: %.1f ns raw, wrapper %.1f ns", raw, alone)
	r.add(Figure{Name: "flow_insert_bare", RawNs: raw, NsPerPacket: r.FloorNs + diff, UndoNs: alone, Method: methodInsert, Verdict: "pass"})
	return nil
}

// countEntries counts m's entries.
func countEntries(m *ebpf.Map) (int, error) {
	var k, v []byte
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("count %s: %w", m, err)
	}
	return n, nil
}

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("cpu affinity: %w", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pinTo binds this thread to cpu. Only for threads that end with their
// goroutine (topo's Do): the binding goes with the thread.
func pinTo(cpu int) error {
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("bind to cpu %d: %w", cpu, err)
	}
	return nil
}
