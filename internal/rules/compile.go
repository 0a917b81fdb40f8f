// SPDX-License-Identifier: Apache-2.0

// Package rules compiles PDRs, FARs and paths from the config into the
// dataplane's tables: tuple-space mask groups, masked classifier entries,
// FARs and paths, at places that stay with their objects so a change
// compiles into a change of a few entries.
package rules

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Resolver maps an interface name to its ifindex on this host.
type Resolver func(name string) (uint32, error)

// Compiler holds the compiled form of the config that serves and turns a
// batch of changes into the next generation at the cost of what the batch
// touches: each PDR knows its classifier entries, each mask group its
// member PDRs, and FARs and paths keep their table indexes. Build makes
// one from a whole config; Apply changes it.
//
// A Compiler is not safe for concurrent use; the Generation it returns is
// its own state, valid until the next Apply.
type Compiler struct {
	resolve Resolver
	limits  bpf.Limits
	allocs  Allocs
	ifidx   map[string]uint32
	paths   map[uint32]compiledPath // by path id
	fars    map[uint32]uint32       // FAR id -> index in gen.FARs
	pdrs    map[uint32]*compiledPDR // by PDR id
	groups  map[bpf.FlowKey]*group  // by mask
	tags    [bpf.MaxGroups]*group
	// shadowed holds, per classifier entry, the rules of other PDRs with
	// the same masked key that lose to the one in gen.Rules.
	shadowed map[bpf.RuleKey][]bpf.Rule
	lb       balancer
	steerIdx map[uint32]uint32          // steering group index by LBR id
	qos      map[uint32]config.QoSClass // by id
	qosIdx   map[uint32]uint32          // a class's index by its id
	flowopt  map[string]config.FlowOptModule
	gen      *commit.Generation

	// State of the Apply under way.
	undo        []func()
	errs        config.Errors
	missing     map[string]bool // interfaces this batch failed to resolve
	groupsMoved bool
	// freeing is the classifier entries of the PDRs this Apply changes
	// or deletes: room a PDR's entries may count on before the batch
	// has taken the old ones out. overflow counts the entries of PDRs
	// not compiled because they would not fit: the batch is refused.
	freeing, overflow int
}

type compiledPath struct {
	idx   uint32
	decap bpf.DecapKey
}

type compiledPDR struct {
	rule  bpf.Rule
	keys  []bpf.RuleKey
	match config.Match // what it matches, for the services it may stand before
	prec  uint32
}

// group is one mask group: its tag and the PDRs with entries in it.
type group struct {
	tag     uint32
	mask    bpf.FlowKey
	members map[uint32]member // by PDR id
	// prios holds the members' prios, best first, and stale ones of
	// PDRs that left or changed (dropped when they come to the top), so
	// that the best prio costs O(log n) as PDRs come and go.
	prios prioHeap
}

type member struct {
	entries int // the PDR's entries in this group
	prio    uint64
}

// minPrio returns the best prio of the group's members.
func (g *group) minPrio() uint64 {
	for len(g.prios) > 0 {
		top := g.prios[0]
		if m, ok := g.members[uint32(top)]; ok && m.prio == top {
			return top
		}
		heap.Pop(&g.prios)
	}
	return ^uint64(0)
}

// prioHeap is a min-heap of prios (container/heap).
type prioHeap []uint64

func (h prioHeap) Len() int           { return len(h) }
func (h prioHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h prioHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *prioHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *prioHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Build compiles cfg into a new Compiler. allocs give each PDR and path a
// stable statistics index; they are not modified: the compiler works on
// a copy (Allocs), where indexes of objects cfg does not have are freed.
// Problems are reported as config.Errors with the path of the culprit.
func Build(cfg *config.Config, ifindex Resolver, allocs Allocs, limits bpf.Limits) (*Compiler, error) {
	return BuildDown(cfg, ifindex, allocs, limits, nil)
}

// BuildDown is Build with the backends health checks took out (down[service]
// [far]) out of their tables from the start, so the generation is one
// compiled whole (compared whole against the dataplane).
func BuildDown(cfg *config.Config, ifindex Resolver, allocs Allocs, limits bpf.Limits, down map[uint32]map[uint32]bool) (*Compiler, error) {
	limits = limits.WithDefaults()
	c := &Compiler{
		resolve:  ifindex,
		limits:   limits,
		lb:       newBalancer(),
		allocs:   allocs.clone(),
		ifidx:    map[string]uint32{},
		paths:    map[uint32]compiledPath{},
		fars:     map[uint32]uint32{},
		pdrs:     map[uint32]*compiledPDR{},
		groups:   map[bpf.FlowKey]*group{},
		shadowed: map[bpf.RuleKey][]bpf.Rule{},
		steerIdx: map[uint32]uint32{},
		qos:      map[uint32]config.QoSClass{},
		qosIdx:   map[uint32]uint32{},
		flowopt:  map[string]config.FlowOptModule{},
		gen: &commit.Generation{
			Rules:        map[bpf.RuleKey]bpf.Rule{},
			FARs:         map[uint32]bpf.Far{},
			Paths:        map[uint32]bpf.Path{},
			ProbeSecrets: map[uint32]bpf.ProbeSecret{},
			Decaps:       map[bpf.DecapKey]bpf.Decap{},
			Services:     map[bpf.SvcKey]bpf.Svc{},
			NATBackends:  map[bpf.SvcKey]bpf.NATBackend{},
			Tables:       map[uint32]*bpf.LBTable{},
			Members:      map[uint32]bpf.MemberRef{},
			NoMatch:      verdict(cfg.Defaults.NoMatch),
			Malformed:    verdict(cfg.Defaults.Malformed),
		},
	}
	live := map[uint32]bool{}
	for _, p := range cfg.PDRs {
		live[p.ID] = true
	}
	livePaths := map[uint32]bool{}
	for _, p := range cfg.Paths {
		livePaths[p.ID] = true
	}
	liveServices := map[uint32]bool{}
	for _, sv := range cfg.Services {
		liveServices[sv.ID] = true
	}
	liveFARs := map[uint32]bool{}
	for _, f := range cfg.FARs {
		liveFARs[f.ID] = true
	}
	// Free first what cfg no longer has, so its indexes can serve new
	// objects.
	c.allocs.PDR.Retain(live)
	c.allocs.Path.Retain(livePaths)
	c.allocs.Service.Retain(liveServices)
	c.allocs.FAR.Retain(liveFARs)
	if len(cfg.Paths) > bpf.MaxPaths {
		return nil, config.Errors{{Path: "paths", Reason: fmt.Sprintf("%d paths, at most %d", len(cfg.Paths), bpf.MaxPaths), Code: config.CodeCapacity}}
	}
	for svc, fars := range down {
		c.lb.down[svc] = maps.Clone(fars)
	}
	if _, err := c.Apply(changesOf(cfg)); err != nil {
		return nil, err
	}
	c.gen.Dirty = nil // compared whole against what the dataplane holds
	return c, nil
}

// Compile compiles cfg into a generation, with the allocators as they are
// after it (see Build).
func Compile(cfg *config.Config, ifindex Resolver, allocs Allocs, limits bpf.Limits) (*commit.Generation, Allocs, error) {
	c, err := Build(cfg, ifindex, allocs, limits)
	if err != nil {
		return nil, Allocs{}, err
	}
	return c.gen, c.allocs, nil
}

// changesOf lists every object of cfg as created, at its place in cfg.
func changesOf(cfg *config.Config) *config.Changes {
	return &config.Changes{
		Interfaces: created("interfaces", cfg.Interfaces),
		Paths:      created("paths", cfg.Paths),
		FARs:       created("fars", cfg.FARs),
		PDRs:       created("pdrs", cfg.PDRs),
		LBRs:       created("lbrs", cfg.LBRs),
		Services:   created("services", cfg.Services),
		QoSClasses: created("qos_classes", cfg.QoSClasses),
		FlowOpt:    created("flowopt", cfg.FlowOpt),
	}
}

func created[T any](list string, items []T) []config.Diff[T] {
	out := make([]config.Diff[T], len(items))
	for i := range items {
		out[i] = config.Diff[T]{At: list + "[" + strconv.Itoa(i) + "]", New: &items[i]}
	}
	return out
}

// Generation returns the compiled tables, with Dirty listing what the
// last Apply changed. It is the compiler's own state: read it before the
// next Apply, do not modify it.
func (c *Compiler) Generation() *commit.Generation { return c.gen }

// Allocs returns the compiler's statistics index allocators.
func (c *Compiler) Allocs() Allocs { return c.allocs }

// Apply compiles a batch of changes (as config.Store.Apply returns them,
// already validated as config). On success it returns a function that
// undoes it, for a commit that fails later. On failure nothing changed
// and the error is config.Errors, at the changes' paths; errors for full
// tables carry config.CodeCapacity.
func (c *Compiler) Apply(ch *config.Changes) (undo func(), err error) {
	c.begin()

	// Whatever is referred to first, then what refers, then removals
	// in reverse.
	puts(ch.Interfaces, c.putInterface)
	puts(ch.Paths, c.putPath)
	puts(ch.FARs, c.putFAR)
	puts(ch.LBRs, c.putLBR)
	puts(ch.Services, c.putService)
	puts(ch.QoSClasses, c.putQoS)
	puts(ch.FlowOpt, func(_ string, m *config.FlowOptModule) { setMap(c, c.flowopt, m.Module, *m, true) })
	c.freeing, c.overflow = 0, 0
	for _, d := range ch.PDRs {
		if d.Old != nil {
			if cp, ok := c.pdrs[d.Old.ID]; ok {
				c.freeing += len(cp.keys)
			}
		}
	}
	for _, d := range ch.PDRs {
		switch {
		case d.New != nil:
			c.putPDR(d.At, d.New)
		case d.Old != nil:
			c.removePDR(d.Old.ID, false)
		}
	}
	removals(ch.Services, func(sv *config.Service) { c.removeService(sv.ID) })
	removals(ch.QoSClasses, func(q *config.QoSClass) { c.removeQoS(q.ID) })
	removals(ch.FlowOpt, func(m *config.FlowOptModule) { setMap(c, c.flowopt, m.Module, config.FlowOptModule{}, false) })
	removals(ch.LBRs, func(l *config.LBR) { c.removeLBR(l.ID) })
	removals(ch.FARs, func(f *config.FAR) { c.removeFAR(f.ID) })
	removals(ch.Paths, func(p *config.Path) { c.removePath(p.ID) })
	removals(ch.Interfaces, func(itf *config.Interface) {
		name := itf.Name
		idx := c.ifidx[name]
		delete(c.ifidx, name)
		c.onUndo(func() { c.ifidx[name] = idx })
	})
	c.rebuildServices()
	c.rebuildSteering()
	if c.gen.QoS == nil || len(ch.QoSClasses) > 0 || len(ch.FlowOpt) > 0 {
		// Made from the classes and modules alone: a batch that
		// changes neither (a PDR's) keeps them.
		c.rebuildQoS()
	}
	if n := len(c.gen.Rules) + c.overflow; n > int(c.limits.Rules) {
		c.errs = append(c.errs, config.FieldError{Path: "pdrs", Reason: fmt.Sprintf("%d classifier entries after port-range expansion exceed limits.rules %d", n, c.limits.Rules), Code: config.CodeCapacity})
	}
	return c.end()
}

// begin starts an Apply: nothing changed yet.
func (c *Compiler) begin() {
	c.undo, c.errs, c.missing, c.groupsMoved = nil, nil, map[string]bool{}, false
	c.gen.Dirty = &commit.Dirty{Rules: map[bpf.RuleKey]struct{}{}, FARs: map[uint32]struct{}{}, Tables: map[uint32]struct{}{}}
	c.gen.ResetStats, c.gen.ResetPathStats, c.gen.ResetLBStats = nil, nil, nil
	c.lb.dirty = map[uint32]string{}
	c.lb.guardsMoved = map[uint32]bool{}
}

// end finishes an Apply: undone whole on errors, else the groups sorted
// and the undo handed out.
func (c *Compiler) end() (undo func(), err error) {
	undoAll := c.takeUndo()
	if len(c.errs) > 0 {
		errs := c.errs
		undoAll()
		return nil, errs
	}
	if c.groupsMoved {
		c.sortGroups()
	}
	return undoAll, nil
}

// puts calls put for every object ds creates or updates.
func puts[T any](ds []config.Diff[T], put func(at string, v *T)) {
	for _, d := range ds {
		if d.New != nil {
			put(d.At, d.New)
		}
	}
}

// removals calls remove for every object ds deletes.
func removals[T any](ds []config.Diff[T], remove func(old *T)) {
	for _, d := range ds {
		if d.New == nil {
			remove(d.Old)
		}
	}
}

// onUndo records how to take back one step of the Apply under way.
func (c *Compiler) onUndo(f func()) { c.undo = append(c.undo, f) }

// takeUndo returns a function undoing every step recorded so far (in
// reverse), leaving the tables and Dirty as they were before the Apply
// made them differ... from the dataplane's point of view: Dirty keeps the
// keys touched, so a generation committed after an undo rewrites them.
func (c *Compiler) takeUndo() func() {
	steps := c.undo
	c.undo = nil
	return func() {
		for i := len(steps) - 1; i >= 0; i-- {
			steps[i]()
		}
		c.sortGroups()
	}
}

func (c *Compiler) fail(path, reason string, code config.ErrorCode) {
	c.errs = append(c.errs, config.FieldError{Path: path, Reason: reason, Code: code})
}

// iface returns the ifindex of a configured interface; a missing one is
// reported at path unless its own failure was.
func (c *Compiler) iface(path, name string) (uint32, bool) {
	idx, ok := c.ifidx[name]
	if !ok && !c.missing[name] {
		c.fail(path, fmt.Sprintf("interface %q is not available", name), config.CodeInvalid)
	}
	return idx, ok
}

func (c *Compiler) putInterface(at string, itf *config.Interface) {
	name := itf.Name
	if _, ok := c.ifidx[name]; ok {
		return // role or XDP mode changed: the ifindex stays
	}
	idx, err := c.resolve(name)
	if err != nil {
		c.fail(at+".name", err.Error(), config.CodeInvalid)
		c.missing[name] = true
		return
	}
	c.ifidx[name] = idx
	c.onUndo(func() { delete(c.ifidx, name) })
}

func (c *Compiler) putPath(at string, pt *config.Path) {
	ifindex, ok := c.iface(at+".interface", pt.Interface)
	if !ok {
		return
	}
	old, had := c.paths[pt.ID]
	idx := old.idx
	if !had {
		var isNew bool
		var err error
		idx, isNew, err = c.allocs.Path.Get(pt.ID)
		if err != nil {
			c.fail(at+".id", err.Error(), capacityIf(errors.Is(err, ErrStatsFull)))
			return
		}
		c.onUndo(func() { c.allocs.Path.Free(pt.ID) })
		if isNew {
			c.gen.ResetPathStats = append(c.gen.ResetPathStats, idx)
		}
	}
	bp := bpf.Path{Ifindex: ifindex, Stats: idx, Id: pt.ID, Ttl: pt.TTL}
	if bp.Ttl == 0 {
		bp.Ttl = config.DefaultPathTTL
	}
	l4, r4 := pt.Local.A.As4(), pt.Remote.A.As4()
	bp.Local, bp.Remote = be32(l4), be32(r4)
	dk := bpf.DecapKey{Local: bp.Local}
	if pt.Key != nil {
		bp.Flags |= bpf.PathFlagKey
		bp.Key = bits.ReverseBytes32(*pt.Key)
		dk.Key, dk.HasKey = bp.Key, 1
	}
	if pt.Seq {
		bp.Flags |= bpf.PathFlagSeq
	}
	if pt.DSCP != nil {
		bp.Flags |= bpf.PathFlagDSCPFixed
		bp.Dscp = *pt.DSCP
	}
	var sec bpf.ProbeSecret
	if key, ok := pt.Monitor.Secret.Key(); ok {
		sec = bpf.NewProbeSecret(key)
	} else if pt.Monitor.Secret.Redacted() {
		// Given back as shown, for a path that has no such secret.
		c.fail(at+".monitor.secret", pt.Monitor.Secret.String()+" is how a secret is shown, not one: give its 32 hex digits "+
			"(an update may give the redacted form of the secret the path has, to keep it)", config.CodeInvalid)
		return
	}
	if had {
		c.dropPath(pt.ID, old)
	}
	c.setPath(pt.ID, compiledPath{idx: idx, decap: dk}, bp, sec)
	if had {
		c.notePath(at, pt.ID)
	}
}

// setPath puts a compiled path in place (undoably), with its probe
// secret (zero: none).
func (c *Compiler) setPath(id uint32, cp compiledPath, bp bpf.Path, sec bpf.ProbeSecret) {
	c.paths[id] = cp
	c.gen.Paths[cp.idx] = bp
	if sec != (bpf.ProbeSecret{}) {
		c.gen.ProbeSecrets[cp.idx] = sec
	}
	c.gen.Decaps[cp.decap] = bpf.Decap{Remote: bp.Remote, Stats: cp.idx, Id: id}
	c.onUndo(func() {
		delete(c.paths, id)
		delete(c.gen.Paths, cp.idx)
		delete(c.gen.ProbeSecrets, cp.idx)
		delete(c.gen.Decaps, cp.decap)
	})
}

// dropPath takes a compiled path out of the tables (undoably); its index
// stays allocated.
func (c *Compiler) dropPath(id uint32, cp compiledPath) {
	bp, dv := c.gen.Paths[cp.idx], c.gen.Decaps[cp.decap]
	sec, hadSec := c.gen.ProbeSecrets[cp.idx]
	delete(c.paths, id)
	delete(c.gen.Paths, cp.idx)
	delete(c.gen.ProbeSecrets, cp.idx)
	delete(c.gen.Decaps, cp.decap)
	c.onUndo(func() {
		c.paths[id] = cp
		c.gen.Paths[cp.idx] = bp
		if hadSec {
			c.gen.ProbeSecrets[cp.idx] = sec
		}
		c.gen.Decaps[cp.decap] = dv
	})
}

func (c *Compiler) removePath(id uint32) {
	cp, ok := c.paths[id]
	if !ok {
		return
	}
	c.dropPath(id, cp)
	c.allocs.Path.Free(id)
	c.onUndo(func() { c.allocs.Path.put(id, cp.idx) })
}

func (c *Compiler) putFAR(at string, f *config.FAR) {
	far := bpf.Far{Id: f.ID}
	switch f.Action {
	case config.ActionPass:
		far.Action = bpf.ActPass
	case config.ActionDrop:
		far.Action = bpf.ActDrop
	case config.ActionRedirect:
		far.Action = bpf.ActRedirect
		idx, ok := c.iface(at+".interface", f.Interface)
		if !ok {
			return
		}
		far.Ifindex = idx
	case config.ActionEncap:
		far.Action = bpf.ActEncap
		cp, ok := c.paths[f.Path]
		if !ok {
			c.fail(at+".path", fmt.Sprintf("path %d is not available", f.Path), config.CodeInvalid)
			return
		}
		far.Path = cp.idx
	case config.ActionDecap:
		far.Action = bpf.ActDecap
	case config.ActionSteer:
		// The group's index: rebuildSteering, once the batch's LBRs are in.
		far.Action = bpf.ActSteer
		far.Path = c.steerIdx[f.LBR]
	case config.ActionNAT:
		far.Action = bpf.ActNAT
		if f.Interface != "" {
			idx, ok := c.iface(at+".interface", f.Interface)
			if !ok {
				return
			}
			far.Ifindex = idx
		}
		if f.Address.A.Is4() {
			a := f.Address.A.As4()
			copy(far.Addr[:], a[:])
		} else {
			far.Addr = f.Address.A.As16()
		}
		far.Port = bits.ReverseBytes16(f.Port)
	default:
		c.fail(at+".action", fmt.Sprintf("unknown action %q", f.Action), config.CodeInvalid)
		return
	}
	idx, had := c.fars[f.ID]
	if !had {
		var err error
		if idx, _, err = c.allocs.FAR.Get(f.ID); err != nil {
			c.fail(at+".id", fmt.Sprintf("no free far index (%d in use)", len(c.fars)), capacityIf(errors.Is(err, ErrStatsFull)))
			return
		}
		c.fars[f.ID] = idx
		c.onUndo(func() {
			c.allocs.FAR.Free(f.ID)
			delete(c.fars, f.ID)
		})
	}
	c.setFAR(idx, far, true)
	c.noteFAR(at, f, true)
}

// setFAR puts (ok) or removes the FAR at idx, undoably.
func (c *Compiler) setFAR(idx uint32, far bpf.Far, ok bool) {
	old, had := c.gen.FARs[idx]
	if ok {
		c.gen.FARs[idx] = far
	} else {
		delete(c.gen.FARs, idx)
	}
	c.gen.Dirty.FARs[idx] = struct{}{}
	c.onUndo(func() {
		if had {
			c.gen.FARs[idx] = old
		} else {
			delete(c.gen.FARs, idx)
		}
	})
}

func (c *Compiler) removeFAR(id uint32) {
	idx, ok := c.fars[id]
	if !ok {
		return
	}
	c.setFAR(idx, bpf.Far{}, false)
	c.noteFAR("", &config.FAR{ID: id}, false)
	delete(c.fars, id)
	c.allocs.FAR.Free(id)
	c.onUndo(func() {
		c.fars[id] = idx
		c.allocs.FAR.put(id, idx)
	})
}

func (c *Compiler) putPDR(at string, p *config.PDR) {
	fi, ok := c.fars[p.FAR]
	if !ok {
		c.fail(at+".far", fmt.Sprintf("no far with id %d", p.FAR), config.CodeInvalid)
		return
	}
	var in, inPath uint32
	if p.Match.In != "" {
		if in, ok = c.iface(at+".match.in", p.Match.In); !ok {
			return
		}
	}
	if p.Match.InPath != 0 {
		cp, ok := c.paths[p.Match.InPath]
		if !ok {
			c.fail(at+".match.in_path", fmt.Sprintf("path %d is not available", p.Match.InPath), config.CodeInvalid)
			return
		}
		// Decapsulated packets carry their path's stable index + 1.
		inPath = cp.idx + 1
	}
	var stats uint32
	if old, had := c.pdrs[p.ID]; had {
		stats = old.rule.Stats
		c.removePDR(p.ID, true)
	} else {
		var isNew bool
		var err error
		stats, isNew, err = c.allocs.PDR.Get(p.ID)
		if err != nil {
			c.fail(at+".id", err.Error(), capacityIf(errors.Is(err, ErrStatsFull)))
			return
		}
		c.onUndo(func() { c.allocs.PDR.Free(p.ID) })
		if isNew {
			c.gen.ResetStats = append(c.gen.ResetStats, stats)
		}
	}
	cp := &compiledPDR{rule: bpf.Rule{Prio: uint64(p.Precedence)<<32 | uint64(p.ID), Far: fi, Stats: stats, Qos: c.qosOf(p.QoS)},
		match: p.Match, prec: p.Precedence}
	key, mask := baseKey(p.Match, in, inPath)
	// Its masked keys, one per pair of port blocks (at most 30 x 30).
	sports, dports := portPrefixes(p.Match.Sport), portPrefixes(p.Match.Dport)
	if c.overflow > 0 {
		c.overflow += len(sports) * len(dports)
		return
	}
	type entry struct{ k, m bpf.FlowKey }
	entries := make([]entry, 0, len(sports)*len(dports))
	fresh := 0
	for _, sp := range sports {
		for _, dp := range dports {
			e := entry{key, mask}
			e.k.Sport, e.m.Sport = bits.ReverseBytes16(sp.val), bits.ReverseBytes16(sp.mask)
			e.k.Dport, e.m.Dport = bits.ReverseBytes16(dp.val), bits.ReverseBytes16(dp.mask)
			entries = append(entries, e)
			if g, ok := c.groups[e.m]; !ok {
				fresh++
			} else if _, ok := c.gen.Rules[bpf.RuleKey{K: e.k, Group: g.tag}]; !ok {
				fresh++
			}
		}
	}
	// Refused before its entries are made when they cannot fit even
	// after the batch's removals: a batch of PDRs with wide port ranges
	// (up to 900 entries each) would otherwise build millions of entries
	// only for the final count to refuse them.
	if len(c.gen.Rules)+fresh > int(c.limits.Rules)+c.freeing {
		c.overflow += fresh
		return
	}
	for _, e := range entries {
		grp := c.group(at, e.m)
		if grp == nil {
			return
		}
		rk := bpf.RuleKey{K: e.k, Group: grp.tag}
		cp.keys = append(cp.keys, rk)
		c.join(grp, p.ID, cp.rule.Prio)
		c.addEntry(rk, cp.rule)
	}
	c.pdrs[p.ID] = cp
	c.onUndo(func() { delete(c.pdrs, p.ID) })
	c.guardServices(cp, 1)
}

// removePDR takes a PDR's entries out; keepStats keeps its statistics
// index for the same PDR compiled again (an update).
func (c *Compiler) removePDR(id uint32, keepStats bool) {
	cp, ok := c.pdrs[id]
	if !ok {
		return
	}
	for _, rk := range cp.keys {
		c.removeEntry(rk, cp.rule.Prio)
		c.leave(c.tags[rk.Group], id)
	}
	delete(c.pdrs, id)
	c.onUndo(func() { c.pdrs[id] = cp })
	c.guardServices(cp, -1)
	if !keepStats {
		c.allocs.PDR.Free(id)
		c.onUndo(func() { c.allocs.PDR.put(id, cp.rule.Stats) })
	}
}

// group returns the mask group for mask, making one if there is none.
func (c *Compiler) group(at string, mask bpf.FlowKey) *group {
	if g, ok := c.groups[mask]; ok {
		return g
	}
	tag := slices.Index(c.tags[:], nil)
	if tag < 0 {
		c.fail(at+".match", fmt.Sprintf("rules would use more than %d distinct match shapes (prefix lengths, fields, port-range blocks), the classifier's limit: align port ranges to powers of two or share prefix lengths", bpf.MaxGroups), config.CodeCapacity)
		return nil
	}
	g := &group{tag: uint32(tag), mask: mask, members: map[uint32]member{}}
	c.groups[mask] = g
	c.tags[tag] = g
	c.groupsMoved = true
	c.onUndo(func() {
		delete(c.groups, mask)
		c.tags[tag] = nil
	})
	return g
}

// join counts one more entry of PDR id (with prio) in g.
func (c *Compiler) join(g *group, id uint32, prio uint64) {
	m := g.members[id]
	g.members[id] = member{entries: m.entries + 1, prio: prio}
	if m.entries == 0 {
		heap.Push(&g.prios, prio)
		if len(g.prios) > 2*len(g.members)+16 {
			// Mostly stale: rebuild from the members.
			g.prios = g.prios[:0]
			for _, m := range g.members {
				g.prios = append(g.prios, m.prio)
			}
			heap.Init(&g.prios)
		}
	}
	c.groupsMoved = true
	c.onUndo(func() {
		if m.entries == 0 {
			delete(g.members, id)
		} else {
			g.members[id] = m
		}
	})
}

// leave counts one entry of PDR id less in g; an empty group goes.
func (c *Compiler) leave(g *group, id uint32) {
	m := g.members[id]
	if m.entries == 1 {
		delete(g.members, id)
	} else {
		g.members[id] = member{entries: m.entries - 1, prio: m.prio}
	}
	if len(g.members) == 0 {
		delete(c.groups, g.mask)
		c.tags[g.tag] = nil
	}
	c.groupsMoved = true
	c.onUndo(func() {
		if m.entries == 1 {
			// minPrio may have dropped its prio from the heap since.
			heap.Push(&g.prios, m.prio)
		}
		g.members[id] = m
		c.groups[g.mask] = g
		c.tags[g.tag] = g
	})
}

// addEntry puts r at key rk, where the best prio wins and the others wait
// in shadowed.
func (c *Compiler) addEntry(rk bpf.RuleKey, r bpf.Rule) {
	cur, taken := c.gen.Rules[rk]
	switch {
	case !taken:
		c.gen.Rules[rk] = r
		c.onUndo(func() { delete(c.gen.Rules, rk) })
	case r.Prio < cur.Prio:
		c.gen.Rules[rk] = r
		c.shadowed[rk] = append(c.shadowed[rk], cur)
		c.onUndo(func() {
			c.gen.Rules[rk] = cur
			c.shadowed[rk] = c.shadowed[rk][:len(c.shadowed[rk])-1]
			if len(c.shadowed[rk]) == 0 {
				delete(c.shadowed, rk)
			}
		})
	default:
		c.shadowed[rk] = append(c.shadowed[rk], r)
		c.onUndo(func() {
			c.shadowed[rk] = slices.DeleteFunc(c.shadowed[rk], func(x bpf.Rule) bool { return x.Prio == r.Prio })
			if len(c.shadowed[rk]) == 0 {
				delete(c.shadowed, rk)
			}
		})
	}
	c.gen.Dirty.Rules[rk] = struct{}{}
}

// removeEntry takes the rule with prio out of key rk; the best shadowed
// one, if any, takes its place.
func (c *Compiler) removeEntry(rk bpf.RuleKey, prio uint64) {
	cur := c.gen.Rules[rk]
	losers := slices.Clone(c.shadowed[rk])
	restore := func() {
		c.gen.Rules[rk] = cur
		if len(losers) > 0 {
			c.shadowed[rk] = losers
		} else {
			delete(c.shadowed, rk)
		}
	}
	c.onUndo(restore)
	c.gen.Dirty.Rules[rk] = struct{}{}
	if cur.Prio != prio {
		left := slices.DeleteFunc(slices.Clone(losers), func(x bpf.Rule) bool { return x.Prio == prio })
		if len(left) > 0 {
			c.shadowed[rk] = left
		} else {
			delete(c.shadowed, rk)
		}
		return
	}
	if len(losers) == 0 {
		delete(c.gen.Rules, rk)
		return
	}
	best := slices.MinFunc(losers, func(a, b bpf.Rule) int { return cmp.Compare(a.Prio, b.Prio) })
	c.gen.Rules[rk] = best
	left := slices.DeleteFunc(slices.Clone(losers), func(x bpf.Rule) bool { return x.Prio == best.Prio })
	if len(left) > 0 {
		c.shadowed[rk] = left
	} else {
		delete(c.shadowed, rk)
	}
}

// sortGroups writes the groups in search order: by best prio (unique: it
// holds a PDR id), so the search can stop at the first group that cannot
// beat what it found.
func (c *Compiler) sortGroups() {
	c.gen.Groups = c.gen.Groups[:0]
	for _, g := range c.tags {
		if g != nil {
			c.gen.Groups = append(c.gen.Groups, bpf.Group{Mask: g.mask, MinPrio: g.minPrio(), Tag: g.tag})
		}
	}
	slices.SortFunc(c.gen.Groups, func(a, b bpf.Group) int {
		return cmp.Or(cmp.Compare(a.MinPrio, b.MinPrio), cmp.Compare(a.Tag, b.Tag))
	})
}

func capacityIf(full bool) config.ErrorCode {
	if full {
		return config.CodeCapacity
	}
	return config.CodeInvalid
}

func verdict(s string) uint32 {
	if s == "drop" {
		return bpf.XDPDrop
	}
	return bpf.XDPPass
}

// baseKey builds the key and mask of a match without its ports.
func baseKey(m config.Match, in, inPath uint32) (key, mask bpf.FlowKey) {
	if in != 0 {
		key.Ifindex, mask.Ifindex = in, 0xffffffff
	}
	if inPath != 0 {
		key.Path, mask.Path = inPath, 0xffffffff
	}
	setPrefix := func(p config.Prefix, k, mk *[16]uint8) {
		if !p.IsSet() {
			return
		}
		addr := p.P.Addr()
		fam := uint8(6)
		b := addr.As16()
		if addr.Is4() {
			fam = 4
			a4 := addr.As4()
			b = [16]uint8{}
			copy(b[:], a4[:])
		}
		key.Family, mask.Family = fam, 0xff
		for i := 0; i < p.P.Bits(); i++ {
			mk[i/8] |= 0x80 >> (i % 8)
		}
		for i := range b {
			k[i] = b[i] & mk[i]
		}
	}
	setPrefix(m.Src, &key.Src, &mask.Src)
	setPrefix(m.Dst, &key.Dst, &mask.Dst)
	if m.Proto.Set {
		key.Proto, mask.Proto = m.Proto.Num, 0xff
	}
	if m.DSCP != nil {
		key.Dscp, mask.Dscp = *m.DSCP, 0xff
	}
	if m.GREKey != nil {
		key.GreKey, mask.GreKey = bits.ReverseBytes32(*m.GREKey), 0xffffffff
		key.Flags, mask.Flags = bpf.KeyFlagGREKey, bpf.KeyFlagGREKey
	}
	return key, mask
}

type portPrefix struct{ val, mask uint16 }

// portPrefixes covers a port range with the fewest aligned power-of-two
// blocks (at most 30 for a 16-bit range); an unset range is one wildcard.
func portPrefixes(r config.PortRange) []portPrefix {
	if !r.Set {
		return []portPrefix{{0, 0}}
	}
	var out []portPrefix
	lo, hi := uint32(r.Lo), uint32(r.Hi)
	for lo <= hi {
		size := uint32(1) << 16
		if lo != 0 {
			size = lo & -lo
		}
		for lo+size-1 > hi {
			size >>= 1
		}
		out = append(out, portPrefix{val: uint16(lo), mask: uint16(^(size - 1))})
		lo += size
	}
	return out
}

// be32 returns the uint32 whose in-memory bytes are a (network order on
// this little-endian host's maps).
func be32(a [4]byte) uint32 {
	return uint32(a[0]) | uint32(a[1])<<8 | uint32(a[2])<<16 | uint32(a[3])<<24
}
