// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/edgeplane/edgeplane/internal/bpf/mapconv"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// Snapshot reads and sums every per-CPU counter.
func (dp *Dataplane) Snapshot() (*dataplane.Snapshot, error) {
	rules, gen, err := dp.ActiveRules()
	if err != nil {
		return nil, err
	}
	paths, err := dp.ActivePaths()
	if err != nil {
		return nil, err
	}
	s, err := readSnapshot(&dp.edgeMaps, rules, paths, gen)
	if err != nil {
		return nil, err
	}
	if s.Backends, err = readBackends(&dp.edgeMaps, dp.ActiveMembers()); err != nil {
		return nil, err
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	names := map[uint32]string{}
	for _, itf := range ifs {
		names[uint32(itf.Index)] = itf.Name
	}
	if s.XDPCPU, err = readXDPCPU(dp.EdgeIfCpu, names); err != nil {
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
		if err := m.Lookup(idx&(IfSlots-1), &per); err != nil {
			return nil, fmt.Errorf("xdp cpu of %s: %w", name, err)
		}
		if slices.ContainsFunc(per, func(v uint64) bool { return v > 0 }) {
			out[name] = per
		}
	}
	return out, nil
}

// pinnedInterfaces names the interfaces of the XDP links pinned in
// pinDir (link_NAME) by their ifindex: the agent's own, whatever network
// namespace the caller is in.
func pinnedInterfaces(pinDir string) map[uint32]string {
	out := map[uint32]string{}
	ents, _ := os.ReadDir(pinDir)
	for _, e := range ents {
		name, ok := strings.CutPrefix(e.Name(), "link_")
		if !ok {
			continue
		}
		l, err := link.LoadPinnedLink(filepath.Join(pinDir, e.Name()), nil)
		if err != nil {
			continue
		}
		if info, err := l.Info(); err == nil && info.XDP() != nil {
			out[info.XDP().Ifindex] = name
		}
		l.Close()
	}
	return out
}

// IfSlots is edge_if_cpu's size (EDGE_IF_SLOTS): an interface counts in
// slot ifindex mod IfSlots.
const IfSlots = 1024

// readBackends reads the balancer's counters of members and counts the
// open entries of the connection table per backend.
func readBackends(m *edgeMaps, members map[uint32]MemberRef) ([]dataplane.BackendCounters, error) {
	if len(members) == 0 {
		return nil, nil
	}
	active := map[uint32]uint64{}
	t, err := mapTable(m.EdgeFt, m.EdgeFtMeta, nil)
	if err != nil {
		return nil, fmt.Errorf("read connections: %w", err)
	}
	t.each(func(w *FTWay, _ bool) bool {
		if w.F.Flags&(FlowConn|FlowClosed) == FlowConn {
			active[w.F.Stats&^StatsLB]++
		}
		return true
	})
	t.unmap()
	out := make([]dataplane.BackendCounters, 0, len(members))
	for idx, ref := range members {
		c, err := sumCtr(m.EdgeLbStats, idx)
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

func readSnapshot(m *edgeMaps, rules map[RuleKey]Rule, paths []Path, gen uint32) (*dataplane.Snapshot, error) {
	s := &dataplane.Snapshot{Gen: gen, PDRs: map[uint32]dataplane.Counter{}, Paths: map[uint32]dataplane.PathCounters{}}
	var st State
	if err := m.EdgeGlobal.Lookup(uint32(0), &st); err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	s.NextHopsByDst = st.FibFlags&fibByDst != 0
	for _, p := range paths {
		tx, err := sumCtr(m.EdgePathStats, 2*p.Stats)
		if err != nil {
			return nil, fmt.Errorf("path stats: %w", err)
		}
		rx, err := sumCtr(m.EdgePathStats, 2*p.Stats+1)
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
		c, err := sumCtr(m.EdgePdrStats, r.Stats)
		if err != nil {
			return nil, fmt.Errorf("pdr stats: %w", err)
		}
		s.PDRs[uint32(r.Prio)] = c
	}
	var err error
	if s.Verdicts, err = sumAll(m.EdgeVerdicts, len(dataplane.VerdictNames)); err != nil {
		return nil, fmt.Errorf("verdict stats: %w", err)
	}
	if s.Reasons, err = sumAll(m.EdgeReasons, ReasonMax); err != nil {
		return nil, fmt.Errorf("reason stats: %w", err)
	}
	for i, dst := range []*uint64{&s.CacheHit, &s.CacheMiss} {
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

func sumCtr(m *ebpf.Map, idx uint32) (dataplane.Counter, error) {
	var per []Ctr
	var c dataplane.Counter
	if err := m.Lookup(idx, &per); err != nil {
		return c, err
	}
	for _, v := range per {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
	}
	return c, nil
}

func sumAll(m *ebpf.Map, n int) ([]dataplane.Counter, error) {
	out := make([]dataplane.Counter, n)
	for i := range out {
		c, err := sumCtr(m, uint32(i))
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// PinnedSnapshot reads the counters straight from the maps pinned under
// pinDir, without an agent.
func PinnedSnapshot(pinDir string) (*dataplane.Snapshot, error) {
	var m edgeMaps
	fields := map[string]**ebpf.Map{
		edgeMapEdgeCacheStats: &m.EdgeCacheStats,
		edgeMapEdgeFars:       &m.EdgeFars,
		edgeMapEdgeFt:         &m.EdgeFt,
		edgeMapEdgeFtMeta:     &m.EdgeFtMeta,
		edgeMapEdgeGlobal:     &m.EdgeGlobal,
		edgeMapEdgeGroups:     &m.EdgeGroups,
		edgeMapEdgePdrStats:   &m.EdgePdrStats,
		edgeMapEdgeReasons:    &m.EdgeReasons,
		edgeMapEdgeRules:      &m.EdgeRules,
		edgeMapEdgeTx:         &m.EdgeTx,
		edgeMapEdgeVerdicts:   &m.EdgeVerdicts,
		edgeMapEdgePaths:      &m.EdgePaths,
		edgeMapEdgeDecaps:     &m.EdgeDecaps,
		edgeMapEdgePathStats:  &m.EdgePathStats,
		edgeMapEdgePathSeq:    &m.EdgePathSeq,
		edgeMapEdgeIfaddrs:    &m.EdgeIfaddrs,
		edgeMapEdgeLbStats:    &m.EdgeLbStats,
		edgeMapEdgeLbNew:      &m.EdgeLbNew,
		edgeMapEdgeLbMembers:  &m.EdgeLbMembers,
	}
	spec, err := loadEdge()
	if err != nil {
		return nil, fmt.Errorf("load embedded object: %w", err)
	}
	bc := mapconv.BTFCache{}
	for name, dst := range fields {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("open pinned %s (is an agent running with --pin-dir %s?): %w", name, pinDir, err)
		}
		*dst = mp
		// Another build's entries would be read at the wrong places.
		r, err := bc.Open(mp, name)
		var why string
		if err == nil {
			why, err = bc.LayoutDiff(spec.Maps[name], r)
		}
		if err == nil && why != "" {
			err = fmt.Errorf("%s: %s: pinned by another build of edgeplane; read them with that build", name, why)
		}
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("read pinned maps: %w", err)
		}
	}
	defer m.Close()
	var st State
	if err := m.EdgeGlobal.Lookup(uint32(0), &st); err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	rules := map[RuleKey]Rule{}
	var k RuleKey
	var v Rule
	it := m.EdgeRules.Iterate()
	for it.Next(&k, &v) {
		if st.Gen != 0 && k.Group/MaxGroups == st.Gen&1 {
			rules[k] = v
		}
	}
	if err := it.Err(); err != nil && !errors.Is(err, ebpf.ErrIterationAborted) {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	var paths []Path
	for i := uint32(0); st.Gen != 0 && i < MaxPaths; i++ {
		var p Path
		if err := m.EdgePaths.Lookup((st.Gen&1)*MaxPaths+i, &p); err != nil {
			return nil, fmt.Errorf("read path %d: %w", i, err)
		}
		if p.Id != 0 { // paths keep their places: holes between them
			paths = append(paths, p)
		}
	}
	s, err := readSnapshot(&m, rules, paths, st.Gen)
	if err != nil {
		return nil, err
	}
	members, err := readMembers(m.EdgeLbMembers)
	if err != nil {
		return nil, err
	}
	if s.Backends, err = readBackends(&m, members); err != nil {
		return nil, err
	}
	// An agent of a build before edge_if_cpu pins none.
	ifc, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, edgeMapEdgeIfCpu), &ebpf.LoadPinOptions{ReadOnly: true})
	if err == nil {
		defer ifc.Close()
		if s.XDPCPU, err = readXDPCPU(ifc, pinnedInterfaces(pinDir)); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open pinned %s: %w", edgeMapEdgeIfCpu, err)
	}
	return s, nil
}
