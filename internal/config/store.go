// SPDX-License-Identifier: Apache-2.0

package config

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Store is a config indexed by object key, changed by batches of
// operations at a cost that depends on the batch, not on the config: a
// batch validates the objects it touches and the references to and from
// them, against everything else the store holds. It is what the agent
// serves the API from; Config materialises it as a Config again (for the
// file, and for listings).
//
// A Store is not safe for concurrent use.
type Store struct {
	limits   Limits
	defaults Defaults
	ifaces   *table[string, Interface]
	paths    *table[uint32, Path]
	fars     *table[uint32, FAR]
	pdrs     *table[uint32, PDR]
	lbrs     *table[uint32, LBR]
	services *table[uint32, Service]
	// users lists, for every object something refers to, who does.
	users map[ref]map[ref]struct{}
	// seq orders objects as their lists do: a create goes last.
	seq uint64
	// cached is Config's answer until the next change.
	cached *Config
}

// Kind is a kind of config object.
type Kind uint8

// Kinds of objects, in the order a batch's changes are compiled.
const (
	KindInterface Kind = iota
	KindPath
	KindFAR
	KindPDR
	KindLBR
	KindService
)

func (k Kind) String() string {
	switch k {
	case KindInterface:
		return "interface"
	case KindPath:
		return "path"
	case KindFAR:
		return "far"
	case KindLBR:
		return "lbr"
	case KindService:
		return "service"
	}
	return "pdr"
}

// Verb is what an Op does.
type Verb uint8

// Verbs of operations.
const (
	Create Verb = iota
	Update
	Delete
)

// Op is one operation of a batch.
type Op struct {
	// At is the path errors about this operation are reported under,
	// such as "operations[3].create.pdr".
	At   string
	Verb Verb
	Kind Kind
	// Name (interfaces) or ID (the others) names what a Delete removes.
	Name string
	ID   uint32
	// The object a Create or Update puts, in the field of its Kind.
	Interface Interface
	Path      Path
	FAR       FAR
	PDR       PDR
	LBR       LBR
	Service   Service
}

// Diff is what a batch did to one object: Old is nil for an object it
// created, New is nil for one it deleted. At is where errors about the
// object are reported (the last operation on it).
type Diff[T any] struct {
	At       string
	Old, New *T
}

// Changes are the objects a batch changed, per kind, in the order it
// first touched them.
type Changes struct {
	Interfaces []Diff[Interface]
	Paths      []Diff[Path]
	FARs       []Diff[FAR]
	PDRs       []Diff[PDR]
	LBRs       []Diff[LBR]
	Services   []Diff[Service]
}

// Len is the number of objects changed.
func (c *Changes) Len() int {
	return len(c.Interfaces) + len(c.Paths) + len(c.FARs) + len(c.PDRs) + len(c.LBRs) + len(c.Services)
}

// ref names an object: its kind and its name or id.
type ref struct {
	kind Kind
	name string
	id   uint32
}

func (r ref) String() string {
	if r.kind == KindInterface {
		return "interface " + r.name
	}
	return r.kind.String() + " " + strconv.FormatUint(uint64(r.id), 10)
}

type row[T any] struct {
	v   T
	seq uint64
}

// table is one kind's objects by key.
type table[K comparable, T any] struct {
	kind Kind
	rows map[K]*row[T]
	ref  func(K) ref
	// refs lists what an object refers to.
	refs func(*T) []ref
	norm func(*T)
}

// NewStore returns a store holding cfg, which must be valid (Validate).
func NewStore(cfg *Config) *Store {
	s := &Store{limits: cfg.Limits, defaults: cfg.Defaults, users: map[ref]map[ref]struct{}{}}
	s.ifaces = &table[string, Interface]{kind: KindInterface, rows: map[string]*row[Interface]{},
		ref:  func(k string) ref { return ref{kind: KindInterface, name: k} },
		refs: func(*Interface) []ref { return nil },
		norm: (*Interface).normalize}
	s.paths = &table[uint32, Path]{kind: KindPath, rows: map[uint32]*row[Path]{},
		ref: idRef(KindPath),
		refs: func(p *Path) []ref {
			return []ref{{kind: KindInterface, name: p.Interface}}
		},
		norm: (*Path).normalize}
	s.fars = &table[uint32, FAR]{kind: KindFAR, rows: map[uint32]*row[FAR]{},
		ref: idRef(KindFAR),
		refs: func(f *FAR) []ref {
			var out []ref
			if f.Interface != "" {
				out = append(out, ref{kind: KindInterface, name: f.Interface})
			}
			if f.Path != 0 {
				out = append(out, ref{kind: KindPath, id: f.Path})
			}
			return out
		},
		norm: (*FAR).normalize}
	s.pdrs = &table[uint32, PDR]{kind: KindPDR, rows: map[uint32]*row[PDR]{},
		ref: idRef(KindPDR),
		refs: func(p *PDR) []ref {
			out := []ref{{kind: KindFAR, id: p.FAR}}
			if p.Match.In != "" {
				out = append(out, ref{kind: KindInterface, name: p.Match.In})
			}
			if p.Match.InPath != 0 {
				out = append(out, ref{kind: KindPath, id: p.Match.InPath})
			}
			return out
		},
		norm: (*PDR).normalize}
	s.lbrs = &table[uint32, LBR]{kind: KindLBR, rows: map[uint32]*row[LBR]{},
		ref: idRef(KindLBR),
		refs: func(l *LBR) []ref {
			out := make([]ref, len(l.Members))
			for i, m := range l.Members {
				out[i] = ref{kind: KindFAR, id: m.FAR}
			}
			return out
		},
		norm: func(*LBR) {}}
	s.services = &table[uint32, Service]{kind: KindService, rows: map[uint32]*row[Service]{},
		ref:  idRef(KindService),
		refs: func(sv *Service) []ref { return []ref{{kind: KindLBR, id: sv.LBR}} },
		norm: func(*Service) {}}
	for _, v := range cfg.Interfaces {
		s.seq++
		setRow(s, s.ifaces, v.Name, &row[Interface]{v: v, seq: s.seq})
	}
	for _, v := range cfg.Paths {
		s.seq++
		setRow(s, s.paths, v.ID, &row[Path]{v: v, seq: s.seq})
	}
	for _, v := range cfg.FARs {
		s.seq++
		setRow(s, s.fars, v.ID, &row[FAR]{v: v, seq: s.seq})
	}
	for _, v := range cfg.PDRs {
		s.seq++
		setRow(s, s.pdrs, v.ID, &row[PDR]{v: v, seq: s.seq})
	}
	for _, v := range cfg.LBRs {
		s.seq++
		setRow(s, s.lbrs, v.ID, &row[LBR]{v: v, seq: s.seq})
	}
	for _, v := range cfg.Services {
		s.seq++
		setRow(s, s.services, v.ID, &row[Service]{v: v, seq: s.seq})
	}
	return s
}

func idRef(k Kind) func(uint32) ref {
	return func(id uint32) ref { return ref{kind: k, id: id} }
}

// setRow puts r under key (deleting the object when r is nil), keeps the
// users index current and returns what was there.
func setRow[K comparable, T any](s *Store, t *table[K, T], key K, r *row[T]) *row[T] {
	self := t.ref(key)
	prev := t.rows[key]
	if prev != nil {
		for _, target := range t.refs(&prev.v) {
			delete(s.users[target], self)
			if len(s.users[target]) == 0 {
				delete(s.users, target)
			}
		}
	}
	if r == nil {
		delete(t.rows, key)
	} else {
		t.rows[key] = r
		for _, target := range t.refs(&r.v) {
			u := s.users[target]
			if u == nil {
				u = map[ref]struct{}{}
				s.users[target] = u
			}
			u[self] = struct{}{}
		}
	}
	s.cached = nil
	return prev
}

// Interface returns the interface called name.
func (s *Store) Interface(name string) (Interface, bool) { return get(s.ifaces, name) }

// Path returns the path with the given id.
func (s *Store) Path(id uint32) (Path, bool) { return get(s.paths, id) }

// FAR returns the FAR with the given id.
func (s *Store) FAR(id uint32) (FAR, bool) { return get(s.fars, id) }

// PDR returns the PDR with the given id.
func (s *Store) PDR(id uint32) (PDR, bool) { return get(s.pdrs, id) }

// LBR returns the LBR with the given id.
func (s *Store) LBR(id uint32) (LBR, bool) { return get(s.lbrs, id) }

// Service returns the service with the given id.
func (s *Store) Service(id uint32) (Service, bool) { return get(s.services, id) }

func get[K comparable, T any](t *table[K, T], key K) (T, bool) {
	if r, ok := t.rows[key]; ok {
		return r.v, true
	}
	var zero T
	return zero, false
}

// Interfaces returns the interfaces in list order (a few: cheaper than
// Config after a change).
func (s *Store) Interfaces() []Interface { return list(s.ifaces) }

// Services returns the services in list order (at most MaxServices).
func (s *Store) Services() []Service { return list(s.services) }

// Config returns the store as a Config, objects in list order. The
// result is shared until the next change and must not be modified.
func (s *Store) Config() *Config {
	if s.cached == nil {
		s.cached = &Config{Interfaces: list(s.ifaces), Paths: list(s.paths), FARs: list(s.fars), PDRs: list(s.pdrs),
			LBRs: list(s.lbrs), Services: list(s.services), Limits: s.limits, Defaults: s.defaults}
	}
	return s.cached
}

func list[K comparable, T any](t *table[K, T]) []T {
	rows := make([]*row[T], 0, len(t.rows))
	for _, r := range t.rows {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b *row[T]) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = r.v
	}
	return out
}

// diffs collects one kind's Diffs of a batch, by key.
type diffs[K comparable, T any] struct {
	order []K
	m     map[K]*Diff[T]
}

// batch is the state of one Apply.
type batch struct {
	s    *Store
	undo []func()
	errs Errors
}

func (b *batch) fail(code ErrorCode, path, format string, a ...any) {
	b.errs = append(b.errs, FieldError{Path: path, Reason: fmt.Sprintf(format, a...), Code: code})
}

// applyOp does one create, update or delete on t, recording how to undo
// it and what it changed.
func applyOp[K comparable, T any](b *batch, t *table[K, T], d *diffs[K, T], op *Op, key K, obj *T) {
	s := b.s
	cur, exists := t.rows[key]
	name := t.ref(key).String()
	var next *row[T]
	switch op.Verb {
	case Create:
		if exists {
			b.fail(CodeExists, op.At, "%s exists; use update", name)
			return
		}
		s.seq++
		next = &row[T]{v: *obj, seq: s.seq}
	case Update:
		if !exists {
			b.fail(CodeNotFound, op.At, "no %s; use create", name)
			return
		}
		next = &row[T]{v: *obj, seq: cur.seq}
	case Delete:
		if !exists {
			b.fail(CodeNotFound, op.At, "no %s", name)
			return
		}
	}
	if next != nil {
		t.norm(&next.v)
	}
	prev := setRow(s, t, key, next)
	b.undo = append(b.undo, func() { setRow(s, t, key, prev) })
	df, seen := d.m[key]
	if !seen {
		df = &Diff[T]{}
		if prev != nil {
			old := prev.v
			df.Old = &old
		}
		d.m[key] = df
		d.order = append(d.order, key)
	}
	df.At = op.At
	df.New = nil
	if next != nil {
		df.New = &next.v
	}
}

// finish returns one kind's Diffs, leaving out objects a batch created
// and deleted again.
func finish[K comparable, T any](d *diffs[K, T]) []Diff[T] {
	out := make([]Diff[T], 0, len(d.order))
	for _, k := range d.order {
		if df := d.m[k]; df.Old != nil || df.New != nil {
			out = append(out, *df)
		}
	}
	return out
}

func newDiffs[K comparable, T any]() *diffs[K, T] {
	return &diffs[K, T]{m: map[K]*Diff[T]{}}
}

// keyOf returns the key an operation names: del for a delete, the
// object's own (obj) otherwise.
func keyOf[K comparable](op *Op, del, obj K) K {
	if op.Verb == Delete {
		return del
	}
	return obj
}

// Apply applies ops in order, all or nothing. It checks each object the
// batch leaves created or updated (its fields and what it refers to) and
// that nothing still refers to an object it deleted, against the whole
// store after the batch. On success it returns what changed and a
// function that undoes the batch (for a commit that fails later); on
// failure the store is unchanged and the error is an Errors value naming
// every problem at its operation's path.
func (s *Store) Apply(ops []Op) (*Changes, func(), error) {
	b := &batch{s: s}
	di, dp, df, dr := newDiffs[string, Interface](), newDiffs[uint32, Path](), newDiffs[uint32, FAR](), newDiffs[uint32, PDR]()
	dl, ds := newDiffs[uint32, LBR](), newDiffs[uint32, Service]()
	for i := range ops {
		op := &ops[i]
		switch op.Kind {
		case KindInterface:
			applyOp(b, s.ifaces, di, op, keyOf(op, op.Name, op.Interface.Name), &op.Interface)
		case KindPath:
			applyOp(b, s.paths, dp, op, keyOf(op, op.ID, op.Path.ID), &op.Path)
		case KindFAR:
			applyOp(b, s.fars, df, op, keyOf(op, op.ID, op.FAR.ID), &op.FAR)
		case KindPDR:
			applyOp(b, s.pdrs, dr, op, keyOf(op, op.ID, op.PDR.ID), &op.PDR)
		case KindLBR:
			applyOp(b, s.lbrs, dl, op, keyOf(op, op.ID, op.LBR.ID), &op.LBR)
		case KindService:
			applyOp(b, s.services, ds, op, keyOf(op, op.ID, op.Service.ID), &op.Service)
		default:
			b.fail(CodeInvalid, op.At, "unknown kind %d", op.Kind)
		}
	}
	ch := &Changes{Interfaces: finish(di), Paths: finish(dp), FARs: finish(df), PDRs: finish(dr), LBRs: finish(dl), Services: finish(ds)}
	if len(b.errs) == 0 {
		b.check(ch)
	}
	undo := func() {
		for i := len(b.undo) - 1; i >= 0; i-- {
			b.undo[i]()
		}
	}
	if len(b.errs) > 0 {
		undo()
		return nil, nil, b.errs
	}
	return ch, undo, nil
}

// check validates what a batch left behind: the fields and references of
// every object it created or updated, and that no object it deleted is
// still used.
func (b *batch) check(ch *Changes) {
	s := b.s
	var v validator
	iface := func(name string) bool { _, ok := s.ifaces.rows[name]; return ok }
	path := func(id uint32) bool { _, ok := s.paths.rows[id]; return ok }
	far := func(id uint32) bool { _, ok := s.fars.rows[id]; return ok }
	for _, d := range ch.Interfaces {
		if d.New != nil {
			v.iface(d.At, *d.New)
		} else {
			b.inUse(d.At, ref{kind: KindInterface, name: d.Old.Name})
		}
	}
	for _, d := range ch.Paths {
		if d.New == nil {
			b.inUse(d.At, ref{kind: KindPath, id: d.Old.ID})
			continue
		}
		v.path(d.At, *d.New, iface)
		// Paths are few (bpf.MaxPaths): compare with each.
		if k, ok := d.New.DecapID(); ok {
			for id, r := range s.paths.rows {
				if k2, ok := r.v.DecapID(); ok && id != d.New.ID && k2 == k {
					v.decapClash(d.At, *d.New, fmt.Sprintf("path %d", id))
					break
				}
			}
		}
	}
	for _, d := range ch.FARs {
		if d.New != nil {
			v.far(d.At, *d.New, iface, path)
		} else {
			b.inUse(d.At, ref{kind: KindFAR, id: d.Old.ID})
		}
	}
	for _, d := range ch.PDRs {
		if d.New != nil {
			v.pdr(d.At, *d.New, iface, path, far)
		}
	}
	farAction := func(id uint32) (string, bool) {
		if r, ok := s.fars.rows[id]; ok {
			return r.v.Action, true
		}
		return "", false
	}
	// A FAR changed to an action no LBR takes may no longer suit the
	// LBRs it is a member of (its users: PDRs too, so only then).
	for _, d := range ch.FARs {
		if d.New == nil || d.Old == nil || d.New.Action == d.Old.Action ||
			d.New.Action == ActionNAT || d.New.Action == ActionEncap {
			continue
		}
		for u := range s.users[ref{kind: KindFAR, id: d.New.ID}] {
			if u.kind == KindLBR {
				v.add(d.At+".action", "far %d is a member of lbr %d, which needs nat or encap", d.New.ID, u.id)
			}
		}
	}
	for _, d := range ch.LBRs {
		if d.New != nil {
			v.lbr(d.At, *d.New, farAction, s.limits.MaglevTable)
		} else {
			b.inUse(d.At, ref{kind: KindLBR, id: d.Old.ID})
		}
	}
	lbr := func(id uint32) bool { _, ok := s.lbrs.rows[id]; return ok }
	for _, d := range ch.Services {
		if d.New == nil {
			continue
		}
		sv := *d.New
		v.service(d.At, sv, lbr)
		// Services are few (MaxServices): compare with each.
		for id, r := range s.services.rows {
			switch {
			case id == sv.ID:
			case sv.VIP.IsSet() && r.v.key() == sv.key():
				v.add(d.At+".vip", "%s is already service %d", sv.key(), id)
			case sv.LBR != 0 && r.v.LBR == sv.LBR:
				v.add(d.At+".lbr", "lbr %d is already used by service %d", sv.LBR, id)
			}
		}
	}
	v.counts(len(s.pdrs.rows), len(s.services.rows), s.limits.Rules)
	if len(ch.Interfaces) > 0 {
		v.someInterface(len(s.ifaces.rows))
	}
	b.errs = append(b.errs, v.errs...)
}

// inUse reports a deleted object something still refers to (naming the
// first such user in a stable order).
func (b *batch) inUse(at string, target ref) {
	users := b.s.users[target]
	if len(users) == 0 {
		return
	}
	list := make([]ref, 0, len(users))
	for u := range users {
		list = append(list, u)
	}
	first := slices.MinFunc(list, func(a, b ref) int {
		if a.kind != b.kind {
			return int(a.kind) - int(b.kind)
		}
		if a.id != b.id {
			return cmp.Compare(a.id, b.id)
		}
		return cmp.Compare(a.name, b.name)
	})
	b.fail(CodeInUse, at, "%s is still used by %s", target, first)
}
