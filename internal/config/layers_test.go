// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLayers: the model is the bottom of the config's layers and its
// file form the next. The file's YAML form (yamlcfg), the CLI's tables
// (client), the API and the dataplane import the model, never the other
// way; the YAML form imports nothing above the model but the atomic
// file write. Of this module, each links only what is listed.
func TestLayers(t *testing.T) {
	const module = "github.com/edgeplane/edgeplane/"
	model := []string{"internal/config", "internal/config/yamlnode", "internal/maglev"}
	for dir, allowed := range map[string][]string{
		".":         model,
		"./yamlcfg": append(slices.Clone(model), "internal/config/yamlcfg", "internal/atomicfile"),
	} {
		out, err := exec.Command("go", "list", "-deps", dir).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", dir, err)
		}
		for _, p := range strings.Fields(string(out)) {
			if rel, ok := strings.CutPrefix(p, module); ok && !slices.Contains(allowed, rel) {
				t.Errorf("%s links %s", dir, rel)
			}
		}
	}
}
