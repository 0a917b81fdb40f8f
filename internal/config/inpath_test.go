// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"gopkg.in/yaml.v3"
)

// decapDoc has a PDR that matches what was decapsulated from path 1 and a
// service placed in the PDRs' precedence order.
const decapDoc = `interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
paths:
  - {id: 1, type: gre, interface: wan0, local: 192.0.2.1, remote: 192.0.2.2, key: 7, monitor: {insecure: true}}
fars:
  - {id: 1, action: drop}
  - {id: 2, action: nat, address: 10.1.0.11, port: 8080}
pdrs:
  - {id: 10, precedence: 5, match: {in_path: 1, proto: tcp, dport: 22}, far: 1}
  - {id: 11, precedence: 6, match: {proto: tcp}, far: 1}
lbrs:
  - {id: 1, algorithm: maglev, members: [{far: 2}]}
  - {id: 2, algorithm: maglev, members: [{far: 2}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1, precedence: 100}
  - {id: 2, vip: 203.0.113.11, port: 80, proto: tcp, lbr: 2}
`

func decapConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := yamlcfg.Parse([]byte(decapDoc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInPathAndServicePrecedence(t *testing.T) {
	c := decapConfig(t)
	if got := c.PDRs[0].Match.InPath; got != 1 {
		t.Errorf("pdrs[0].match.in_path = %d, want 1", got)
	}
	if got := c.PDRs[1].Match.InPath; got != 0 {
		t.Errorf("pdrs[1].match.in_path = %d, want 0 (any)", got)
	}
	if got := c.Services[0].Precedence; got != 100 {
		t.Errorf("services[0].precedence = %d, want 100", got)
	}

	// Both encoders write the fields only when set, and read back alike.
	marshalled, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string][]byte{"yaml.Marshal": marshalled, "AppendCompact": yamlcfg.AppendCompact(nil, c)} {
		if n := strings.Count(string(out), "in_path:"); n != 1 {
			t.Errorf("%s wrote in_path %d times, want once:\n%s", name, n, out)
		}
		if n := strings.Count(string(out), "precedence: 100"); n != 1 {
			t.Errorf("%s: precedence 100 written %d times, want once:\n%s", name, n, out)
		}
		if strings.Contains(string(out), "precedence: 0") {
			t.Errorf("%s wrote a zero precedence:\n%s", name, out)
		}
		back, err := yamlcfg.Parse(out)
		if err != nil {
			t.Fatalf("%s: parse back: %v\n%s", name, err, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Errorf("%s round trip:\n%+v\nwant\n%+v", name, back, c)
		}
	}

	for _, tc := range []struct{ name, doc, want string }{
		{"no such path", strings.Replace(decapDoc, "in_path: 1", "in_path: 7", 1), "pdrs[0].match.in_path: no path with id 7"},
		{"not a number", strings.Replace(decapDoc, "in_path: 1", "in_path: wan0", 1), `pdrs[0].match.in_path: must be an unsigned integer, got "wan0"`},
		{"precedence not a number", strings.Replace(decapDoc, "precedence: 100", "precedence: first", 1), `services[0].precedence: must be an unsigned integer, got "first"`},
	} {
		got := parseErrors(t, tc.doc)
		if !slices.Contains(got, tc.want) {
			t.Errorf("%s: missing %q in\n%s", tc.name, tc.want, strings.Join(got, "\n"))
		}
	}
}

func TestStoreInPathReference(t *testing.T) {
	s := config.NewStore(decapConfig(t))
	_, _, err := s.Apply([]config.Op{{At: "operations[0].delete", Verb: config.Delete, Kind: config.KindPath, ID: 1}})
	if err == nil || err.Error() != "operations[0].delete: path 1 is still used by pdr 10" {
		t.Errorf("deleting a path a PDR's in_path names: %v", err)
	}
	_, _, err = s.Apply([]config.Op{{At: "operations[0].create.pdr", Verb: config.Create, Kind: config.KindPDR,
		Object: config.PDR{ID: 12, FAR: 1, Match: config.Match{InPath: 9}}}})
	if err == nil || err.Error() != "operations[0].create.pdr.match.in_path: no path with id 9" {
		t.Errorf("creating a PDR with in_path naming no path: %v", err)
	}
	// Once no PDR names it, the path goes.
	_, _, err = s.Apply([]config.Op{
		{At: "operations[0].update.pdr", Verb: config.Update, Kind: config.KindPDR, Object: config.PDR{ID: 10, Precedence: 5, FAR: 1}},
		{At: "operations[1].delete", Verb: config.Delete, Kind: config.KindPath, ID: 1},
	})
	if err != nil {
		t.Errorf("deleting a path no longer named: %v", err)
	}
}
