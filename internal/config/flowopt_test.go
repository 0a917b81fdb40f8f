// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"bytes"
	"testing"

	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

// TestFlowOpt: modules parse as written, their defaults filled by
// Effective (probe's RTT factor, relief's hot share and min rate) and
// shown by get; what is wrong is refused naming the field: a missing or
// unknown module (listing the valid ones), a setting on a module it is
// not for, a setting out of its range, a module listed twice.
func TestFlowOpt(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(qosBase + `flowopt:
  - module: probe
    rtt_factor: 2
  - module: fairness
  - {module: relief, off: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []config.FlowOptModule{
		{Module: config.ModuleProbe, RTTFactor: config.Factor{V: 2, Set: true}},
		{Module: config.ModuleFairness},
		{Module: config.ModuleRelief, Off: true},
	}
	if len(c.FlowOpt) != len(want) {
		t.Fatalf("modules %+v, want %+v", c.FlowOpt, want)
	}
	for i, w := range want {
		if c.FlowOpt[i] != w {
			t.Errorf("module %d: %+v, want %+v", i, c.FlowOpt[i], w)
		}
	}
	effective := []config.FlowOptModule{
		{Module: config.ModuleProbe, RTTFactor: config.Factor{V: 2, Set: true}},
		{Module: config.ModuleFairness},
		{Module: config.ModuleRelief, Off: true, Hot: config.Ratio{V: config.DefaultHot, Set: true}, MinPPS: config.DefaultMinPPS},
	}
	for i, w := range effective {
		if e := c.FlowOpt[i].Effective(); e != w {
			t.Errorf("module %d effective: %+v, want %+v", i, e, w)
		}
	}
	if e := (config.FlowOptModule{Module: config.ModuleProbe}).Effective(); e.RTTFactor.V != config.DefaultRTTFactor || !e.RTTFactor.Set {
		t.Errorf("probe's default RTT factor: %+v", e)
	}

	var b bytes.Buffer
	if err := client.WriteTable(&b, config.Builtin(), config.KindFlowOpt, config.Builtin().Objects(c, config.KindFlowOpt)); err != nil {
		t.Fatal(err)
	}
	const table = "MODULE    STATE  SETTINGS\nprobe     on     rtt_factor 2\nfairness  on     -\nrelief    off    hot 150% min_pps 20000\n"
	if b.String() != table {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), table)
	}

	for _, tc := range []struct{ name, modules, want string }{
		{"no module", `{off: true}`, `flowopt[0].module: required (probe, fairness or relief)`},
		{"unknown module", `{module: pacing}`, `flowopt[0].module: unknown module "pacing" (want probe, fairness or relief)`},
		{"rtt_factor on relief", `{module: relief, rtt_factor: 2}`, `flowopt[0].rtt_factor: not for module relief (only probe)`},
		{"hot on probe", `{module: probe, hot: 200%}`, `flowopt[0].hot: not for module probe (only relief)`},
		{"min_pps on fairness", `{module: fairness, min_pps: 1000}`, `flowopt[0].min_pps: not for module fairness (only relief)`},
		{"rtt_factor on relief, out of range too", `{module: relief, rtt_factor: 20}`, `flowopt[0].rtt_factor: not for module relief (only probe)`},
		{"rtt_factor too small", `{module: probe, rtt_factor: 1.05}`, `flowopt[0].rtt_factor: 1.05 is outside 1.1-10`},
		{"rtt_factor too large", `{module: probe, rtt_factor: 12}`, `flowopt[0].rtt_factor: 12 is outside 1.1-10`},
		{"hot too small", `{module: relief, hot: 105%}`, `flowopt[0].hot: 105% is outside 110%-1000%`},
		{"hot too large", `{module: relief, hot: 20}`, `flowopt[0].hot: 2000% is outside 110%-1000%`},
		{"bad rtt_factor", `{module: probe, rtt_factor: fast}`, `flowopt[0].rtt_factor: invalid factor "fast" (want a number such as 1.5)`},
		{"NaN rtt_factor", `{module: probe, rtt_factor: .nan}`, `flowopt[0].rtt_factor: invalid factor ".nan" (want a number such as 1.5)`},
		{"bad hot", `{module: relief, hot: warm}`, `flowopt[0].hot: invalid ratio "warm" (want e.g. 5% or 0.05)`},
		{"module twice", `{module: probe}, {module: probe, off: true}`, `flowopt[1].module: duplicate module "probe" (first at flowopt[0])`},
	} {
		_, err := yamlcfg.Parse([]byte(qosBase + "flowopt: [" + tc.modules + "]\n"))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}

// TestFactor: a factor reads as a plain number and writes back the same;
// anything else, NaN and infinities included, is refused.
func TestFactor(t *testing.T) {
	for in, want := range map[string]string{"1.5": "1.5", " 2 ": "2", "10": "10", "1.1": "1.1", "0": "0"} {
		f, err := config.ParseFactor(in)
		if err != nil || f.String() != want || !f.Set {
			t.Errorf("ParseFactor(%q) = %+v, %v; want %s", in, f, err, want)
		}
	}
	for _, bad := range []string{"", "1.5x", "150%", "NaN", "+Inf", "one"} {
		if f, err := config.ParseFactor(bad); err == nil {
			t.Errorf("ParseFactor(%q) = %+v, want an error", bad, f)
		}
	}
	var f config.Factor
	if err := f.SetString(""); err != nil || f.Set || f.String() != "" {
		t.Errorf("SetString(\"\") = %+v, %v; want unset", f, err)
	}
}
