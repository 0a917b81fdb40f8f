// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// steerBase has two paths, their encap FARs (11, 12) and n steering
// groups (LBRs 100.., each over 11 and 12, the second per packet) each
// named by a steer FAR (200..).
func steerBase(n int) string {
	var b strings.Builder
	b.WriteString(`
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}]
paths:
  - {id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.1.1, monitor: {insecure: true}}
  - {id: 2, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.1.2, key: 2, monitor: {insecure: true}}
fars:
  - {id: 11, action: encap, path: 1}
  - {id: 12, action: encap, path: 2}
`)
	for i := range n {
		fmt.Fprintf(&b, "  - {id: %d, action: steer, lbr: %d}\n", 200+i, 100+i)
	}
	b.WriteString("lbrs:\n")
	for i := range n {
		alg, extra := "active-standby", ""
		if i == 1 {
			alg, extra = "load-balancing", ", per_packet: true"
		}
		fmt.Fprintf(&b, "  - {id: %d, algorithm: %s, members: [{far: 12}, {far: 11}]%s}\n", 100+i, alg, extra)
	}
	b.WriteString("limits: {flows: 1024, rules: 1024}\n")
	return b.String()
}

// TestCompileSteering: each steering group named by a steer FAR gets an
// index, its members' FAR indexes in its order and its per-packet flag;
// the steer FAR holds the index. An LBR no steer FAR names gets none.
// More groups than the dataplane holds is a capacity error.
func TestCompileSteering(t *testing.T) {
	cfg := mustParse(t, strings.Replace(steerBase(2), "limits:", "  - {id: 102, algorithm: wrr, members: [{far: 11}]}\nlimits:", 1))
	comp, err := Build(cfg, resolver, NewAllocs(1024, nil, nil), bpf.Limits{Flows: 1024, Rules: 1024})
	if err != nil {
		t.Fatal(err)
	}
	g := comp.Generation()
	idx := comp.SteerGroups()
	if len(idx) != 2 || len(g.Steers) != 2 {
		t.Fatalf("groups %v, steers %v: want LBRs 100 and 101 only", idx, g.Steers)
	}
	for i, want := range []struct {
		lbr   uint32
		far   uint32
		flags uint32
	}{{100, 200, 0}, {101, 201, bpf.SteerPerPacket}} {
		s, ok := g.Steers[idx[want.lbr]]
		if !ok {
			t.Fatalf("group %d: no steering entry at %d", i, idx[want.lbr])
		}
		if s.N != 2 || s.Far[0] != comp.fars[12] || s.Far[1] != comp.fars[11] || s.Flags != want.flags {
			t.Errorf("lbr %d: %+v, want members FAR 12 (%d) then 11 (%d), flags %d", want.lbr, s, comp.fars[12], comp.fars[11], want.flags)
		}
		if f := g.FARs[comp.fars[want.far]]; f.Action != bpf.ActSteer || f.Path != idx[want.lbr] {
			t.Errorf("steer FAR %d: %+v, want action steer and group %d", want.far, f, idx[want.lbr])
		}
	}

	if _, _, err := Compile(mustParse(t, steerBase(bpf.MaxSteer+1)), resolver, NewAllocs(1024, nil, nil), bpf.Limits{Flows: 1024, Rules: 1024}); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("more than %d steering groups", bpf.MaxSteer)) {
		t.Errorf("%d steering groups compiled: %v", bpf.MaxSteer+1, err)
	}
	if _, _, err := Compile(mustParse(t, steerBase(bpf.MaxSteer)), resolver, NewAllocs(1024, nil, nil), bpf.Limits{Flows: 1024, Rules: 1024}); err != nil {
		t.Errorf("%d steering groups: %v", bpf.MaxSteer, err)
	}
}

// redundantCfg is a redundant group (LBR 7, steer FAR 20) over encap FARs
// 1 and 2, into paths 1 and 2 as given.
func redundantCfg(path1, path2 string) string {
	return `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}, {name: wan1, role: wan}]
paths:
  - {id: 1, type: gre, local: 10.0.0.1, remote: 10.0.1.1, monitor: {insecure: true}` + path1 + `}
  - {id: 2, type: gre, local: 10.0.2.1, remote: 10.0.3.1, monitor: {insecure: true}` + path2 + `}
fars:
  - {id: 1, action: encap, path: 1}
  - {id: 2, action: encap, path: 2}
  - {id: 20, action: steer, lbr: 7}
lbrs:
  - {id: 7, algorithm: redundant, members: [{far: 1}, {far: 2}]}
limits: {flows: 1024, rules: 1024}
`
}

// TestCompileRedundant: a redundant group is flagged so; its copies are
// made one per interface and rewritten in place, so a member whose path
// shares another member's interface, numbers its own packets, or differs
// in having a GRE key is refused, naming the member and why.
func TestCompileRedundant(t *testing.T) {
	lim := bpf.Limits{Flows: 1024, Rules: 1024}
	comp, err := Build(mustParse(t, redundantCfg(", interface: wan0, key: 1", ", interface: wan1, key: 2")), resolver, NewAllocs(1024, nil, nil), lim)
	if err != nil {
		t.Fatal(err)
	}
	if s := comp.Generation().Steers[comp.SteerGroups()[7]]; s.N != 2 || s.Flags != bpf.SteerRedundant {
		t.Errorf("redundant group: %+v, want 2 members, flags %d", s, bpf.SteerRedundant)
	}
	for _, c := range []struct{ name, p1, p2, want string }{
		{"one interface", ", interface: wan0", ", interface: wan0", "lbrs[0].members[1].far: path 2 leaves by the interface of members[0]'s path; a redundant group sends one copy per interface"},
		{"key on one", ", interface: wan0, key: 1", ", interface: wan1", "lbrs[0].members[1].far: path 2 has no key and members[0]'s path has one; a redundant group's paths all have one or none"},
		{"own numbers", ", interface: wan0, seq: true", ", interface: wan1", "lbrs[0].members[0].far: path 1 numbers its own packets (seq); a redundant group's paths carry the group's numbers"},
	} {
		_, _, err := Compile(mustParse(t, redundantCfg(c.p1, c.p2)), resolver, NewAllocs(1024, nil, nil), lim)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestCompileProbeSecrets: a path's probe secret goes to the dataplane
// with the path, at its index (a path without one, insecure, has none
// there); a secret given only in its redacted form, which is no key, is
// refused at its field.
func TestCompileProbeSecrets(t *testing.T) {
	lim := bpf.Limits{Flows: 1024, Rules: 1024}
	const key = "000102030405060708090a0b0c0d0e0f"
	cfg := `
interfaces: [{name: wan0, role: wan}]
paths:
  - {id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.1.1, monitor: {secret: ` + key + `}}
  - {id: 2, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.1.2, key: 2, monitor: {insecure: true}}
limits: {flows: 1024, rules: 1024}
`
	comp, err := Build(mustParse(t, cfg), resolver, NewAllocs(1024, nil, nil), lim)
	if err != nil {
		t.Fatal(err)
	}
	g := comp.Generation()
	var idx1, idx2 uint32
	for i, p := range g.Paths {
		switch p.Id {
		case 1:
			idx1 = i
		case 2:
			idx2 = i
		}
	}
	want := bpf.NewProbeSecret([16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	if s, ok := g.ProbeSecrets[idx1]; !ok || s != want || len(g.ProbeSecrets) != 1 {
		t.Errorf("probe secrets %+v (path 1 at %d, 2 at %d), want path 1's only: %+v", g.ProbeSecrets, idx1, idx2, want)
	}
	s, _ := config.ParseSecret(key)
	redacted := strings.Replace(cfg, key, s.String(), 1)
	_, _, err = Compile(mustParse(t, redacted), resolver, NewAllocs(1024, nil, nil), lim)
	if err == nil || !strings.Contains(err.Error(), "paths[0].monitor.secret: "+s.String()+" is how a secret is shown, not one") {
		t.Errorf("a redacted secret compiled: %v", err)
	}
}
