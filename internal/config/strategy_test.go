// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

// strategyDoc is the strategies docs/cpu-strategies.md describes: one of
// each policy.
const strategyDoc = qosBase + `strategies:
  - id: 1
    name: gnb
    command_regex: "^(nr-gnb|open5gs-upfd)$"
    selectors:
      pod_labels: {app: gnb, app.kubernetes.io/part-of: ran}
      cgroup: /kubepods.slice
    priority: true
    cpus: "2-3"
    irq_affinity: [lan0, wan1]
  - {id: 2, selectors: {user: open5gs, env: EDGEPLANE_CLASS=urllc}, priority: true, policy: deadline, execution_time: 500us}
  - {id: 3, command_regex: iperf3, selectors: {user: iperf}, priority: true, policy: rr, rt_priority: 10, cpus: 5}
  - {id: 4, selectors: {cgroup: /system.slice/open5gs-upfd.service}, others_weight: 2}
`

// TestStrategies: strategies parse as written, their defaults filled by
// Effective (fifo with priority, else weight; rt_priority 50; a 1 ms
// period) and shown by get. TestTypedKindsRoundTrip reads them back.
func TestStrategies(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(strategyDoc))
	if err != nil {
		t.Fatal(err)
	}
	st := c.Strategies
	if len(st) != 4 {
		t.Fatalf("strategies: %+v", st)
	}
	first := config.Strategy{ID: 1, Name: "gnb", CommandRegex: "^(nr-gnb|open5gs-upfd)$",
		Selectors: &config.Selectors{PodLabels: map[string]string{"app": "gnb", "app.kubernetes.io/part-of": "ran"}, Cgroup: "/kubepods.slice"},
		Priority:  true, CPUs: config.CPUList{Bits: [16]uint64{0b1100}}, IRQAffinity: []string{"lan0", "wan1"}}
	if !reflect.DeepEqual(st[0], first) {
		t.Errorf("strategy 1: %+v, want %+v", st[0], first)
	}
	for i, want := range []struct {
		policy string
		rtPrio uint32
		period time.Duration
	}{{config.PolicyFIFO, 50, 0}, {config.PolicyDeadline, 0, time.Millisecond}, {config.PolicyRR, 10, 0}, {config.PolicyWeight, 0, 0}} {
		e := st[i].Effective()
		if e.Policy != want.policy || e.RTPriority != want.rtPrio || e.Period.D != want.period {
			t.Errorf("strategy %d effective: %+v, want policy %s rt_priority %d period %s", st[i].ID, e, want.policy, want.rtPrio, want.period)
		}
	}
	var b bytes.Buffer
	if err := client.WriteTable(&b, config.Builtin(), config.KindStrategy, config.Builtin().Objects(c, config.KindStrategy)); err != nil {
		t.Fatal(err)
	}
	const table = `ID  NAME  MATCH                                                                                              POLICY              CPUS
1   gnb   regex ^(nr-gnb|open5gs-upfd)$ labels app=gnb,app.kubernetes.io/part-of=ran cgroup /kubepods.slice  fifo 50             2-3
2   -     user open5gs env EDGEPLANE_CLASS=urllc                                                             deadline 500µs/1ms  -
3   -     regex iperf3 user iperf                                                                            rr 10               5
4   -     cgroup /system.slice/open5gs-upfd.service                                                          weight others 2     -
`
	if b.String() != table {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), table)
	}
}

// TestStrategyErrors: what is wrong with a strategy is refused naming
// the field and why: nothing to match, a regex that does not compile, a
// selector that is not a label, a cgroup path, a user or NAME=VALUE, an
// unknown policy or a real-time one without priority, a setting of
// another policy (execution_time on FIFO/RR or weight, rt_priority off
// fifo/rr, period off deadline), values out of range, a cpu list that is
// not one, irq_affinity without cpus or naming no interface, a
// dedicated CPU two strategies claim.
func TestStrategyErrors(t *testing.T) {
	const untrusted = `strategies[0].selectors: a strategy that raises priority, dedicates cpus or lowers others_weight needs user, cgroup or pod_labels ` +
		`(any user can name a process to match command_regex and set its env: those only narrow)`
	for _, tc := range []struct{ name, strategies, want string }{
		{"no id", `{command_regex: gnb}`, `strategies[0].id: required`},
		{"nothing to match", `{id: 1, priority: true}`, `strategies[0].command_regex: required without selectors (a strategy would take every process)`},
		{"empty selectors", `{id: 1, selectors: {}}`, `strategies[0].command_regex: required without selectors (a strategy would take every process)`},
		{"bad regex", `{id: 1, command_regex: "(gnb"}`, "strategies[0].command_regex: invalid RE2 expression: missing closing ): `(gnb`"},
		{"perl regex", `{id: 1, command_regex: "gnb(?=x)"}`, "strategies[0].command_regex: invalid RE2 expression: invalid or unsupported Perl syntax: `(?=`"},
		{"label key", `{id: 1, selectors: {pod_labels: {"-app": gnb}}}`, `strategies[0].selectors.pod_labels: label key "-app": the name must be 1-63 letters, digits, -, _ or ., starting and ending with a letter or digit`},
		{"label prefix", `{id: 1, selectors: {pod_labels: {"Example.com/app": gnb}}}`, `strategies[0].selectors.pod_labels: label key "Example.com/app": the prefix must be a DNS subdomain (lowercase letters, digits, - and ., 253 bytes at most)`},
		{"label value", `{id: 1, selectors: {pod_labels: {app: "g nb"}}}`, `strategies[0].selectors.pod_labels: label app value "g nb": want at most 63 letters, digits, -, _ or ., starting and ending with a letter or digit`},
		{"relative cgroup", `{id: 1, selectors: {cgroup: system.slice}}`, `strategies[0].selectors.cgroup: "system.slice" must start with / (a cgroup v2 path)`},
		{"cgroup ..", `{id: 1, selectors: {cgroup: /system.slice/../x}}`, `strategies[0].selectors.cgroup: "/system.slice/../x" must not contain ..`},
		{"user", `{id: 1, selectors: {user: "open 5gs"}}`, `strategies[0].selectors.user: "open 5gs" is neither a user name nor a numeric uid`},
		{"uid -1", `{id: 1, selectors: {user: "4294967295"}}`, `strategies[0].selectors.user: "4294967295" is neither a user name nor a numeric uid`},
		{"env", `{id: 1, selectors: {env: EDGEPLANE_CLASS}}`, `strategies[0].selectors.env: "EDGEPLANE_CLASS": want NAME=VALUE (NAME letters, digits and _, not starting with a digit)`},
		{"unknown policy", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, policy: idle, rt_priority: 200}`, `strategies[0].policy: unknown policy "idle" (want fifo, rr, deadline or weight)`},
		{"fifo without priority", `{id: 1, command_regex: gnb, selectors: {user: ran}, policy: fifo}`, `strategies[0].policy: fifo needs priority: true (a real-time policy is how a strategy protects)`},
		{"rt_priority range", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, rt_priority: 100}`, `strategies[0].rt_priority: 100 is outside 1-99`},
		{"rt_priority on deadline", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, policy: deadline, execution_time: 100us, rt_priority: 10}`, `strategies[0].rt_priority: not for policy deadline (only fifo and rr)`},
		{"rt_priority on weight", `{id: 1, command_regex: gnb, selectors: {user: ran}, rt_priority: 10}`, `strategies[0].rt_priority: not for policy weight (only fifo and rr)`},
		{"execution_time on fifo", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, execution_time: 500us}`, `strategies[0].execution_time: not for policy fifo (FIFO and RR have no budget: a task runs until it blocks or yields; use deadline)`},
		{"execution_time on rr", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, policy: rr, execution_time: 500us}`, `strategies[0].execution_time: not for policy rr (FIFO and RR have no budget: a task runs until it blocks or yields; use deadline)`},
		{"execution_time on weight", `{id: 1, command_regex: gnb, selectors: {user: ran}, execution_time: 500us}`, `strategies[0].execution_time: not for policy weight (a weight is a share, not a budget; use deadline)`},
		{"deadline without execution_time", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, policy: deadline}`, `strategies[0].execution_time: required with policy deadline (the runtime each period)`},
		{"execution_time too short", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, policy: deadline, execution_time: 5us}`, `strategies[0].execution_time: 5µs is outside 10µs up to below 1ms (the period: the rest of each period is the other tasks')`},
		{"execution_time past the period", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, policy: deadline, execution_time: 2ms, period: 1500us}`, `strategies[0].execution_time: 2ms is outside 10µs up to below 1.5ms (the period: the rest of each period is the other tasks')`},
		{"period too short", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, policy: deadline, execution_time: 20us, period: 50us}`, `strategies[0].period: 50µs is outside 100µs-4.194304s`},
		{"period on fifo", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, period: 1ms}`, `strategies[0].period: not for policy fifo (only deadline)`},
		{"period on weight", `{id: 1, command_regex: gnb, selectors: {user: ran}, period: 1ms}`, `strategies[0].period: not for policy weight (only deadline)`},
		{"bad duration", `{id: 1, command_regex: gnb, selectors: {user: ran}, priority: true, policy: deadline, execution_time: fast}`, `strategies[0].execution_time: invalid duration "fast" (want e.g. 500ms or 2s)`},
		{"cpu list syntax", `{id: 1, command_regex: gnb, selectors: {user: ran}, cpus: "2-"}`, `strategies[0].cpus: invalid cpu list "2-" (want CPUs and ranges such as 0,2-3)`},
		{"cpu list not ascending", `{id: 1, command_regex: gnb, selectors: {user: ran}, cpus: "4,2-3"}`, `strategies[0].cpus: cpu list "4,2-3": 2-3 overlaps or comes before cpu 4 (want ascending, without overlaps)`},
		{"cpu list overlap", `{id: 1, command_regex: gnb, selectors: {user: ran}, cpus: "0-3,3"}`, `strategies[0].cpus: cpu list "0-3,3": 3 overlaps or comes before cpu 3 (want ascending, without overlaps)`},
		{"cpu list reversed", `{id: 1, command_regex: gnb, selectors: {user: ran}, cpus: "3-1"}`, `strategies[0].cpus: cpu list "3-1": range 3-1 is reversed`},
		{"cpu too large", `{id: 1, command_regex: gnb, selectors: {user: ran}, cpus: "1000-1024"}`, `strategies[0].cpus: cpu list "1000-1024": cpu 1024 is outside 0-1023`},
		{"irq_affinity without cpus", `{id: 1, command_regex: gnb, selectors: {user: ran}, irq_affinity: [wan1]}`, `strategies[0].irq_affinity: needs cpus (the CPUs the IRQs go to)`},
		{"irq_affinity name", `{id: 1, command_regex: gnb, selectors: {user: ran}, cpus: 2, irq_affinity: [wan1, "a/b"]}`, `strategies[0].irq_affinity[1]: interface name "a/b" must not contain '/'`},
		{"irq_affinity twice", `{id: 1, command_regex: gnb, selectors: {user: ran}, cpus: 2, irq_affinity: [wan1, wan1]}`, `strategies[0].irq_affinity[1]: wan1 is already irq_affinity[0]`},
		{"others_weight", `{id: 1, command_regex: gnb, selectors: {user: ran}, others_weight: 10001}`, `strategies[0].others_weight: 10001 is outside 1-10000 (cgroup v2 cpu.weight)`},
		{"cpu in two strategies", `{id: 1, command_regex: gnb, selectors: {user: ran}, cpus: "2-3"}, {id: 2, command_regex: upf, selectors: {user: ran}, cpus: "3,5"}`, `strategies[1].cpus: cpu 3 is already dedicated to strategies[0]`},
		{"id twice", `{id: 1, command_regex: gnb}, {id: 1, command_regex: upf}`, `strategies[1].id: duplicate id 1 (first at strategies[0])`},
		// What a process chooses itself selects nothing that changes
		// anything; the system's processes are never selected.
		{"priority by name", `{id: 1, command_regex: "^nr-gnb$", priority: true}`, untrusted},
		{"cpus by name", `{id: 1, command_regex: "^nr-gnb$", cpus: 1}`, untrusted},
		{"weight by name", `{id: 1, command_regex: "^nr-gnb$", others_weight: 2}`, untrusted},
		{"policy weight by env", `{id: 1, selectors: {env: CLASS=urllc}, policy: weight}`, untrusted},
		{"deadline by env and name", `{id: 1, command_regex: gnb, selectors: {env: CLASS=urllc}, priority: true, policy: deadline, execution_time: 100us}`, untrusted},
		{"root with .*", `{id: 1, command_regex: ".*", selectors: {user: "0"}, priority: true, rt_priority: 99}`, `strategies[0].command_regex: ".*" matches "init", a system process's name: a strategy never takes the system's processes`},
		{"sshd", `{id: 1, command_regex: "ssh", selectors: {user: root}, cpus: 1}`, `strategies[0].command_regex: "ssh" matches "sshd", a system process's name: a strategy never takes the system's processes`},
		{"any name", `{id: 1, command_regex: "-process$", selectors: {user: ran}, priority: true}`, `strategies[0].command_regex: "-process$" matches "q7-unnamed-process", a name nobody chose for it (it matches process names at large): a strategy never takes the system's processes`},
		{"root alone", `{id: 1, selectors: {user: root}, priority: true}`, `strategies[0].selectors.user: root's processes are the system's (init, sshd, the agent): narrow them with command_regex`},
		{"uid 0 alone", `{id: 1, selectors: {user: "00"}, others_weight: 1}`, `strategies[0].selectors.user: 00's processes are the system's (init, sshd, the agent): narrow them with command_regex`},
		{"root cgroup", `{id: 1, command_regex: gnb, selectors: {cgroup: /}, priority: true}`, `strategies[0].selectors.cgroup: "/" holds init or every process: name the group of the processes to protect`},
		{"init.scope", `{id: 1, command_regex: gnb, selectors: {cgroup: /init.scope/}, priority: true}`, `strategies[0].selectors.cgroup: "/init.scope/" holds init or every process: name the group of the processes to protect`},
		{"system.slice", `{id: 1, selectors: {cgroup: /system.slice}, priority: true}`, `strategies[0].selectors.cgroup: "/system.slice" holds many services or pods, the system's among them: name one, or narrow it with command_regex`},
		{"kubepods", `{id: 1, selectors: {cgroup: /kubepods.slice/kubepods-burstable.slice}, cpus: 1}`, `strategies[0].selectors.cgroup: "/kubepods.slice/kubepods-burstable.slice" holds many services or pods, the system's among them: name one, or narrow it with command_regex`},
		{"deadline of the whole period", `{id: 1, selectors: {user: ran}, priority: true, policy: deadline, execution_time: 1ms, period: 1ms}`, `strategies[0].execution_time: 1ms is outside 10µs up to below 1ms (the period: the rest of each period is the other tasks')`},
	} {
		_, err := yamlcfg.Parse([]byte(qosBase + "strategies: [" + tc.strategies + "]\n"))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	var many strings.Builder
	for i := range config.MaxStrategies + 1 {
		fmt.Fprintf(&many, "{id: %d, command_regex: gnb%d}, ", i+1, i)
	}
	if _, err := yamlcfg.Parse([]byte(qosBase + "strategies: [" + many.String() + "]\n")); err == nil || !strings.Contains(err.Error(), "65 strategies, at most 64") {
		t.Errorf("65 strategies: %v, want refused", err)
	}
}

// TestStrategySelections: what a strategy that changes something may
// select by — a user, a cgroup, pod labels, narrowed by command_regex and
// env — and one that changes nothing by its name alone.
func TestStrategySelections(t *testing.T) {
	for _, y := range []string{
		`{id: 1, command_regex: "^nr-gnb$", selectors: {user: "0"}, priority: true, cpus: "1"}`,
		`{id: 1, command_regex: "^nr-gnb$", selectors: {user: open5gs, env: CLASS=urllc}, priority: true, policy: deadline, execution_time: 999us}`,
		`{id: 1, selectors: {cgroup: /system.slice/open5gs-upfd.service}, others_weight: 2}`,
		`{id: 1, command_regex: "^upf", selectors: {cgroup: /system.slice}, priority: true}`,
		`{id: 1, selectors: {pod_labels: {app: gnb}}, cpus: "2-3"}`,
		`{id: 1, command_regex: ".*"}`, // changes nothing: matched, shown, no more
	} {
		if _, err := yamlcfg.Parse([]byte(qosBase + "strategies: [" + y + "]\n")); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
}

// TestStrategyStore: a store batch's strategies land in
// Changes.Strategies, and one that claims another's dedicated CPU is
// refused naming the CPU and the strategy that has it.
func TestStrategyStore(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(strategyDoc))
	if err != nil {
		t.Fatal(err)
	}
	s := config.NewStore(c)
	cpus, _ := config.ParseCPUList("6-7")
	ch, _, err := s.Apply([]config.Op{
		{At: "operations[0].create.strategy", Verb: config.Create, Kind: config.KindStrategy, Object: config.Strategy{ID: 5, CommandRegex: "upf", Selectors: &config.Selectors{User: "upf"}, CPUs: cpus}},
		{At: "operations[1].delete", Verb: config.Delete, Kind: config.KindStrategy, ID: 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := ch.Strategies; len(d) != 2 || d[0].Old != nil || d[0].New.ID != 5 || d[1].Old.ID != 4 || d[1].New != nil || ch.Other != nil {
		t.Errorf("changes: %+v, want strategy 5 created and 4 deleted", d)
	}
	cpus, _ = config.ParseCPUList("3-4")
	_, _, err = s.Apply([]config.Op{{At: "operations[0].update.strategy", Verb: config.Update, Kind: config.KindStrategy, Object: config.Strategy{ID: 5, CommandRegex: "upf", Selectors: &config.Selectors{User: "upf"}, CPUs: cpus}}})
	if err == nil || err.Error() != "operations[0].update.strategy.cpus: cpu 3 is already dedicated to strategy 1" {
		t.Errorf("cpu 3 twice: %v", err)
	}
}
