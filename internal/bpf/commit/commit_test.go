// SPDX-License-Identifier: Apache-2.0

package commit_test

import (
	"fmt"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// tables is what one slot of the maps holds.
type tables struct {
	rules    map[bpf.RuleKey]bpf.Rule
	fars     map[uint32]bpf.Far
	groups   []bpf.Group
	services map[bpf.SvcKey]bpf.Svc // SvcKey.Slot zero
	maglev   map[uint32][]lbEntry   // by tag, of the services' tags
}

// lbEntry is a Maglev table entry as packets see it: the backend's FAR
// index (NoFAR: none) and its counters' index.
type lbEntry struct {
	Far, Stats uint32
}

// entries lists the entries of tag's table t.
func entries(tag uint32, t *bpf.LBTable) []lbEntry {
	out := make([]lbEntry, len(t.Members))
	for i, m := range t.Members {
		out[i] = lbEntry{Far: bpf.NoFAR, Stats: tag*bpf.MaxMembers + uint32(m)}
		if m != bpf.ReplyMember {
			out[i].Far = t.Far[m]
		}
	}
	return out
}

func tablesOf(g *commit.Generation) tables {
	t := tables{rules: maps.Clone(g.Rules), fars: maps.Clone(g.FARs), groups: slices.Clone(g.Groups),
		services: maps.Clone(g.Services), maglev: map[uint32][]lbEntry{}}
	for _, sv := range g.Services {
		t.maglev[sv.Tag] = entries(sv.Tag, g.Tables[sv.Tag])
	}
	return t
}

// readTables reads slot t of the kernel's maps.
func readTables(t *testing.T, dp *loader.Dataplane, slot uint32) tables {
	t.Helper()
	st, err := dp.State()
	if err != nil {
		t.Fatal(err)
	}
	out := tables{rules: map[bpf.RuleKey]bpf.Rule{}, fars: map[uint32]bpf.Far{}}
	var k bpf.RuleKey
	var v bpf.Rule
	it := dp.EdgeRules.Iterate()
	for it.Next(&k, &v) {
		if k.Group/bpf.MaxGroups == slot {
			k.Group %= bpf.MaxGroups
			out.rules[k] = v
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	for i := uint32(0); i < dp.Limits.FARStride(); i++ {
		var f bpf.Far
		if err := dp.EdgeFars.Lookup(slot*dp.Limits.FARStride()+i, &f); err != nil {
			t.Fatal(err)
		}
		if f != (bpf.Far{}) {
			out.fars[i] = f
		}
	}
	for i := uint32(0); i < st.Ngroups[slot]; i++ {
		var g bpf.Group
		if err := dp.EdgeGroups.Lookup(slot*bpf.MaxGroups+i, &g); err != nil {
			t.Fatal(err)
		}
		out.groups = append(out.groups, g)
	}
	out.services, out.maglev = map[bpf.SvcKey]bpf.Svc{}, map[uint32][]lbEntry{}
	var sk bpf.SvcKey
	var sv bpf.Svc
	sit := dp.EdgeServices.Iterate()
	for sit.Next(&sk, &sv) {
		if sk.Slot != slot {
			continue
		}
		sk.Slot = 0
		out.services[sk] = sv
		size := sv.Size
		if size == 0 {
			size = dp.Limits.MaglevSize
		}
		// Decode the kernel's form: a member index per entry, a FAR
		// index per member.
		base := slot*bpf.MaxServices + sv.Tag
		tbl := make([]lbEntry, size)
		var blk bpf.MaglevBlk
		for i := range tbl {
			if i%bpf.MaglevBlock == 0 {
				if err := dp.EdgeMaglev.Lookup(base*dp.Limits.MaglevBlocks()+uint32(i/bpf.MaglevBlock), &blk); err != nil {
					t.Fatal(err)
				}
			}
			m := uint32(blk.M[i%bpf.MaglevBlock])
			tbl[i] = lbEntry{Far: bpf.NoFAR, Stats: sv.Tag*bpf.MaxMembers + m}
			if m != bpf.ReplyMember {
				if err := dp.EdgeLbFar.Lookup(base*bpf.MaxMembers+m, &tbl[i].Far); err != nil {
					t.Fatal(err)
				}
			}
		}
		out.maglev[sv.Tag] = tbl
	}
	if err := sit.Err(); err != nil {
		t.Fatal(err)
	}
	if st.Nservices[slot] != uint32(len(out.services)) {
		t.Fatalf("slot %d: nservices %d, %d services in the map", slot, st.Nservices[slot], len(out.services))
	}
	// The slot's service index places exactly its services.
	inSlot := map[bpf.SvcKey]bpf.Svc{}
	for k, v := range out.services {
		k.Slot = slot
		inSlot[k] = v
	}
	want, _ := bpf.SvcIndex(inSlot)
	for b := range want {
		var got bpf.SvcSlot
		if err := dp.EdgeSvcIndex.Lookup(slot*bpf.SvcIndexSize+uint32(b), &got); err != nil {
			t.Fatal(err)
		}
		if got != want[b] {
			t.Fatalf("slot %d: service index bucket %d holds %+v, want %+v", slot, b, got, want[b])
		}
	}
	return out
}

func (a tables) diff(b tables) string {
	if !slices.Equal(a.groups, b.groups) {
		return fmt.Sprintf("groups %v, want %v", a.groups, b.groups)
	}
	if !maps.Equal(a.fars, b.fars) {
		return fmt.Sprintf("fars %v, want %v", a.fars, b.fars)
	}
	if !maps.Equal(a.services, b.services) {
		return fmt.Sprintf("services %v, want %v", a.services, b.services)
	}
	for tag, want := range b.maglev {
		if !slices.Equal(a.maglev[tag], want) {
			return fmt.Sprintf("maglev table of tag %d differs", tag)
		}
	}
	for k, v := range b.rules {
		if got, ok := a.rules[k]; !ok || got != v {
			return fmt.Sprintf("entry %+v: %+v (present %v), want %+v", k, got, ok, v)
		}
	}
	if len(a.rules) != len(b.rules) {
		return fmt.Sprintf("%d entries, want %d", len(a.rules), len(b.rules))
	}
	return ""
}

// TestIncrementalCommitsReachTheMaps commits random batches as the agent
// does (store, compiler, writer with Dirty sets) and checks after each
// that the live slot of the kernel's maps holds exactly the new
// generation and the other slot exactly the one before: the writer's
// pending-plus-dirty bookkeeping loses no entry. Some commits are rolled
// back again (as after a failed journal write).
func TestIncrementalCommitsReachTheMaps(t *testing.T) {
	testutil.RequireRoot(t)
	cfg, err := yamlcfg.Parse([]byte(`
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
pdrs:
  - {id: 1000, precedence: 9, match: {dst: 192.0.2.0/24}, far: 2}
limits: {flows: 1024, rules: 300}
`))
	if err != nil {
		t.Fatal(err)
	}
	// Tables of 251 entries (LBRs that say so) and of the limit's 257.
	limits := bpf.Limits{Flows: cfg.Limits.Flows, Rules: cfg.Limits.Rules, MaglevSize: 257}
	dp, err := loader.Open(limits, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	resolve := func(name string) (uint32, error) { return map[string]uint32{"lan0": 2, "wan0": 3}[name], nil }
	comp, err := rules.Build(cfg, resolve, rules.NewAllocs(limits.Rules, nil, nil), limits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dp.Commit(comp.Generation()); err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(cfg)
	prev := tablesOf(comp.Generation())
	rng := rand.New(rand.NewSource(3))
	var commits, rollbacks int
	check := func(i int, live, other tables) {
		t.Helper()
		st, err := dp.State()
		if err != nil {
			t.Fatal(err)
		}
		if d := readTables(t, dp, st.Gen&1).diff(live); d != "" {
			t.Fatalf("commit %d: live slot: %s", i, d)
		}
		if d := readTables(t, dp, 1-st.Gen&1).diff(other); d != "" {
			t.Fatalf("commit %d: other slot: %s", i, d)
		}
	}
	for i := 0; i < 300; i++ {
		ch, undoStore, err := store.Apply(testutil.RandomOps(rng, store.Config(), 1+rng.Intn(6)))
		if err != nil {
			continue
		}
		undoComp, err := comp.Apply(ch)
		if err != nil {
			undoStore()
			continue
		}
		if _, err := dp.Commit(comp.Generation()); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		commits++
		cur := tablesOf(comp.Generation())
		check(i, cur, prev)
		if rng.Intn(8) == 0 {
			undoComp()
			undoStore()
			if _, err := dp.Commit(comp.Generation()); err != nil {
				t.Fatalf("roll back %d: %v", i, err)
			}
			rollbacks++
			check(i, prev, cur)
			cur = prev
		}
		prev = cur
	}
	t.Logf("%d commits, %d rolled back; %d entries, %d groups, %d services live", commits, rollbacks, len(prev.rules), len(prev.groups), len(prev.services))
	if commits < 100 || rollbacks == 0 {
		t.Errorf("too few commits (%d) or rollbacks (%d) to mean anything", commits, rollbacks)
	}
}

// expeditedSwitch returns a reader of /sys/kernel/rcu_expedited, which
// goes back to what it was when t ends.
func expeditedSwitch(t *testing.T) func() string {
	t.Helper()
	const sw = "/sys/kernel/rcu_expedited"
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(sw)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	orig := read()
	t.Cleanup(func() { os.WriteFile(sw, []byte(orig), 0) })
	return read
}

func setExpedited(t *testing.T, v string) {
	t.Helper()
	if err := os.WriteFile("/sys/kernel/rcu_expedited", []byte(v), 0); err != nil {
		t.Fatal(err)
	}
}

// deadMark writes a mark holding content for a process that has exited,
// as an agent killed would leave it, and returns its path.
func deadMark(t *testing.T, content string) string {
	t.Helper()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("/run/edgeplane-rcu-expedited.%d", dead.Process.Pid)
	if err := os.WriteFile(mark, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(mark) })
	return mark
}

// commitEmpty opens a dataplane without pins and commits three empty
// generations: the second and third wait for a barrier.
func commitEmpty(t *testing.T) *loader.Dataplane {
	t.Helper()
	dp, err := loader.Open(bpf.Limits{Flows: 1024, Rules: 64}, "")
	if err != nil {
		t.Fatal(err)
	}
	g := &commit.Generation{Rules: map[bpf.RuleKey]bpf.Rule{}, FARs: map[uint32]bpf.Far{}, Paths: map[uint32]bpf.Path{}, Decaps: map[bpf.DecapKey]bpf.Decap{}}
	for i := 0; i < 3; i++ {
		if _, err := dp.Commit(g); err != nil {
			t.Fatal(err)
		}
	}
	return dp
}

// TestExpeditedSwitchRestored checks that commits leave
// /sys/kernel/rcu_expedited as they found it, and that a mark left by an
// agent killed while it had the switch on makes the next one switch it
// back off.
func TestExpeditedSwitchRestored(t *testing.T) {
	testutil.RequireRoot(t)
	read := expeditedSwitch(t)
	setExpedited(t, "0")

	// A process that has exited, as an agent killed mid-barrier would
	// have: its mark stays, the switch is on.
	mark := deadMark(t, "")
	setExpedited(t, "1")

	dp := commitEmpty(t)
	// (The last commit's barrier may still run, with the switch on for
	// its instant: the switch is read after Close, which waits for it.)
	if _, err := os.Stat(mark); err == nil {
		t.Error("the dead process's mark is still there")
	}
	own := fmt.Sprintf("/run/edgeplane-rcu-expedited.%d", os.Getpid())
	if _, err := os.Stat(own); err != nil {
		t.Errorf("no mark of our own while the dataplane is open: %v", err)
	}
	if err := dp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(own); err == nil {
		t.Error("our mark outlives the dataplane")
	}
	if got := read(); got != "0" {
		t.Errorf("switch %s after the barriers and close, want 0 (the killed agent's leftover undone)", got)
	}
}

// TestExpeditedSwitchOperatorsKept: an operator who turned
// /sys/kernel/rcu_expedited on keeps it on, even when the mark of an agent
// killed while it had not switched anything is cleaned up; only a mark
// that says the switch was off before its agent turned it on brings it
// back to off.
func TestExpeditedSwitchOperatorsKept(t *testing.T) {
	testutil.RequireRoot(t)
	read := expeditedSwitch(t)
	for _, c := range []struct {
		mark, want string
	}{
		{"-", "1"}, // killed while idle: the operator's 1 stays
		{"0", "0"}, // killed with the switch on: off, as before it
	} {
		mark := deadMark(t, c.mark)
		setExpedited(t, "1")
		if err := commitEmpty(t).Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Errorf("mark %q: the dead process's mark is still there", c.mark)
		}
		if got := read(); got != c.want {
			t.Errorf("mark %q: switch %s after the barriers, want %s", c.mark, got, c.want)
		}
	}
}
