// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// A kind's fields are its type's exported struct fields, named by their
// yaml tags, in the config file and, by the same names, in the API. The
// decoder, the encoder and the API's conversion all read them here.
//
// Struct tags read, besides yaml's name, omitempty and inline:
//
//	max:"63"                 the largest value of an unsigned integer field
//	what:"a number of bytes" what a field must be, for its type errors

// Field is one yaml field of a struct.
type Field struct {
	// Name is the yaml name; Index the struct field's index.
	Name  string
	Index int
	// OmitEmpty: the field is left out of a file when zero.
	OmitEmpty bool
	// Max is the largest value of an unsigned integer field (its max
	// tag), or 0 for the type's own.
	Max uint64
	// What says what the field must be in a type error ("a number of
	// bytes"), or "" for what its type says.
	What string
}

// fieldCache memoizes FieldsOf: the tags of a type never change, and the
// encoder asks for them once per object written.
var fieldCache sync.Map // reflect.Type -> []Field

// FieldsOf returns the yaml fields of struct type t, in declaration
// order, leaving out inline ones (Config.Objects). The slice is shared:
// callers must not modify it.
func FieldsOf(t reflect.Type) []Field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]Field)
	}
	var out []Field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("yaml")
		if !sf.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		inline := false
		f := Field{Index: i, What: sf.Tag.Get("what")}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "omitempty":
				f.OmitEmpty = true
			case "inline":
				inline = true
			}
		}
		if inline {
			continue
		}
		if name == "" && ok {
			name = strings.ToLower(sf.Name)
		}
		f.Name = name
		if m := sf.Tag.Get("max"); m != "" {
			v, err := strconv.ParseUint(m, 10, 64)
			if err != nil {
				panic(fmt.Sprintf("config: field %s.%s: max tag %q: %v", t.Name(), sf.Name, m, err)) // a build defect
			}
			f.Max = v
		}
		out = append(out, f)
	}
	fieldCache.Store(t, out)
	return out
}

// JoinPath returns the path of key below parent: "pdrs[0].match" and
// "dst" give "pdrs[0].match.dst", the path a FieldError names.
func JoinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// JoinWords writes words as a message lists them: "a, b and c" (conj
// "and") or "a, b or c".
func JoinWords(words []string, conj string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}
