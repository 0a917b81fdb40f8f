// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// pinDataplane pins edgeplane's maps and program under dir, as an agent
// does, and releases the handles.
func pinDataplane(t *testing.T, dir string) {
	t.Helper()
	dp, err := loader.Open(bpf.Limits{Flows: 1024, Rules: 64}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if _, err := dp.EnsureProgram(dir, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
}

// pinForeign pins a map another tool made under dir as name.
func pinForeign(t *testing.T, dir, name string) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "foreign", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestDownLeavesForeignPins: `edgeplane down` on a pin dir edgeplane did
// not create (the bpffs root, a dir shared with other tools) removes
// edgeplane's program and maps and nothing else, even pins named like
// edgeplane's; on a dir it created it removes everything and the dir.
func TestDownLeavesForeignPins(t *testing.T) {
	testutil.RequireRoot(t)
	if err := loader.EnsureBPFFS("/sys/fs/bpf"); err != nil {
		t.Fatal(err)
	}

	t.Run("shared", func(t *testing.T) {
		dir := "/sys/fs/bpf/" + testutil.UniqueName("agtshared")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, n := range []string{"edge_foreign", "link_foreign", "prog_foreign", "other"} {
				os.Remove(filepath.Join(dir, n))
			}
			os.Remove(dir)
		})
		// Another tool was there first: the dir is not edgeplane's.
		for _, n := range []string{"edge_foreign", "link_foreign", "prog_foreign", "other"} {
			pinForeign(t, dir, n)
		}
		if err := loader.EnsureBPFFS(dir); err != nil {
			t.Fatal(err)
		}
		pinDataplane(t, dir)
		if err := Down(dir); err != nil {
			t.Fatalf("down: %v", err)
		}
		got := dirNames(t, dir)
		want := []string{"edge_foreign", "link_foreign", "other", "prog_foreign"}
		if len(got) != len(want) {
			t.Fatalf("pin dir after down holds %v, want only the foreign %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("pin dir after down holds %v, want only the foreign %v", got, want)
			}
		}
	})

	t.Run("own", func(t *testing.T) {
		dir := "/sys/fs/bpf/" + testutil.UniqueName("agtown")
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := loader.EnsureBPFFS(dir); err != nil {
			t.Fatal(err)
		}
		pinDataplane(t, dir)
		if err := Down(dir); err != nil {
			t.Fatalf("down: %v", err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("pin dir edgeplane created still there after down: %v", err)
		}
	})
}
