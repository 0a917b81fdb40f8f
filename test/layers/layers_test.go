// SPDX-License-Identifier: Apache-2.0

package layers_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// module is the path every "./" entry of the rules is relative to.
const module = "github.com/edgeplane/edgeplane"

// loader is what links the XDP objects and the kernel's BPF calls.
var loader = []string{"./internal/bpf", "github.com/cilium/ebpf"}

// rules says which packages must not link which. pkg and each of
// forbidden are import paths, "./" standing for the module's; a
// forbidden path forbids the packages under it too. A package's links
// are its dependencies as `go list -deps` gives them (its tests' aside).
// Add a row to hold a new rule.
var rules = []struct {
	pkg       string
	forbidden []string
	why       string
}{
	{"./internal/dataplane", []string{"./", "github.com/cilium/ebpf"},
		"the dataplane's contract is the bottom layer: the API, the controller, the metrics and the loader all import it"},
	{"./internal/api", loader, "the API serves a gateway's dataplane through the contract (internal/dataplane), and a controller, which has none"},
	{"./internal/fleet", loader, "the fleet controller runs where no dataplane is loaded"},
	{"./internal/client", loader, "the CLI's API client talks to a gateway, it loads nothing"},
	{"./internal/metrics", loader, "the metrics read counters through the contract"},
}

// pkgInfo is what `go list -json` says of a package.
type pkgInfo struct {
	ImportPath string
	Imports    []string
}

// expand resolves a rule's "./" path.
func expand(p string) string {
	if p == "./" {
		return module
	}
	if rest, ok := strings.CutPrefix(p, "./"); ok {
		return module + "/" + rest
	}
	return p
}

// under reports whether import path p is f or a package below it.
func under(p, f string) bool {
	return p == f || strings.HasPrefix(p, f+"/")
}

// graph lists pkgs and everything they import, by import path.
func graph(t *testing.T, pkgs []string) map[string][]string {
	t.Helper()
	cmd := exec.Command(testutil.GoTool(), append([]string{"list", "-deps", "-json=ImportPath,Imports"}, pkgs...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	g := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkgInfo
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list's output: %v", err)
		}
		g[p.ImportPath] = p.Imports
	}
	return g
}

// chain returns the shortest import chain from pkg to a package under
// forbidden, nil when there is none.
func chain(g map[string][]string, pkg, forbidden string) []string {
	from := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != pkg && under(p, forbidden) {
			var c []string
			for ; p != ""; p = from[p] {
				c = append(c, p)
			}
			slices.Reverse(c)
			return c
		}
		for _, q := range g[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

// TestLayers holds the rules: a package linking what a rule forbids
// fails with the import chain that brings it in.
func TestLayers(t *testing.T) {
	var pkgs []string
	for _, r := range rules {
		pkgs = append(pkgs, expand(r.pkg))
	}
	g := graph(t, pkgs)
	for _, r := range rules {
		pkg := expand(r.pkg)
		if _, ok := g[pkg]; !ok {
			t.Errorf("%s: go list did not list it", r.pkg)
			continue
		}
		for _, f := range r.forbidden {
			if c := chain(g, pkg, expand(f)); c != nil {
				t.Errorf("%s links %s (%s): %s", r.pkg, f, r.why, strings.Join(c, " -> "))
			}
		}
	}
}
