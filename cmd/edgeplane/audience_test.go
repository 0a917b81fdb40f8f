// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

const module = "github.com/edgeplane/edgeplane"

// devTools are the packages for trying, measuring and testing edgeplane
// on one machine. They start etcd's server, build namespaces, emulate
// WAN links and time the dataplane: nothing a gateway or a controller
// runs.
var devTools = []string{
	"go.etcd.io/etcd/server",
	module + "/cmd/edgeplane-dev",
	module + "/internal/bench",
	module + "/internal/devtools",
	module + "/internal/lab",
	module + "/internal/wanem",
	module + "/internal/topo",
	module + "/internal/testutil",
	module + "/internal/api/apitest",
}

// audienceRules say what a package may not link, with the reason.
var audienceRules = []struct {
	pkg       string // a package, or every production package: "production"
	forbidden []string
	why       string
}{
	{module + "/cmd/edgeplane", devTools,
		"the binary a gateway and a controller run links no lab, bench, emulator or etcd server"},
	{"production", devTools,
		"production packages never import developer tools (cmd/edgeplane-dev carries them)"},
}

// TestBinariesByAudience holds the split of the binaries by who runs
// them: go list -deps of edgeplane (agent, controller, CLI verbs), and of
// every production package, lists none of the developer tools.
func TestBinariesByAudience(t *testing.T) {
	deps := moduleDeps(t)
	if _, ok := deps[module+"/cmd/edgeplane-dev"]; !ok {
		t.Fatalf("go list found no cmd/edgeplane-dev: %d packages", len(deps))
	}
	for _, r := range audienceRules {
		pkgs := []string{r.pkg}
		if r.pkg == "production" {
			pkgs = nil
			for p := range deps {
				if !isDevTool(p, devTools) && !strings.HasPrefix(p, module+"/test/") {
					pkgs = append(pkgs, p)
				}
			}
		}
		for _, p := range pkgs {
			d, ok := deps[p]
			if !ok {
				t.Errorf("%s: not a package of the module", p)
				continue
			}
			for _, f := range r.forbidden {
				var linked []string
				for _, dep := range d {
					if isDevTool(dep, []string{f}) {
						linked = append(linked, dep)
					}
				}
				if len(linked) > 0 {
					t.Errorf("%s links %d package(s) of %s (%s): %s", strings.TrimPrefix(p, module+"/"), len(linked), f, linked[0], r.why)
				}
			}
		}
	}
}

// moduleDeps returns every package of the module with its transitive
// (non-test) dependencies, as go list -deps gives them.
func moduleDeps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command(testutil.GoTool(), "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	return deps
}

func isDevTool(pkg string, tools []string) bool {
	for _, d := range tools {
		if pkg == d || strings.HasPrefix(pkg, d+"/") {
			return true
		}
	}
	return false
}
