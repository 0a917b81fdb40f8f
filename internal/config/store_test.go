// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"gopkg.in/yaml.v3"
)

func mustStore(t *testing.T) *config.Store {
	t.Helper()
	return config.NewStore(storeConfig(t))
}

// storeConfig is the config mustStore holds.
func storeConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := yamlcfg.Parse([]byte(sample + `
paths:
  - {id: 1, type: gre, interface: wan0, local: 192.0.2.1, remote: 192.0.2.2, key: 7, monitor: {insecure: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func pdrOp(verb config.Verb, at string, id, far uint32, dst string) config.Op {
	return config.Op{At: at, Verb: verb, Kind: config.KindPDR, Object: config.PDR{ID: id, Precedence: 5, FAR: far, Match: config.Match{Dst: config.Prefix{P: netip.MustParsePrefix(dst)}}}}
}

func ids(ps []config.PDR) []uint32 {
	var out []uint32
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

func TestStoreApplyKeepsListOrder(t *testing.T) {
	s := mustStore(t)
	ch, _, err := s.Apply([]config.Op{
		pdrOp(config.Create, "operations[0].create.pdr", 30, 1, "10.3.0.0/16"),
		pdrOp(config.Update, "operations[1].update.pdr", 10, 2, "10.1.0.0/16"),
		{At: "operations[2].delete", Verb: config.Delete, Kind: config.KindPDR, ID: 20},
		pdrOp(config.Create, "operations[3].create.pdr", 20, 1, "10.4.0.0/16"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// An update keeps its place, a create goes last, a deleted and
	// re-created object moves to the end.
	if got, want := ids(s.Config().PDRs), []uint32{10, 30, 20}; !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	// PDR 20 was deleted and created: one change, old and new, at the
	// last operation on it.
	if len(ch.PDRs) != 3 {
		t.Fatalf("%d PDR changes, want 3: %+v", len(ch.PDRs), ch.PDRs)
	}
	for _, d := range ch.PDRs {
		if d.New.ID == 20 && (d.Old == nil || d.At != "operations[3].create.pdr" || d.New.Match.Dst.String() != "10.4.0.0/16") {
			t.Errorf("change of PDR 20: %+v", d)
		}
	}
}

func TestStoreApplyErrorsAndUndo(t *testing.T) {
	s := mustStore(t)
	before := s.Config()
	cases := []struct {
		name string
		ops  []config.Op
		code config.ErrorCode
		want string
	}{
		{"exists", []config.Op{pdrOp(config.Create, "operations[0].create.pdr", 10, 1, "10.0.0.0/8")}, config.CodeExists, "operations[0].create.pdr: pdr 10 exists; use update"},
		{"missing", []config.Op{pdrOp(config.Update, "operations[0].update.pdr", 99, 1, "10.0.0.0/8")}, config.CodeNotFound, "operations[0].update.pdr: no pdr 99; use create"},
		{"delete missing", []config.Op{{At: "operations[0].delete", Verb: config.Delete, Kind: config.KindFAR, ID: 9}}, config.CodeNotFound, "operations[0].delete: no far 9"},
		{"in use", []config.Op{{At: "operations[0].delete", Verb: config.Delete, Kind: config.KindFAR, ID: 2}}, config.CodeInUse, "operations[0].delete: far 2 is still used by pdr 10"},
		{"path in use", []config.Op{
			{At: "operations[0].create.far", Verb: config.Create, Kind: config.KindFAR, Object: config.FAR{ID: 3, Action: config.ActionEncap, Path: 1}},
			{At: "operations[1].delete", Verb: config.Delete, Kind: config.KindPath, ID: 1},
		}, config.CodeInUse, "operations[1].delete: path 1 is still used by far 3"},
		{"bad field and reference", []config.Op{
			pdrOp(config.Create, "operations[0].create.pdr", 40, 1, "10.0.0.0/8"),
			pdrOp(config.Create, "operations[1].create.pdr", 41, 7, "10.0.0.1/8"),
		}, config.CodeInvalid, "operations[1].create.pdr.match.dst: host bits set"},
		{"decap clash", []config.Op{{At: "operations[0].create.path", Verb: config.Create, Kind: config.KindPath, Object: config.Path{ID: 2, Type: config.PathGRE, Interface: "wan0",
			Local: config.Addr{A: netip.MustParseAddr("192.0.2.1")}, Remote: config.Addr{A: netip.MustParseAddr("192.0.2.9")}, Key: new(uint32(7))}}},
			config.CodeInvalid, "operations[0].create.path.key: key 7 with local 192.0.2.1 is already used by path 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := s.Apply(c.ops)
			var fe config.Errors
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want Errors", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("err:\n%v\nwant %q", err, c.want)
			}
			if fe[0].Code != c.code {
				t.Errorf("code %d, want %d", fe[0].Code, c.code)
			}
			if after := s.Config(); !reflect.DeepEqual(after, before) {
				t.Errorf("refused batch changed the store")
			}
		})
	}
	if _, _, err := s.Apply([]config.Op{pdrOp(config.Create, "operations[0].create.pdr", 41, 7, "10.0.0.0/8")}); err == nil || !strings.Contains(err.Error(), "operations[0].create.pdr.far: no far with id 7") {
		t.Errorf("reference to a missing far: %v", err)
	}

	// A batch that succeeds and is undone leaves the store, and what
	// refers to what, as before.
	_, undo, err := s.Apply([]config.Op{
		{At: "a", Verb: config.Delete, Kind: config.KindPDR, ID: 10},
		{At: "b", Verb: config.Delete, Kind: config.KindFAR, ID: 2},
		pdrOp(config.Create, "c", 50, 1, "10.5.0.0/16"),
	})
	if err != nil {
		t.Fatal(err)
	}
	undo()
	if after := s.Config(); !reflect.DeepEqual(after, before) {
		t.Fatalf("undone batch: %+v, want %+v", after, before)
	}
	if _, _, err := s.Apply([]config.Op{{At: "x", Verb: config.Delete, Kind: config.KindFAR, ID: 2}}); err == nil {
		t.Error("after an undo, far 2 can be deleted although pdr 10 uses it again")
	}
}

func TestStoreCapacity(t *testing.T) {
	cfg := storeConfig(t)
	cfg.Limits.Rules = 3
	s := config.NewStore(cfg)
	_, _, err := s.Apply([]config.Op{pdrOp(config.Create, "o0", 60, 1, "10.6.0.0/16"), pdrOp(config.Create, "o1", 61, 1, "10.7.0.0/16")})
	var fe config.Errors
	if !errors.As(err, &fe) || fe[0].Code != config.CodeCapacity || fe[0].Path != "pdrs" {
		t.Fatalf("err %v, want a capacity error at pdrs", err)
	}
}

func TestParseServicesAndHealth(t *testing.T) {
	base := sample + `
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
  - {id: 11, action: nat, address: 10.30.1.2, port: 8080}
lbrs:
  - {id: 1, algorithm: maglev, members: [{far: 11, weight: 3}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1, health: %s}
`
	good := strings.Replace(base, "%s", "{type: http, path: /healthz, interval: 500ms}", 1)
	// sample has its own fars section: drop it so ours is the only one.
	good = strings.Replace(good, "fars:\n  - {id: 1, action: redirect, interface: wan0}\n  - {id: 2, action: drop}\n", "", 1)
	cfg, err := yamlcfg.Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Services[0].Health.Effective()
	if h.Interval.D != 500*time.Millisecond || h.Timeout.D != 500*time.Millisecond || h.Rise != 2 || h.Fall != 3 || h.Path != "/healthz" {
		t.Errorf("effective health %+v", h)
	}
	// What the agent writes back parses to the same.
	again, err := yamlcfg.Parse(yamlcfg.AppendCompact(nil, cfg))
	if err != nil || !reflect.DeepEqual(again, cfg) {
		t.Errorf("round trip: %v\n%+v\n%+v", err, again, cfg)
	}
	for _, c := range []struct{ health, want string }{
		{"{type: ping}", `services[0].health.type: unknown type "ping" (want tcp or http)`},
		{"{type: tcp, path: /x}", "services[0].health.path: only for type http"},
		{"{type: http, interval: 10ms}", "services[0].health.interval: 10ms outside 100ms..1h"},
		{"{type: http, interval: 1s, timeout: 2s}", "services[0].health.timeout: 2s must be positive and at most the interval (1s)"},
		{"{type: http, interval: soon}", `services[0].health.interval: invalid duration "soon"`},
	} {
		bad := strings.Replace(strings.Replace(base, "%s", c.health, 1), "fars:\n  - {id: 1, action: redirect, interface: wan0}\n  - {id: 2, action: drop}\n", "", 1)
		if _, err := yamlcfg.Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("health %s: err %v, want %q", c.health, err, c.want)
		}
	}
	// A table size of its own: prime, within limits.maglev_table.
	for size, want := range map[uint32]string{
		1021:   "",
		1000:   "lbrs[0].table_size: 1000 is not prime",
		131071: "lbrs[0].table_size: 131071 outside 251..65537 (limits.maglev_table)",
	} {
		c := *cfg
		c.LBRs = []config.LBR{{ID: 1, Algorithm: config.AlgorithmMaglev, TableSize: size, Members: cfg.LBRs[0].Members}}
		err := c.Validate()
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("table_size %d: err %v, want %q", size, err, want)
		}
	}
}

// TestStoreKeepsAnInterface refuses a batch that deletes the last
// interface: the file it would fold into could not be loaded again.
func TestStoreKeepsAnInterface(t *testing.T) {
	cfg, err := yamlcfg.Parse([]byte("interfaces: [{name: lan0, role: lan}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := config.NewStore(cfg)
	_, _, err = s.Apply([]config.Op{{At: "operations[0].delete", Verb: config.Delete, Kind: config.KindInterface, Name: "lan0"}})
	if err == nil || !strings.Contains(err.Error(), "interfaces: at least one interface required") {
		t.Fatalf("deleting the last interface: %v", err)
	}
	if got := s.Config().Interfaces; len(got) != 1 {
		t.Errorf("refused batch left %v", got)
	}
}

// TestInterfacesCapacity: the dataplane sends on and answers from at most
// MaxInterfaces interfaces (its maps' size): one more is refused as a
// problem of size, before anything is attached.
func TestInterfacesCapacity(t *testing.T) {
	var b strings.Builder
	b.WriteString("interfaces:\n")
	for i := 0; i <= config.MaxInterfaces; i++ {
		fmt.Fprintf(&b, "  - {name: eth%d, role: lan}\n", i)
	}
	_, err := yamlcfg.Parse([]byte(b.String()))
	var fe config.Errors
	if !errors.As(err, &fe) || fe[0].Code != config.CodeCapacity || fe[0].Path != "interfaces" || !strings.Contains(fe[0].Reason, "65 interfaces, at most 64") {
		t.Fatalf("err %v, want a capacity error at interfaces", err)
	}
	if _, err := yamlcfg.Parse([]byte(strings.Replace(b.String(), fmt.Sprintf("  - {name: eth%d, role: lan}\n", config.MaxInterfaces), "", 1))); err != nil {
		t.Errorf("%d interfaces: %v", config.MaxInterfaces, err)
	}
}

// typedDoc is a config with objects of the kinds that were in
// Config.Objects until the compiler needed them typed, and of the kinds
// typed from the start (strategies: a map, a CPU list, a list of names).
const typedDoc = qosBase + `qos_classes:
  - {id: 1, type: urllc, dscp: 46}
  - {id: 2, type: embb, dscp: "10,12", rate: 100mbit}
flowopt:
  - {module: probe, rtt_factor: 1.5}
  - {module: relief, hot: 110%, min_pps: 5000, off: true}
strategies:
  - {id: 1, command_regex: "^gnb$", selectors: {pod_labels: {app: gnb, "example.com/tier": ""}, user: "0"}, priority: true, cpus: "0,2-3", irq_affinity: [lan0]}
  - {id: 2, selectors: {env: A=b c, user: ran}, priority: true, policy: deadline, execution_time: 100us, period: 2ms}
`

// TestTypedKindsRoundTrip: QoS classes, FlowOpt modules and strategies
// land in Config.QoSClasses, Config.FlowOpt and Config.Strategies, not
// Objects, and read back the same from AppendCompact and yaml.Marshal; a store batch's changes of
// them land in Changes.QoSClasses and Changes.FlowOpt.
func TestTypedKindsRoundTrip(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(typedDoc))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.QoSClasses) != 2 || len(c.FlowOpt) != 2 || len(c.Strategies) != 2 || c.Objects != nil {
		t.Fatalf("qos classes %+v, flowopt %+v, strategies %+v, objects %+v; want 2 classes, 2 modules, 2 strategies, no objects", c.QoSClasses, c.FlowOpt, c.Strategies, c.Objects)
	}
	marshalled, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string][]byte{"AppendCompact": yamlcfg.AppendCompact(nil, c), "yaml.Marshal": marshalled} {
		back, err := yamlcfg.Parse(doc)
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Errorf("%s round trip: %v\n%+v\nwant %+v\n%s", name, err, back, c, doc)
		}
	}

	s := config.NewStore(c)
	ch, _, err := s.Apply([]config.Op{
		{At: "operations[0].create.qos_class", Verb: config.Create, Kind: config.KindQoSClass, Object: config.QoSClass{ID: 3, Type: config.QoSMMTC, DSCP: config.DSCPSet{Bits: 1 << 8}}},
		{At: "operations[1].delete", Verb: config.Delete, Kind: config.KindQoSClass, ID: 1},
		{At: "operations[2].create.flowopt", Verb: config.Create, Kind: config.KindFlowOpt, Object: config.FlowOptModule{Module: config.ModuleFairness}},
		{At: "operations[3].update.flowopt", Verb: config.Update, Kind: config.KindFlowOpt, Object: config.FlowOptModule{Module: config.ModuleRelief, Hot: config.Ratio{V: 2, Set: true}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.QoSClasses) != 2 || ch.QoSClasses[0].New.ID != 3 || ch.QoSClasses[1].Old.ID != 1 || ch.QoSClasses[1].New != nil || ch.Other != nil || ch.Len() != 4 {
		t.Errorf("changes: qos classes %+v, other %+v; want class 3 created and 1 deleted", ch.QoSClasses, ch.Other)
	}
	if f := ch.FlowOpt; len(f) != 2 || f[0].Old != nil || f[0].New.Module != config.ModuleFairness || !f[1].Old.Off || f[1].New.Off || f[1].New.Hot.V != 2 {
		t.Errorf("changes: flowopt %+v; want fairness created and relief switched on at 200%%", f)
	}
	if got := s.Config().QoSClasses; len(got) != 2 || got[0].ID != 2 || got[1].ID != 3 {
		t.Errorf("store's classes %+v, want 2 and 3", got)
	}
	if got := s.Config().FlowOpt; len(got) != 3 || got[1].Module != config.ModuleRelief || got[1].Off || got[2].Module != config.ModuleFairness {
		t.Errorf("store's modules %+v, want probe, relief on, fairness", got)
	}
	const want = "operations[0].update.flowopt.rtt_factor: not for module relief (only probe)"
	if _, _, err := s.Apply([]config.Op{{At: "operations[0].update.flowopt", Verb: config.Update, Kind: config.KindFlowOpt, Object: config.FlowOptModule{Module: config.ModuleRelief, RTTFactor: config.Factor{V: 2, Set: true}}}}); err == nil || err.Error() != want {
		t.Errorf("an RTT factor on relief: %v, want %s", err, want)
	}
}

// TestStoreUpdateMovesReferences updates objects so that some of what
// they refer to stays, some goes and some comes: what can be deleted
// after each follows what the objects refer to now, also once undone.
func TestStoreUpdateMovesReferences(t *testing.T) {
	s := mustStore(t)
	deleteFAR := func(id uint32) error {
		_, undo, err := s.Apply([]config.Op{{At: "d", Verb: config.Delete, Kind: config.KindFAR, ID: id}})
		if err == nil {
			undo()
		}
		return err
	}
	// PDR 10 keeps far 2 (another field changed), then moves to far 1.
	if _, _, err := s.Apply([]config.Op{pdrOp(config.Update, "u", 10, 2, "10.9.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	if err := deleteFAR(2); err == nil || !strings.Contains(err.Error(), "far 2 is still used by pdr 10") {
		t.Errorf("far 2 kept by pdr 10's update: delete says %v", err)
	}
	_, undo, err := s.Apply([]config.Op{pdrOp(config.Update, "u", 10, 1, "10.9.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	if err := deleteFAR(2); err != nil {
		t.Errorf("far 2 no longer used: %v", err)
	}
	if err := deleteFAR(1); err == nil || !strings.Contains(err.Error(), "far 1 is still used by pdr") {
		t.Errorf("far 1 used by pdrs 10 and 20: delete says %v", err)
	}
	// Pdr 20 moves from far 1 to far 2 and back in one batch.
	if _, undo20, err := s.Apply([]config.Op{pdrOp(config.Update, "a", 20, 2, "10.2.0.0/16"), pdrOp(config.Update, "b", 20, 1, "10.2.0.0/16")}); err != nil {
		t.Fatal(err)
	} else if err := deleteFAR(2); err != nil {
		t.Errorf("far 2 used by none after pdr 20 went there and back: %v", err)
	} else {
		undo20()
	}
	undo()
	if err := deleteFAR(2); err == nil || !strings.Contains(err.Error(), "far 2 is still used by pdr 10") {
		t.Errorf("pdr 10's move undone: delete of far 2 says %v", err)
	}
	if err := deleteFAR(1); err == nil || !strings.Contains(err.Error(), "far 1 is still used by pdr 20") {
		t.Errorf("pdr 10's move undone: delete of far 1 says %v", err)
	}
}
