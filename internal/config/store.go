// SPDX-License-Identifier: Apache-2.0

package config

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
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
	schema   *Schema
	limits   Limits
	defaults Defaults
	tables   map[Kind]anyTable
	// users lists, for every object something refers to, who does;
	// constrained lists those of them whose reference has a Check on
	// the referent, which a change of the referent must pass again.
	users, constrained map[ref]map[ref]struct{}
	// seq orders objects as their lists do: a create goes last.
	seq uint64
	// cached is Config's answer until the next change.
	cached *Config
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
	// Name (kinds named by name: interfaces) or ID (the others) names
	// what a Delete removes.
	Name string
	ID   uint32
	// Object is what a Create or Update puts: a value of the kind's type
	// (a PDR for KindPDR).
	Object any
}

// ref names an object: its kind and key.
type ref struct {
	kind Kind
	key  Key
}

func (r ref) String() string { return string(r.kind) + " " + r.key.String() }

type row[T any] struct {
	v   T
	seq uint64
}

// anyTable is one kind's objects, whatever their type.
type anyTable interface {
	put(s *Store, obj reflect.Value)
	apply(b *batch, op *Op)
	// finish puts the batch's changes into ch and forgets them.
	finish(ch *Changes)
	check(b *batch, v *validation)
	get(key Key) (any, bool)
	ptr(key Key) (any, bool)
	list() reflect.Value
	reset()
}

// table is one kind's objects by key, and what the batch under way did
// to them.
type table[T any] struct {
	k     *KindOf[T]
	rows  map[Key]*row[T]
	order []Key
	diffs map[Key]*Diff[T]
	// done is the batch's Diffs once its operations are all applied.
	done []Diff[T]
}

func (k *KindOf[T]) newTable() anyTable {
	return &table[T]{k: k, rows: map[Key]*row[T]{}, diffs: map[Key]*Diff[T]{}}
}

// NewStore returns a store holding cfg, which must be valid (Validate).
func NewStore(cfg *Config) *Store { return builtin.NewStore(cfg) }

// NewStore returns a store of s's kinds holding cfg, which must be valid.
func (s *Schema) NewStore(cfg *Config) *Store {
	st := &Store{schema: s, limits: cfg.Limits, defaults: cfg.Defaults, tables: map[Kind]anyTable{},
		users: map[ref]map[ref]struct{}{}, constrained: map[ref]map[ref]struct{}{}}
	for _, k := range s.kinds {
		m := k.meta()
		t := k.newTable()
		st.tables[m.kind] = t
		l := m.list(cfg)
		for i := range l.Len() {
			t.put(st, l.Index(i))
		}
	}
	return st
}

func (t *table[T]) put(s *Store, obj reflect.Value) {
	x := obj.Interface().(T)
	s.seq++
	setRow(s, t, t.k.key(&x), &row[T]{v: x, seq: s.seq})
}

// relink makes self's references in the users index (and constrained,
// for those with a Check) those of now instead of was, changing only the
// targets that differ: an LBR updated to take one of ten members out
// unlinks one FAR, where taking all ten out and putting nine back made
// nine sets anew.
func (s *Store) relink(self ref, was, now []Ref) {
	s.linkOnly(self, was, now, false)
	s.linkOnly(self, now, was, true)
}

// linkOnly links self to (add) or unlinks it from the targets of refs
// that other does not name the same way.
func (s *Store) linkOnly(self ref, refs, other []Ref, add bool) {
	for _, r := range refs {
		if target := (ref{r.Kind, r.Key}); !r.Key.IsZero() {
			if !refersTo(other, target, false) {
				linkIn(s.users, target, self, add)
			}
			if r.Check != nil && !refersTo(other, target, true) {
				linkIn(s.constrained, target, self, add)
			}
		}
	}
}

// refersTo says whether refs refer to target (with a Check, when
// checked).
func refersTo(refs []Ref, target ref, checked bool) bool {
	for _, r := range refs {
		if r.Kind == target.kind && r.Key == target.key && (!checked || r.Check != nil) {
			return true
		}
	}
	return false
}

func linkIn(idx map[ref]map[ref]struct{}, target, user ref, add bool) {
	u := idx[target]
	switch {
	case add && u == nil:
		idx[target] = map[ref]struct{}{user: {}}
	case add:
		u[user] = struct{}{}
	default:
		delete(u, user)
		if len(u) == 0 {
			delete(idx, target)
		}
	}
}

// setRow puts r under key (deleting the object when r is nil), keeps the
// users index current and returns what was there.
func setRow[T any](s *Store, t *table[T], key Key, r *row[T]) *row[T] {
	prev := t.rows[key]
	if t.k.Refs != nil {
		var was, now []Ref
		if prev != nil {
			was = t.k.Refs(&prev.v)
		}
		if r != nil {
			now = t.k.Refs(&r.v)
		}
		s.relink(ref{t.k.Kind, key}, was, now)
	}
	if r == nil {
		delete(t.rows, key)
	} else {
		t.rows[key] = r
	}
	s.cached = nil
	return prev
}

func (t *table[T]) get(key Key) (any, bool) {
	if r, ok := t.rows[key]; ok {
		return r.v, true
	}
	return nil, false
}

// list returns the objects (a []T) in list order.
func (t *table[T]) list() reflect.Value {
	return reflect.ValueOf(rowsInOrder(t.rows))
}

func rowsInOrder[T any](m map[Key]*row[T]) []T {
	rows := make([]*row[T], 0, len(m))
	for _, r := range m {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b *row[T]) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = r.v
	}
	return out
}

// Get returns the object of kind k with key (a value of the kind's type).
func (s *Store) Get(k Kind, key Key) (any, bool) {
	t, ok := s.tables[k]
	if !ok {
		return nil, false
	}
	return t.get(key)
}

// List returns the objects of kind k in list order (values of the kind's
// type).
func (s *Store) List(k Kind) []any {
	t, ok := s.tables[k]
	if !ok {
		return nil
	}
	l := t.list()
	out := make([]any, l.Len())
	for i := range out {
		out[i] = l.Index(i).Interface()
	}
	return out
}

// storeGet and storeList are the typed forms of Get and List.
func storeGet[T any](s *Store, k Kind, key Key) (T, bool) {
	v, ok := s.Get(k, key)
	if !ok {
		var zero T
		return zero, false
	}
	return v.(T), true
}

func storeList[T any](s *Store, k Kind) []T {
	return s.tables[k].list().Interface().([]T)
}

// Interface returns the interface called name.
func (s *Store) Interface(name string) (Interface, bool) {
	return storeGet[Interface](s, KindInterface, NameKey(name))
}

// Path returns the path with the given id.
func (s *Store) Path(id uint32) (Path, bool) { return storeGet[Path](s, KindPath, IDKey(id)) }

// FAR returns the FAR with the given id.
func (s *Store) FAR(id uint32) (FAR, bool) { return storeGet[FAR](s, KindFAR, IDKey(id)) }

// PDR returns the PDR with the given id.
func (s *Store) PDR(id uint32) (PDR, bool) { return storeGet[PDR](s, KindPDR, IDKey(id)) }

// LBR returns the LBR with the given id.
func (s *Store) LBR(id uint32) (LBR, bool) { return storeGet[LBR](s, KindLBR, IDKey(id)) }

// Service returns the service with the given id.
func (s *Store) Service(id uint32) (Service, bool) {
	return storeGet[Service](s, KindService, IDKey(id))
}

// Interfaces returns the interfaces in list order (a few: cheaper than
// Config after a change).
func (s *Store) Interfaces() []Interface { return storeList[Interface](s, KindInterface) }

// Paths returns the paths in list order (a few: cheaper than Config
// after a change).
func (s *Store) Paths() []Path { return storeList[Path](s, KindPath) }

// Services returns the services in list order (at most MaxServices).
func (s *Store) Services() []Service { return storeList[Service](s, KindService) }

// QoSClasses, FlowOpt and Strategies return those kinds in list order
// (a few each): what a loop that polls them reads, where Config after a
// change would sort every PDR.
func (s *Store) QoSClasses() []QoSClass { return storeList[QoSClass](s, KindQoSClass) }

func (s *Store) FlowOpt() []FlowOptModule { return storeList[FlowOptModule](s, KindFlowOpt) }

func (s *Store) Strategies() []Strategy { return storeList[Strategy](s, KindStrategy) }

// Config returns the store as a Config, objects in list order. The
// result is shared until the next change and must not be modified.
func (s *Store) Config() *Config {
	if s.cached == nil {
		c := &Config{Limits: s.limits, Defaults: s.defaults}
		for _, k := range s.schema.kinds {
			m := k.meta()
			if l := s.tables[m.kind].list(); l.Len() > 0 {
				m.setList(c, l)
			}
		}
		s.cached = c
	}
	return s.cached
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

// apply does one create, update or delete, recording how to undo it and
// what it changed.
func (t *table[T]) apply(b *batch, op *Op) {
	s := b.s
	var key Key
	var next *row[T]
	if op.Verb == Delete {
		key = IDKey(op.ID)
		if t.k.meta().byName {
			key = NameKey(op.Name)
		}
	} else {
		var x T
		switch o := op.Object.(type) {
		case T:
			x = o
		case *T:
			x = *o
		default:
			b.fail(CodeInvalid, op.At, "a %s operation carries %T", t.k.Kind, op.Object)
			return
		}
		key = t.k.key(&x)
		next = &row[T]{v: x}
	}
	cur, exists := t.rows[key]
	name := t.k.meta().name(key)
	switch op.Verb {
	case Create:
		if exists {
			b.fail(CodeExists, op.At, "%s exists; use update", name)
			return
		}
		s.seq++
		next.seq = s.seq
	case Update:
		if !exists {
			b.fail(CodeNotFound, op.At, "no %s; use create", name)
			return
		}
		next.seq = cur.seq
	case Delete:
		if !exists {
			b.fail(CodeNotFound, op.At, "no %s", name)
			return
		}
	}
	if next != nil && t.k.Keep != nil {
		var old *T
		if exists {
			old = &cur.v
		}
		t.k.Keep(&next.v, old)
	}
	if next != nil && t.k.Normalize != nil {
		t.k.Normalize(&next.v)
	}
	prev := setRow(s, t, key, next)
	b.undo = append(b.undo, func() { setRow(s, t, key, prev) })
	df, seen := t.diffs[key]
	if !seen {
		df = &Diff[T]{}
		if prev != nil {
			old := prev.v
			df.Old = &old
		}
		t.diffs[key] = df
		t.order = append(t.order, key)
	}
	df.At = op.At
	df.New = nil
	if next != nil {
		df.New = &next.v
	}
}

// diffList returns the batch's Diffs, leaving out objects it created and
// deleted again; asked after the batch's operations, it keeps its answer.
func (t *table[T]) diffList() []Diff[T] {
	if t.done != nil {
		return t.done
	}
	out := make([]Diff[T], 0, len(t.order))
	for _, k := range t.order {
		if df := t.diffs[k]; df.Old != nil || df.New != nil {
			out = append(out, *df)
		}
	}
	t.done = out
	return out
}

func (t *table[T]) finish(ch *Changes) {
	ds := t.diffList()
	if len(ds) == 0 {
		return // the field stays empty: no boxing, no reflection
	}
	if i := t.k.meta().changesIndex; i >= 0 {
		reflect.ValueOf(ch).Elem().Field(i).Set(reflect.ValueOf(ds))
	} else if len(ds) > 0 {
		if ch.Other == nil {
			ch.Other = map[Kind]any{}
		}
		ch.Other[t.k.Kind] = ds
	}
}

func (t *table[T]) reset() {
	clear(t.diffs)
	t.order = t.order[:0]
	t.done = nil
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
	for _, t := range s.tables {
		t.reset()
	}
	for i := range ops {
		op := &ops[i]
		t, ok := s.tables[op.Kind]
		if !ok {
			b.fail(CodeInvalid, op.At, "unknown kind %q", op.Kind)
			continue
		}
		t.apply(b, op)
	}
	ch := &Changes{}
	if len(b.errs) == 0 {
		v := &validation{limits: s.limits}
		for _, k := range s.schema.ranked {
			s.tables[k.meta().kind].check(b, v)
		}
		for _, k := range s.schema.ranked {
			k.countIn(v, s)
		}
		b.errs = append(b.errs, v.errs...)
	}
	for _, k := range s.schema.kinds {
		s.tables[k.meta().kind].finish(ch)
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

// storeWorld is the store's objects.
type storeWorld struct{ s *Store }

func (w storeWorld) find(k Kind, key Key) (any, bool) {
	t, ok := w.s.tables[k]
	if !ok {
		return nil, false
	}
	return t.ptr(key)
}

// ptr returns a pointer to the object with key, as Ref.Check takes it.
func (t *table[T]) ptr(key Key) (any, bool) {
	if r, ok := t.rows[key]; ok {
		return &r.v, true
	}
	return nil, false
}

// check validates what a batch left of the kind: the fields, references
// and unique values of every object it created or updated, what refers
// to an updated object, and that no object it deleted is still used.
func (t *table[T]) check(b *batch, v *validation) {
	s := b.s
	m := t.k.meta()
	ds := t.diffList()
	for _, d := range ds {
		if d.New == nil {
			b.inUse(d.At, ref{m.kind, t.k.key(d.Old)})
			continue
		}
		key := t.k.key(d.New)
		c := t.k.checkOne(v, d.At, d.New, storeWorld{s})
		for _, un := range t.k.Unique {
			val, ok := un.Key(d.New)
			if !ok {
				continue
			}
			// The first other holder in list order, so the message
			// does not depend on map order.
			var other *row[T]
			for k, r := range t.rows {
				if k == key || (other != nil && r.seq > other.seq) {
					continue
				}
				if val2, ok := un.Key(&r.v); ok && val2 == val {
					other = r
				}
			}
			if other != nil {
				c.Add(un.Field, "%s", un.Clash(d.New, m.name(t.k.key(&other.v))))
			}
		}
		if d.Old != nil {
			s.checkUsers(v, d.At, ref{m.kind, key}, d.New)
		}
	}
}

// checkUsers checks again what the users of an updated object, obj,
// require of it (Ref.Check), reporting at the update (at).
func (s *Store) checkUsers(v *validation, at string, self ref, obj any) {
	users := slices.SortedFunc(maps.Keys(s.constrained[self]), s.compareRefs)
	for _, u := range users {
		user, ok := s.Get(u.kind, u.key)
		if !ok {
			continue
		}
		for _, r := range s.schema.def(u.kind).refsOf(user) {
			if r.Kind != self.kind || r.Key != self.key || r.Check == nil {
				continue
			}
			if field, problem := r.Check(obj); problem != "" {
				v.add(CodeInvalid, JoinPath(at, field), "%s %s (%s uses it)", self, problem, u)
			}
		}
	}
}

func (k *KindOf[T]) refsOf(obj any) []Ref {
	if k.Refs == nil {
		return nil
	}
	x := obj.(T)
	return k.Refs(&x)
}

// countIn checks the number of the kind's objects in the store: every
// batch for capacity, and AtLeastOne when the batch changed the kind.
func (k *KindOf[T]) countIn(v *validation, s *Store) {
	t := s.tables[k.Kind].(*table[T])
	if k.Capacity != nil {
		if reason := k.Capacity(len(t.rows), v.limits); reason != "" {
			v.add(CodeCapacity, k.Plural, "%s", reason)
		}
	}
	if k.AtLeastOne && len(t.diffList()) > 0 && len(t.rows) == 0 {
		v.add(CodeInvalid, k.Plural, "at least one %s required", k.Kind)
	}
}

// compareRefs orders refs as the config file lists kinds, then by key.
func (s *Store) compareRefs(a, b ref) int {
	if a.kind != b.kind {
		return s.schema.rank[a.kind] - s.schema.rank[b.kind]
	}
	if a.key.ID != b.key.ID {
		return cmp.Compare(a.key.ID, b.key.ID)
	}
	return cmp.Compare(a.key.Name, b.key.Name)
}

// inUse reports a deleted object something still refers to (naming the
// first such user in a stable order).
func (b *batch) inUse(at string, target ref) {
	users := b.s.users[target]
	if len(users) == 0 {
		return
	}
	first := slices.MinFunc(slices.Collect(maps.Keys(users)), b.s.compareRefs)
	b.fail(CodeInUse, at, "%s is still used by %s", target, first)
}
