// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// Relief's cpumap (edge_cpus) and the interfaces whose XDP work is
// handed to one CPU (edge_if_steer): both run edge_xdp_cpu on the CPU a
// frame is handed to.

// cpumapVal is struct bpf_cpumap_val: the queue size and the program the
// CPU runs on what it is handed.
type cpumapVal struct {
	Qsize  uint32
	ProgFD int32
}

// cpumapQueue is each CPU's queue of handed packets (the kernel's
// samples use 2048; a burst of 64 per NAPI poll fits many times).
const cpumapQueue = 2048

// SetRelief fills edge_cpus with every CPU relief may place flows on,
// each running edge_xdp_cpu, or empties it (on false): with no entry for
// its CPU a placed flow is handled where it arrives.
func (dp *Dataplane) SetRelief(on bool) error {
	dp.cpuMu.Lock()
	defer dp.cpuMu.Unlock()
	dp.reliefOn = on
	for cpu := range bpf.ReliefCPUs() {
		if err := dp.cpumapEntry(cpu, on || dp.steeredTo(int(cpu))); err != nil {
			return fmt.Errorf("relief: %w", err)
		}
	}
	return nil
}

// cpumapEntry gives CPU cpu an entry of edge_cpus running edge_xdp_cpu
// (on), or removes it.
func (dp *Dataplane) cpumapEntry(cpu uint32, on bool) error {
	if !on {
		if err := dp.EdgeCpus.Delete(cpu); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove cpu %d from the cpumap: %w", cpu, err)
		}
		return nil
	}
	prog, err := dp.cpuProgram()
	if err != nil {
		return err
	}
	if err := dp.EdgeCpus.Put(cpu, cpumapVal{Qsize: cpumapQueue, ProgFD: int32(prog.FD())}); err != nil {
		return fmt.Errorf("give cpu %d a cpumap entry: %w", cpu, err)
	}
	return nil
}

// steeredTo tells whether an interface's XDP work is steered to cpu.
func (dp *Dataplane) steeredTo(cpu int) bool {
	for _, c := range dp.steered {
		if c == cpu {
			return true
		}
	}
	return false
}

// SetIfSteer hands the XDP work of the interface with ifindex idx to CPU
// cpu (a frame coming in on another CPU is redirected there through
// edge_cpus), or back to whichever CPU receives it (cpu < 0).
func (dp *Dataplane) SetIfSteer(idx uint32, cpu int) error {
	dp.cpuMu.Lock()
	defer dp.cpuMu.Unlock()
	if cpu >= int(bpf.ReliefCPUs()) {
		return fmt.Errorf("cpu %d: the cpumap holds CPUs 0-%d", cpu, bpf.ReliefCPUs()-1)
	}
	slot := idx & (bpf.IfSlots - 1)
	if dp.steered == nil {
		dp.steered = map[uint32]int{}
	}
	old, had := dp.steered[slot]
	if cpu >= 0 {
		dp.steered[slot] = cpu
		if err := dp.cpumapEntry(uint32(cpu), true); err != nil {
			return err
		}
		if err := dp.EdgeIfSteer.Put(slot, uint32(cpu+1)); err != nil {
			return fmt.Errorf("steer interface %d: %w", idx, err)
		}
	} else {
		delete(dp.steered, slot)
		if err := dp.EdgeIfSteer.Put(slot, uint32(0)); err != nil {
			return fmt.Errorf("unsteer interface %d: %w", idx, err)
		}
	}
	if had && old != cpu && !dp.reliefOn && !dp.steeredTo(old) {
		return dp.cpumapEntry(uint32(old), false)
	}
	return nil
}

// ClearIfSteer hands every interface's XDP work back to the CPUs that
// receive it: what a previous agent (a crashed one) left steered.
func (dp *Dataplane) ClearIfSteer() error {
	dp.cpuMu.Lock()
	defer dp.cpuMu.Unlock()
	for slot := range uint32(bpf.IfSlots) {
		var v uint32
		if err := dp.EdgeIfSteer.Lookup(slot, &v); err != nil {
			return err
		}
		if v != 0 {
			if err := dp.EdgeIfSteer.Put(slot, uint32(0)); err != nil {
				return err
			}
		}
	}
	dp.steered = nil
	return nil
}

// cpuProgram loads (once) edge_xdp_cpu, the pipeline a CPU runs on the
// packets relief hands it, against dp's maps.
func (dp *Dataplane) cpuProgram() (*ebpf.Program, error) {
	if dp.cpuProg != nil {
		return dp.cpuProg, nil
	}
	var p struct {
		Prog *ebpf.Program `ebpf:"edge_xdp_cpu"`
	}
	if err := dp.LoadApart(&p, "relief's cpu program"); err != nil {
		return nil, err
	}
	dp.cpuProg = p.Prog
	return dp.cpuProg, nil
}
