// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/edgeplane/edgeplane/internal/maglev"
)

// Validation runs in two places with the same checks: over a whole config
// (yamlcfg.Parse, Validate), where another object is named by its place in the
// file ("paths[0]"), and over what a Store batch changes, where it is
// named by kind and key ("path 2"). A kind's Check, Refs and Unique are
// written once for both.

// Validate checks the configuration as Normalize would leave it (c itself
// is not modified) and returns an Errors value listing every problem, or
// nil. Problems are listed kind by kind, then limits and defaults.
func (c *Config) Validate() error { return builtin.Validate(c) }

// Validate is the package's Validate for a config of s's kinds.
func (s *Schema) Validate(c *Config) error {
	if errs := s.validate(c); len(errs) > 0 {
		return errs
	}
	return nil
}

func (s *Schema) validate(c *Config) Errors {
	n := s.normalizedCopy(c)
	v := &validation{limits: n.Limits}
	w := &fileWorld{lists: map[Kind]reflect.Value{}, index: map[Kind]map[Key]int{}, s: s}
	// Every kind is indexed first, so a reference may point to a kind
	// checked later.
	for _, k := range s.kinds {
		m := k.meta()
		l := m.list(n)
		idx := make(map[Key]int, l.Len())
		for i := range l.Len() {
			key := k.keyOf(l.Index(i).Addr().Interface())
			if _, dup := idx[key]; !dup && !key.IsZero() {
				idx[key] = i
			}
		}
		w.lists[m.kind], w.index[m.kind] = l, idx
	}
	for _, k := range s.kinds {
		k.validateAll(v, w.lists[k.meta().kind], w)
	}
	v.limitsAndDefaults(n.Limits, n.Defaults)
	return v.errs
}

// normalizedCopy returns a normalized copy of c that shares nothing
// Normalize writes to with c.
func (s *Schema) normalizedCopy(c *Config) *Config {
	n := *c
	n.Objects = nil
	for _, k := range s.kinds {
		m := k.meta()
		l := m.list(c)
		cp := reflect.MakeSlice(l.Type(), l.Len(), l.Len())
		reflect.Copy(cp, l)
		if l.IsNil() {
			cp = l
		}
		m.setList(&n, cp)
	}
	s.Normalize(&n)
	return &n
}

// validation collects the problems found.
type validation struct {
	errs   Errors
	limits Limits
}

func (v *validation) add(code ErrorCode, path, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Path: path, Reason: fmt.Sprintf(format, args...), Code: code})
}

// Check is what a kind's Check reports one object's problems to.
type Check struct {
	v  *validation
	at string
	// bad holds the fields with a problem, which a reference is not
	// checked at again.
	bad map[string]bool
}

// Add reports a problem with field ("" for the object as a whole;
// "match.dst" below it).
func (c *Check) Add(field, format string, args ...any) {
	c.AddCode(CodeInvalid, field, format, args...)
}

// AddCode reports a problem of the given code (CodeCapacity: the object is
// fine but too big for the maps as sized).
func (c *Check) AddCode(code ErrorCode, field, format string, args ...any) {
	if c.bad == nil {
		c.bad = map[string]bool{}
	}
	c.bad[field] = true
	c.v.add(code, JoinPath(c.at, field), format, args...)
}

// Limits returns the limits the config is checked against.
func (c *Check) Limits() Limits { return c.v.limits }

// world is what checking one object needs of the others: the object a
// reference names and how to name it.
type world interface {
	find(k Kind, key Key) (obj any, ok bool)
}

// fileWorld is a whole config's objects, each named by its place.
type fileWorld struct {
	s     *Schema
	lists map[Kind]reflect.Value
	index map[Kind]map[Key]int
}

func (w *fileWorld) find(k Kind, key Key) (any, bool) {
	i, ok := w.index[k][key]
	if !ok {
		return nil, false
	}
	return w.lists[k].Index(i).Addr().Interface(), true
}

// checkOne checks x (at path at): its fields, then its references.
func (k *KindOf[T]) checkOne(v *validation, at string, x *T, w world) *Check {
	c := &Check{v: v, at: at}
	if k.Check != nil {
		k.Check(c, x)
	}
	if k.Refs == nil {
		return c
	}
	for _, r := range k.Refs(x) {
		if r.Key.IsZero() || c.bad[r.Field] {
			continue
		}
		target, ok := w.find(r.Kind, r.Key)
		if !ok {
			c.Add(r.Field, "%s", refMeta(r).missing(r.Key))
			continue
		}
		if r.Check != nil {
			if _, problem := r.Check(target); problem != "" {
				c.Add(r.Field, "%s %s", refMeta(r).name(r.Key), problem)
			}
		}
	}
	return c
}

// refMeta names the referent of r in messages; only its kind and whether
// it is named by a name matter, and a name key says which.
func refMeta(r Ref) *kindMeta {
	return &kindMeta{kind: r.Kind, byName: r.Key.ID == 0}
}

// validateAll checks a whole config's objects of the kind (list is a
// []T): each one, their keys and unique values (the first holder wins),
// their number.
func (k *KindOf[T]) validateAll(v *validation, list reflect.Value, w world) {
	m := k.meta()
	objs := list.Interface().([]T)
	firstKey := map[Key]int{}
	// A unique value's holders are indexed once one has it: a kind may
	// declare many (a strategy's every CPU) that few objects use.
	first := make([]map[any]int, len(k.Unique))
	at := func(i int) string { return m.plural + "[" + strconv.Itoa(i) + "]" }
	for i := range objs {
		x := &objs[i]
		c := k.checkOne(v, at(i), x, w)
		if key := k.key(x); !key.IsZero() && !c.bad[m.keyField] {
			if j, dup := firstKey[key]; dup {
				c.Add(m.keyField, "duplicate %s %s (first at %s)", m.keyField, m.keyText(key), at(j))
			} else {
				firstKey[key] = i
			}
		}
		for u, un := range k.Unique {
			val, ok := un.Key(x)
			if !ok {
				continue
			}
			switch j, dup := first[u][val]; {
			case dup:
				c.Add(un.Field, "%s", un.Clash(x, at(j)))
			case first[u] == nil:
				first[u] = map[any]int{val: i}
			default:
				first[u][val] = i
			}
		}
	}
	k.count(v, len(objs))
}

// count checks the number of objects of the kind.
func (k *KindOf[T]) count(v *validation, n int) {
	m := k.meta()
	if k.AtLeastOne && n == 0 {
		v.add(CodeInvalid, m.plural, "at least one %s required", m.kind)
	}
	if k.Capacity != nil {
		if reason := k.Capacity(n, v.limits); reason != "" {
			v.add(CodeCapacity, m.plural, "%s", reason)
		}
	}
}

func (v *validation) limitsAndDefaults(l Limits, d Defaults) {
	bound := func(path string, val, lo, hi uint32) {
		switch {
		case val < lo:
			v.add(CodeInvalid, path, "%d below minimum %d", val, lo)
		case val > hi:
			v.add(CodeInvalid, path, "%d above maximum %d", val, hi)
		}
	}
	bound("limits.flows", l.Flows, MinFlows, MaxFlows)
	bound("limits.rules", l.Rules, MinRules, MaxRules)
	if l.Connections != l.Flows { // the default follows flows, checked above
		bound("limits.connections", l.Connections, MinFlows, MaxFlows)
	}
	bound("limits.maglev_table", l.MaglevTable, MinMaglevTable, MaxMaglevTable)
	bound("limits.sessions", l.Sessions, MinSessions, MaxSessions)
	if l.MaglevTable >= MinMaglevTable && l.MaglevTable <= MaxMaglevTable && !maglev.IsPrime(l.MaglevTable) {
		v.add(CodeInvalid, "limits.maglev_table", "%d is not prime (Maglev's permutations need a prime table size; 65537 is)", l.MaglevTable)
	}
	for _, x := range []struct{ path, val string }{
		{"defaults.no_match", d.NoMatch},
		{"defaults.malformed", d.Malformed},
	} {
		switch x.val {
		case ActionPass, ActionDrop:
		default:
			v.add(CodeInvalid, x.path, "unknown action %q (want pass or drop)", x.val)
		}
	}
}
