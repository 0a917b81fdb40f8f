// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// FlowOpt's dataplane side (bpf/lib/flowopt.h): the QoS classes and the
// modules' switches a generation carries, the rounds the agent keeps
// adjusting in the live slot, relief's cpumap and CPU loads, and the
// counters.

type (
	// QoSClassEntry is a QoS class as one slot of edge_qos holds it.
	QoSClassEntry = edgeEdgeQosClass
	// QoSCounters are a class's counters (edge_qos_stats).
	QoSCounters = edgeEdgeQosCtr
	// FOConn is a connection's FlowOpt state (edge_fo), FODir one of
	// its directions.
	FOConn = edgeEdgeFoConn
	FODir  = edgeEdgeFoDir
	// CPULoad is a CPU's load as relief reads it (edge_cpu_loads).
	CPULoad = edgeEdgeCpuLoad
)

// Limits and flags of bpf/edge_consts.h (TestHeaderConstants).
const (
	MaxQoS     = 64
	MaxCPUs    = 64
	FFQoSShift = 8

	FOProbe  = 1 // edge_state.fo_flags: the probe stage is on
	FOFair   = 2 // fairness
	FORelief = 4 // relief

	QoSFlagURLLC = 1 // edge_qos_class.flags: never held back
	QoSFlagDrop  = 2 // over its share: dropped, even when ECN-capable

	FODHint = 1 // edge_fo_dir.flags: the congestion hint
	FODECN  = 2 // the direction is ECN-capable
)

// FOMaxEntries bounds edge_fo: FlowOpt follows at most this many
// connections (216 bytes each: 54 MiB), however large the flow table.
const FOMaxEntries = 1 << 18

// FOEntries is edge_fo's size for l: the flow table's, at most
// FOMaxEntries.
func (l Limits) FOEntries() uint32 {
	return min(l.FTEntries(), FOMaxEntries)
}

// qosRound is the round the agent last set for a class index, and the
// class it set it for.
type qosRound struct {
	id    uint32
	round uint64
}

// writeQoS makes slot t's QoS classes and DSCP classes those of g. A
// class keeps the round the agent set for it (SetQoSRound) while its
// entry says it has a rate.
func (w *writer) writeQoS(t uint32, g *Generation) error {
	dp := w.dp
	cur := w.slots[t]
	for i := uint32(0); i < MaxQoS; i++ {
		want := g.QoS[i]
		if r, ok := w.qosRounds[i]; ok && r.id == want.Id && want.RoundNs != 0 {
			want.RoundNs = r.round
		}
		if cur.qosKnown && cur.qos[i] == want {
			continue
		}
		if err := dp.EdgeQos.Put(t*MaxQoS+i, want); err != nil {
			return fmt.Errorf("write qos class %d: %w", i, err)
		}
		cur.qos[i] = want
	}
	for d := uint32(0); d < 64; d++ {
		if cur.qosKnown && cur.qosDSCP[d] == g.QoSDSCP[d] {
			continue
		}
		if err := dp.EdgeQosDscp.Put(t*64+d, g.QoSDSCP[d]); err != nil {
			return fmt.Errorf("write the class of dscp %d: %w", d, err)
		}
		cur.qosDSCP[d] = g.QoSDSCP[d]
	}
	cur.qosKnown = true
	return nil
}

// SetQoSRound sets the round (ns in which each flow earns a quantum) of
// class index idx, the class id's, in both slots where it has a rate.
func (dp *Dataplane) SetQoSRound(idx, id uint32, round uint64) error {
	w := dp.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	if idx >= MaxQoS || round == 0 {
		return fmt.Errorf("qos class index %d, round %d: out of range", idx, round)
	}
	for t, s := range w.slots {
		e := s.qos[idx]
		if !s.qosKnown || e.Id != id || e.RoundNs == 0 || e.RoundNs == round {
			continue
		}
		e.RoundNs = round
		if err := dp.EdgeQos.Put(uint32(t)*MaxQoS+idx, e); err != nil {
			return fmt.Errorf("write qos class %d's round: %w", idx, err)
		}
		s.qos[idx] = e
	}
	w.qosRounds[idx] = qosRound{id: id, round: round}
	return nil
}

// QoSStats returns each class index's counters, summed over the CPUs.
func (dp *Dataplane) QoSStats() ([MaxQoS]QoSCounters, error) {
	var out [MaxQoS]QoSCounters
	var per []QoSCounters
	for i := uint32(0); i < MaxQoS; i++ {
		if err := dp.EdgeQosStats.Lookup(i, &per); err != nil {
			return out, fmt.Errorf("read qos class %d's counters: %w", i, err)
		}
		for _, c := range per {
			o := &out[i]
			o.Packets += c.Packets
			o.Bytes += c.Bytes
			o.Marked += c.Marked
			o.Dropped += c.Dropped
			o.Flows += c.Flows
			o.Hinted += c.Hinted
			o.Congested += c.Congested
		}
	}
	return out, nil
}

// CPUPackets returns the packets the dataplane has handled on each CPU
// (every verdict's, summed), the load relief balances.
func (dp *Dataplane) CPUPackets() ([]uint64, error) {
	var out []uint64
	var per []Ctr
	for v := uint32(0); v < 8; v++ {
		if err := dp.EdgeVerdicts.Lookup(v, &per); err != nil {
			return nil, fmt.Errorf("read verdict %d's counters: %w", v, err)
		}
		if out == nil {
			out = make([]uint64, len(per))
		}
		for cpu, c := range per {
			out[cpu] += c.Packets
		}
	}
	return out, nil
}

// SetCPULoads writes each CPU's load for relief (index: the CPU).
func (dp *Dataplane) SetCPULoads(loads []CPULoad) error {
	for cpu, l := range loads[:min(len(loads), MaxCPUs)] {
		if err := dp.EdgeCpuLoads.Put(uint32(cpu), l); err != nil {
			return fmt.Errorf("write cpu %d's load: %w", cpu, err)
		}
	}
	return nil
}

// ReliefCPUs is how many CPUs relief may place flows on: the possible
// CPUs, at most MaxCPUs.
func ReliefCPUs() uint32 {
	n, err := ebpf.PossibleCPU()
	if err != nil || n < 1 {
		return 1
	}
	return uint32(min(n, MaxCPUs))
}

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
	for cpu := range ReliefCPUs() {
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
	if cpu >= int(ReliefCPUs()) {
		return fmt.Errorf("cpu %d: the cpumap holds CPUs 0-%d", cpu, ReliefCPUs()-1)
	}
	slot := idx & (IfSlots - 1)
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
	for slot := range uint32(IfSlots) {
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
	opts := &ebpf.CollectionOptions{MapReplacements: dp.MapReplacements()}
	if err := dp.spec.LoadAndAssign(&p, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load relief's cpu program: %+v", ve)
		}
		return nil, fmt.Errorf("load relief's cpu program: %w", err)
	}
	dp.cpuProg = p.Prog
	return dp.cpuProg, nil
}

// FOKey is a connection as FlowOpt keys it (struct edge_fo_key): the
// lower endpoint first, so both directions give the same.
type FOKey struct {
	A, B  [2]uint64
	Ports uint64
}

// FOPlace is where edge_fo holds the connection of a packet with key k
// (fo_place): the first of its two slots, the check its entry carries,
// its key and the packet's direction (0: from the lower endpoint).
func (dp *Dataplane) FOPlace(k FlowKey) (idx, check uint32, key FOKey, dir int) {
	a0, a1, b0, b1 := le64(k.Src[:8]), le64(k.Src[8:]), le64(k.Dst[:8]), le64(k.Dst[8:])
	ap, bp := k.Sport, k.Dport
	if a0 > b0 || (a0 == b0 && (a1 > b1 || (a1 == b1 && ap > bp))) {
		a0, b0, a1, b1, ap, bp = b0, a0, b1, a1, bp, ap
		dir = 1
	}
	h := sipTuple(dp.secret, a0, a1, b0, b1, uint32(ap)|uint32(bp)<<16, k.Proto, k.Family)
	key = FOKey{A: [2]uint64{a0, a1}, B: [2]uint64{b0, b1},
		Ports: uint64(ap) | uint64(bp)<<16 | uint64(k.Proto)<<32 | uint64(k.Family)<<40}
	return uint32(h) & (dp.Limits.FOEntries() - 1) &^ 1, uint32(h>>32) | 1, key, dir
}

// FOLookup returns the FlowOpt state of the connection of key k, and the
// direction k is of it; false when edge_fo has none.
func (dp *Dataplane) FOLookup(k FlowKey) (FOConn, int, bool, error) {
	idx, check, key, dir := dp.FOPlace(k)
	var e FOConn
	for i := idx; i < idx+2; i++ {
		if err := dp.EdgeFo.Lookup(i, &e); err != nil {
			return e, dir, false, fmt.Errorf("read flowopt slot %d: %w", i, err)
		}
		if e.Check == check && (FOKey{A: e.K.A, B: e.K.B, Ports: e.K.Ports}) == key {
			return e, dir, true, nil
		}
	}
	return FOConn{}, dir, false, nil
}
