// SPDX-License-Identifier: Apache-2.0

package upgrade

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// TestMapRoles: every map the dataplane pins says how an upgrade carries
// it over.
func TestMapRoles(t *testing.T) {
	spec, err := bpf.LoadSpec()
	if err != nil {
		t.Fatal(err)
	}
	for name, ms := range spec.Maps {
		_, ok := mapRoles[name]
		if pinned := ms.Pinning == ebpf.PinByName; pinned != ok {
			t.Errorf("map %s: pinned %v, has an upgrade role %v", name, pinned, ok)
		}
	}
	for name := range mapRoles {
		if _, ok := spec.Maps[name]; !ok {
			t.Errorf("upgrade role for map %s, which the dataplane does not have", name)
		}
	}
}

// TestFARGeometry moves FAR places between rules limits: rule FARs keep
// their index, reply rewrites follow the limit, FARs past a smaller one
// are dropped.
func TestFARGeometry(t *testing.T) {
	g := farGeometry{oldStride: 64 + bpf.MaxServices, newStride: 128 + bpf.MaxServices}
	for _, c := range []struct {
		in, want uint64
		ok       bool
	}{
		{5, 5, true}, {64 + 3, 128 + 3, true}, {80 + 5, 144 + 5, true}, {80 + 64 + 2, 144 + 128 + 2, true},
	} {
		got, ok := g.index(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("index %d -> %d %v, want %d %v", c.in, got, ok, c.want, c.ok)
		}
	}
	small := farGeometry{oldStride: 128 + bpf.MaxServices, newStride: 64 + bpf.MaxServices}
	if _, ok := small.place(100); ok {
		t.Error("a rule FAR past the new limit kept")
	}
	if p, ok := small.place(128 + 2); !ok || p != 64+2 {
		t.Errorf("reply rewrite of tag 2 -> %d %v, want %d", p, ok, 64+2)
	}
	if _, ok := g.place(bpf.NoFAR); ok {
		t.Error("EDGE_NO_FAR moved")
	}
}
