// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
)

// The flow table moves as one: its ways (edge_ft) and its buckets'
// lines (edge_ft_meta) are new together whenever either differs, and
// the old ways are placed again by their keys' hashes in the new table,
// whose bucket count may differ (the flows limit changed). A way is
// converted member by member as any map's value (struct edge_ft_way by
// BTF), and a connection keeps its backend: the FAR place its entry
// names moves with the rules limit as the FARs do.

// ftMoveTogether makes edge_ft and edge_ft_meta both new when either is.
func ftMoveTogether(why map[string]string) {
	for _, pair := range [][2]string{{edgeMapEdgeFt, edgeMapEdgeFtMeta}, {edgeMapEdgeFtMeta, edgeMapEdgeFt}} {
		if why[pair[0]] != "" && why[pair[1]] == "" {
			why[pair[1]] = "the flow table moves with its buckets (" + pair[0] + ": " + why[pair[0]] + ")"
		}
	}
}

// carryFlows places the flows of the old table (ways from, bucket lines
// fromMeta, either nil when absent) that the new one (to, toMeta) lacks
// into it, hot as they were and used at tick now, and returns how many
// it placed and how many found no room. g moves FAR places between
// rules limits.
func carryFlows(from, fromMeta, to, toMeta *rawMap, g farGeometry, now uint16) (placed, dropped int, err error) {
	if from == nil {
		return 0, 0, nil
	}
	conv, err := convFor(from, to, from.valueType, to.valueType, from.valueSize, to.valueSize)
	if err != nil {
		return 0, 0, fmt.Errorf("map %s value: %w", edgeMapEdgeFt, err)
	}
	remap := g.oldStride != g.newStride && g.oldStride > MaxServices && g.newStride > MaxServices
	old, err := from.readAll()
	if err != nil {
		return 0, 0, err
	}
	// Which old ways had more than one packet: their buckets' lines, if
	// laid out as this build's.
	hot := map[uint32]bool{}
	if fromMeta != nil && fromMeta.valueSize == ftBucketSize {
		lines, err := fromMeta.readAll()
		if err != nil {
			return 0, 0, err
		}
		for _, l := range lines {
			b := binary.LittleEndian.Uint32(l.key)
			m := (*FTBucket)(unsafe.Pointer(&l.vals[0][0]))
			for i := range uint32(FTWays) {
				hot[b*FTWays+i] = m.Tag[i] != 0 && m.Hot[i] != 0
			}
		}
	}
	t, err := mapTable(to.m, toMeta.m)
	if err != nil {
		return 0, 0, err
	}
	defer t.unmap()
	buf := make([]byte, ftWaySize)
	for _, e := range old {
		clear(buf)
		conv.convert(buf, e.vals[0])
		w := (*FTWay)(unsafe.Pointer(&buf[0]))
		if w.K.Family == 0 {
			continue // never written
		}
		if remap && w.F.Far < g.oldStride {
			p, ok := g.place(uint64(w.F.Far))
			if !ok {
				continue // its FAR has no place under the new limit
			}
			w.F.Far = uint32(p)
		}
		if _, _, ok := t.find(&w.K); ok {
			continue
		}
		if t.insert(w, hot[binary.LittleEndian.Uint32(e.key)], now) {
			placed++
		} else {
			dropped++
		}
	}
	return placed, dropped, nil
}

// ftCarry is an upgrade's carry of the flow table: the old build's maps
// (nil when it had none) and the new.
type ftCarry struct {
	from, fromMeta, to, toMeta, state *rawMap
	g                                 farGeometry
}

// run places the old flows the new table lacks, at the new table's tick.
func (c *ftCarry) run() (placed, dropped int, err error) {
	var st State
	if c.state != nil {
		if err := c.state.m.Lookup(uint32(0), &st); err != nil {
			return 0, 0, fmt.Errorf("read the flow table's clock: %w", err)
		}
	}
	return carryFlows(c.from, c.fromMeta, c.to, c.toMeta, c.g, uint16(st.Tick))
}

// close closes the maps the carry opened; the upgrade's old maps are
// closed with the rest of them.
func (c *ftCarry) close() {
	for _, r := range []*rawMap{c.from, c.fromMeta, c.to, c.toMeta, c.state} {
		if r != nil {
			r.m.Close()
		}
	}
}

// carryFlowsFirst sets up the upgrade's flow-table carry and places the
// old flows in the new table (the first copy).
func (u *Upgrade) carryFlowsFirst(bc btfCache, byName map[string]*ebpf.Map, why string) error {
	c := &ftCarry{from: u.old[edgeMapEdgeFt], fromMeta: u.old[edgeMapEdgeFtMeta]}
	var err error
	for _, o := range []struct {
		name string
		r    **rawMap
	}{{edgeMapEdgeFt, &c.to}, {edgeMapEdgeFtMeta, &c.toMeta}, {edgeMapEdgeGlobal, &c.state}} {
		src := byName[o.name]
		// The clock the old program marks its flows by: the new state
		// takes it over later in the copy.
		if o.name == edgeMapEdgeGlobal && u.old[o.name] != nil {
			src = u.old[o.name].m
		}
		m, err := src.Clone()
		if err != nil {
			return fmt.Errorf("map %s: %w", o.name, err)
		}
		if *o.r, err = bc.open(m, o.name); err != nil {
			m.Close()
			return err
		}
	}
	if f := u.old[edgeMapEdgeFars]; f != nil {
		c.g = farGeometry{f.maxEntries / 2, u.dp.Limits.FARStride()}
	}
	u.ft = c
	n, dropped, err := c.run()
	if err != nil {
		return err
	}
	u.log.Info("upgrade: flow table placed anew", "why", why, "flows", n, "no_room", dropped)
	return nil
}

// carryFlowsAgain places the flows the old program added since the
// last copy.
func (u *Upgrade) carryFlowsAgain() error {
	if u.ft == nil {
		return nil
	}
	n, dropped, err := u.ft.run()
	if err != nil {
		return err
	}
	u.log.Info("upgrade: flows the old program added meanwhile", "flows", n, "no_room", dropped)
	return nil
}
