// SPDX-License-Identifier: Apache-2.0

// Package stats reads what the packet path counted: the counters of
// rules, paths, verdicts, reasons and service backends, and the flows,
// from a running dataplane's maps or from the pins another process
// left.
package stats

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// Live is what the counters are read for: the live generation and its
// rules and paths, what each balancer counter counts, and the names of
// the interfaces by ifindex.
type Live struct {
	Gen     uint32
	Rules   map[bpf.RuleKey]bpf.Rule // group-relative keys
	Paths   []bpf.Path
	Members map[uint32]bpf.MemberRef
	Ifnames map[uint32]string
}

// Read reads and sums every per-CPU counter of m for live.
func Read(m *bpf.Maps, live Live) (*dataplane.Snapshot, error) {
	s, err := readSnapshot(m, live.Rules, live.Paths, live.Gen)
	if err != nil {
		return nil, err
	}
	if s.Backends, err = readBackends(m, live.Members); err != nil {
		return nil, err
	}
	if m.EdgeIfCpu == nil { // pinned by a build before it
		return s, nil
	}
	if s.XDPCPU, err = readXDPCPU(m.EdgeIfCpu, live.Ifnames); err != nil {
		return nil, err
	}
	return s, nil
}

// readXDPCPU reads edge_if_cpu for the interfaces names gives by
// ifindex (the agent's network namespace's).
func readXDPCPU(m *ebpf.Map, names map[uint32]string) (map[string][]uint64, error) {
	out := map[string][]uint64{}
	for idx, name := range names {
		var per []uint64
		if err := m.Lookup(idx&(bpf.IfSlots-1), &per); err != nil {
			return nil, fmt.Errorf("xdp cpu of %s: %w", name, err)
		}
		if slices.ContainsFunc(per, func(v uint64) bool { return v > 0 }) {
			out[name] = per
		}
	}
	return out, nil
}

// readBackends reads the balancer's counters of members and counts the
// open entries of the connection table per backend.
func readBackends(m *bpf.Maps, members map[uint32]bpf.MemberRef) ([]dataplane.BackendCounters, error) {
	if len(members) == 0 {
		return nil, nil
	}
	active := map[uint32]uint64{}
	t, err := bpf.MapFlowTable(m.EdgeFt, m.EdgeFtMeta, nil)
	if err != nil {
		return nil, fmt.Errorf("read connections: %w", err)
	}
	t.Each(func(w *bpf.FTWay, _ bool) bool {
		if w.F.Flags&(bpf.FlowConn|bpf.FlowClosed) == bpf.FlowConn {
			active[w.F.Stats&^bpf.StatsLB]++
		}
		return true
	})
	t.Unmap()
	out := make([]dataplane.BackendCounters, 0, len(members))
	for idx, ref := range members {
		c, err := bpf.SumCtr(m.EdgeLbStats, idx)
		if err != nil {
			return nil, fmt.Errorf("balancer stats: %w", err)
		}
		var per []uint64
		if err := m.EdgeLbNew.Lookup(idx, &per); err != nil {
			return nil, fmt.Errorf("balancer new connections: %w", err)
		}
		b := dataplane.BackendCounters{Service: ref.Service, FAR: ref.FAR, Counter: c, Active: active[idx]}
		for _, v := range per {
			b.NewConns += v
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b dataplane.BackendCounters) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.FAR, b.FAR))
	})
	return out, nil
}

func readSnapshot(m *bpf.Maps, rules map[bpf.RuleKey]bpf.Rule, paths []bpf.Path, gen uint32) (*dataplane.Snapshot, error) {
	s := &dataplane.Snapshot{Gen: gen, PDRs: map[uint32]dataplane.Counter{}, Paths: map[uint32]dataplane.PathCounters{}}
	var st bpf.State
	if err := m.EdgeGlobal.Lookup(uint32(0), &st); err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	s.NextHopsByDst = st.FibFlags&bpf.FIBByDst != 0
	for _, p := range paths {
		tx, err := bpf.SumCtr(m.EdgePathStats, 2*p.Stats)
		if err != nil {
			return nil, fmt.Errorf("path stats: %w", err)
		}
		rx, err := bpf.SumCtr(m.EdgePathStats, 2*p.Stats+1)
		if err != nil {
			return nil, fmt.Errorf("path stats: %w", err)
		}
		s.Paths[p.Id] = dataplane.PathCounters{Tx: tx, Rx: rx}
	}
	seen := map[uint32]bool{}
	for _, r := range rules {
		if seen[r.Stats] {
			continue
		}
		seen[r.Stats] = true
		c, err := bpf.SumCtr(m.EdgePdrStats, r.Stats)
		if err != nil {
			return nil, fmt.Errorf("pdr stats: %w", err)
		}
		s.PDRs[uint32(r.Prio)] = c
	}
	var err error
	if s.Verdicts, err = sumAll(m.EdgeVerdicts, len(dataplane.VerdictNames)); err != nil {
		return nil, fmt.Errorf("verdict stats: %w", err)
	}
	if s.Reasons, err = sumAll(m.EdgeReasons, bpf.ReasonMax); err != nil {
		return nil, fmt.Errorf("reason stats: %w", err)
	}
	for i, dst := range []*uint64{&s.CacheHit, &s.CacheMiss, &s.CacheFirst} {
		var per []uint64
		if err := m.EdgeCacheStats.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("cache stats: %w", err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return s, nil
}

func sumAll(m *ebpf.Map, n int) ([]dataplane.Counter, error) {
	out := make([]dataplane.Counter, n)
	for i := range out {
		c, err := bpf.SumCtr(m, uint32(i))
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}
