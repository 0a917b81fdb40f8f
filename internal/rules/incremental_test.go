// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// canon describes what a generation makes packets see, independent of
// the places (group tags, FAR and statistics indexes) it put things at:
// the search order of masks, every entry with its mask, rule and FAR. It
// also checks that each PDR has one statistics index of its own.
func canon(t *testing.T, g *commit.Generation) string {
	t.Helper()
	masks := map[uint32]bpf.FlowKey{}
	var groups []string
	for i, grp := range g.Groups {
		if i > 0 && grp.MinPrio < g.Groups[i-1].MinPrio {
			t.Fatalf("groups out of search order at %d", i)
		}
		masks[grp.Tag] = grp.Mask
		// Groups of equal best prio (one PDR's port blocks) may come in
		// any order: the search stops only at a worse one.
		groups = append(groups, fmt.Sprintf("group min %020d %x", grp.MinPrio, grp.Mask))
	}
	slices.Sort(groups)
	var b strings.Builder
	b.WriteString(strings.Join(groups, "\n") + "\n")
	stats := map[uint32]uint32{}
	owner := map[uint32]uint32{}
	var lines []string
	for k, r := range g.Rules {
		m, ok := masks[k.Group]
		if !ok {
			t.Fatalf("entry in group tag %d, which is not in the search order", k.Group)
		}
		far, ok := g.FARs[r.Far]
		if !ok {
			t.Fatalf("entry of PDR %d points at FAR index %d, which holds nothing", uint32(r.Prio), r.Far)
		}
		id := uint32(r.Prio)
		if s, ok := stats[id]; ok && s != r.Stats {
			t.Fatalf("PDR %d has statistics indexes %d and %d", id, s, r.Stats)
		}
		if o, ok := owner[r.Stats]; ok && o != id {
			t.Fatalf("PDRs %d and %d share statistics index %d", o, id, r.Stats)
		}
		stats[id], owner[r.Stats] = r.Stats, id
		lines = append(lines, fmt.Sprintf("%x/%x prio %d far %+v", k.K, m, r.Prio, far))
	}
	slices.Sort(lines)
	b.WriteString(strings.Join(lines, "\n"))
	// Services, each with its table as the FAR ids it holds, and its
	// reply rewrite.
	var svcs []string
	for k, sv := range g.Services {
		tbl := g.Tables[sv.Tag]
		owners := make([]string, len(tbl.Members))
		for i, m := range tbl.Members {
			if m == bpf.ReplyMember || tbl.Far[m] == bpf.NoFAR {
				owners[i] = "-"
			} else {
				owners[i] = fmt.Sprint(g.FARs[tbl.Far[m]].Id)
			}
		}
		unnat := "none"
		if sv.Unnat != bpf.NoFAR {
			unnat = fmt.Sprintf("%+v", g.FARs[sv.Unnat])
		}
		svcs = append(svcs, fmt.Sprintf("service %d %x:%d/%d flags %x prec %d unnat %s table %s", sv.Id, k.Vip, k.Port, k.Proto, sv.Flags, sv.Prec, unnat, strings.Join(owners, ",")))
	}
	for k, nb := range g.NATBackends {
		for _, u := range nb.U {
			if u.Svc != 0 {
				svcs = append(svcs, fmt.Sprintf("nat backend %x:%d/%d of service %d (flags %x), rewrite %+v", k.Vip, k.Port, k.Proto, u.Svc, u.Flags, g.FARs[u.Unnat]))
			}
		}
	}
	slices.Sort(svcs)
	b.WriteString("\n" + strings.Join(svcs, "\n"))
	return b.String()
}

// TestIncrementalMatchesFullCompile applies random batches through the
// store and the compiler, as the agent does for API calls, and checks
// after each that the tables are what compiling the whole config from
// scratch gives, that Dirty lists every entry that changed, and that a
// refused or undone batch leaves the tables as they were.
func TestIncrementalMatchesFullCompile(t *testing.T) {
	cfg := mustParse(t, base)
	cfg.Limits.Rules = 300 // small enough that some batches overflow
	limits := bpf.Limits{Flows: 1024, Rules: cfg.Limits.Rules, MaglevSize: 257}
	store := config.NewStore(cfg)
	comp, err := Build(cfg, resolver, NewAllocs(limits.Rules, nil, nil), limits)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(7))
	var applied, refusedStore, refusedCompile, undone int
	for i := 0; i < 1500; i++ {
		ops := testutil.RandomOps(rng, store.Config(), 1+rng.Intn(6))
		if len(ops) == 0 {
			continue
		}
		g := comp.Generation()
		before := canon(t, g)
		oldRules, oldFARs := maps.Clone(g.Rules), maps.Clone(g.FARs)
		ch, undoStore, err := store.Apply(ops)
		if err != nil {
			refusedStore++
			continue
		}
		undoComp, err := comp.Apply(ch)
		if err != nil {
			refusedCompile++
			undoStore()
			if after := canon(t, comp.Generation()); after != before {
				t.Fatalf("batch %d: refused (%v) but the tables changed", i, err)
			}
			continue
		}
		if rng.Intn(6) == 0 {
			undone++
			undoComp()
			undoStore()
			if after := canon(t, comp.Generation()); after != before {
				t.Fatalf("batch %d: undone but the tables differ", i)
			}
			continue
		}
		applied++
		g = comp.Generation()
		for k := range g.Dirty.Rules {
			delete(oldRules, k) // what is dirty may differ
		}
		for k, v := range g.Rules {
			if _, dirty := g.Dirty.Rules[k]; dirty {
				continue
			}
			if old, ok := oldRules[k]; !ok || old != v {
				t.Fatalf("batch %d: entry %+v changed but is not in Dirty", i, k)
			}
			delete(oldRules, k)
		}
		if len(oldRules) > 0 {
			t.Fatalf("batch %d: %d entries removed but not in Dirty", i, len(oldRules))
		}
		for idx, f := range g.FARs {
			if _, dirty := g.Dirty.FARs[idx]; !dirty && oldFARs[idx] != f {
				t.Fatalf("batch %d: FAR index %d changed but is not in Dirty", i, idx)
			}
		}
		full, _, err := Compile(store.Config(), resolver, NewAllocs(limits.Rules, nil, nil), limits)
		if err != nil {
			t.Fatalf("batch %d: the store's config does not compile whole: %v\nops: %+v", i, err, ops)
		}
		if got, want := canon(t, g), canon(t, full); got != want {
			t.Fatalf("batch %d (%d ops): incremental tables differ from a full compile\nincremental:\n%s\nfull:\n%s", i, len(ops), got, want)
		}
	}
	t.Logf("%d batches applied, %d refused by the store, %d by the compiler, %d undone; %d PDRs, %d entries, %d groups at the end",
		applied, refusedStore, refusedCompile, undone, len(store.Config().PDRs), len(comp.Generation().Rules), len(comp.Generation().Groups))
	if len(comp.Generation().Services) == 0 {
		t.Errorf("no service at the end: the balancer's changes were not exercised")
	}
	if applied < 500 || refusedStore == 0 || refusedCompile == 0 || undone == 0 {
		t.Errorf("the random batches did not exercise every outcome")
	}
}

// TestPathChangeRebuildsTable moves a dsr-gre backend's tunnel: its remote
// is the member's key in the Maglev table, so the service's table must be
// what a compile from scratch builds.
func TestPathChangeRebuildsTable(t *testing.T) {
	cfg := mustParse(t, `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}]
paths:
  - {id: 1, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.6.1.1, key: 1, monitor: {insecure: true}}
  - {id: 2, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.6.1.2, key: 2, monitor: {insecure: true}}
  - {id: 3, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.6.1.3, key: 3, monitor: {insecure: true}}
fars: [{id: 21, action: encap, path: 1}, {id: 22, action: encap, path: 2}, {id: 23, action: encap, path: 3}]
lbrs: [{id: 1, algorithm: maglev, members: [{far: 21}, {far: 22}, {far: 23}]}]
services: [{id: 1, vip: 203.0.113.20, port: 80, proto: udp, lbr: 1}]
limits: {flows: 1024, rules: 64}
`)
	limits := bpf.Limits{Flows: 1024, Rules: cfg.Limits.Rules, MaglevSize: 257}
	store := config.NewStore(cfg)
	comp, err := Build(cfg, resolver, NewAllocs(limits.Rules, nil, nil), limits)
	if err != nil {
		t.Fatal(err)
	}
	before := canon(t, comp.Generation())
	moved := cfg.Paths[1]
	moved.Remote = config.Addr{A: netip.MustParseAddr("10.6.9.9")}
	ch, _, err := store.Apply([]config.Op{{At: "operations[0].update.path", Verb: config.Update, Kind: config.KindPath, Object: moved}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comp.Apply(ch); err != nil {
		t.Fatal(err)
	}
	full, _, err := Compile(store.Config(), resolver, NewAllocs(limits.Rules, nil, nil), limits)
	if err != nil {
		t.Fatal(err)
	}
	got, want := canon(t, comp.Generation()), canon(t, full)
	if got != want {
		t.Errorf("after moving path 2, the incremental table differs from a full compile")
	}
	if got == before {
		t.Errorf("moving a backend's tunnel left the table as it was")
	}
}

// TestBuildDownIsOneWhole builds a config with a backend health checks took
// out: its table equals the one taking it out after the build gives, and
// the generation stays marked for a whole comparison (a later Apply-like
// step used to replace that mark with its own few keys, so a reload's
// changes never reached the kernel).
func TestBuildDownIsOneWhole(t *testing.T) {
	cfg := mustParse(t, `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}]
fars: [{id: 11, action: nat, address: 10.6.0.11, port: 80}, {id: 12, action: nat, address: 10.6.0.12, port: 80}]
lbrs: [{id: 1, algorithm: maglev, members: [{far: 11}, {far: 12}]}]
services: [{id: 1, vip: 203.0.113.20, port: 80, proto: tcp, lbr: 1}]
limits: {flows: 1024, rules: 64}
`)
	limits := bpf.Limits{Flows: 1024, Rules: cfg.Limits.Rules, MaglevSize: 257}
	down, err := BuildDown(cfg, resolver, NewAllocs(limits.Rules, nil, nil), limits, map[uint32]map[uint32]bool{1: {12: true}})
	if err != nil {
		t.Fatal(err)
	}
	if down.Generation().Dirty != nil {
		t.Errorf("BuildDown's generation is not marked for a whole comparison")
	}
	after, err := Build(cfg, resolver, NewAllocs(limits.Rules, nil, nil), limits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := after.SetBackendUp(1, 12, false); err != nil {
		t.Fatal(err)
	}
	if got, want := canon(t, down.Generation()), canon(t, after.Generation()); got != want {
		t.Errorf("BuildDown's tables differ from Build then SetBackendUp")
	}
	tbl := down.Generation().Tables[0]
	for i, m := range tbl.Members {
		if m != bpf.ReplyMember && tbl.Far[m] != bpf.NoFAR && m != 0 {
			t.Fatalf("table entry %d names the backend that is down: member %d, far %d", i, m, tbl.Far[m])
		}
	}
}
