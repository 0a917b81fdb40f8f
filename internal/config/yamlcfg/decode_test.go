// SPDX-License-Identifier: Apache-2.0

package yamlcfg

import (
	"strings"
	"testing"
)

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
	errs, err := Decode([]byte("mtu: big\nlinks: {wan1: {loss: 2, jitter: 1ms}, wan2: {delay: 30ms}}\nnmae: x\n"), &v, DecodeOptions{ListFields: true})
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
	if _, err := Decode([]byte("- 1\n"), &v, DecodeOptions{}); err == nil || err.Error() != "top level must be a mapping of name, mtu and links, got a list" {
		t.Errorf("a list: %v", err)
	}
}
