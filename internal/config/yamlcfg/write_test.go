// SPDX-License-Identifier: Apache-2.0

package yamlcfg

import "testing"

func TestPlainToken(t *testing.T) {
	for v, want := range map[string]bool{
		"lan0": true, "redirect": true, "9000-9100": true, "icmpv6": true, "wan_1.2": true,
		"": false, "80": false, "10.2.0.0/16": false, "fd02::/64": false, "1.5": false, ".5": false,
		"-x": false, "yes": false, "Off": false, "null": false, "a b": false, "a:b": false,
	} {
		if got := plainToken(v); got != want {
			t.Errorf("plainToken(%q) = %v, want %v", v, got, want)
		}
	}
}
