// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"maps"
	"reflect"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/config"
)

// qosState is what a generation holds of the classes and FlowOpt modules.
func qosState(g *commit.Generation) (map[uint32]bpf.QoSClassEntry, [64]uint32, uint32, uint32) {
	return maps.Clone(g.QoS), g.QoSDSCP, g.FlowOpt, g.FlowOptK16
}

// TestQoSKeptByOtherBatches: a batch that changes neither a class nor a
// module keeps the classes as they are (they are not rebuilt), a batch
// that changes one rebuilds them, and undoing each gives back what was
// before it; each state is what a full compile of the store gives.
func TestQoSKeptByOtherBatches(t *testing.T) {
	cfg := mustParse(t, base+`
qos_classes:
  - {id: 1, type: urllc, dscp: 46}
  - {id: 2, type: embb, dscp: [10, 12], rate: 200mbit}
flowopt:
  - module: fairness
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0}, far: 1, qos: 2}
`)
	limits := bpf.Limits{Flows: 1024, Rules: 1024}
	store := config.NewStore(cfg)
	comp, err := Build(cfg, resolver, NewAllocs(limits.Rules, nil, nil), limits)
	if err != nil {
		t.Fatal(err)
	}
	same := func(what string) {
		t.Helper()
		full, _, err := Compile(store.Config(), resolver, NewAllocs(limits.Rules, nil, nil), limits)
		if err != nil {
			t.Fatal(err)
		}
		q, d, f, k := qosState(comp.Generation())
		fq, fd, ff, fk := qosState(full)
		if !maps.Equal(q, fq) || d != fd || f != ff || k != fk {
			t.Errorf("%s: classes %v dscp %v flowopt %d/%d, a full compile %v %v %d/%d", what, q, d, f, k, fq, fd, ff, fk)
		}
	}
	apply := func(what string, ops ...config.Op) func() {
		t.Helper()
		ch, undoStore, err := store.Apply(ops)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		undoComp, err := comp.Apply(ch)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		same(what)
		return func() { undoComp(); undoStore(); same("undo " + what) }
	}
	pdr := func(id, qos uint32) config.Op {
		return config.Op{At: "operations[0].create.pdr", Verb: config.Create, Kind: config.KindPDR,
			Object: config.PDR{ID: id, Precedence: id, Match: config.Match{In: "lan0"}, FAR: 1, QoS: qos}}
	}
	before := comp.Generation().QoS
	undo1 := apply("a PDR", pdr(11, 1))
	if g := comp.Generation(); len(before) == 0 || !sameMap(g.QoS, before) {
		t.Errorf("a PDR's batch rebuilt the classes")
	}
	undo2 := apply("a class", config.Op{At: "operations[0].create.qos_class", Verb: config.Create, Kind: config.KindQoSClass,
		Object: config.QoSClass{ID: 3, Type: config.QoSMMTC, DSCP: config.DSCPSet{Bits: 1 << 40}}})
	if sameMap(comp.Generation().QoS, before) {
		t.Errorf("a class's batch did not rebuild the classes")
	}
	undo3 := apply("a PDR of the new class", pdr(12, 3))
	undo4 := apply("a module", config.Op{At: "operations[0].update.flowopt", Verb: config.Update, Kind: config.KindFlowOpt,
		Object: config.FlowOptModule{Module: config.ModuleFairness, Off: true}})
	undo4()
	undo3()
	undo2()
	undo1()
}

// sameMap says whether a and b are the same map, not equal ones.
func sameMap[K comparable, V any](a, b map[K]V) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
