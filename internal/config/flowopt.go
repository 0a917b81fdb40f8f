// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strconv"
	"strings"
)

// FlowOpt modules (after XDP-FlowOpt): each runs when it is
// listed in the config and not off, and is switched on or off at runtime
// through the API.
const (
	// ModuleProbe watches each flow's RTT and raises a congestion hint
	// when it exceeds RTTFactor times the flow's min RTT.
	ModuleProbe = "probe"
	// ModuleFairness shares each QoS class among its flows (DRR).
	ModuleFairness = "fairness"
	// ModuleRelief relieves a receive CPU whose packet rate exceeds Hot
	// times the CPUs' mean.
	ModuleRelief = "relief"
)

// flowOptModules are the modules in the order messages list them.
var flowOptModules = []string{ModuleProbe, ModuleFairness, ModuleRelief}

// FlowOptModule is one FlowOpt module and its settings. A setting
// belongs to one module and is refused on the others.
type FlowOptModule struct {
	// Module is ModuleProbe, ModuleFairness or ModuleRelief: the key.
	Module string `yaml:"module"`
	// Off keeps the module in the config but not running.
	Off bool `yaml:"off,omitempty"`
	// RTTFactor (probe): a flow whose RTT exceeds RTTFactor times its
	// min RTT raises a congestion hint (MinRTTFactor-MaxRTTFactor,
	// DefaultRTTFactor).
	RTTFactor Factor `yaml:"rtt_factor,omitempty"`
	// Hot (relief): a receive CPU is hot when its packet rate exceeds
	// this share of the CPUs' mean (MinHot-MaxHot, DefaultHot)...
	Hot Ratio `yaml:"hot,omitempty"`
	// MinPPS (relief): ...and is at least MinPPS packets a second
	// (DefaultMinPPS): a lightly loaded CPU is never hot, however
	// uneven the load.
	MinPPS uint32 `yaml:"min_pps,omitempty"`
}

// FlowOpt settings' bounds and defaults. The 1.5 RTT factor is the P4
// ATSSS scheduler's RTTMon threshold (weights against 1.5 x minRTT).
const (
	DefaultRTTFactor = 1.5
	MinRTTFactor     = 1.1
	MaxRTTFactor     = 10
	DefaultHot       = 1.5
	MinHot           = 1.1
	MaxHot           = 10
	DefaultMinPPS    = 20000
)

// Effective returns m with the defaults of its module's settings filled.
func (m FlowOptModule) Effective() FlowOptModule {
	switch m.Module {
	case ModuleProbe:
		if !m.RTTFactor.Set {
			m.RTTFactor = Factor{V: DefaultRTTFactor, Set: true}
		}
	case ModuleRelief:
		if !m.Hot.Set {
			m.Hot = Ratio{V: DefaultHot, Set: true}
		}
		if m.MinPPS == 0 {
			m.MinPPS = DefaultMinPPS
		}
	}
	return m
}

// flowOptSettings are the modules' settings: each one's field, the
// module it is for, and its value as get shows it ("" when unset).
var flowOptSettings = []struct {
	field, module string
	value         func(m *FlowOptModule) string
}{
	{"rtt_factor", ModuleProbe, func(m *FlowOptModule) string { return m.RTTFactor.String() }},
	{"hot", ModuleRelief, func(m *FlowOptModule) string { return m.Hot.String() }},
	{"min_pps", ModuleRelief, func(m *FlowOptModule) string {
		if m.MinPPS == 0 {
			return ""
		}
		return strconv.FormatUint(uint64(m.MinPPS), 10)
	}},
}

// Settings shows m's settings as "name value" pairs, as the CLI lists
// them: "hot 150% min_pps 20000".
func (m FlowOptModule) Settings() string {
	var out []string
	for _, s := range flowOptSettings {
		if v := s.value(&m); v != "" {
			out = append(out, s.field+" "+v)
		}
	}
	return strings.Join(out, " ")
}

var flowOptKind = &KindOf[FlowOptModule]{
	Kind:     KindFlowOpt,
	Plural:   "flowopt",
	KeyField: "module",
	Check:    checkFlowOpt,
}

func checkFlowOpt(c *Check, m *FlowOptModule) {
	want := JoinWords(flowOptModules, "or")
	switch m.Module {
	case ModuleProbe, ModuleFairness, ModuleRelief:
		for _, s := range flowOptSettings {
			if s.module != m.Module && s.value(m) != "" {
				c.Add(s.field, "not for module %s (only %s)", m.Module, s.module)
			}
		}
	case "":
		c.Add("module", "required (%s)", want)
	default:
		c.Add("module", "unknown module %q (want %s)", m.Module, want)
	}
	// A setting on the wrong module is not also out of range.
	if f := m.RTTFactor; f.Set && !c.bad["rtt_factor"] && (f.V < MinRTTFactor || f.V > MaxRTTFactor) {
		c.Add("rtt_factor", "%s is outside %s-%s", f, Factor{V: MinRTTFactor, Set: true}, Factor{V: MaxRTTFactor, Set: true})
	}
	if h := m.Hot; h.Set && !c.bad["hot"] && (h.V < MinHot || h.V > MaxHot) {
		c.Add("hot", "%s is outside %s-%s", h, Ratio{V: MinHot, Set: true}, Ratio{V: MaxHot, Set: true})
	}
}
