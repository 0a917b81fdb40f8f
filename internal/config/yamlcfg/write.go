// SPDX-License-Identifier: Apache-2.0

package yamlcfg

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/config"
	"gopkg.in/yaml.v3"
)

// fileHeader starts a config file the agent wrote.
const fileHeader = `# Written by the edgeplane agent after API changes: with the changes in
# FILE.journal newer than the sequence number below, what the gateway
# serves and a restarted agent serves again. Edit it and send SIGHUP to
# apply an edit (comments are not kept across API changes).
`

// WriteFile writes c to path with atomicfile.Replace, keeping the
// file's mode.
func WriteFile(path string, c *config.Config, durable bool, header string) error {
	// That this reads back as the same config is TestWriteFileRoundTrip's
	// to show, not every commit's to pay for.
	data := AppendCompact([]byte(fileHeader+header), c)
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	if holdsSecret(c) {
		// The file holds path secrets: its owner's alone.
		mode &^= 0o077
	}
	return atomicfile.Replace(path, data, mode, durable)
}

// holdsSecret reports whether c holds a secret's key.
func holdsSecret(c *config.Config) bool {
	for _, p := range c.Paths {
		if _, ok := p.Monitor.Secret.Key(); ok {
			return true
		}
	}
	return false
}

// AppendCompact appends c as YAML with one flow mapping per object, the
// shape of the examples in docs/configuration.md:
//
//	pdrs:
//	  - {id: 10, precedence: 10, match: {in: lan0, dst: "10.2.0.0/16"}, far: 2}
//
// It writes in a few microseconds per object what yaml.Marshal of the same
// config takes ~80 us per object for, and a commit rewrites the file.
// Fields are written as their yaml tags say (in order, omitempty ones
// only when set), so it needs nothing from a kind but its type. Strings
// are written as YAML double-quoted scalars unless they are plain tokens
// (interface names, actions, protocol names, port ranges).
func AppendCompact(b []byte, c *config.Config) []byte {
	return builtin.AppendCompact(b, c)
}

// AppendCompact is the package's AppendCompact for a config of f's kinds.
func (f Format) AppendCompact(b []byte, c *config.Config) []byte {
	w := compact{b: b}
	v := reflect.ValueOf(c).Elem()
	for _, fi := range config.FieldsOf(v.Type()) {
		w.section(fi.Name, v.Field(fi.Index))
	}
	for _, k := range f.extraKinds() {
		if list, ok := c.Objects[f.s.Plural(k)]; ok {
			w.section(f.s.Plural(k), reflect.ValueOf(list))
		}
	}
	return w.b
}

// section writes one top-level field: a list as one line per item
// (nothing when empty), anything else on one line.
func (w *compact) section(name string, v reflect.Value) {
	if v.Kind() == reflect.Slice {
		if v.Len() == 0 {
			return
		}
		w.raw(name + ":\n")
		for i := range v.Len() {
			w.raw("  - ")
			w.value(v.Index(i))
			w.raw("\n")
		}
		return
	}
	w.raw(name + ": ")
	w.value(v)
	w.raw("\n")
}

var marshalerType = reflect.TypeFor[yaml.Marshaler]()

// value writes v in flow style.
func (w *compact) value(v reflect.Value) {
	if v.Type().Implements(marshalerType) {
		if out := marshal(v); out != nil {
			w.value(reflect.ValueOf(out))
		} else {
			w.raw("null")
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		w.value(v.Elem())
	case reflect.String:
		w.str(v.String())
	case reflect.Bool:
		w.b = strconv.AppendBool(w.b, v.Bool())
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		w.b = strconv.AppendUint(w.b, v.Uint(), 10)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		w.b = strconv.AppendInt(w.b, v.Int(), 10)
	case reflect.Slice:
		w.raw("[")
		for i := range v.Len() {
			if i > 0 {
				w.raw(", ")
			}
			w.value(v.Index(i))
		}
		w.raw("]")
	case reflect.Map:
		// Keys sorted: the same map is written the same way each time.
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		w.raw("{")
		for i, k := range keys {
			if i > 0 {
				w.raw(", ")
			}
			w.str(k.String())
			w.raw(": ")
			w.value(v.MapIndex(k))
		}
		w.raw("}")
	case reflect.Struct:
		w.raw("{")
		first := true
		for _, fi := range config.FieldsOf(v.Type()) {
			f := v.Field(fi.Index)
			if omitted(f, fi) {
				continue
			}
			if !first {
				w.raw(", ")
			}
			first = false
			w.raw(fi.Name + ": ")
			w.value(f)
		}
		w.raw("}")
	default:
		panic("config: cannot encode " + v.Type().String()) // a build defect
	}
}

// omitted reports whether field f (of fi) is left out: omitempty and
// zero, a nil pointer, an empty string (no field's value is "" when
// set), or a value type that is not set.
func omitted(f reflect.Value, fi config.Field) bool {
	switch {
	case f.Kind() == reflect.Pointer:
		return f.IsNil()
	case f.Kind() == reflect.String:
		return f.Len() == 0
	case f.Type().Implements(marshalerType):
		return marshal(f) == nil
	}
	return fi.OmitEmpty && f.IsZero()
}

// marshal returns what a value type's MarshalYAML gives (nil: unset).
func marshal(v reflect.Value) any {
	out, err := v.Interface().(yaml.Marshaler).MarshalYAML()
	if err != nil {
		panic(fmt.Sprintf("config: %s.MarshalYAML: %v", v.Type(), err)) // the value types never fail
	}
	return out
}

// compact writes flow mappings.
type compact struct {
	b []byte
}

func (w *compact) raw(s string) { w.b = append(w.b, s...) }

// str writes a string scalar.
func (w *compact) str(v string) {
	if plainToken(v) {
		w.raw(v)
		return
	}
	// A JSON string is a YAML double-quoted scalar.
	w.b = strconv.AppendQuote(w.b, v)
}

// plainToken reports whether v can stand unquoted in a flow mapping and
// read back as the same string: only letters, digits, '_', '.' and '-',
// not starting with '-', not number-like (a leading digit or '.' is fine
// only with a '-' in v, as in the port range 9000-9100), and not one of
// YAML's special words.
func plainToken(v string) bool {
	if v == "" || v[0] == '-' {
		return false
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	if c := v[0]; (c >= '0' && c <= '9' || c == '.') && !strings.Contains(v, "-") {
		return false
	}
	switch strings.ToLower(v) {
	case "true", "false", "yes", "no", "on", "off", "null", "y", "n":
		return false
	}
	return true
}
