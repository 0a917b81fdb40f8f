// SPDX-License-Identifier: Apache-2.0

package config

import "testing"

// TestBuiltinKindsTyped: every built-in kind has a field of its own in
// Config and in Changes, so the compiler reads each kind's objects and
// changes typed; none is left in Config.Objects or Changes.Other.
func TestBuiltinKindsTyped(t *testing.T) {
	for _, k := range builtin.kinds {
		if m := k.meta(); m.configIndex < 0 || m.changesIndex < 0 {
			t.Errorf("kind %s: Config field %d, Changes field %d; want both", m.kind, m.configIndex, m.changesIndex)
		}
	}
}
