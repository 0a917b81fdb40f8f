// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
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
	if _, err := yamlcfg.Parse([]byte(`
interfaces: [{name: lan0, role: lan}]
fars: [{id: 1, action: nat, address: 10.0.0.1, port: 80}, {id: 2, action: nat, address: 10.0.0.2, port: 80}]
lbrs:
  - {id: 1, algorithm: maglev, members: &m [{far: 1}, {far: 2}]}
  - {id: 2, algorithm: maglev, members: *m}
`)); err != nil {
		t.Errorf("a reused anchor: %v", err)
	}
}
