// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// verifierBudget is the most of the verifier's 1,000,000-instruction
// limit the dataplane may use, so the stages still to come (balancing,
// fairness, probing) fit. Before edge_classify became a global function
// the pipeline used 846,000 and one more counter pushed it over.
const verifierBudget = 500_000

// TestVerifierHeadroom loads the dataplane with verifier statistics and
// fails when it uses more than verifierBudget instructions.
func TestVerifierHeadroom(t *testing.T) {
	testutil.RequireRoot(t)
	l := Limits{Flows: 1024, Rules: 1024}
	spec, err := Spec(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	o, err := LoadObject(spec, l, &ebpf.CollectionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var progs edgePrograms
	opts := &ebpf.CollectionOptions{MapReplacements: o.MapReplacements(), Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}}
	if err := o.Spec.LoadAndAssign(&progs, opts); err != nil {
		t.Fatal(err)
	}
	defer progs.Close()
	m := regexp.MustCompile(`processed (\d+) insns`).FindStringSubmatch(progs.EdgeXdp.VerifierLog)
	if m == nil {
		t.Fatalf("no statistics in the verifier log:\n%s", progs.EdgeXdp.VerifierLog)
	}
	n, _ := strconv.Atoi(m[1])
	t.Logf("verifier processed %d instructions (budget %d, limit 1000000)", n, verifierBudget)
	if n > verifierBudget {
		t.Errorf("the dataplane takes %d verifier instructions, over the budget of %d: move a stage into a global function or a tail call", n, verifierBudget)
	}
}
