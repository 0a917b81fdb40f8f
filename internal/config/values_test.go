// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
)

// TestCPUList: a cpulist reads as the kernel writes one and writes back
// the same; anything else is refused.
func TestCPUList(t *testing.T) {
	for in, want := range map[string]string{"0": "0", "0,2-3": "0,2-3", " 1 , 4-7 ": "1,4-7", "0-1023": "0-1023", "2,3": "2-3", "": ""} {
		l, err := config.ParseCPUList(in)
		if err != nil || l.String() != want {
			t.Errorf("ParseCPUList(%q) = %s, %v; want %s", in, l, err, want)
		}
	}
	for _, bad := range []string{"x", "1,,2", "-1", "1-2-3", "0x1", "2,1", "1024"} {
		if l, err := config.ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) = %s, want an error", bad, l)
		}
	}
	l, _ := config.ParseCPUList("63-64")
	if !l.Has(63) || !l.Has(64) || l.Has(62) || l.Has(65) || l.Has(-1) || l.Has(config.MaxCPUs) {
		t.Errorf("63-64: %v", l.Bits)
	}
}
