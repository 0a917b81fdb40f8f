// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Kind names a kind of configuration object, singular, as the API and the
// CLI do: "pdr".
type Kind string

// The kinds of the gateway's config, declared in one file each
// (interface.go, path.go, far.go, lbr.go, service.go, qos.go,
// flowopt.go, strategy.go, pdr.go) and registered in kinds.go.
const (
	KindInterface Kind = "interface"
	KindPath      Kind = "path"
	KindFAR       Kind = "far"
	KindPDR       Kind = "pdr"
	KindLBR       Kind = "lbr"
	KindService   Kind = "service"
	KindQoSClass  Kind = "qos_class"
	KindFlowOpt   Kind = "flowopt"
	KindStrategy  Kind = "strategy"
)

func (k Kind) String() string { return string(k) }

// Key names one object of a kind: by name (interfaces) or by id.
type Key struct {
	Name string
	ID   uint32
}

// IDKey returns the key of the object with id.
func IDKey(id uint32) Key { return Key{ID: id} }

// NameKey returns the key of the object called name.
func NameKey(name string) Key { return Key{Name: name} }

// IsZero reports a key that names nothing (id 0 or name "").
func (k Key) IsZero() bool { return k == Key{} }

// String returns the name, or the id in decimal.
func (k Key) String() string {
	if k.ID == 0 {
		return k.Name
	}
	return strconv.FormatUint(uint64(k.ID), 10)
}

// Ref is a reference from an object to another one.
type Ref struct {
	// Field is where the object holds it, below the object's own path:
	// "far", "match.in", "members[2].far".
	Field string
	Kind  Kind
	// Key names the referent; a zero key refers to nothing (an optional
	// reference left unset).
	Key Key
	// Check, when set, says what else the referent (a *T of Kind) must
	// be: the referent's field at fault and the problem ("has action
	// drop; members need nat or encap"), or "". It is checked when the
	// referring object changes and when the referent does.
	Check func(target any) (field, problem string)
}

// Unique is a value no two objects of a kind may share (besides their
// key).
type Unique[T any] struct {
	// Field is where the clash is reported.
	Field string
	// Key returns the value, or false when x has none to clash on.
	Key func(x *T) (any, bool)
	// Clash says what x clashes with, other naming the object that has
	// the value already: "paths[0]" in a file, "path 2" in the store.
	Clash func(x *T, other string) string
}

// KindOf declares a kind of object whose values are T: a struct whose
// exported fields, by their yaml tags, are the kind's fields in the config
// file and, by the same names, in the API. Everything else about the kind
// is said here once, and the decoder, the encoder, validation, the store,
// the API and the CLI are driven by it.
type KindOf[T any] struct {
	Kind Kind
	// Plural is the kind's list in the config file ("pdrs") and the
	// CLI's plural.
	Plural string
	// KeyField is the yaml name of the field that names an object:
	// "id" (a uint32, non-zero) or "name" (a string).
	KeyField string
	// Normalize fills defaults in place (optional); it is idempotent.
	Normalize func(x *T)
	// Keep fills in, from old (the object x replaces; nil for a new
	// one), what an update may give back as it was shown rather than
	// as it is (a secret in its redacted form). Optional; before
	// Normalize and Check.
	Keep func(x, old *T)
	// Check reports what is wrong with one object's own fields.
	// References (Refs) and uniqueness (Unique) are checked after it.
	Check func(c *Check, x *T)
	// Refs lists what x refers to. A referent that does not exist is
	// reported at the reference's field ("no far with id 7", "unknown
	// interface \"lan9\""), unless Check reported a problem there
	// already, and an object something refers to cannot be deleted.
	Refs func(x *T) []Ref
	// Unique lists values no two objects may share.
	Unique []Unique[T]
	// Capacity says why n objects do not fit the dataplane as sized by
	// l, or "".
	Capacity func(n int, l Limits) string
	// AtLeastOne requires an object of the kind in every config.
	AtLeastOne bool

	once sync.Once
	m    kindMeta
}

// kindMeta is what the schema derives from a declaration and T.
type kindMeta struct {
	kind     Kind
	plural   string
	keyField string
	keyIndex int
	byName   bool
	typ      reflect.Type
	// configIndex is the Config field of type []T, or -1: then the
	// objects are in Config.Objects[plural].
	configIndex int
	// changesIndex is the Changes field of type []Diff[T], or -1: then
	// the diffs are in Changes.Other[kind].
	changesIndex int
}

// kindDef is a declaration without its type parameter, as the schema
// and the store hold them.
type kindDef interface {
	meta() *kindMeta
	keyOf(obj any) Key
	normalizeAll(list reflect.Value)
	validateAll(v *validation, list reflect.Value, w world)
	newTable() anyTable
	refsOf(obj any) []Ref
	countIn(v *validation, s *Store)
}

func (k *KindOf[T]) meta() *kindMeta {
	k.once.Do(func() {
		t := reflect.TypeFor[T]()
		m := kindMeta{kind: k.Kind, plural: k.Plural, keyField: k.KeyField, typ: t, keyIndex: -1,
			configIndex:  fieldOfType(reflect.TypeFor[Config](), reflect.TypeFor[[]T]()),
			changesIndex: fieldOfType(reflect.TypeFor[Changes](), reflect.TypeFor[[]Diff[T]]())}
		for _, fi := range FieldsOf(t) {
			if fi.Name == k.KeyField {
				m.keyIndex = fi.Index
			}
		}
		if m.keyIndex < 0 {
			panic(fmt.Sprintf("config: kind %s: no field %q in %s", k.Kind, k.KeyField, t)) // a build defect
		}
		switch t.Field(m.keyIndex).Type.Kind() {
		case reflect.String:
			m.byName = true
		case reflect.Uint32:
		default:
			panic(fmt.Sprintf("config: kind %s: key %q is neither a string nor a uint32", k.Kind, k.KeyField)) // a build defect
		}
		k.m = m
	})
	return &k.m
}

// fieldOfType returns the index of the field of s of type t, or -1.
func fieldOfType(s, t reflect.Type) int {
	for i := range s.NumField() {
		if s.Field(i).Type == t {
			return i
		}
	}
	return -1
}

// key returns x's key.
func (k *KindOf[T]) key(x *T) Key {
	m := k.meta()
	f := reflect.ValueOf(x).Elem().Field(m.keyIndex)
	if m.byName {
		return Key{Name: f.String()}
	}
	return Key{ID: uint32(f.Uint())}
}

func (k *KindOf[T]) keyOf(obj any) Key {
	switch x := obj.(type) {
	case T:
		return k.key(&x)
	case *T:
		return k.key(x)
	}
	panic(fmt.Sprintf("config: %T is not a %s", obj, k.Kind))
}

func (k *KindOf[T]) normalizeAll(list reflect.Value) {
	if k.Normalize == nil {
		return
	}
	for i := range list.Len() {
		k.Normalize(list.Index(i).Addr().Interface().(*T))
	}
}

// name is how messages name the object with key: "pdr 10", "interface
// lan0".
func (m *kindMeta) name(key Key) string {
	return string(m.kind) + " " + key.String()
}

// keyText shows a key in a message: a name quoted, an id as it is.
func (m *kindMeta) keyText(key Key) string {
	if m.byName {
		return strconv.Quote(key.Name)
	}
	return key.String()
}

// missing says that key names no object of this kind.
func (m *kindMeta) missing(key Key) string {
	if m.byName {
		return fmt.Sprintf("unknown %s %q", m.kind, key.Name)
	}
	return fmt.Sprintf("no %s with id %d", m.kind, key.ID)
}

// list returns c's objects of the kind (a []T), which the caller must not
// modify.
func (m *kindMeta) list(c *Config) reflect.Value {
	if m.configIndex >= 0 {
		return reflect.ValueOf(c).Elem().Field(m.configIndex)
	}
	if l, ok := c.Objects[m.plural]; ok {
		return reflect.ValueOf(l)
	}
	return reflect.Zero(reflect.SliceOf(m.typ))
}

// setList stores list (a []T) as c's objects of the kind.
func (m *kindMeta) setList(c *Config, list reflect.Value) {
	if m.configIndex >= 0 {
		reflect.ValueOf(c).Elem().Field(m.configIndex).Set(list)
		return
	}
	if list.Len() == 0 {
		delete(c.Objects, m.plural)
		if len(c.Objects) == 0 {
			c.Objects = nil
		}
		return
	}
	if c.Objects == nil {
		c.Objects = map[string]any{}
	}
	c.Objects[m.plural] = list.Interface()
}

// Schema is a set of kinds: what a config holds.
type Schema struct {
	// kinds are in the order batches are applied and listed: what is
	// referred to before what refers to it.
	kinds  []kindDef
	byKind map[Kind]kindDef
	// ranked are the kinds as the config file lists them (Config's
	// fields, then the kinds without one), and rank their places: the
	// order a store batch is checked in and its objects' users are named
	// in, as a file's problems are listed.
	ranked []kindDef
	rank   map[Kind]int
}

// NewSchema returns the schema of kinds, given in the order what is
// referred to comes before what refers to it.
func NewSchema(kinds ...kindDef) *Schema {
	s := &Schema{byKind: map[Kind]kindDef{}, rank: map[Kind]int{}}
	for _, k := range kinds {
		m := k.meta()
		if _, dup := s.byKind[m.kind]; dup {
			panic("config: kind " + string(m.kind) + " declared twice") // a build defect
		}
		s.kinds = append(s.kinds, k)
		s.byKind[m.kind] = k
	}
	ranked := slices.Clone(s.kinds)
	slices.SortStableFunc(ranked, func(a, b kindDef) int {
		ra, rb := a.meta().configIndex, b.meta().configIndex
		switch {
		case ra < 0 && rb < 0:
			return 0
		case ra < 0:
			return 1
		case rb < 0:
			return -1
		}
		return ra - rb
	})
	for i, k := range ranked {
		s.rank[k.meta().kind] = i
	}
	s.ranked = ranked
	return s
}

// With returns a schema of s's kinds and more.
func (s *Schema) With(kinds ...kindDef) *Schema {
	return NewSchema(append(slices.Clone(s.kinds), kinds...)...)
}

// Builtin returns the schema of the gateway's kinds.
func Builtin() *Schema { return builtin }

// Kinds returns the kinds in the order what is referred to comes before
// what refers to it: the order to apply and to list them in.
func (s *Schema) Kinds() []Kind {
	out := make([]Kind, len(s.kinds))
	for i, k := range s.kinds {
		out[i] = k.meta().kind
	}
	return out
}

// Lookup finds a kind by its singular or plural name, in any case.
func (s *Schema) Lookup(name string) (Kind, bool) {
	l := strings.ToLower(name)
	for _, k := range s.kinds {
		if m := k.meta(); l == string(m.kind) || l == m.plural {
			return m.kind, true
		}
	}
	return "", false
}

// Has reports whether s declares kind k.
func (s *Schema) Has(k Kind) bool {
	_, ok := s.byKind[k]
	return ok
}

func (s *Schema) def(k Kind) kindDef {
	d, ok := s.byKind[k]
	if !ok {
		panic("config: no kind " + string(k)) // callers take kinds from the schema
	}
	return d
}

// Plural returns k's plural: its list in the config file.
func (s *Schema) Plural(k Kind) string { return s.def(k).meta().plural }

// ByName reports whether k's objects are named by a name, not an id.
func (s *Schema) ByName(k Kind) bool { return s.def(k).meta().byName }

// KeyField returns the yaml name of the field that names k's objects.
func (s *Schema) KeyField(k Kind) string { return s.def(k).meta().keyField }

// Type returns the type of k's objects.
func (s *Schema) Type(k Kind) reflect.Type { return s.def(k).meta().typ }

// KeyOf returns the key of obj, a T or *T of kind k.
func (s *Schema) KeyOf(k Kind, obj any) Key { return s.def(k).keyOf(obj) }

// Objects returns c's objects of kind k (each a T), in list order.
func (s *Schema) Objects(c *Config, k Kind) []any {
	l := s.def(k).meta().list(c)
	out := make([]any, l.Len())
	for i := range out {
		out[i] = l.Index(i).Interface()
	}
	return out
}

// SetObjects replaces c's objects of kind k with objs (each a T).
func (s *Schema) SetObjects(c *Config, k Kind, objs []any) {
	m := s.def(k).meta()
	l := reflect.MakeSlice(reflect.SliceOf(m.typ), len(objs), len(objs))
	for i, o := range objs {
		l.Index(i).Set(reflect.ValueOf(o))
	}
	if len(objs) == 0 && m.configIndex >= 0 {
		l = reflect.Zero(l.Type()) // nil, as a config without the list decodes
	}
	m.setList(c, l)
}
