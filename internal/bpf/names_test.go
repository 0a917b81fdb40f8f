// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// TestReasonNamesMatchHeader keeps dataplane.ReasonNames and the Reason*
// constants in step with enum edge_reason in bpf/edge_types.h.
func TestReasonNamesMatchHeader(t *testing.T) {
	src, err := os.ReadFile("../../bpf/edge_types.h")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	start := strings.Index(body, "enum edge_reason {")
	end := strings.Index(body[start:], "};")
	re := regexp.MustCompile(`EDGE_R_([A-Z0-9_]+)`)
	var names []string
	for _, m := range re.FindAllStringSubmatch(body[start:start+end], -1) {
		names = append(names, strings.ToLower(m[1]))
	}
	if names[len(names)-1] != "max" {
		t.Fatalf("enum does not end with EDGE_R_MAX: %v", names)
	}
	names = names[:len(names)-1]
	if len(names) != ReasonMax || len(dataplane.ReasonNames) != ReasonMax {
		t.Fatalf("header has %d reasons, ReasonMax %d, ReasonNames %d", len(names), ReasonMax, len(dataplane.ReasonNames))
	}
	if dataplane.ReasonNone != ReasonNone {
		t.Errorf("dataplane.ReasonNone %d, ReasonNone %d", dataplane.ReasonNone, ReasonNone)
	}
	for i, n := range names {
		if dataplane.ReasonNames[i] != n {
			t.Errorf("reason %d: header %q, Go %q", i, n, dataplane.ReasonNames[i])
		}
	}
}
