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

// module is the path every "./" path of the rules is relative to.
const module = "github.com/edgeplane/edgeplane"

// production stands, as a rule's pkg, for every package of the module
// but the developer tools and test/.
const production = "production"

// loader is what links the XDP objects and the kernel's BPF calls.
var loader = []string{"./internal/bpf", "github.com/cilium/ebpf"}

// loaderPkgs are the loader's packages by name, for the rules that
// allow a package to link it (allowed names packages exactly).
var loaderPkgs = []string{"./internal/bpf", "./internal/bpf/rcu", "./internal/bpf/mapconv", "./internal/bpf/commit",
	"./internal/bpf/stats", "./internal/bpf/upgrade", "./internal/bpf/loader"}

// devTools are the packages for trying, measuring and testing edgeplane
// on one machine. They start etcd's server, build namespaces, emulate
// WAN links and time the dataplane: nothing a gateway or a controller
// runs.
var devTools = []string{
	"go.etcd.io/etcd/server",
	"./cmd/edgeplane-dev",
	"./internal/bench",
	"./internal/devtools",
	"./internal/lab",
	"./internal/wanem",
	"./internal/topo",
	"./internal/testutil",
	"./internal/api/apitest",
}

// configModel is the bottom of the config's layers: the object model.
var configModel = []string{"./internal/config", "./internal/config/yamlnode", "./internal/maglev"}

// rules says which packages must not link which. Paths are import
// paths, "./" standing for the module's. A forbidden path forbids the
// packages under it too, but for those allowed names exactly. A
// package's links are its dependencies as `go list -deps` gives them
// (its tests' aside). Add a row to hold a new rule.
var rules = []struct {
	pkg       string // or production
	forbidden []string
	allowed   []string
	why       string
}{
	// The dataplane's contract and who reads it.
	{"./internal/dataplane", []string{"./", "github.com/cilium/ebpf"}, nil,
		"the dataplane's contract is the bottom layer: the API, the controller, the metrics and the loader all import it"},
	{"./internal/api", loader, nil, "the API serves a gateway's dataplane through the contract (internal/dataplane), and a controller, which has none"},
	{"./internal/fleet", loader, nil, "the fleet controller runs where no dataplane is loaded"},
	{"./internal/client", loader, nil, "the CLI's API client talks to a gateway, it loads nothing"},
	{"./internal/metrics", loader, nil, "the metrics read counters through the contract"},
	// The loader's layers: leaves at the bottom, the object above them,
	// each job above the object, the loader on top.
	{"./internal/bpf/rcu", []string{"./"}, nil, "waiting out grace periods needs nothing of the dataplane"},
	{"./internal/bpf/mapconv", []string{"./"}, nil, "maps of any build as bytes, converted by their BTF: nothing of this build's object"},
	{"./internal/bpf", []string{"./"}, []string{"./internal/bpf/mapconv", "./internal/dataplane"},
		"the object and typed access to its maps are below every job that uses them"},
	{"./internal/bpf/commit", []string{"./"}, []string{"./internal/bpf", "./internal/bpf/rcu", "./internal/bpf/mapconv", "./internal/dataplane"},
		"the rule writer needs the object and grace periods, nothing of the loader, the readers or the upgrade"},
	{"./internal/bpf/stats", []string{"./"}, []string{"./internal/bpf", "./internal/bpf/mapconv", "./internal/dataplane"},
		"the counters' readers read the object's maps (or pins), whoever wrote them"},
	{"./internal/bpf/upgrade", []string{"./"}, []string{"./internal/bpf", "./internal/bpf/rcu", "./internal/bpf/mapconv", "./internal/dataplane"},
		"an upgrade carries maps over; the loader puts the writer over them"},
	{"./internal/bpf/loader", []string{"./internal/config"}, nil,
		"the loader attaches to interfaces by name and mode; the config model is the agent's"},
	{"./internal/rules", []string{"./internal/bpf/loader", "./internal/bpf/stats", "./internal/bpf/upgrade"}, nil,
		"the rule compiler builds a generation for the writer; it loads and reads nothing"},
	// Binaries by audience.
	{"./cmd/edgeplane", devTools, nil,
		"the binary a gateway and a controller run links no lab, bench, emulator or etcd server"},
	{production, devTools, nil,
		"production packages never import developer tools (cmd/edgeplane-dev carries them)"},
	// The config's layers: the model, then its YAML form; the CLI's
	// tables, the API and the dataplane import them, never the other way.
	{"./internal/config", []string{"./"}, configModel, "the object model is the bottom of the config's layers"},
	{"./internal/config/yamlcfg", []string{"./"}, append(slices.Clone(configModel), "./internal/config/yamlcfg", "./internal/atomicfile"),
		"the config file's YAML form imports nothing above the model but the atomic file write"},
	// The agent's subsystems below it: each takes the config and what
	// it needs of the dataplane, never the agent.
	{"./internal/sched", []string{"./"}, append(slices.Clone(configModel), "./internal/dataplane", "./internal/sched/scx"),
		"CPU strategies read the config's strategies and report through the contract; the agent starts them"},
	{"./internal/pathmon", []string{"./"}, slices.Concat(configModel, []string{"./internal/dataplane", "./internal/rtloop", "./internal/cpuwatch"}, loaderPkgs),
		"path monitoring probes and steers through the loader; the agent starts it"},
	{"./internal/rtloop", []string{"./"}, nil, "a real-time loop needs nothing of edgeplane"},
	{"./internal/cpuwatch", []string{"./"}, configModel, "watching for stopped CPUs needs nothing of edgeplane but the cpulist's parser"},
	{"./internal/n4", []string{"./"}, nil,
		"the N4 endpoint speaks PFCP to SMFs; what a session asks of the dataplane reaches it through the agent"},
	{"./internal/upf", []string{"./"}, append([]string{"./internal/n4", "./internal/atomicfile", "./internal/dataplane", "./internal/rtloop"}, loaderPkgs...),
		"the user plane compiles N4's sessions for the dataplane and journals them, and probes its access peers on a real-time loop; the agent hands it to N4"},
	{"./internal/fibwatch", []string{"./"}, append([]string{"./internal/dataplane"}, loaderPkgs...),
		"following the kernel's routing for the next hops needs the loader alone; the agent starts it"},
	// The bench's parts stand alone: the top level runs the ones asked
	// for and assembles the report; the parts share only measure (goals,
	// percentiles, binaries) and the per-packet and end-to-end parts the
	// gateway they both set up.
	{"./internal/bench/measure", []string{"./"}, []string{"./internal/bench/measure"}, "what every part of the bench shares is the bottom of its layers"},
	{"./internal/bench/testbed", []string{"./internal/bench"}, []string{"./internal/bench/testbed"}, "the gateway the bench's parts set up knows no part"},
	{"./internal/bench/packet", []string{"./internal/bench"}, benchShared("./internal/bench/packet"), "the per-packet part stands alone"},
	{"./internal/bench/endtoend", []string{"./internal/bench"}, benchShared("./internal/bench/endtoend"), "the end-to-end part stands alone"},
	{"./internal/bench/control", []string{"./internal/bench"}, benchShared("./internal/bench/control"), "the control part stands alone"},
	{"./internal/bench/sdwan", []string{"./internal/bench"}, benchShared("./internal/bench/sdwan"), "the SD-WAN lab's scenarios stand alone"},
	{"./internal/bench/fleetbench", []string{"./internal/bench"}, benchShared("./internal/bench/fleetbench"), "the fleet scenario stands alone"},
	// The per-packet part times BPF programs in one namespace: no lab,
	// agent, API or etcd.
	{"./internal/bench/packet", []string{"./internal/lab", "./internal/fleet", "./internal/api", "google.golang.org/grpc", "go.etcd.io/etcd"}, nil,
		"the per-packet part runs the dataplane's program alone"},
}

// benchShared is what a part of the bench may import of the bench: itself
// and what the parts share.
func benchShared(part string) []string {
	return []string{part, "./internal/bench/measure", "./internal/bench/testbed"}
}

// pkgInfo is what `go list -json` says of a package.
type pkgInfo struct {
	ImportPath string
	Imports    []string
	GoFiles    []string
}

// testOnly holds the module's packages that have only test files (graph
// fills it): they are in no binary and in no row of the drawing.
var testOnly = map[string]bool{}

// expand resolves a rule's "./" paths.
func expand(ps ...string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		switch rest, ok := strings.CutPrefix(p, "./"); {
		case p == "./":
			out[i] = module
		case ok:
			out[i] = module + "/" + rest
		default:
			out[i] = p
		}
	}
	return out
}

// under reports whether import path p is one of paths or a package
// below one.
func under(p string, paths []string) bool {
	return slices.ContainsFunc(paths, func(f string) bool { return p == f || strings.HasPrefix(p, f+"/") })
}

// graph lists the module's packages and everything they import, by
// import path, in one go list.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command(testutil.GoTool(), "list", "-deps", "-json=ImportPath,Imports,GoFiles", "./...")
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
		if len(p.GoFiles) == 0 {
			testOnly[p.ImportPath] = true
		}
	}
	return g
}

// chain returns the shortest import chain from pkg to a package under
// forbidden and not allowed, nil when there is none.
func chain(g map[string][]string, pkg string, forbidden, allowed []string) []string {
	from := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != pkg && under(p, forbidden) && !slices.Contains(allowed, p) {
			var c []string
			for ; p != ""; p = from[p] {
				c = append(c, strings.TrimPrefix(p, module+"/"))
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
// fails with the import chain that brings it in. A rule naming a
// package, or forbidding a path, that no package of the graph has
// fails too: it would hold nothing.
func TestLayers(t *testing.T) {
	g := graph(t)
	var all, prod []string
	for p := range g {
		all = append(all, p)
		if under(p, []string{module}) && !under(p, expand(devTools...)) && !under(p, expand("./test")) {
			prod = append(prod, p)
		}
	}
	for _, r := range rules {
		forbidden, allowed := expand(r.forbidden...), expand(r.allowed...)
		for _, f := range forbidden {
			if !slices.ContainsFunc(all, func(p string) bool { return under(p, []string{f}) }) {
				t.Errorf("%s: no package is %s or under it: the rule holds nothing", r.pkg, f)
			}
		}
		pkgs := prod
		if r.pkg != production {
			pkgs = expand(r.pkg)
		}
		for _, pkg := range pkgs {
			if _, ok := g[pkg]; !ok {
				t.Errorf("%s: go list did not list it", r.pkg)
				continue
			}
			for _, f := range forbidden {
				if c := chain(g, pkg, []string{f}, allowed); c != nil {
					t.Errorf("%s links %s (%s): %s", strings.TrimPrefix(pkg, module+"/"), c[len(c)-1], r.why, strings.Join(c, " -> "))
				}
			}
		}
	}
}
