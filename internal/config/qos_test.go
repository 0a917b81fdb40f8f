// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"gopkg.in/yaml.v3"
)

const qosBase = "interfaces: [{name: lan0, role: lan}]\nfars: [{id: 1, action: pass}]\n"

// TestQoSClasses: classes parse with their defaults (the quantum of their
// type, ECN marking, a burst of 16 quanta under a rate), a PDR names one,
// and what is wrong is refused naming the field: a missing or unknown
// type, a quantum or over on urllc (never held back), a quantum out of
// range, an unknown over, a burst without a rate or below a quantum, a
// code point out of range or in two classes, a PDR's unknown class.
func TestQoSClasses(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(qosBase + `qos_classes:
  - {id: 1, name: control, type: urllc, dscp: 46}
  - {id: 2, type: embb, dscp: [10, 12, 14], rate: 200mbit}
  - {id: 3, type: mmtc, dscp: "40-45"}
pdrs:
  - {id: 10, precedence: 1, far: 1, qos: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := c.QoSClasses
	if len(st) != 3 {
		t.Fatalf("classes: %+v", st)
	}
	for i, want := range []struct {
		dscp           string
		quantum, burst uint32
		over           string
		rate           uint64
	}{{"46", 0, 0, "", 0}, {"10,12,14", 1514, 16 * 1514, "ecn", 200e6}, {"40-45", 256, 16 * 1514, "ecn", 0}} {
		q := st[i]
		e := q.Effective()
		if q.DSCP.String() != want.dscp || e.Quantum != want.quantum || e.Over != want.over || q.Rate.BPS != want.rate {
			t.Errorf("class %d: %+v (effective %+v), want dscp %s quantum %d over %q rate %d", q.ID, q, e, want.dscp, want.quantum, want.over, want.rate)
		}
		if want.rate != 0 && e.Burst != want.burst {
			t.Errorf("class %d: burst %d, want %d", q.ID, e.Burst, want.burst)
		}
	}
	if c.PDRs[0].QoS != 3 {
		t.Errorf("pdr 10's class %d, want 3", c.PDRs[0].QoS)
	}

	for _, tc := range []struct{ name, classes, want string }{
		{"no type", `{id: 1}`, `qos_classes[0].type: required (urllc, embb, mmtc or custom)`},
		{"unknown type", `{id: 1, type: gold}`, `qos_classes[0].type: unknown type "gold" (want urllc, embb, mmtc or custom)`},
		{"quantum on urllc", `{id: 1, type: urllc, quantum: 1514}`, `qos_classes[0].quantum: not for urllc (never held back by the others)`},
		{"over on urllc", `{id: 1, type: urllc, over: drop}`, `qos_classes[0].over: not for urllc`},
		{"quantum too small", `{id: 1, type: embb, quantum: 10}`, `qos_classes[0].quantum: 10 bytes is outside 64-65535`},
		{"unknown over", `{id: 1, type: embb, over: police}`, `qos_classes[0].over: unknown "police" (want ecn or drop)`},
		{"burst without rate", `{id: 1, type: embb, burst: 100000}`, `qos_classes[0].burst: needs a rate`},
		{"burst below quantum", `{id: 1, type: embb, rate: 10mbit, burst: 100, quantum: 1514}`, `qos_classes[0].burst: 100 bytes is less than a quantum (1514)`},
		{"dscp out of range", `{id: 1, type: embb, dscp: 64}`, `qos_classes[0].dscp: dscp "64": want code points 0-63`},
		{"bad rate", `{id: 1, type: embb, rate: 10mbps}`, `qos_classes[0].rate: rate "10mbps": bps is ambiguous`},
		{"dscp in two classes", `{id: 1, type: urllc, dscp: 46}, {id: 2, type: embb, dscp: "40-47"}`, `qos_classes[1].dscp: dscp 46 is already`},
	} {
		_, err := yamlcfg.Parse([]byte(qosBase + "qos_classes: [" + tc.classes + "]\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	var many strings.Builder
	for i := range config.MaxQoSClasses + 1 {
		fmt.Fprintf(&many, "{id: %d, type: custom}, ", i+1)
	}
	if _, err := yamlcfg.Parse([]byte(qosBase + "qos_classes: [" + many.String() + "]\n")); err == nil || !strings.Contains(err.Error(), "65 qos classes, at most 64") {
		t.Errorf("65 classes: %v, want refused", err)
	}
	if _, err := yamlcfg.Parse([]byte(qosBase + "pdrs: [{id: 10, far: 1, qos: 9}]\n")); err == nil || !strings.Contains(err.Error(), "pdrs[0].qos: no qos_class with id 9") {
		t.Errorf("a PDR naming no class: %v", err)
	}
}

// TestDSCPSet: code points read as a number, a string of them and
// ranges, or a YAML list, and written back as runs.
func TestDSCPSet(t *testing.T) {
	for in, want := range map[string]string{
		"46": "46", "[10, 12, 14]": "10,12,14", `"40-47"`: "40-47", `"0,1,2,3,63"`: "0-3,63", `"5,6"`: "5,6", "[]": "",
	} {
		var s config.DSCPSet
		if err := yaml.Unmarshal([]byte(in), &s); err != nil || s.String() != want {
			t.Errorf("%s: %q, %v; want %q", in, s.String(), err, want)
		}
		var back config.DSCPSet
		if err := back.SetString(want); want != "" && (err != nil || back != s) {
			t.Errorf("%q does not read back: %v", want, err)
		}
	}
	var s config.DSCPSet
	for _, bad := range []string{"64", "7-3", "a", "1,,2"} {
		if err := s.SetString(bad); err == nil {
			t.Errorf("%q read as %s", bad, s.String())
		}
	}
}
