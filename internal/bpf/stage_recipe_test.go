// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// stageEdit is one step of the recipe for a stage (docs/architecture.md,
// "Adding a stage"): what it does to a file of bpf/ (old is "" for a new
// file).
type stageEdit struct {
	file string
	edit func(old string) (string, bool)
}

// after puts text after the one place anchor is in a file.
func after(anchor, text string) func(string) (string, bool) {
	return func(old string) (string, bool) {
		if strings.Count(old, anchor) != 1 {
			return "", false
		}
		return strings.Replace(old, anchor, anchor+text, 1), true
	}
}

// beforeGuardEnd puts text before the #endif that ends a header.
func beforeGuardEnd(text string) func(string) (string, bool) {
	return func(old string) (string, bool) {
		const end = "\n#endif\n"
		if !strings.HasSuffix(old, end) {
			return "", false
		}
		return strings.TrimSuffix(old, end) + "\n" + text + end[1:], true
	}
}

// testStageMap is the stage's state between packets, as edge_maps.h
// declares maps.
const testStageMap = `/* The test stage's counters (lib/test_stage.h): [0] packets it saw,
 * [1] those it dropped. Written by packets, read by TestStageRecipe. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ctr);
	__uint(max_entries, 2);
} edge_test_ctrs SEC(".maps");
`

// stageRecipe is the recipe, for a stage with a map of its own that
// runs on every decided packet: three files of bpf/ and nothing in Go.
func stageRecipe(t *testing.T) []stageEdit {
	stage, err := os.ReadFile("testdata/stage/test_stage.h")
	if err != nil {
		t.Fatal(err)
	}
	return []stageEdit{
		// 1. The stage: a header of its own.
		{"lib/test_stage.h", func(old string) (string, bool) { return string(stage), old == "" }},
		// 2. Its state between packets: a map in edge_maps.h.
		{"edge_maps.h", beforeGuardEnd(testStageMap)},
		// 3. Included by the pipeline and called at its place: here
		// right after the packet is decided.
		{"lib/pipeline.h", after("#include \"verdict.h\"\n", "#include \"test_stage.h\"\n")},
		{"lib/pipeline.h", after("\n\tfl = decide(ctx, c, st, &emc, &rc);\n\tif (!fl)\n\t\treturn rc;\n",
			"\trc = edge_test_stage(c);\n\tif (rc != EDGE_GO_ON)\n\t\treturn rc;\n")},
	}
}

// stageFiles are the files the recipe touches, as docs/architecture.md
// counts them for such a stage.
var stageFiles = []string{"edge_maps.h", "lib/pipeline.h", "lib/test_stage.h"}

// TestStageRecipe adds a stage to a copy of bpf/ by the recipe alone,
// then runs the program through the production loader and commit
// unchanged (no Go file touched; the stage's map is created and shared
// by name): the stage sees every decided packet, first and cached, and
// the packets it drops are dropped and counted.
func TestStageRecipe(t *testing.T) {
	testutil.RequireTool(t, "clang")
	testutil.RequireRoot(t)
	src, err := filepath.Abs("../../bpf")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bpf")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	for _, e := range stageRecipe(t) {
		p := filepath.Join(dir, e.file)
		old, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		out, ok := e.edit(string(old))
		if !ok {
			t.Fatalf("bpf/%s has changed where the recipe edits it: update the recipe (docs/architecture.md) and this test", e.file)
		}
		if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := changedFiles(t, src, dir); !slices.Equal(got, stageFiles) {
		t.Errorf("the recipe touched %v, the docs say %v", got, stageFiles)
	}

	// As TestHeadersCompileAlone would: the header includes what it uses.
	alone := filepath.Join(t.TempDir(), "alone.c")
	if err := os.WriteFile(alone, []byte("#include \"lib/test_stage.h\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	compile(t, dir, alone)
	obj, err := ebpf.LoadCollectionSpec(compile(t, dir, filepath.Join(dir, "xdp_edge.bpf.c")))
	if err != nil {
		t.Fatal(err)
	}

	h := newHarnessOf(t, `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
  - {name: wan1, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
pdrs:
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.3.0.0/16}, far: 1}
limits: {flows: 4096, rules: 64}
`, obj)
	ctrs := progMap(t, h.dp.Prog, "edge_test_ctrs")
	drops := func() uint64 { return h.snapshot().Verdicts[bpf.XDPDrop].Packets }
	dropsBefore := drops()
	for i, c := range []struct {
		name       string
		s          spec
		verdict    uint32
		seen, drop uint64
	}{
		{"udp/53, first packet", v4(dst4, udpU(40000, 53)), bpf.XDPRedirect, 1, 0},
		{"udp/53, cached", v4(dst4, udpU(40000, 53)), bpf.XDPRedirect, 2, 0},
		{"udp/9, dropped by the stage", v4(dst4, udpU(40000, 9)), bpf.XDPDrop, 3, 1},
		{"tcp/9", v4(dst4, tcpU(40000, 9)), bpf.XDPRedirect, 4, 1},
	} {
		frame := serialize(t, c.s())
		got, out := h.run(frame, "lan0")
		if got != c.verdict {
			t.Errorf("%s: verdict %s, want %s (pcap: %s)", c.name, verdictName(got), verdictName(c.verdict), writePcap(t, t.Name()+"-"+c.name, frame, out))
		}
		if c.verdict == bpf.XDPRedirect {
			if want := forwarded(t, c.s, "wan0"); string(out) != string(want) {
				t.Errorf("%s: forwarded frame differs (pcap: %s)", c.name, writePcap(t, t.Name()+"-"+c.name, frame, out, want))
			}
		}
		if seen, drop := counters(t, ctrs, 0), counters(t, ctrs, 1); seen != c.seen || drop != c.drop {
			t.Errorf("after case %d (%s): the stage saw %d and dropped %d, want %d and %d", i, c.name, seen, drop, c.seen, c.drop)
		}
	}
	if d := drops() - dropsBefore; d != 1 {
		t.Errorf("dropped packets counted: %d, want 1", d)
	}
}

// changedFiles lists the files of dir that are not as they are in src, or
// not in src at all, relative to dir and sorted.
func changedFiles(t *testing.T, src, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		now, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if was, err := os.ReadFile(filepath.Join(src, rel)); err != nil || string(was) != string(now) {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// compile compiles file with the dataplane's flags and include path dir
// and returns the object's path.
func compile(t *testing.T, dir, file string) string {
	t.Helper()
	obj := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(file), ".c")+".o")
	args := append(slices.Clone(bpf.ClangFlags), "-I", dir, "-c", file, "-o", obj)
	if out, err := exec.Command("clang", args...).CombinedOutput(); err != nil {
		t.Fatalf("compile %s: %v\n%s", file, err, out)
	}
	return obj
}

// progMap returns the map called name that prog uses: one the Go side
// does not know by a generated field, as a stage's new map is until `make
// generate`.
func progMap(t *testing.T, prog *ebpf.Program, name string) *ebpf.Map {
	t.Helper()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		if mi, err := m.Info(); err == nil && mi.Name == name {
			t.Cleanup(func() { m.Close() })
			return m
		}
		m.Close()
	}
	t.Fatalf("the program uses no map %s", name)
	return nil
}

// counters sums the packets of entry i of a per-CPU edge_ctr array.
func counters(t *testing.T, m *ebpf.Map, i uint32) uint64 {
	t.Helper()
	var per []dataplane.Counter
	if err := m.Lookup(i, &per); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range per {
		n += c.Packets
	}
	return n
}
