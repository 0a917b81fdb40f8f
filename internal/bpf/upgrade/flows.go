// SPDX-License-Identifier: Apache-2.0

package upgrade

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/mapconv"
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
	for _, pair := range [][2]string{{mapFt, mapFtMeta}, {mapFtMeta, mapFt}} {
		if why[pair[0]] != "" && why[pair[1]] == "" {
			why[pair[1]] = "the flow table moves with its buckets (" + pair[0] + ": " + why[pair[0]] + ")"
		}
	}
}

// carryFlows places the flows of the old table (ways from, bucket lines
// fromMeta, either nil when absent) that the new one (to, toMeta, placed
// by secret) lacks into it, hot as they were and used at tick now, and
// returns how many it placed and how many found no room. g moves FAR
// places between rules limits.
func carryFlows(from, fromMeta, to, toMeta *mapconv.Map, secret *bpf.HashSecret, g farGeometry, now uint16) (placed, dropped int, err error) {
	if from == nil {
		return 0, 0, nil
	}
	conv, err := mapconv.ConvFor(from, to, from.ValueType, to.ValueType, from.ValueSize(), to.ValueSize())
	if err != nil {
		return 0, 0, fmt.Errorf("map %s value: %w", mapFt, err)
	}
	remap := g.oldStride != g.newStride && g.oldStride > bpf.MaxServices && g.newStride > bpf.MaxServices
	old, err := from.ReadAll()
	if err != nil {
		return 0, 0, err
	}
	// Which old ways had more than one packet: their buckets' lines, if
	// laid out as this build's.
	hot := map[uint32]bool{}
	if fromMeta != nil && fromMeta.ValueSize() == bpf.FTBucketSize {
		lines, err := fromMeta.ReadAll()
		if err != nil {
			return 0, 0, err
		}
		for _, l := range lines {
			b := binary.LittleEndian.Uint32(l.Key)
			m := (*bpf.FTBucket)(unsafe.Pointer(&l.Vals[0][0]))
			for i := range uint32(bpf.FTWays) {
				hot[b*bpf.FTWays+i] = m.Tag[i] != 0 && m.Hot[i] != 0
			}
		}
	}
	t, err := bpf.MapFlowTable(to.Map, toMeta.Map, secret)
	if err != nil {
		return 0, 0, err
	}
	defer t.Unmap()
	buf := make([]byte, bpf.FTWaySize)
	for _, e := range old {
		clear(buf)
		conv.Convert(buf, e.Vals[0])
		w := (*bpf.FTWay)(unsafe.Pointer(&buf[0]))
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
		if _, _, ok := t.Find(&w.K); ok {
			continue
		}
		if t.Insert(w, hot[binary.LittleEndian.Uint32(e.Key)], now) {
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
	from, fromMeta, to, toMeta, state *mapconv.Map
	// conns is the legacy connection table of a build before the flow
	// table (nil: none).
	conns *mapconv.Map
	g     farGeometry
	// secret places the flows in the new table.
	secret bpf.HashSecret
}

// run places the old flows the new table lacks, at the new table's tick.
func (c *ftCarry) run() (placed, dropped int, err error) {
	var st bpf.State
	if c.state != nil {
		if err := c.state.Lookup(uint32(0), &st); err != nil {
			return 0, 0, fmt.Errorf("read the flow table's clock: %w", err)
		}
	}
	placed, dropped, err = carryFlows(c.from, c.fromMeta, c.to, c.toMeta, &c.secret, c.g, uint16(st.Tick))
	if err != nil || c.conns == nil {
		return placed, dropped, err
	}
	t, err := bpf.MapFlowTable(c.to.Map, c.toMeta.Map, &c.secret)
	if err != nil {
		return placed, dropped, err
	}
	defer t.Unmap()
	p, d, err := carryConns(c.conns, t, c.g, uint16(st.Tick))
	return placed + p, dropped + d, err
}

// close closes the maps the carry opened; the upgrade's old maps are
// closed with the rest of them.
func (c *ftCarry) close() {
	for _, r := range []*mapconv.Map{c.from, c.fromMeta, c.to, c.toMeta, c.state, c.conns} {
		if r != nil {
			r.Close()
		}
	}
}

// carryFlowsFirst sets up the upgrade's flow-table carry and places the
// old flows in the new table (the first copy).
func (u *Upgrade) carryFlowsFirst(bc mapconv.BTFCache, byName map[string]*ebpf.Map, why string) error {
	c := &ftCarry{from: u.old[mapFt], fromMeta: u.old[mapFtMeta], secret: u.obj.Secret}
	var err error
	for _, o := range []struct {
		name string
		r    **mapconv.Map
	}{{mapFt, &c.to}, {mapFtMeta, &c.toMeta}, {mapGlobal, &c.state}} {
		src := byName[o.name]
		// The clock the old program marks its flows by: the new state
		// takes it over later in the copy.
		if o.name == mapGlobal && u.old[o.name] != nil {
			src = u.old[o.name].Map
		}
		m, err := src.Clone()
		if err != nil {
			return fmt.Errorf("map %s: %w", o.name, err)
		}
		if *o.r, err = bc.Open(m, o.name); err != nil {
			m.Close()
			return err
		}
	}
	if f := u.old[mapFars]; f != nil {
		c.g = farGeometry{f.MaxEntries() / 2, u.obj.Limits.FARStride()}
	}
	if c.from == nil {
		if c.conns, err = openLegacyConns(bc, u.pinDir); err != nil {
			return err
		}
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

// legacyConns is the connection table of the builds before the flow
// table (edge_conns: a connection's 5-tuple -> its backend's FAR index
// and id, its counter and service). An upgrade from such a build places
// each connection in the flow table as a stale entry of its 5-tuple
// (ingress 0, DSCP 0): a packet of the connection finds it by 5-tuple
// (edge_ft_lookup's connection) and keeps its backend.
const legacyConns = "edge_conns"

// carryConns places the connections of a legacy connection table conns
// that the flow table t lacks, and returns how many it placed and how
// many found no room. g moves FAR places between rules limits.
func carryConns(conns *mapconv.Map, t *bpf.FlowTable, g farGeometry, now uint16) (placed, dropped int, err error) {
	st, ok := btf.UnderlyingType(conns.ValueType).(*btf.Struct)
	if !ok || conns.KeySize() != uint32(unsafe.Sizeof(bpf.ConnKey{})) {
		return 0, 0, fmt.Errorf("map %s: no BTF of its value, or a key of %d bytes", legacyConns, conns.KeySize())
	}
	off := map[string]uint32{}
	for _, m := range st.Members {
		off[m.Name] = uint32(m.Offset / 8)
	}
	for _, name := range []string{"far", "far_id", "stats", "svc", "closed"} {
		if _, ok := off[name]; !ok {
			return 0, 0, fmt.Errorf("map %s: its value has no member %s", legacyConns, name)
		}
	}
	es, err := conns.ReadAll()
	if err != nil {
		return 0, 0, err
	}
	remap := g.oldStride != g.newStride && g.oldStride > bpf.MaxServices && g.newStride > bpf.MaxServices
	u32 := func(v []byte, name string) uint32 { return binary.LittleEndian.Uint32(v[off[name]:]) }
	for _, e := range es {
		k := (*bpf.ConnKey)(unsafe.Pointer(&e.Key[0]))
		v := e.Vals[0]
		w := bpf.FTWay{K: bpf.FlowKey{Src: k.Src, Dst: k.Dst, Sport: k.Sport, Dport: k.Dport, Proto: k.Proto, Family: k.Family},
			F: bpf.Flow{Far: u32(v, "far"), FarId: u32(v, "far_id"), Stats: u32(v, "stats") | bpf.StatsLB, Svc: u32(v, "svc"), Flags: bpf.FlowConn}}
		if u32(v, "closed") != 0 {
			w.F.Flags |= bpf.FlowClosed
		}
		if remap && w.F.Far < g.oldStride {
			p, ok := g.place(uint64(w.F.Far))
			if !ok {
				continue
			}
			w.F.Far = uint32(p)
		}
		if _, _, ok := t.Find(&w.K); ok {
			continue
		}
		if t.Insert(&w, true, now) {
			placed++
		} else {
			dropped++
		}
	}
	return placed, dropped, nil
}

// CarryLegacyConns places the connections of a legacy connection table
// (edge_conns of the builds before the flow table) in o's flow table, as
// an upgrade from such a build does (the rules limit unchanged), and
// returns how many it placed and how many found no room.
func CarryLegacyConns(conns *ebpf.Map, o *bpf.Object) (placed, dropped int, err error) {
	c, err := conns.Clone()
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	r, err := mapconv.BTFCache{}.Open(c, legacyConns)
	if err != nil {
		return 0, 0, err
	}
	t, err := o.FlowTable()
	if err != nil {
		return 0, 0, err
	}
	defer t.Unmap()
	return carryConns(r, t, farGeometry{}, 0)
}

// openLegacyConns opens the legacy connection table pinned under pinDir,
// or returns nil when there is none.
func openLegacyConns(bc mapconv.BTFCache, pinDir string) (*mapconv.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, legacyConns), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open pinned map %s: %w", legacyConns, err)
	}
	r, err := bc.Open(m, legacyConns)
	if err != nil {
		m.Close()
		return nil, err
	}
	return r, nil
}
