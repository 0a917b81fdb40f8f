// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
)

// TestReferenceUpToDate: the committed page is what the declarations
// generate now, so a field added, renamed or documented differently
// without `make generate` fails here as well as in check-generate.
func TestReferenceUpToDate(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := moduleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	want, err := reference(root)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(root, referencePath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run make generate (or go run ./internal/config/docgen) and commit it", referencePath)
	}
}

// TestEveryKindAndField: each kind of the schema has its section, and
// each of its fields a row, so a kind added to the schema cannot be
// left out of the page.
func TestEveryKindAndField(t *testing.T) {
	wd, _ := os.Getwd()
	root, err := moduleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	page, err := reference(root)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	g := &gen{schema: config.Builtin()}
	for _, k := range g.schema.Kinds() {
		plural := g.schema.Plural(k)
		if !strings.Contains(s, "\n## "+plural+"\n") {
			t.Errorf("no section for kind %s (%s)", k, plural)
		}
		for _, f := range yamlFields(g.schema.Type(k)) {
			if !strings.Contains(s, "| `"+f.name+"` |") {
				t.Errorf("kind %s: no row for field %s", k, f.name)
			}
		}
	}
}

// TestUndocumentedFieldFails: a field without a doc comment is an
// error, not an empty description.
func TestUndocumentedFieldFails(t *testing.T) {
	src := &source{types: map[string]typeDoc{}, consts: map[string]string{}}
	g := &gen{src: src, schema: config.Builtin()}
	g.table(g.schema.Type(g.schema.Kinds()[0]), reflect.Value{}, "")
	if len(g.errs) == 0 {
		t.Fatal("fields without docs gave no error")
	}
}
