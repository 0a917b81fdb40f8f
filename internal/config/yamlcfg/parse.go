// SPDX-License-Identifier: Apache-2.0

// Package yamlcfg is the config file's YAML form: it reads a file into
// a config.Config, reporting every problem at its path in document order
// (what the decoder finds and what the model's validation does), and
// writes a config back in the compact shape the agent persists. The
// model (package config) knows nothing of it; the kinds' fields are read
// from their yaml tags through config.FieldsOf.
package yamlcfg

import (
	"errors"
	"fmt"
	"os"
	"reflect"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlnode"
	"gopkg.in/yaml.v3"
)

// docPath is the path used for problems with the document as a whole.
const docPath = "config"

// Format is the config file of a schema's kinds.
type Format struct{ s *config.Schema }

// For returns the file format of s's kinds.
func For(s *config.Schema) Format { return Format{s} }

// builtin is the file of the gateway's kinds.
var builtin = For(config.Builtin())

// Load reads the configuration file at path and parses it with Parse.
func Load(path string) (*config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data)
}

// Parse decodes a YAML configuration, applies Normalize and validates it.
// On failure it returns a nil Config and a config.Errors value listing
// every problem found (unknown fields, type errors and semantic errors),
// each with the path of the offending field, in document order.
func Parse(data []byte) (*config.Config, error) { return builtin.Parse(data) }

// Parse is the package's Parse for a config of f's kinds.
func (f Format) Parse(data []byte) (*config.Config, error) {
	c, d, err := f.decode(data)
	if err != nil {
		return nil, err
	}
	all := d.errs
	var invalid config.Errors
	if err := f.s.Validate(c); !errors.As(err, &invalid) && err != nil {
		return nil, err // Validate returns Errors or nil
	}
	for _, e := range invalid {
		if !d.suppressed(e.Path) {
			all = append(all, e)
		}
	}
	if len(all) == 0 {
		return c, nil
	}
	d.sort(all)
	return nil, all
}

// decode decodes and normalizes data, keeping the decoder's errors.
func (f Format) decode(data []byte) (*config.Config, *decoder, error) {
	var c config.Config
	d := newDecoder(DecodeOptions{})
	root, err := parseDocument(data)
	if err == nil && root != nil && !yamlnode.IsNull(root) {
		fields := f.rootFields(d, &c)
		if err = d.top(root, fields); err == nil {
			d.mapping(root, "", fields)
			err = d.overrun()
		}
	}
	if err != nil {
		return nil, nil, config.Errors{{Path: docPath, Reason: err.Error()}}
	}
	f.s.Normalize(&c)
	return &c, d, nil
}

// ParseObjects reads a file's objects as Parse does (unknown fields and
// values that do not decode are errors at their paths) but checks
// nothing of what they mean together: for a fleet controller's target,
// whose objects are checked as each gateway they reach holds them, with
// what its other targets give it.
func (f Format) ParseObjects(data []byte) (*config.Config, error) {
	c, d, err := f.decode(data)
	if err != nil {
		return nil, err
	}
	if len(d.errs) > 0 {
		d.sort(d.errs)
		return nil, d.errs
	}
	return c, nil
}

// rootFields are the top-level keys of the file: Config's fields, then the
// lists of the kinds that have none, into Objects.
func (f Format) rootFields(d *decoder, c *config.Config) []field {
	fields := d.structFields(reflect.ValueOf(c).Elem())
	for _, k := range f.extraKinds() {
		fields = append(fields, field{f.s.Plural(k), func(p string, n *yaml.Node) {
			l := reflect.New(reflect.SliceOf(f.s.Type(k))).Elem()
			d.value(n, p, l, nil)
			objs := make([]any, l.Len())
			for i := range objs {
				objs[i] = l.Index(i).Interface()
			}
			f.s.SetObjects(c, k, objs)
		}})
	}
	return fields
}

// extraKinds are the kinds without a Config field of their own, whose
// objects are in Config.Objects, in the schema's order.
func (f Format) extraKinds() []config.Kind {
	own := map[string]bool{}
	for _, fi := range config.FieldsOf(reflect.TypeFor[config.Config]()) {
		own[fi.Name] = true
	}
	var out []config.Kind
	for _, k := range f.s.Kinds() {
		if !own[f.s.Plural(k)] {
			out = append(out, k)
		}
	}
	return out
}
