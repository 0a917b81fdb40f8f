// SPDX-License-Identifier: Apache-2.0

package yamlcfg

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlnode"
	"gopkg.in/yaml.v3"
)

// The decoder walks yaml.v3's node tree into typed Go values, field by
// field as their yaml tags name them, so that every problem is reported
// at its path ("pdrs[3].match.dst") and all of them at once, where
// yaml.v3's own Decode stops at the first and names a line. Value types
// (Prefix, Proto, ...) decode themselves through UnmarshalYAML. The
// gateway's config (Parse) and the lab's (Decode) both go through it,
// reading struct fields as FieldsOf gives them.

// field is one known key of a mapping and how to decode its value.
type field struct {
	name   string
	decode func(path string, v *yaml.Node)
}

// maxOf is the largest value field f of unsigned integer type t takes.
func maxOf(t reflect.Type, f *config.Field) uint64 {
	limit := uint64(math.MaxUint64) >> (64 - t.Bits())
	if f != nil && f.Max != 0 && f.Max < limit {
		limit = f.Max
	}
	return limit
}

// DecodeOptions adjust Decode to the file it reads.
type DecodeOptions struct {
	// ListFields makes an unknown field's error list the known ones
	// ("(want name, mtu or links)") instead of suggesting a likely one:
	// for files with few fields.
	ListFields bool
}

// Decode decodes the single YAML document in data over v, a pointer
// to a struct: the fields the document sets replace what v holds, the
// rest keep it. Problems with values are returned as Errors, in the order
// found, each at its path; a document that cannot be read at all (not
// YAML, several documents, not a mapping, too many aliases) is the
// error.
func Decode(data []byte, v any, o DecodeOptions) (config.Errors, error) {
	d := newDecoder(o)
	root, err := parseDocument(data)
	if err != nil || root == nil || yamlnode.IsNull(root) {
		return nil, err
	}
	fields := d.structFields(reflect.ValueOf(v).Elem())
	if err := d.top(root, fields); err != nil {
		return nil, err
	}
	d.mapping(root, "", fields)
	return d.errs, d.overrun()
}

// decoder walks the YAML node tree field by field so that unknown keys and
// type errors are reported with their paths.
type decoder struct {
	o    DecodeOptions
	errs config.Errors
	// pos maps a path to where it appears in the document.
	pos map[string]position
	// last maps a path to the position of its last recorded descendant,
	// so that problems with missing fields sort after the present ones.
	last map[string]position
	// failed holds paths whose value could not be decoded; semantic
	// errors at or below them are not reported again.
	failed map[string]bool
	// budget is how many more values may be decoded. Aliases let a small
	// document name one big node many times (a "billion laughs"): each
	// use is decoded again, so the walk is bounded by the document's own
	// size, not by what its aliases expand to.
	budget int
}

// position is a line and column in the YAML document (1-based).
type position struct {
	line, col int
}

func newDecoder(o DecodeOptions) *decoder {
	return &decoder{o: o, pos: map[string]position{}, last: map[string]position{}, failed: map[string]bool{}}
}

// Alias expansion bounds: a document may decode this many values per node
// it holds, and this many in any case (anchors reused a few times in a
// small file are fine).
const (
	aliasRatio   = 10
	aliasMinimum = 100_000
)

// top checks that root is a mapping and sets the decode budget from the
// document's size.
func (d *decoder) top(root *yaml.Node, fields []field) error {
	if root.Kind != yaml.MappingNode {
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.name
		}
		return fmt.Errorf("top level must be a mapping of %s, got %s", config.JoinWords(names, "and"), yamlnode.Describe(root))
	}
	d.budget = max(aliasRatio*countNodes(root, map[*yaml.Node]bool{}), aliasMinimum)
	return nil
}

// overrun returns the error of a document whose aliases expanded past the
// budget.
func (d *decoder) overrun() error {
	if d.budget >= 0 {
		return nil
	}
	return errors.New("document expands its aliases too far (a YAML bomb?)")
}

// countNodes counts the nodes of the tree under n, each once (aliases
// are not followed).
func countNodes(n *yaml.Node, seen map[*yaml.Node]bool) int {
	if n == nil || seen[n] {
		return 0
	}
	seen[n] = true
	c := 1
	for _, k := range n.Content {
		c += countNodes(k, seen)
	}
	return c
}

// parseDocument returns the root node of the single YAML document in data,
// or nil when data holds no document.
func parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, fmt.Errorf("invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	default:
		return nil, errors.New("multiple YAML documents are not supported")
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return doc.Content[0], nil
	}
	return &doc, nil
}

// mark records where path appears and extends the last known position of
// its ancestors.
func (d *decoder) mark(path string, n *yaml.Node) {
	here := position{n.Line, n.Column}
	if _, ok := d.pos[path]; !ok {
		d.pos[path] = here
	}
	for p := parentPath(path); p != ""; p = parentPath(p) {
		if here.compare(d.last[p]) > 0 {
			d.last[p] = here
		}
	}
}

// report records a problem at path.
func (d *decoder) report(path string, n *yaml.Node, format string, args ...any) {
	d.mark(path, n)
	d.errs = append(d.errs, config.FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// fail records a problem that left the value at path undecoded.
func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	d.report(path, n, format, args...)
	d.failed[path] = true
}

// suppressed reports whether path is at or below a path that failed to
// decode.
func (d *decoder) suppressed(path string) bool {
	for p := path; p != ""; p = parentPath(p) {
		if d.failed[p] {
			return true
		}
	}
	return false
}

// sort orders errs by where their paths appear in the document, keeping
// discovery order for ties. A path missing from the document (a required
// field left out) sorts just after the last key of its nearest ancestor.
func (d *decoder) sort(errs config.Errors) {
	type key struct {
		pos   position
		after bool
	}
	where := func(path string) key {
		if pos, ok := d.pos[path]; ok {
			return key{pos: pos}
		}
		for p := parentPath(path); p != ""; p = parentPath(p) {
			if pos, ok := d.last[p]; ok {
				return key{pos: pos, after: true}
			}
			if pos, ok := d.pos[p]; ok {
				return key{pos: pos, after: true}
			}
		}
		return key{}
	}
	slices.SortStableFunc(errs, func(a, b config.FieldError) int {
		ka, kb := where(a.Path), where(b.Path)
		if c := ka.pos.compare(kb.pos); c != 0 {
			return c
		}
		switch {
		case ka.after == kb.after:
			return 0
		case ka.after:
			return 1
		default:
			return -1
		}
	})
}

func (p position) compare(q position) int {
	if p.line != q.line {
		return p.line - q.line
	}
	return p.col - q.col
}

// parentPath returns "pdrs[0].match" for "pdrs[0].match.dst", "pdrs" for
// "pdrs[0]" and "" for "pdrs".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// entries decodes the mapping n, calling decode for each of its keys
// (merge keys (<<) honoured; duplicate keys reported); decode reports
// false for a key it does not know.
func (d *decoder) entries(n *yaml.Node, path string, decode func(key, path string, v *yaml.Node) bool, known func() []string) {
	n, ok := d.collection(n, path, yaml.MappingNode, "a mapping")
	if !ok {
		return
	}
	type entry struct{ key, val *yaml.Node }
	var entries, merged []entry
	seen := map[string]*yaml.Node{}
	// collect adds m's keys to out and returns its merge sources. The
	// mapping's own keys (explicit) report what is wrong with them; merged
	// keys never override one already seen, and are otherwise skipped
	// quietly.
	collect := func(m *yaml.Node, explicit bool, out *[]entry) (merges []*yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if isMergeKey(k) {
				merges = append(merges, v)
				continue
			}
			k = yamlnode.Resolve(k)
			first, dup := seen[k.Value]
			switch {
			case k.Kind != yaml.ScalarNode && explicit:
				d.report(path, k, "keys must be field names, got %s", yamlnode.Describe(k))
			case dup && explicit:
				d.report(config.JoinPath(path, k.Value), k, "duplicate key (first at line %d)", first.Line)
			case k.Kind == yaml.ScalarNode && !dup:
				seen[k.Value] = k
				*out = append(*out, entry{k, v})
			}
		}
		return merges
	}
	merges := collect(n, true, &entries)
	// Earlier merge sources win over later ones. visited keeps expansion
	// linear even when anchors are merged many times.
	visited := map[*yaml.Node]bool{}
	var expand func(m *yaml.Node)
	expand = func(m *yaml.Node) {
		m = yamlnode.Resolve(m)
		if visited[m] {
			return
		}
		visited[m] = true
		switch m.Kind {
		case yaml.MappingNode:
			for _, v := range collect(m, false, &merged) {
				expand(v)
			}
		case yaml.SequenceNode:
			for _, item := range m.Content {
				if yamlnode.Resolve(item).Kind != yaml.MappingNode {
					d.report(path, item, "merge key << needs a mapping or a list of mappings, got a list item that is %s", yamlnode.Describe(yamlnode.Resolve(item)))
					continue
				}
				expand(item)
			}
		default:
			d.report(path, m, "merge key << needs a mapping or a list of mappings, got %s", yamlnode.Describe(m))
		}
	}
	for _, m := range merges {
		expand(m)
	}
	for _, e := range append(entries, merged...) {
		if d.budget < 0 {
			return
		}
		p := config.JoinPath(path, e.key.Value)
		d.mark(p, e.key)
		if !decode(e.key.Value, p, e.val) {
			d.report(p, e.key, "unknown field%s", d.hint(e.key.Value, known()))
		}
	}
}

// collection resolves n, which must be a mapping or a list (kind, named
// want in the error): ok is false for null and for anything else.
func (d *decoder) collection(n *yaml.Node, path string, kind yaml.Kind, want string) (*yaml.Node, bool) {
	n = yamlnode.Resolve(n)
	if yamlnode.IsNull(n) {
		return n, false
	}
	if n.Kind != kind {
		d.fail(path, n, "must be %s, got %s", want, yamlnode.Describe(n))
		return n, false
	}
	return n, true
}

// mapping decodes the mapping n against fields, reporting unknown and
// duplicate keys.
func (d *decoder) mapping(n *yaml.Node, path string, fields []field) {
	d.entries(n, path, func(key, p string, v *yaml.Node) bool {
		i := slices.IndexFunc(fields, func(f field) bool { return f.name == key })
		if i < 0 {
			return false
		}
		fields[i].decode(p, v)
		return true
	}, func() []string {
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.name
		}
		return names
	})
}

// hint explains an unknown key: the field likely meant, or (ListFields)
// every known one.
func (d *decoder) hint(key string, known []string) string {
	if d.o.ListFields {
		return " (want " + config.JoinWords(known, "or") + ")"
	}
	return suggest(key, known)
}

// list decodes the sequence n, calling item for every element.
func (d *decoder) list(n *yaml.Node, path string, item func(path string, n *yaml.Node)) {
	n, ok := d.collection(n, path, yaml.SequenceNode, "a list")
	if !ok {
		return
	}
	for i, it := range n.Content {
		if d.budget < 0 {
			return // over budget: stop here, overrun reports it
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		d.mark(p, it)
		item(p, it)
	}
}

// typeError reports a value of the wrong type: "must be <want>, got X",
// with the field's own what tag when it has one.
func (d *decoder) typeError(path string, n *yaml.Node, f *config.Field, want string) {
	if f != nil && f.What != "" {
		want = f.What
	}
	d.fail(path, n, "must be %s, got %s", want, yamlnode.Describe(n))
}

// uint decodes an unsigned integer no larger than limit. ok is false for
// null and on error.
func (d *decoder) uint(n *yaml.Node, path string, limit uint64, f *config.Field) (v uint64, ok bool) {
	if yamlnode.IsNull(n) {
		return 0, false
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && isDigits(n.Value) {
		// Too large for a 64-bit integer, so YAML resolved it as a float.
		d.fail(path, n, "%s out of range 0-%d", n.Value, limit)
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.typeError(path, n, f, "an unsigned integer")
		return 0, false
	}
	if v > limit {
		d.fail(path, n, "%d out of range 0-%d", v, limit)
		return 0, false
	}
	return v, true
}

// Types the decoder treats specially.
var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	anyMapType      = reflect.TypeFor[map[string]any]()
)

// value decodes n into v, a settable value of any type the config uses;
// f, when not nil, is the struct field v is.
func (d *decoder) value(n *yaml.Node, path string, v reflect.Value, f *config.Field) {
	if d.budget--; d.budget < 0 {
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.fail(path, n, "%s", err.Error())
		}
		return
	}
	n = yamlnode.Resolve(n)
	if yamlnode.IsNull(n) {
		return
	}
	switch t := v.Type(); t.Kind() {
	case reflect.Pointer:
		e := reflect.New(t.Elem())
		if !v.IsNil() {
			e.Elem().Set(v.Elem())
		}
		d.value(n, path, e.Elem(), f)
		// A scalar that did not decode stays unset; a mapping is kept
		// with what did, so that its other fields are still checked.
		if t.Elem().Kind() == reflect.Struct || !d.failed[path] {
			v.Set(e)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.typeError(path, n, f, "a string")
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.typeError(path, n, f, "true or false")
			return
		}
		v.SetBool(n.Value == "true")
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if x, ok := d.uint(n, path, maxOf(t, f), f); ok {
			v.SetUint(x)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var x int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&x) != nil || v.OverflowInt(x) {
			d.typeError(path, n, f, "an integer")
			return
		}
		v.SetInt(x)
	case reflect.Struct:
		d.mapping(n, path, d.structFields(v))
	case reflect.Slice:
		d.list(n, path, func(p string, item *yaml.Node) {
			e := reflect.New(t.Elem()).Elem()
			d.value(item, p, e, nil)
			v.Set(reflect.Append(v, e))
		})
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic("config: map keys must be strings: " + t.String()) // a build defect
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(t))
		}
		d.entries(n, path, func(key, p string, item *yaml.Node) bool {
			e := reflect.New(t.Elem()).Elem()
			if cur := v.MapIndex(reflect.ValueOf(key)); cur.IsValid() {
				e.Set(cur)
			}
			d.value(item, p, e, nil)
			v.SetMapIndex(reflect.ValueOf(key).Convert(t.Key()), e)
			return true
		}, nil)
	default:
		panic("config: cannot decode into " + t.String()) // a build defect
	}
}

// structFields returns the fields of the struct v, each decoding into
// v's field. An inline map[string]any (Config.Objects) is left to the
// caller, which knows what its keys hold.
func (d *decoder) structFields(v reflect.Value) []field {
	infos := config.FieldsOf(v.Type())
	out := make([]field, 0, len(infos))
	for i := range infos {
		fi := &infos[i]
		fv := v.Field(fi.Index)
		out = append(out, field{fi.Name, func(p string, n *yaml.Node) { d.value(n, p, fv, fi) }})
	}
	return out
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

func isDigits(s string) bool {
	s = strings.TrimPrefix(s, "+")
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) }) < 0
}

// suggest returns ` (did you mean "x"?)` when key is a likely typo of a
// known field name, else "".
func suggest(key string, known []string) string {
	best, bestDist := "", 3
	for _, name := range known {
		dist := editDistance(strings.ToLower(key), name)
		if dist < bestDist && (dist <= 1 || len(name) >= 6) {
			best, bestDist = name, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
