// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"fmt"
	"math/bits"

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

	// Fixed point of the fairness stage: tokens in 1/2^FOTokenShift
	// bytes, a class's tok_mul in 1/2^FOMulShift, its ns_byte in
	// 1/2^FONsbShift.
	FOTokenShift = 10
	FOMulShift   = 24
	FONsbShift   = 16
)

// Bounds of the derived fields, so the packet path's products fit in 64
// bits: tok_mul times an elapsed time under 2^24 ns (FO_MUL_EL), ns_byte
// times a frame's length (under 2^16), four times depth_ns.
const (
	foTokMulMax  = 1 << 39
	foNsByteMax  = 1<<47 - 1
	foDepthNsMax = 1 << 60
)

// WithDerived returns e with the fields the packet path multiplies by
// (tok_mul, ns_byte, depth_ns) derived from its quantum, round, rate
// and depth: the stage divides by none of them per packet.
func (e QoSClassEntry) WithDerived() QoSClassEntry {
	e.TokMul, e.NsByte, e.DepthNs = 0, 0, 0
	if e.RoundNs != 0 {
		// quantum << (token + mul shifts) / round: too large to
		// multiply by stays 0 (the stage divides).
		hi, lo := bits.Mul64(uint64(e.Quantum), 1<<(FOTokenShift+FOMulShift))
		if hi < e.RoundNs {
			if q, _ := bits.Div64(hi, lo, e.RoundNs); q < foTokMulMax {
				e.TokMul = q
			}
		}
	}
	if e.Rate != 0 {
		e.NsByte = min(uint64(1e9<<FONsbShift)/e.Rate, foNsByteMax)
		e.DepthNs = foDepthNsMax
		if hi, lo := bits.Mul64(uint64(e.Depth), 1e9); hi < e.Rate {
			q, _ := bits.Div64(hi, lo, e.Rate)
			e.DepthNs = min(q, foDepthNsMax)
		}
	}
	return e
}

// FOMaxEntries bounds edge_fo: FlowOpt follows at most this many
// connections (216 bytes each: 54 MiB), however large the flow table.
const FOMaxEntries = 1 << 18

// FOEntries is edge_fo's size for l: the flow table's, at most
// FOMaxEntries.
func (l Limits) FOEntries() uint32 {
	return min(l.FTEntries(), FOMaxEntries)
}

// QoSStats returns each class index's counters, summed over the CPUs.
func (o *Object) QoSStats() ([MaxQoS]QoSCounters, error) {
	var out [MaxQoS]QoSCounters
	var per []QoSCounters
	for i := uint32(0); i < MaxQoS; i++ {
		if err := o.EdgeQosStats.Lookup(i, &per); err != nil {
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
func (o *Object) CPUPackets() ([]uint64, error) {
	var out []uint64
	var per []Ctr
	for v := uint32(0); v < 8; v++ {
		if err := o.EdgeVerdicts.Lookup(v, &per); err != nil {
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
func (o *Object) SetCPULoads(loads []CPULoad) error {
	for cpu, l := range loads[:min(len(loads), MaxCPUs)] {
		if err := o.EdgeCpuLoads.Put(uint32(cpu), l); err != nil {
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

// FOKey is a connection as FlowOpt keys it (struct edge_fo_key): the
// lower endpoint first, so both directions give the same.
type FOKey struct {
	A, B  [2]uint64
	Ports uint64
}

// FOPlace is where edge_fo holds the connection of a packet with key k
// (fo_place): the first of its two slots, the check its entry carries,
// its key and the packet's direction (0: from the lower endpoint).
func (o *Object) FOPlace(k FlowKey) (idx, check uint32, key FOKey, dir int) {
	a0, a1, b0, b1 := le64(k.Src[:8]), le64(k.Src[8:]), le64(k.Dst[:8]), le64(k.Dst[8:])
	ap, bp := k.Sport, k.Dport
	if a0 > b0 || (a0 == b0 && (a1 > b1 || (a1 == b1 && ap > bp))) {
		a0, b0, a1, b1, ap, bp = b0, a0, b1, a1, bp, ap
		dir = 1
	}
	h := sipTuple(o.Secret, a0, a1, b0, b1, uint32(ap)|uint32(bp)<<16, k.Proto, k.Family)
	key = FOKey{A: [2]uint64{a0, a1}, B: [2]uint64{b0, b1},
		Ports: uint64(ap) | uint64(bp)<<16 | uint64(k.Proto)<<32 | uint64(k.Family)<<40}
	return uint32(h) & (o.Limits.FOEntries() - 1) &^ 1, uint32(h>>32) | 1, key, dir
}

// FOLookup returns the FlowOpt state of the connection of key k, and the
// direction k is of it; false when edge_fo has none.
func (o *Object) FOLookup(k FlowKey) (FOConn, int, bool, error) {
	idx, check, key, dir := o.FOPlace(k)
	var e FOConn
	for i := idx; i < idx+2; i++ {
		if err := o.EdgeFo.Lookup(i, &e); err != nil {
			return e, dir, false, fmt.Errorf("read flowopt slot %d: %w", i, err)
		}
		if e.Check == check && (FOKey{A: e.K.A, B: e.K.B, Ports: e.K.Ports}) == key {
			return e, dir, true, nil
		}
	}
	return FOConn{}, dir, false, nil
}
