// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"maps"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
)

// TestDiffOpsSinceLastCommit: a member that compares only what changed
// since its last commit gives the gateway the very batch a comparison of
// everything the gateway holds would, through creates, updates with the
// same value and another, and deletes.
func TestDiffOpsSinceLastCommit(t *testing.T) {
	decode := func(v *pb.Object, created int64) *object {
		b, err := protojson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		o, err := decodeObject("all", b, created)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	far := func(id uint32, action string, created int64) *object {
		return decode(&pb.Object{Kind: &pb.Object_Far{Far: &pb.Far{Id: id, Action: action}}}, created)
	}
	pdr := func(id, farID uint32, created int64) *object {
		return decode(pdrOp(id, farID, "7000").GetCreate(), created)
	}
	state := func(objs ...*object) map[objKey]*object {
		out := map[objKey]*object{}
		for _, o := range objs {
			out[o.objKey] = o
		}
		return out
	}
	f1, f2, p1 := far(1, "drop", 10), far(2, "pass", 11), pdr(1, 1, 12)
	steps := []map[objKey]*object{
		state(f1, f2, p1),                     // all new
		state(f1, f2, p1, far(3, "drop", 13)), // one created
		state(f1, far(2, "pass", 11), p1),     // 3 deleted; 2 written again, the same
		state(f1, far(2, "drop", 11), p1),     // 2 changed
		state(f1, pdr(2, 1, 14)),              // 2 and PDR 1 deleted, PDR 2 created
		state(),                               // everything deleted
	}
	text := func(ops []*pb.Operation) []string {
		var out []string
		for _, op := range ops {
			b, _ := protojson.Marshal(op)
			out = append(out, string(b))
		}
		return out
	}
	var prev map[objKey]*object
	for i, want := range steps {
		// The gateway, as a full comparison finds it: what the last
		// commit left, in configOf's order.
		cur := configOf(slices.Collect(maps.Values(prev)))
		full := text(diffOps(carried(cur), want, nil))
		var since []string
		if prev != nil {
			since = text(diffOps(heldOf(prev), want, prev))
		} else {
			since = full
		}
		if !slices.Equal(full, since) {
			t.Errorf("step %d: comparing what changed gives %v, comparing everything %v", i, since, full)
		}
		t.Logf("step %d: %v", i, full)
		prev = want
	}
	if n := len(diffOps(heldOf(steps[2]), steps[2], steps[2])); n != 0 {
		t.Errorf("nothing changed: %d operations", n)
	}
}
