// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand"
	"runtime"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

func TestPortPrefixesCoverExactly(t *testing.T) {
	cases := []struct{ lo, hi uint16 }{{0, 65535}, {9000, 9100}, {1, 1}, {0, 0}, {65535, 65535}, {1024, 2047}, {1, 65534}, {80, 443}}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		a, b := uint16(rng.Intn(65536)), uint16(rng.Intn(65536))
		if a > b {
			a, b = b, a
		}
		cases = append(cases, struct{ lo, hi uint16 }{a, b})
	}
	for _, c := range cases {
		ps := portPrefixes(config.PortRange{Lo: c.lo, Hi: c.hi, Set: true})
		if len(ps) > 30 {
			t.Errorf("%d-%d: %d blocks, at most 30 possible", c.lo, c.hi, len(ps))
		}
		covered := make([]int, 65536)
		for _, p := range ps {
			if p.val&^p.mask != 0 {
				t.Fatalf("%d-%d: block %#x/%#x has bits outside its mask", c.lo, c.hi, p.val, p.mask)
			}
			for port := 0; port < 65536; port++ {
				if uint16(port)&p.mask == p.val {
					covered[port]++
				}
			}
		}
		for port, n := range covered {
			in := port >= int(c.lo) && port <= int(c.hi)
			if in && n != 1 || !in && n != 0 {
				t.Fatalf("%d-%d: port %d covered %d times", c.lo, c.hi, port, n)
			}
		}
	}
	if ps := portPrefixes(config.PortRange{}); len(ps) != 1 || ps[0].mask != 0 {
		t.Errorf("unset range: %v, want one wildcard", ps)
	}
}

func resolver(name string) (uint32, error) {
	switch name {
	case "lan0":
		return 2, nil
	case "wan0":
		return 3, nil
	case "wan1":
		return 4, nil
	}
	return 0, fmt.Errorf("no interface %q", name)
}

func mustParse(t *testing.T, y string) *config.Config {
	t.Helper()
	cfg, err := yamlcfg.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const base = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
limits: {flows: 1024, rules: 1024}
`

func TestCompileGroupsAndOrder(t *testing.T) {
	cfg := mustParse(t, base+`
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0, proto: udp, dport: 9000-9100}, far: 2}
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.2.0.0/16}, far: 1}
  - {id: 21, precedence: 100, match: {in: lan0, dst: 10.3.0.0/16}, far: 1}
  - {id: 30, precedence: 5, match: {dst: "fd00::/8"}, far: 2}
`)
	g, _, err := Compile(cfg, resolver, NewAllocs(1024, nil, nil), bpf.Limits{Flows: 1024, Rules: 1024})
	if err != nil {
		t.Fatal(err)
	}
	// 9000-9100 is 9000/8, 9008/16, 9024/64, 9088/8, 9096/4, 9100/1: five
	// block sizes, five groups; the two /16 share one group; the
	// IPv6 rule has its own.
	if len(g.Groups) != 5+1+1 {
		t.Fatalf("%d groups, want 7", len(g.Groups))
	}
	for i := 1; i < len(g.Groups); i++ {
		if g.Groups[i].MinPrio < g.Groups[i-1].MinPrio {
			t.Fatalf("groups not sorted by min prio at %d", i)
		}
	}
	if got := uint32(g.Groups[0].MinPrio); got != 30 {
		t.Errorf("first group's best rule is PDR %d, want 30 (precedence 5)", got)
	}
	if g.Groups[0].Mask.Family != 0xff || g.Groups[0].Mask.Dst[0] != 0xff || g.Groups[0].Mask.Dst[1] != 0 {
		t.Errorf("fd00::/8 mask wrong: %+v", g.Groups[0].Mask)
	}
	byTag := map[uint32]bpf.Group{}
	for _, grp := range g.Groups {
		byTag[grp.Tag] = grp
	}
	var sixteen int
	for k, r := range g.Rules {
		if m := byTag[k.Group].Mask; k.K.Family == 4 && m.Dst[1] == 0xff && m.Dst[2] == 0 {
			sixteen++
			if r.Far != 0 {
				t.Errorf("10.x/16 rule points at far %d, want index 0", r.Far)
			}
		}
		if k.K.Dport != 0 && bits.ReverseBytes16(k.K.Dport) < 9000 {
			t.Errorf("dport block %d below the range", bits.ReverseBytes16(k.K.Dport))
		}
	}
	if sixteen != 2 {
		t.Errorf("%d entries in the /16 group, want 2", sixteen)
	}
}

func TestCompileEqualPrecedenceLowerIDWins(t *testing.T) {
	cfg := mustParse(t, base+`
pdrs:
  - {id: 7, precedence: 50, match: {dst: 10.2.0.0/16}, far: 2}
  - {id: 3, precedence: 50, match: {dst: 10.2.0.0/16}, far: 1}
`)
	g, _, err := Compile(cfg, resolver, NewAllocs(1024, nil, nil), bpf.Limits{Flows: 1024, Rules: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Rules) != 1 {
		t.Fatalf("%d entries, want the two identical matches folded into 1", len(g.Rules))
	}
	for _, r := range g.Rules {
		if uint32(r.Prio) != 3 {
			t.Errorf("entry kept PDR %d, want 3 (lower id on equal precedence)", uint32(r.Prio))
		}
	}
}

func TestCompileErrorsNamePaths(t *testing.T) {
	cfg := mustParse(t, `
interfaces:
  - {name: lan0, role: lan}
  - {name: nosuch0, role: wan}
fars:
  - {id: 1, action: redirect, interface: nosuch0}
pdrs:
  - {id: 1, precedence: 1, match: {in: lan0}, far: 1}
`)
	_, _, err := Compile(cfg, resolver, NewAllocs(1024, nil, nil), bpf.Limits{Flows: 1024, Rules: 1024})
	var fe config.Errors
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not config.Errors", err)
	}
	msg := err.Error()
	if want := `interfaces[1].name: no interface "nosuch0"`; !strings.Contains(msg, want) {
		t.Errorf("missing %q in:\n%s", want, msg)
	}
	// References to the missing interface are consequences, not news.
	if strings.Contains(msg, "fars[0]") {
		t.Errorf("missing interface reported again at its reference:\n%s", msg)
	}
}

func TestCompileCapacity(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(base + "pdrs:\n")
	for i := 1; i <= 40; i++ {
		// 1-65534 expands to 30 blocks: 40 rules x 30 entries > 1024.
		fmt.Fprintf(&sb, "  - {id: %d, precedence: %d, match: {proto: tcp, dst: 10.9.%d.0/24, dport: 1-65534}, far: 1}\n", i, i, i)
	}
	cfg := mustParse(t, sb.String())
	_, _, err := Compile(cfg, resolver, NewAllocs(1024, nil, nil), bpf.Limits{Flows: 1024, Rules: 1024})
	if err == nil || !strings.Contains(err.Error(), "pdrs: 1200 classifier entries after port-range expansion exceed limits.rules 1024") {
		t.Fatalf("err = %v", err)
	}
}

func TestStatsAllocStableAndNotMutatedOnError(t *testing.T) {
	a := NewAllocs(4, map[uint32]uint32{10: 2}, nil)
	cfg := mustParse(t, base+`
pdrs:
  - {id: 10, precedence: 1, match: {dst: 10.2.0.0/16}, far: 1}
  - {id: 11, precedence: 2, match: {dst: 10.3.0.0/16}, far: 1}
`)
	g, next, err := Compile(cfg, resolver, a, bpf.Limits{Flows: 1024, Rules: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if idx, _, _ := next.PDR.Get(10); idx != 2 {
		t.Errorf("PDR 10 moved to stats index %d, want 2 (seeded)", idx)
	}
	if len(g.ResetStats) != 1 || g.ResetStats[0] == 2 {
		t.Errorf("ResetStats %v, want only the new PDR's index", g.ResetStats)
	}
	// A failing compile must not touch the allocator it was given.
	bad := mustParse(t, base+`
pdrs:
  - {id: 12, precedence: 1, match: {in: lan0}, far: 1}
`)
	bad.Interfaces[0].Name = "gone0"
	if _, _, err := Compile(bad, resolver, next, bpf.Limits{Flows: 1024, Rules: 1024}); err == nil {
		t.Fatal("compile with a missing interface succeeded")
	}
	if idx, isNew, _ := next.PDR.Get(11); isNew || idx == 2 {
		t.Errorf("PDR 11 lost its index after a failed compile (idx %d, new %v)", idx, isNew)
	}
}

// TestCompileWidePortsBounded compiles 1,000 PDRs whose port ranges each
// expand to 30 classifier entries against room for 1,024: the batch is
// refused without building the 30,000 entries first (31 MiB before the
// fix; a batch of 100,000 such PDRs would have built 3 million).
func TestCompileWidePortsBounded(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(base + "pdrs:\n")
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&sb, "  - {id: %d, precedence: %d, match: {proto: tcp, dst: 10.%d.%d.0/24, dport: 1-65534}, far: 1}\n", i, i, i/256, i%256)
	}
	cfg := mustParse(t, sb.String())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := Compile(cfg, resolver, NewAllocs(4096, nil, nil), bpf.Limits{Flows: 1024, Rules: 1024})
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "classifier entries after port-range expansion exceed limits.rules 1024") {
		t.Fatalf("err = %v", err)
	}
	t.Logf("refused after allocating %d KiB", (after.TotalAlloc-before.TotalAlloc)>>10)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("refusing the batch allocated %d MiB", alloc>>20)
	}
}

// TestStatelessNATBackendAlone: a stateless NAT service's replies are told
// apart by their backend alone (no per-client state), so a backend it
// shares with another service of the same protocol is refused, naming
// both; the same backend under another protocol, or shared by two
// stateful services, is fine, and listed with its services.
func TestStatelessNATBackendAlone(t *testing.T) {
	cfg := func(stateless bool, proto2 string) string {
		return fmt.Sprintf(`
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}]
fars:
  - {id: 11, action: nat, address: 10.6.0.11, port: 8080}
lbrs:
  - {id: 1, algorithm: maglev, members: [{far: 11}]}
  - {id: 2, algorithm: maglev, members: [{far: 11}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1, stateless: %t}
  - {id: 2, vip: 203.0.113.11, port: 80, proto: %s, lbr: 2}
limits: {flows: 1024, rules: 64, maglev_table: 251}
`, stateless, proto2)
	}
	limits := bpf.Limits{Flows: 1024, Rules: 64, MaglevSize: 251}
	_, _, err := Compile(mustParse(t, cfg(true, "tcp")), resolver, NewAllocs(64, nil, nil), limits)
	if err == nil || !strings.Contains(err.Error(), "backend 10.6.0.11:8080 serves service") || !strings.Contains(err.Error(), "must serve it alone") {
		t.Fatalf("shared by a stateless service: err = %v", err)
	}
	for _, c := range []struct {
		stateless bool
		proto     string
	}{{true, "udp"}, {false, "tcp"}} {
		gen, _, err := Compile(mustParse(t, cfg(c.stateless, c.proto)), resolver, NewAllocs(64, nil, nil), limits)
		if err != nil {
			t.Fatalf("stateless %t, %s: %v", c.stateless, c.proto, err)
		}
		// Every NAT backend lists the services it serves: under two
		// protocols, two backends of one service each; shared, one
		// backend of both, the stateless flag with its service.
		users := map[uint32]uint32{}
		for _, nb := range gen.NATBackends {
			for _, u := range nb.U {
				if u.Svc != 0 {
					users[u.Svc] = u.Flags
				}
			}
		}
		wantStateless := map[bool]uint32{true: bpf.SvcStateless}[c.stateless]
		if want := map[bool]int{true: 2, false: 1}[c.stateless]; len(gen.NATBackends) != want || len(users) != 2 || users[1] != wantStateless || users[2] != 0 {
			t.Errorf("stateless %t: %d backend entries, users %v; want %d and both services", c.stateless, len(gen.NATBackends), users, want)
		}
	}
}

// TestNATBackendUsersBounded: a backend serves at most bpf.NATUsers NAT
// services (a reply looks its service up among them); one more is
// refused, naming the backend and the bound.
func TestNATBackendUsersBounded(t *testing.T) {
	cfg := "interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}]\nfars:\n  - {id: 11, action: nat, address: 10.6.0.11, port: 8080}\nlbrs:\n"
	svcs := "services:\n"
	for i := 1; i <= bpf.NATUsers+1; i++ {
		cfg += fmt.Sprintf("  - {id: %d, algorithm: maglev, members: [{far: 11}]}\n", i)
		svcs += fmt.Sprintf("  - {id: %d, vip: 203.0.113.%d, port: 80, proto: tcp, lbr: %d}\n", i, 10+i, i)
	}
	cfg += svcs + "limits: {flows: 1024, rules: 64, maglev_table: 251}\n"
	_, _, err := Compile(mustParse(t, cfg), resolver, NewAllocs(64, nil, nil), bpf.Limits{Flows: 1024, Rules: 64, MaglevSize: 251})
	if err == nil || !strings.Contains(err.Error(), "backend 10.6.0.11:8080 serves 8 NAT services already, at most 8") {
		t.Fatalf("err = %v", err)
	}
}
