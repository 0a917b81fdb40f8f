// SPDX-License-Identifier: Apache-2.0

package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
)

func TestFileObjectsWholeConfig(t *testing.T) {
	cur := agentConfig(t)
	file, notes, err := fileObjects(schema, []byte(agentYAML+"limits: {rules: 16}\n"), &config.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(file.PDRs, cur.PDRs) || !reflect.DeepEqual(file.Paths, cur.Paths) || len(file.Interfaces) != 2 || len(file.FARs) != 4 ||
		!reflect.DeepEqual(file.LBRs, cur.LBRs) || !reflect.DeepEqual(file.Services, cur.Services) {
		t.Errorf("objects = %+v, want those of the file", file)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "limits ignored") {
		t.Errorf("notes = %q, want limits ignored", notes)
	}
}

func TestFileObjectsPartial(t *testing.T) {
	// Refers to an interface and a FAR only the agent has.
	data := "pdrs:\n  - {id: 11, precedence: 5, match: {in: lan0, proto: tcp, dport: 443}, far: 2}\n"
	file, notes, err := fileObjects(schema, []byte(data), agentConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 || len(file.Interfaces)+len(file.Paths)+len(file.FARs)+len(file.LBRs)+len(file.Services) != 0 || len(file.PDRs) != 1 {
		t.Fatalf("objects = %+v, notes %q; want pdr 11 only", file, notes)
	}
	p := file.PDRs[0]
	if p.ID != 11 || p.FAR != 2 || p.Match.In != "lan0" || p.Match.Dport.String() != "443" {
		t.Errorf("pdr = %+v", p)
	}

	// Replaces the agent's pdr 10: no duplicate id.
	file, _, err = fileObjects(schema, []byte("pdrs:\n  - {id: 10, precedence: 1, far: 1}\n"), agentConfig(t))
	if err != nil || len(file.PDRs) != 1 || file.PDRs[0].Precedence != 1 {
		t.Errorf("replacing pdr 10: %+v, %v", file, err)
	}

	// Nothing at all.
	for _, empty := range []string{"", "# nothing\n", "pdrs: []\n", "~\n"} {
		file, _, err := fileObjects(schema, []byte(empty), agentConfig(t))
		if err != nil || len(file.PDRs)+len(file.FARs)+len(file.Paths)+len(file.Interfaces) != 0 {
			t.Errorf("%q: %+v, %v; want no objects", empty, file, err)
		}
	}
}

func TestFileObjectsPartialErrors(t *testing.T) {
	data := `pdrs:
  - id: 11
    match: {dst: 10.0.0.1/8}
    far: 9
  - id: 12
    mach: {proto: udp}
    far: 1
`
	got := fieldErrors(t, func() error { _, _, err := fileObjects(schema, []byte(data), agentConfig(t)); return err }())
	want := []string{
		"pdrs[0].match.dst: host bits set; did you mean 10.0.0.0/8?",
		"pdrs[0].far: no far with id 9",
		`pdrs[1].mach: unknown field (did you mean "match"?)`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFileObjectsErrorAtAgentObject(t *testing.T) {
	// A new path with the local address and key of the agent's path 1:
	// decapsulation could not tell them apart, reported at the second.
	data := "paths:\n  - {id: 2, type: gre, interface: wan0, local: 192.0.2.1, remote: 203.0.113.1, key: 7, monitor: {insecure: true}}\n"
	got := fieldErrors(t, func() error { _, _, err := fileObjects(schema, []byte(data), agentConfig(t)); return err }())
	if len(got) != 1 || !strings.HasPrefix(got[0], "paths[1].key: ") || !strings.HasSuffix(got[0], "(paths[1] is the agent's path 1, not in the file)") {
		t.Errorf("errors = %q", got)
	}
}

func TestFileObjectsDocumentErrors(t *testing.T) {
	for _, data := range []string{"pdrs: [\n", "- id: 1\n", "pdrs: []\n---\nfars: []\n"} {
		_, _, err := fileObjects(schema, []byte(data), agentConfig(t))
		got := fieldErrors(t, err)
		if len(got) != 1 || !strings.HasPrefix(got[0], "config: ") {
			t.Errorf("%q: errors = %q, want one config: error", data, got)
		}
	}
}

func TestPlanApply(t *testing.T) {
	data := `interfaces:
  - {name: lan0, role: lan}
fars:
  - {id: 2, action: drop}
pdrs:
  - {id: 20, precedence: 10, match: {proto: udp, dport: 5000-5100, dscp: 46}, far: 1}
  - {id: 30, precedence: 1, match: {gre_key: 5}, far: 1}
`
	cur := agentConfig(t)
	file, _, err := fileObjects(schema, []byte(data), cur)
	if err != nil {
		t.Fatal(err)
	}
	changes := planApply(schema, file, cur)
	var got []string
	for _, c := range changes {
		got = append(got, string(c.kind)+" "+c.key+" "+c.verb)
		switch {
		case c.verb == "unchanged" && c.op != nil,
			c.verb == "created" && c.op.GetCreate() == nil,
			c.verb == "configured" && c.op.GetUpdate() == nil:
			t.Errorf("%s %s %s: op %v", c.kind, c.key, c.verb, c.op)
		}
	}
	want := []string{"interface lan0 unchanged", "far 2 configured", "pdr 20 unchanged", "pdr 30 created"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
	// Sent normalized: gre_key implies proto gre.
	if m := changes[3].op.GetCreate().GetPdr().GetMatch(); m.GetProto() != "gre" || m.GetGreKey() != 5 {
		t.Errorf("pdr 30 match = %v", m)
	}
	if f := changes[1].op.GetUpdate().GetFar(); f.GetAction() != "drop" || f.GetPath() != 0 {
		t.Errorf("far 2 = %v", f)
	}
}
