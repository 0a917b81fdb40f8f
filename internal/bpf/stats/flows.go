// SPDX-License-Identifier: Apache-2.0

package stats

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// Ports and the GRE key are kept in network order in the keys; read as
// little-endian integers (bpfel), reversing their bytes gives the value.

// Flows reads every flow of o's flow table, adds the per-CPU counts not
// yet folded in, and returns the top n by bytes (all when n <= 0), their
// PDRs named by the live generation gen's rules. A read races with
// packets: counts are a moment's, not a snapshot.
func Flows(o *bpf.Object, rules map[bpf.RuleKey]bpf.Rule, gen uint32, n int) ([]dataplane.FlowStat, error) {
	pdrOf := map[uint32]uint32{} // stats index -> PDR id
	for _, r := range rules {
		pdrOf[r.Stats] = uint32(r.Prio)
	}
	// Exact-match copies first (at most a slot per CPU each): what each
	// CPU counted and has not folded into the shared entry yet.
	pending := map[bpf.FlowKey]bpf.Flow{}
	if o.EdgeEmc4 != nil {
		var slots []bpf.EMC4
		for i := uint32(0); i < o.EdgeEmc4.MaxEntries(); i++ {
			if err := o.EdgeEmc4.Lookup(i, &slots); err != nil {
				return nil, fmt.Errorf("read exact-match cache slot %d: %w", i, err)
			}
			for _, e := range slots {
				if e.F.Packets == 0 {
					continue
				}
				k := unpack4(e.K)
				p := pending[k]
				p.Packets += e.F.Packets
				p.Bytes += e.F.Bytes
				pending[k] = p
			}
		}
	}
	// Then the table, from memory, keeping only the n largest so far: a
	// table of millions of flows costs a walk, not its size in memory.
	t, err := o.FlowTable()
	if err != nil {
		return nil, err
	}
	defer t.Unmap()
	top := &flowHeap{n: n}
	t.Each(func(w *bpf.FTWay, _ bool) bool {
		v := w.F
		if p, ok := pending[w.K]; ok {
			v.Packets += p.Packets
			v.Bytes += p.Bytes
		}
		k := w.K
		top.offer(v, func() keyedFlow { return keyedFlow{flowStat(k, v, pdrOf, gen), k} })
		return true
	})
	slices.SortFunc(top.s, func(a, b keyedFlow) int { return byTraffic(a.FlowStat, b.FlowStat) })
	out := make([]dataplane.FlowStat, len(top.s))
	for i, kf := range top.s {
		out[i] = kf.FlowStat
		e, dir, ok, err := o.FOLookup(kf.key)
		if err != nil {
			return nil, err
		}
		if ok {
			d := e.D[dir]
			out[i].RTTUs, out[i].MinRTTUs, out[i].RTTSamples = d.SrttUs, d.MinUs, d.Samples
			out[i].Rate, out[i].Congested = d.Rate, d.Flags&bpf.FODHint != 0
		}
	}
	return out, nil
}

// byTraffic orders flows most bytes first, then most packets.
func byTraffic(a, b dataplane.FlowStat) int {
	if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
		return c
	}
	return cmp.Compare(b.Packets, a.Packets)
}

// flowHeap keeps the n flows with the most traffic offered to it (every
// one when n <= 0), as a min-heap on byTraffic: the least of them at the
// top, replaced by a larger one.
type flowHeap struct {
	n int
	s []keyedFlow
}

// keyedFlow is a flow with its key, to find its FlowOpt record by.
type keyedFlow struct {
	dataplane.FlowStat
	key bpf.FlowKey
}

func (h *flowHeap) Len() int           { return len(h.s) }
func (h *flowHeap) Less(i, j int) bool { return byTraffic(h.s[i].FlowStat, h.s[j].FlowStat) > 0 }
func (h *flowHeap) Swap(i, j int)      { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *flowHeap) Push(x any)         { h.s = append(h.s, x.(keyedFlow)) }
func (h *flowHeap) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}

// offer adds the flow whose counters are v (built by stat, only when it
// is kept).
func (h *flowHeap) offer(v bpf.Flow, stat func() keyedFlow) {
	if h.n > 0 && len(h.s) == h.n {
		least := h.s[0]
		if byTraffic(dataplane.FlowStat{Packets: v.Packets, Bytes: v.Bytes}, least.FlowStat) >= 0 {
			return
		}
		h.s[0] = stat()
		heap.Fix(h, 0)
		return
	}
	heap.Push(h, stat())
}

// unpack4 is flow_unpack4 (flowcache.h): the full key of a compact
// IPv4 key.
func unpack4(k4 bpf.FlowKey4) bpf.FlowKey {
	k := bpf.FlowKey{Ifindex: k4.Ifindex, GreKey: k4.GreKey, Sport: k4.Sport, Dport: k4.Dport, Proto: k4.Proto,
		Dscp: k4.Dscp, Family: 4, Flags: k4.Flags, Path: k4.Path}
	binary.LittleEndian.PutUint32(k.Src[:4], k4.Src)
	binary.LittleEndian.PutUint32(k.Dst[:4], k4.Dst)
	return k
}

func flowStat(k bpf.FlowKey, v bpf.Flow, pdrOf map[uint32]uint32, gen uint32) dataplane.FlowStat {
	f := dataplane.FlowStat{Proto: k.Proto, Sport: bits.ReverseBytes16(k.Sport), Dport: bits.ReverseBytes16(k.Dport), Ifindex: k.Ifindex, DSCP: k.Dscp,
		HasGREKey: k.Flags&bpf.KeyFlagGREKey != 0}
	if k.Family == 4 {
		f.Src = netip.AddrFrom4([4]byte(k.Src[:4]))
		f.Dst = netip.AddrFrom4([4]byte(k.Dst[:4]))
	} else {
		f.Src, f.Dst = netip.AddrFrom16(k.Src), netip.AddrFrom16(k.Dst)
	}
	if f.HasGREKey {
		f.GREKey = bits.ReverseBytes32(k.GreKey)
	}
	fillFlow(&f, v, pdrOf, gen)
	return f
}

func fillFlow(f *dataplane.FlowStat, v bpf.Flow, pdrOf map[uint32]uint32, gen uint32) {
	f.Gen, f.Live = v.Gen, v.Gen == gen
	if v.Stats != bpf.NoPDR {
		f.PDR = pdrOf[v.Stats]
	}
	f.Packets, f.Bytes = v.Packets, v.Bytes
}
