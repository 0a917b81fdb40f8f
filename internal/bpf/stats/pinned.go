// SPDX-License-Identifier: Apache-2.0

package stats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/mapconv"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// PinnedSnapshot reads the counters straight from the maps pinned under
// pinDir, without an agent.
func PinnedSnapshot(pinDir string) (*dataplane.Snapshot, error) {
	m, err := openPinned(pinDir)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	live, err := pinnedLive(m)
	if err != nil {
		return nil, err
	}
	if m.EdgeIfCpu != nil {
		live.Ifnames = pinnedInterfaces(pinDir)
	}
	return Read(m, live)
}

// pinnedFields are the maps PinnedSnapshot reads, by name.
func pinnedFields(m *bpf.Maps) map[string]**ebpf.Map {
	return map[string]**ebpf.Map{
		"edge_cache_stats": &m.EdgeCacheStats,
		"edge_fars":        &m.EdgeFars,
		"edge_ft":          &m.EdgeFt,
		"edge_ft_meta":     &m.EdgeFtMeta,
		"edge_global":      &m.EdgeGlobal,
		"edge_groups":      &m.EdgeGroups,
		"edge_pdr_stats":   &m.EdgePdrStats,
		"edge_reasons":     &m.EdgeReasons,
		"edge_rules":       &m.EdgeRules,
		"edge_tx":          &m.EdgeTx,
		"edge_verdicts":    &m.EdgeVerdicts,
		"edge_paths":       &m.EdgePaths,
		"edge_decaps":      &m.EdgeDecaps,
		"edge_path_stats":  &m.EdgePathStats,
		"edge_path_seq":    &m.EdgePathSeq,
		"edge_ifaddrs":     &m.EdgeIfaddrs,
		"edge_lb_stats":    &m.EdgeLbStats,
		"edge_lb_new":      &m.EdgeLbNew,
		"edge_lb_members":  &m.EdgeLbMembers,
	}
}

// ifCPUMap is edge_if_cpu, which an agent of a build before it pins
// none of: read when it is there.
const ifCPUMap = "edge_if_cpu"

// openPinned opens read-only the maps PinnedSnapshot reads, refusing
// those another build laid out otherwise (their entries would be read
// at the wrong places).
func openPinned(pinDir string) (*bpf.Maps, error) {
	spec, err := bpf.LoadSpec()
	if err != nil {
		return nil, err
	}
	m := &bpf.Maps{}
	bc := mapconv.BTFCache{}
	for name, dst := range pinnedFields(m) {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("open pinned %s (is an agent running with --pin-dir %s?): %w", name, pinDir, err)
		}
		*dst = mp
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
	ifc, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, ifCPUMap), &ebpf.LoadPinOptions{ReadOnly: true})
	switch {
	case err == nil:
		m.EdgeIfCpu = ifc
	case !errors.Is(err, os.ErrNotExist):
		m.Close()
		return nil, fmt.Errorf("open pinned %s: %w", ifCPUMap, err)
	}
	return m, nil
}

// pinnedLive reads from pinned maps what the live generation holds: its
// rules and paths, and what each balancer counter counts.
func pinnedLive(m *bpf.Maps) (Live, error) {
	var st bpf.State
	if err := m.EdgeGlobal.Lookup(uint32(0), &st); err != nil {
		return Live{}, fmt.Errorf("read state: %w", err)
	}
	live := Live{Gen: st.Gen, Rules: map[bpf.RuleKey]bpf.Rule{}}
	var k bpf.RuleKey
	var v bpf.Rule
	it := m.EdgeRules.Iterate()
	for it.Next(&k, &v) {
		if st.Gen != 0 && k.Group/bpf.MaxGroups == st.Gen&1 {
			live.Rules[k] = v
		}
	}
	if err := it.Err(); err != nil && !errors.Is(err, ebpf.ErrIterationAborted) {
		return Live{}, fmt.Errorf("read rules: %w", err)
	}
	for i := uint32(0); st.Gen != 0 && i < bpf.MaxPaths; i++ {
		var p bpf.Path
		if err := m.EdgePaths.Lookup((st.Gen&1)*bpf.MaxPaths+i, &p); err != nil {
			return Live{}, fmt.Errorf("read path %d: %w", i, err)
		}
		if p.Id != 0 { // paths keep their places: holes between them
			live.Paths = append(live.Paths, p)
		}
	}
	var err error
	live.Members, err = bpf.ReadMembers(m.EdgeLbMembers)
	return live, err
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
