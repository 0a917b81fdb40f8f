// SPDX-License-Identifier: Apache-2.0

// Package upgrade takes a pinned dataplane of another build over, while
// its program keeps forwarding: maps whose layout is this build's are
// reused, the others created beside them, filled member by member from
// the old ones (the flow table placed again by key), topped up after the
// switch, and moved over the old pins.
package upgrade

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/mapconv"
	"github.com/edgeplane/edgeplane/internal/bpf/rcu"
)

// Dir is the directory under the pin dir where a build pins the
// maps (and the agent the program) it creates while it takes over from a
// pinned dataplane whose map layouts or sizes differ from its own. They
// move up into the pin dir, replacing the old ones, once every link runs
// the new program; until then the old pins are untouched, so whatever
// happens the old program and its maps are whole.
const Dir = "next"

// The maps an upgrade handles by name.
const (
	mapGlobal = "edge_global"
	mapFars   = "edge_fars"
	mapFt     = "edge_ft"
	mapFtMeta = "edge_ft_meta"
	mapFo     = "edge_fo"
	mapSecret = "edge_secret"
)

// carry says how an upgrade takes a map's contents over from the build
// before.
type carry uint8

const (
	// rebuilt: written whole by the agent's first commit (or by its
	// interface setup), not copied.
	rebuilt carry = iota
	// table: written by the agent; copied before the first commit, which
	// reads back what the live generation gave each object (statistics
	// indexes, FAR and service places: what restarts keep).
	table
	// cache: written by packets, derivable again; copied once, so
	// per-flow counts continue.
	cache
	// state: written by packets and not derivable (connections and their
	// replies): copied, and after the switch what the old program added
	// meanwhile is copied too.
	state
	// counter: per-CPU counters and GRE sequence numbers: copied, and
	// after the switch what the old program counted meanwhile is added.
	counter
	// flows: the flow table (edge_ft with edge_ft_meta; it holds the
	// connections): placed again by key into the new table, before and
	// after the switch as state is copied (flows.go).
	flows
	// secret: the flows' hash key (edge_secret), never copied: kept as
	// it is, or, when the flows were placed by another hash (hashChange),
	// drawn anew with every flow placed again.
	secret
)

// mapRole is how a pinned map is carried over, and whether it belongs to
// the rules generation: a map whose entries name a generation's slots or
// FAR places is reused only if all of them are, since the agent commits
// its first generation into them while the old program still reads them.
type mapRole struct {
	carry      carry
	generation bool
}

// mapRoles lists every pinned map (TestMapRoles keeps it complete).
var mapRoles = map[string]mapRole{
	"edge_global":       {table, true},
	"edge_groups":       {table, true},
	"edge_rules":        {table, true},
	"edge_fars":         {table, true},
	"edge_paths":        {table, true},
	"edge_decaps":       {table, true},
	"edge_services":     {table, true},
	"edge_nat_backends": {table, true},
	"edge_svc_index":    {rebuilt, true},
	"edge_maglev":       {rebuilt, true},
	"edge_lb_far":       {rebuilt, true},
	"edge_ft":           {flows, false},
	"edge_ft_meta":      {flows, false},
	"edge_emc4":         {cache, true},
	"edge_lb_members":   {table, false},
	"edge_tx":           {rebuilt, false},
	"edge_ifaddrs":      {rebuilt, false},
	"edge_pdr_stats":    {counter, false},
	"edge_lb_stats":     {counter, false},
	"edge_lb_new":       {counter, false},
	"edge_path_stats":   {counter, false},
	"edge_verdicts":     {counter, false},
	"edge_reasons":      {counter, false},
	"edge_cache_stats":  {counter, false},
	"edge_if_cpu":       {counter, false},
	"edge_if_steer":     {rebuilt, false},
	"edge_path_seq":     {counter, false},
	"edge_path_probe":   {rebuilt, false},
	"edge_path_auth":    {table, true},
	"edge_steer":        {rebuilt, true},
	"edge_steer_ok":     {rebuilt, false},
	"edge_dup_seq":      {counter, false},
	"edge_dup_tx":       {rebuilt, false},
	"edge_path_dedup":   {table, true},
	"edge_dedup":        {rebuilt, false},
	"edge_path_nh":      {rebuilt, false},
	"edge_path_tcp_rtt": {rebuilt, false},
	// FlowOpt's connections: soft state (samples, tokens, placements),
	// copied once like the exact-match cache.
	"edge_fo":         {cache, false},
	"edge_fo_shares":  {rebuilt, false},
	"edge_secret":     {secret, false},
	"edge_qos":        {rebuilt, true},
	"edge_qos_dscp":   {rebuilt, true},
	"edge_qos_stats":  {counter, false},
	"edge_qos_vqs":    {rebuilt, false},
	"edge_qos_vq_cpu": {rebuilt, false},
	"edge_cpu_loads":  {rebuilt, false},
	"edge_cpus":       {rebuilt, false},
	// The user plane's sessions: written by the agent, kept across a
	// restart as they are (the agent writes them again from its
	// journal); a session's counters, per CPU.
	"edge_teid":       {table, false},
	"edge_ue4":        {table, false},
	"edge_ue6":        {table, false},
	"edge_ue_bits":    {table, false},
	"edge_ue_dm":      {table, false},
	"edge_sess_live":  {table, false},
	"edge_sessions":   {table, false},
	"edge_sess_stats": {counter, false},
	// Their maximum bit rate meters: written again by the agent as
	// it puts each session back (a full bucket).
	"edge_sess_mbr": {rebuilt, false},
	// Buffered downlink on its way to the agent: read where it is.
	"edge_buff": {rebuilt, false},
	// The peers multi-access sessions steer between: the agent places
	// them again as it puts each session back.
	"edge_gtpu_peers": {rebuilt, false},
}

// pinnedDiffs opens the maps of spec pinned under pinDir and says why each
// that cannot be adopted differs. The caller closes the maps.
func pinnedDiffs(spec *ebpf.CollectionSpec, pinDir string, bc mapconv.BTFCache) (map[string]*mapconv.Map, map[string]string, error) {
	old, why := map[string]*mapconv.Map{}, map[string]string{}
	closeAll := func() {
		for _, r := range old {
			r.Close()
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Maps)) {
		ms := spec.Maps[name]
		if ms.Pinning != ebpf.PinByName {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			why[name] = "new in this build"
			continue
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open pinned map %s: %w", name, err)
		}
		r, err := bc.Open(m, name)
		if err != nil {
			m.Close()
			closeAll()
			return nil, nil, err
		}
		old[name] = r
		d, err := bc.Differs(ms, r)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		if d != "" {
			why[name] = d
		}
	}
	return old, why, nil
}

// CheckPinned returns bpf.ErrIncompatible, naming the maps, when a map
// pinned under pinDir exists with another layout or size than spec's
// (the kernel compares sizes only: a struct whose members moved within
// the same size would be read at the wrong places), or its flows were
// placed by another hash. Maps not pinned yet are created by the caller.
func CheckPinned(spec *ebpf.CollectionSpec, pinDir string) error {
	old, why, err := pinnedDiffs(spec, pinDir, mapconv.BTFCache{})
	if err != nil {
		return err
	}
	change, err := hashChange(old, why)
	if change != "" {
		why[mapSecret] = change
	}
	var diffs []string
	for name, r := range old {
		r.Close()
		if why[name] != "" {
			diffs = append(diffs, name+": "+why[name])
		}
	}
	if err != nil {
		return err
	}
	if change != "" && old[mapSecret] == nil {
		diffs = append(diffs, mapSecret+": "+change)
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		return fmt.Errorf("%w: %s", bpf.ErrIncompatible, strings.Join(diffs, "; "))
	}
	return nil
}

// hashChange says why the flows pinned (old, with why each map differs)
// were placed by another hash than this build's, which then places them
// all again: a build before the secret, or one keying another hash. ""
// when there are none to place or they are where this build looks.
func hashChange(old map[string]*mapconv.Map, why map[string]string) (string, error) {
	if old[mapFt] == nil {
		return "", nil
	}
	r := old[mapSecret]
	if r == nil {
		return "the flow table was placed by an unkeyed hash", nil
	}
	if why[mapSecret] != "" {
		return "", nil // another layout: a new secret already
	}
	s, err := bpf.ReadSecret(r.Map)
	if err != nil {
		return "", err
	}
	if s.Hash != 0 && s.Hash != bpf.HashSipHash13 {
		return fmt.Sprintf("the flow table was placed by hash %d, this build's is %d", s.Hash, bpf.HashSipHash13), nil
	}
	return "", nil
}

// Upgrade is the maps of a dataplane built beside the pinned one of
// another build whose map layouts or sizes differ, taking its state over
// while the old program keeps forwarding: maps whose layout is this
// build's are reused as they are; the others are created under Dir and
// filled from the old ones (see mapRoles), converted member by member.
// The agent then commits its config into the new maps, switches every
// link to the new program (CopyAgain just before), and calls Finish,
// which copies what the old program added after the first copy and
// moves the new pins into the pin dir. Abort, any time before the
// switch, leaves the old dataplane as it was.
type Upgrade struct {
	obj           *bpf.Object
	pinDir, stage string
	log           *slog.Logger
	old           map[string]*mapconv.Map // the old build's pinned maps
	fresh         []string                // the maps created under stage, by name
	convs         map[string]*mapconv.Copy
	// then holds each counter map's old entries as first copied.
	then map[string]map[string]mapconv.Entry
	// Halt, when set, is called with "promoting" once the first new pin
	// has replaced an old one: the agent's crash tests end it there.
	Halt func(phase string)
	// ft is the flow table's carry (nil: the table was kept).
	ft *ftCarry
}

// Prepare builds the maps for l beside the dataplane pinned under pinDir
// and copies the pinned state into them (the first copy). It loads no
// program. The new maps (Object) are the caller's to close.
func Prepare(l bpf.Limits, pinDir string, log *slog.Logger) (u *Upgrade, err error) {
	spec, err := bpf.Spec(l)
	if err != nil {
		return nil, err
	}
	stage := filepath.Join(pinDir, Dir)
	if ents, _ := os.ReadDir(stage); len(ents) > 0 {
		return nil, fmt.Errorf("%s holds the pins of another upgrade", stage)
	}
	bc := mapconv.BTFCache{}
	old, why, err := pinnedDiffs(spec, pinDir, bc)
	if err != nil {
		return nil, err
	}
	u = &Upgrade{pinDir: pinDir, stage: stage, log: log, old: old, convs: map[string]*mapconv.Copy{}, then: map[string]map[string]mapconv.Entry{}}
	defer func() {
		if err != nil {
			if u.obj != nil {
				u.obj.Close()
			}
			u.Abort()
		}
	}()
	reuse, err := u.plan(why)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", stage, err)
	}
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: stage}, MapReplacements: reuse}
	if u.obj, err = bpf.LoadObject(spec, l, opts); err != nil {
		return nil, fmt.Errorf("create maps in %s: %w", stage, err)
	}
	if err := u.copyFirst(bc, why); err != nil {
		return nil, err
	}
	return u, nil
}

// plan completes why (each map that cannot be reused, and why): a new
// secret places every flow and connection anew, the flow table moves
// with its buckets, and the rules tables move together. It returns the
// old maps reused as they are, by name.
func (u *Upgrade) plan(why map[string]string) (map[string]*ebpf.Map, error) {
	change, err := hashChange(u.old, why)
	if err != nil {
		return nil, err
	}
	if change != "" {
		why[mapSecret] = change
	}
	if why[mapSecret] != "" {
		// A new secret: every flow and connection goes to a new place.
		for _, name := range []string{mapFt, mapFo} {
			if why[name] == "" {
				why[name] = "placed by another hash (" + mapSecret + ": " + why[mapSecret] + ")"
			}
		}
	}
	ftMoveTogether(why)
	genNew := false
	for name := range why {
		role, ok := mapRoles[name]
		if !ok {
			return nil, fmt.Errorf("map %s has no upgrade role (internal/bpf/upgrade: mapRoles)", name)
		}
		genNew = genNew || role.generation
	}
	reuse := map[string]*ebpf.Map{}
	for name, r := range u.old {
		switch {
		case why[name] != "":
		case genNew && mapRoles[name].generation:
			why[name] = "a rules table changed: they move together"
		default:
			reuse[name] = r.Map
		}
	}
	return reuse, nil
}

// copyFirst fills each map created anew (those why names) from the old
// build's, as its role says: the first copy.
func (u *Upgrade) copyFirst(bc mapconv.BTFCache, why map[string]string) error {
	byName := u.obj.MapReplacements()
	for _, name := range slices.Sorted(maps.Keys(why)) {
		u.fresh = append(u.fresh, name)
		from := u.old[name]
		if mapRoles[name].carry == flows {
			if name == mapFt {
				if err := u.carryFlowsFirst(bc, byName, why[name]); err != nil {
					return err
				}
			}
			continue
		}
		// FlowOpt's records sit where their hash and the table's size
		// put them: under a new secret or size they start again (a
		// flow's exact-match copy, which remembers where its record
		// was, would otherwise keep one direction on a record the
		// other no longer finds).
		placedAnew := name == mapFo && from != nil &&
			(why[mapSecret] != "" || from.MaxEntries() != byName[name].MaxEntries())
		if from == nil || mapRoles[name].carry == rebuilt || mapRoles[name].carry == secret || placedAnew {
			u.log.Info("upgrade: new map", "map", name, "why", why[name], "copied", false)
			continue
		}
		if err := u.copyMap(bc, name, from, byName[name], why[name]); err != nil {
			return err
		}
	}
	return nil
}

// copyMap copies the old build's map from into to, the map name, once.
func (u *Upgrade) copyMap(bc mapconv.BTFCache, name string, from *mapconv.Map, toMap *ebpf.Map, why string) error {
	to, err := bc.Open(toMap, name)
	if err != nil {
		return err
	}
	mc, err := newMapConv(name, from, to, u.old[mapFars], u.obj.Limits.FARStride())
	if err != nil {
		return err
	}
	u.convs[name] = mc
	es, err := from.ReadAll()
	if err != nil {
		return err
	}
	conv := mc.Convert(es)
	if err := to.Write(conv, ebpf.UpdateAny); err != nil {
		return err
	}
	if mapRoles[name].carry == counter {
		snap := make(map[string]mapconv.Entry, len(es))
		for _, e := range es {
			snap[string(e.Key)] = e
		}
		u.then[name] = snap
	}
	u.log.Info("upgrade: map copied", "map", name, "why", why, "entries", len(es), "kept", len(conv),
		"added_members", mc.Value.Added, "dropped_members", mc.Value.Dropped)
	return nil
}

// Object returns the new maps: commit to them, load their program.
func (u *Upgrade) Object() *bpf.Object { return u.obj }

// Stage is the directory the new pins wait in until Finish.
func (u *Upgrade) Stage() string { return u.stage }

// CopyAgain copies the connections the old program opened since the
// first copy, just before the switch, so the window in which the new
// program does not know them is as short as it can be.
func (u *Upgrade) CopyAgain() error {
	if err := u.carryFlowsAgain(); err != nil {
		return err
	}
	for _, name := range u.fresh {
		if mc := u.convs[name]; mc != nil && mapRoles[name].carry == state {
			if _, err := mc.CopyMissing(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Finish runs once every link runs the new program: it waits with b
// until the old program has left every CPU, copies what it added and
// counted since the first copy, and moves the new maps' pins over the
// old ones. A failure leaves the pins for FinishStaged.
func (u *Upgrade) Finish(b *rcu.Barrier) error {
	if err := b.Sync(); err != nil {
		return err
	}
	if err := u.carryFlowsAgain(); err != nil {
		return err
	}
	for _, name := range u.fresh {
		mc := u.convs[name]
		if mc == nil {
			continue
		}
		switch mapRoles[name].carry {
		case state:
			n, err := mc.CopyMissing()
			if err != nil {
				return err
			}
			u.log.Info("upgrade: entries the old program added meanwhile", "map", name, "entries", n)
		case counter:
			if err := mc.AddDeltas(u.then[name]); err != nil {
				return err
			}
		}
	}
	if err := promote(u.pinDir, u.fresh, u.Halt); err != nil {
		return err
	}
	u.closeOld()
	return nil
}

// promote moves the named pins from the upgrade directory into the pin
// dir, each replacing the old one in one rename; halt (if set) is called
// after the first.
func promote(pinDir string, names []string, halt func(string)) error {
	for i, name := range names {
		if err := os.Rename(filepath.Join(pinDir, Dir, name), filepath.Join(pinDir, name)); err != nil {
			return fmt.Errorf("move pin %s into %s: %w", name, pinDir, err)
		}
		if i == 0 && halt != nil {
			halt("promoting")
		}
	}
	return removeLegacyPins(pinDir)
}

// legacyPins are maps of earlier builds this one has no use for, by
// name and key size: the flow caches, connection and reverse-NAT tables
// the flow table replaced (their connections were carried over:
// carryConns). Once the new program forwards alone, their pins go, and
// the memory with them.
var legacyPins = map[string]uint32{"edge_flows": 56, "edge_flows4": 32, legacyConns: 40, "edge_rnat": 40}

// removeLegacyPins removes the legacyPins pinned under pinDir: only
// LRU hashes of their key size, so a pin dir shared with other tools
// keeps another's map of the same name.
func removeLegacyPins(pinDir string) error {
	for name, keySize := range legacyPins {
		p := filepath.Join(pinDir, name)
		m, err := ebpf.LoadPinnedMap(p, &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			continue // not there, or not a map
		}
		ours := m.Type() == ebpf.LRUHash && m.KeySize() == keySize
		m.Close()
		if !ours {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove pin %s of an earlier build: %w", name, err)
		}
	}
	return nil
}

func (u *Upgrade) closeOld() {
	for _, r := range u.old {
		r.Close()
	}
	u.old = nil
	if u.ft != nil {
		for _, r := range []*mapconv.Map{u.ft.to, u.ft.toMeta, u.ft.state, u.ft.conns} {
			if r != nil {
				r.Close()
			}
		}
		u.ft = nil
	}
}

// Abort, before the switch, removes the new maps' pins (the caller
// closes them first); the old dataplane is as it was.
func (u *Upgrade) Abort() {
	u.closeOld()
	if err := DiscardStaged(u.pinDir); err != nil {
		u.log.Error("upgrade: remove staged pins", "error", err)
	}
}

// DiscardStaged removes what an upgrade pinned under Dir: an
// upgrade that ended before any link ran its program.
func DiscardStaged(pinDir string) error {
	if err := os.RemoveAll(filepath.Join(pinDir, Dir)); err != nil {
		return fmt.Errorf("remove staged pins: %w", err)
	}
	return nil
}

// FinishStaged completes, from the pins alone, an upgrade that ended after
// some link ran its program, once the caller has switched the rest: the
// connections the old program opened are copied into the new maps (by
// the BTF of both, whichever builds they came from), then every staged map
// replaces the old one. Counters lose what the old program counted since
// the first copy (the snapshot was the ended agent's).
func FinishStaged(pinDir string, log *slog.Logger) error {
	stage := filepath.Join(pinDir, Dir)
	ents, err := os.ReadDir(stage)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", stage, err)
	}
	b, err := rcu.New()
	if err != nil {
		return err
	}
	err = b.Sync() // the old program has left every CPU
	b.Close()
	if err != nil {
		return err
	}
	bc := mapconv.BTFCache{}
	load := func(dir, name string) *mapconv.Map {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			return nil // gone, or not a map (the program)
		}
		r, err := bc.Open(m, name)
		if err != nil {
			m.Close()
			return nil
		}
		return r
	}
	oldFars, newFars := load(pinDir, mapFars), load(stage, mapFars)
	var names []string
	for _, e := range ents {
		to := load(stage, e.Name())
		if to == nil {
			continue
		}
		names = append(names, e.Name())
		if e.Name() == mapFt {
			c := &ftCarry{from: load(pinDir, mapFt), fromMeta: load(pinDir, mapFtMeta),
				to: to, toMeta: load(stage, mapFtMeta), state: load(pinDir, mapGlobal)}
			// The new table's secret: staged with it, or the one kept.
			sec := load(stage, mapSecret)
			if sec == nil {
				sec = load(pinDir, mapSecret)
			}
			if sec != nil {
				c.secret, err = bpf.ReadSecret(sec.Map)
				sec.Close()
			}
			if (sec == nil || err != nil || !c.secret.Usable()) && c.toMeta != nil {
				log.Error("upgrade: no secret to place the flows the old program added by", "error", err)
				c.toMeta.Close()
				c.toMeta = nil
			}
			if c.from == nil {
				c.conns = load(pinDir, legacyConns)
			}
			if oldFars != nil && newFars != nil {
				c.g = farGeometry{oldFars.MaxEntries() / 2, newFars.MaxEntries() / 2}
			}
			if c.toMeta != nil {
				n, dropped, err := c.run()
				log.Info("upgrade: flows the old program added meanwhile", "entries", n, "no_room", dropped, "error", err)
			}
			c.close()
			continue
		}
		if from := load(pinDir, e.Name()); from != nil && mapRoles[e.Name()].carry == state {
			newStride := uint32(0)
			if newFars != nil {
				newStride = newFars.MaxEntries() / 2
			}
			mc, err := newMapConv(e.Name(), from, to, oldFars, newStride)
			if err == nil {
				var n int
				n, err = mc.CopyMissing()
				log.Info("upgrade: entries the old program added meanwhile", "map", e.Name(), "entries", n)
			}
			if err != nil {
				log.Error("upgrade: copy entries the old program added", "map", e.Name(), "error", err)
			}
			from.Close()
		}
		to.Close()
	}
	for _, r := range []*mapconv.Map{oldFars, newFars} {
		if r != nil {
			r.Close()
		}
	}
	return promote(pinDir, names, nil)
}

// newMapConv plans the copy of from's entries into to. oldFars is the old
// build's edge_fars (nil: none) and newStride the new FAR stride, for the
// entries that hold a FAR's place.
func newMapConv(name string, from, to *mapconv.Map, oldFars *mapconv.Map, newStride uint32) (*mapconv.Copy, error) {
	mc, err := mapconv.NewCopy(name, from, to)
	if err != nil {
		return nil, err
	}
	g := farGeometry{newStride, newStride}
	if oldFars != nil {
		g.oldStride = oldFars.MaxEntries() / 2
	}
	if g.oldStride == g.newStride || g.oldStride <= bpf.MaxServices || g.newStride <= bpf.MaxServices {
		return mc, nil
	}
	switch name {
	case mapFars:
		mc.RemapKey = func(k []byte) bool {
			i, ok := g.index(mapconv.UintAt(k, 4))
			mapconv.PutUint(k, 4, i)
			return ok
		}
	}
	return mc, nil
}

// farGeometry moves FAR indexes from one rules limit to another: a slot
// holds stride places, the rules' FARs first and the services' reply
// rewrites at rules + tag (Limits.FARStride).
type farGeometry struct{ oldStride, newStride uint32 }

// place moves an index within a slot.
func (g farGeometry) place(i uint64) (uint64, bool) {
	oldRules, newRules := uint64(g.oldStride-bpf.MaxServices), uint64(g.newStride-bpf.MaxServices)
	switch {
	case i >= uint64(g.oldStride):
		return i, false // no FAR (EDGE_NO_FAR)
	case i >= oldRules:
		return i - oldRules + newRules, true
	case i >= newRules:
		return i, false // a rule FAR past the new limit
	}
	return i, true
}

// index moves an edge_fars index (slot * stride + place).
func (g farGeometry) index(i uint64) (uint64, bool) {
	p, ok := g.place(i % uint64(g.oldStride))
	return i/uint64(g.oldStride)*uint64(g.newStride) + p, ok
}
