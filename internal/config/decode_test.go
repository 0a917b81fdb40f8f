// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAliasBomb feeds a document whose aliases expand to a million LBR
// members from a few thousand nodes: refused as a whole, quickly, not
// decoded.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("interfaces: [{name: lan0, role: lan}]\nfars: [{id: 1, action: nat, address: 10.0.0.1, port: 80}]\nlbrs:\n")
	b.WriteString("  - {id: 1, algorithm: maglev, members: &m [")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("{far: 1}")
	}
	b.WriteString("]}\n")
	for i := 2; i <= 1000; i++ {
		fmt.Fprintf(&b, "  - {id: %d, algorithm: maglev, members: *m}\n", i)
	}
	start := time.Now()
	got := parseErrors(t, b.String())
	if len(got) != 1 || got[0] != "config: document expands its aliases too far (a YAML bomb?)" {
		t.Errorf("errors: %q", got[:min(len(got), 3)])
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s", d)
	}

	// Anchors used a few times, as people write them, are fine.
	if _, err := Parse([]byte(`
interfaces: [{name: lan0, role: lan}]
fars: [{id: 1, action: nat, address: 10.0.0.1, port: 80}, {id: 2, action: nat, address: 10.0.0.2, port: 80}]
lbrs:
  - {id: 1, algorithm: maglev, members: &m [{far: 1}, {far: 2}]}
  - {id: 2, algorithm: maglev, members: *m}
`)); err != nil {
		t.Errorf("a reused anchor: %v", err)
	}
}

// TestDecodeYAMLOverlay decodes over what a value holds, as the lab's
// config does over its defaults, with unknown fields listed.
func TestDecodeYAMLOverlay(t *testing.T) {
	type link struct {
		Delay string `yaml:"delay"`
		Loss  string `yaml:"loss"`
	}
	type doc struct {
		Name  string          `yaml:"name"`
		MTU   int             `yaml:"mtu" what:"a number of bytes"`
		Links map[string]link `yaml:"links"`
	}
	v := doc{Name: "ep", MTU: 1500, Links: map[string]link{"wan1": {Delay: "5ms", Loss: "1"}}}
	errs, err := DecodeYAML([]byte("mtu: big\nlinks: {wan1: {loss: 2, jitter: 1ms}, wan2: {delay: 30ms}}\nnmae: x\n"), &v, DecodeOptions{ListFields: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`mtu: must be a number of bytes, got "big"`,
		"links.wan1.jitter: unknown field (want delay or loss)",
		"nmae: unknown field (want name, mtu or links)",
	}
	if errs.Error() != strings.Join(want, "\n") {
		t.Errorf("errors:\n%v\nwant:\n%s", errs, strings.Join(want, "\n"))
	}
	if v.Name != "ep" || v.MTU != 1500 || v.Links["wan1"] != (link{Delay: "5ms", Loss: "2"}) || v.Links["wan2"] != (link{Delay: "30ms"}) {
		t.Errorf("decoded %+v", v)
	}
	if _, err := DecodeYAML([]byte("- 1\n"), &v, DecodeOptions{}); err == nil || err.Error() != "top level must be a mapping of name, mtu and links, got a list" {
		t.Errorf("a list: %v", err)
	}
}
