// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"gopkg.in/yaml.v3"
)

// A kind declared here and nowhere else: its type, whose yaml tags are
// its fields, and its declaration. widgetSchema is its one registration;
// widgetTable, its table in the CLI, is optional (a kind without one is
// listed by its key). The tests below take it through everything a kind
// goes through.

type Widget struct {
	ID     uint32   `yaml:"id"`
	Colour string   `yaml:"colour,omitempty"`
	Size   uint16   `yaml:"size,omitempty" max:"100"`
	Path   uint32   `yaml:"path,omitempty"`
	Tags   []string `yaml:"tags,omitempty"`
}

var widgetKind = &config.KindOf[Widget]{
	Kind:     "widget",
	Plural:   "widgets",
	KeyField: "id",
	Normalize: func(w *Widget) {
		if w.Size == 0 {
			w.Size = 1
		}
	},
	Check: func(c *config.Check, w *Widget) {
		if w.ID == 0 {
			c.Add("id", "required")
		}
		switch w.Colour {
		case "red", "blue":
		case "":
			c.Add("colour", "required (want red or blue)")
		default:
			c.Add("colour", "unknown colour %q (want red or blue)", w.Colour)
		}
	},
	Refs: func(w *Widget) []config.Ref {
		return []config.Ref{{Field: "path", Kind: config.KindPath, Key: config.IDKey(w.Path)}}
	},
	Unique: []config.Unique[Widget]{{
		Field: "tags",
		Key: func(w *Widget) (any, bool) {
			return strings.Join(w.Tags, ","), len(w.Tags) > 0
		},
		Clash: func(w *Widget, other string) string { return "the same tags as " + other },
	}},
}

var widgetSchema = config.Builtin().With(widgetKind)

// widgetTable is the CLI's table of widgets.
var widgetTable = client.Table[Widget]{
	{Name: "ID", Value: func(w *Widget) string { return always(w.ID) }},
	{Name: "COLOUR", Value: func(w *Widget) string { return w.Colour }},
	{Name: "SIZE", Value: func(w *Widget) string { return always(w.Size) }},
	{Name: "PATH", Value: func(w *Widget) string { return num(w.Path) }, Unset: "-"},
	{Name: "TAGS", Value: func(w *Widget) string { return strings.Join(w.Tags, ",") }, Unset: "-", Optional: true},
}

// widgetFile is the config file with widgets.
var widgetFile = yamlcfg.For(widgetSchema)

// always and num are the column values of a number: always shown, or
// "" for zero.
func always[N ~uint32 | ~uint16](v N) string { return strconv.FormatUint(uint64(v), 10) }

func num[N ~uint32](v N) string {
	if v == 0 {
		return ""
	}
	return always(v)
}

const widgetHead = `interfaces: [{name: wan0, role: wan}]
paths: [{id: 1, type: gre, interface: wan0, local: 192.0.2.1, remote: 192.0.2.2, monitor: {insecure: true}}]
`

func TestWidgetDecodeErrors(t *testing.T) {
	_, err := widgetFile.Parse([]byte(widgetHead + `widgets:
  - {id: 1, colour: red, path: 9}
  - {id: 2, colour: green, size: 200}
  - {id: 1, shape: round, tags: [a]}
  - {colour: blue, tags: [a]}
`))
	want := []string{
		"widgets[0].path: no path with id 9",
		`widgets[1].colour: unknown colour "green" (want red or blue)`,
		"widgets[1].size: 200 out of range 0-100",
		"widgets[2].id: duplicate id 1 (first at widgets[0])",
		"widgets[2].shape: unknown field",
		"widgets[2].colour: required (want red or blue)",
		"widgets[3].tags: the same tags as widgets[2]",
		"widgets[3].id: required",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	_, err = widgetFile.Parse([]byte("- 1\n"))
	if err == nil || err.Error() != "config: top level must be a mapping of interfaces, paths, fars, pdrs, lbrs, services, limits, defaults, qos_classes, flowopt, strategies and widgets, got a list" {
		t.Errorf("a list: %v", err)
	}
}

// widgetConfig is a valid config with widgets.
func widgetConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := widgetFile.Parse([]byte(widgetHead + `widgets:
  - {id: 5, colour: red, size: 7, path: 1, tags: [x, "y z"]}
  - {id: 6, colour: blue}
`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWidgetRoundTrip(t *testing.T) {
	c := widgetConfig(t)
	want := []Widget{{ID: 5, Colour: "red", Size: 7, Path: 1, Tags: []string{"x", "y z"}}, {ID: 6, Colour: "blue", Size: 1}}
	if got := c.Objects["widgets"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("widgets %+v, want %+v", got, want)
	}
	if err := widgetSchema.Validate(c); err != nil {
		t.Errorf("Validate: %v", err)
	}
	out := widgetFile.AppendCompact(nil, c)
	if !bytes.Contains(out, []byte("widgets:\n  - {id: 5, colour: red, size: 7, path: 1, tags: [x, \"y z\"]}\n  - {id: 6, colour: blue, size: 1}\n")) {
		t.Errorf("compact:\n%s", out)
	}
	marshalled, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string][]byte{"AppendCompact": out, "yaml.Marshal": marshalled} {
		back, err := widgetFile.Parse(doc)
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Errorf("%s round trip: %v\n%+v\nwant %+v\n%s", name, err, back, c, doc)
		}
	}
	// The gateway's own schema does not know widgets.
	if _, err := yamlcfg.Parse(out); err == nil || !strings.Contains(err.Error(), "widgets: unknown field") {
		t.Errorf("builtin Parse of widgets: %v", err)
	}
}

func TestWidgetStore(t *testing.T) {
	s := widgetSchema.NewStore(widgetConfig(t))
	ch, _, err := s.Apply([]config.Op{{At: "operations[0].create.widget", Verb: config.Create, Kind: "widget", Object: Widget{ID: 7, Colour: "red", Path: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := ch.Other["widget"].([]config.Diff[Widget]); len(d) != 1 || d[0].New.Size != 1 || d[0].Old != nil || ch.Len() != 1 {
		t.Errorf("changes %+v", ch.Other)
	}
	if w, ok := s.Get("widget", config.IDKey(7)); !ok || w.(Widget).Colour != "red" {
		t.Errorf("widget 7: %+v %v", w, ok)
	}
	for _, tc := range []struct {
		ops  []config.Op
		want string
	}{
		{[]config.Op{{At: "operations[0].delete", Verb: config.Delete, Kind: config.KindPath, ID: 1}}, "operations[0].delete: path 1 is still used by widget 5"},
		{[]config.Op{{At: "operations[0].update.widget", Verb: config.Update, Kind: "widget", Object: Widget{ID: 6, Colour: "red", Path: 4, Tags: []string{"x", "y z"}}}},
			"operations[0].update.widget.path: no path with id 4\noperations[0].update.widget.tags: the same tags as widget 5"},
		{[]config.Op{{At: "operations[0].create.widget", Verb: config.Create, Kind: "widget", Object: config.PDR{ID: 9}}}, "operations[0].create.widget: a widget operation carries config.PDR"},
		{[]config.Op{{At: "operations[0].create.gadget", Verb: config.Create, Kind: "gadget"}}, `operations[0].create.gadget: unknown kind "gadget"`},
	} {
		if _, _, err := s.Apply(tc.ops); err == nil || err.Error() != tc.want {
			t.Errorf("apply %+v: %v, want %s", tc.ops, err, tc.want)
		}
	}
	if got := s.Config().Objects["widgets"].([]Widget); len(got) != 3 || got[2].ID != 7 {
		t.Errorf("store's widgets %+v", got)
	}
}

func TestWidgetTable(t *testing.T) {
	c := widgetConfig(t)
	var b bytes.Buffer
	if err := widgetTable.Write(&b, widgetSchema.Objects(c, "widget")); err != nil {
		t.Fatal(err)
	}
	want := "ID  COLOUR  SIZE  PATH  TAGS\n5   red     7     1     x,y z\n6   blue    1     -     -\n"
	if b.String() != want {
		t.Errorf("table:\n%q\nwant:\n%q", b.String(), want)
	}
	if k, ok := widgetSchema.Lookup("Widgets"); !ok || k != "widget" || widgetSchema.Plural(k) != "widgets" {
		t.Errorf("Lookup(Widgets) = %q, %v", k, ok)
	}
}
