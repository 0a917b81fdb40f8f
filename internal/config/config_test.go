// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"errors"
	"io/fs"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"gopkg.in/yaml.v3"
)

const sample = `
interfaces:
  - {name: lan0, role: lan, xdp: auto}
  - {name: wan0, role: wan, xdp: auto}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0, proto: udp, dport: 9000-9100}, far: 2}
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.2.0.0/16}, far: 1}
limits: {flows: 65536, rules: 65536}
`

// head is a valid interfaces and fars section that test cases extend.
const head = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
`

// withPDR returns head plus a pdrs section holding the given entries.
func withPDR(entries ...string) string {
	return head + "pdrs:\n  - " + strings.Join(entries, "\n  - ") + "\n"
}

// parseErrors parses doc and returns the reported problems as strings,
// failing the test if Parse succeeded or returned something else.
func parseErrors(t *testing.T, doc string) []string {
	t.Helper()
	c, err := yamlcfg.Parse([]byte(doc))
	if err == nil {
		t.Fatalf("Parse succeeded, want an error; config: %+v", c)
	}
	if c != nil {
		t.Errorf("Parse returned a config along with error %v", err)
	}
	var errs config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse error %T (%v), want Errors", err, err)
	}
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	if got := err.Error(); got != strings.Join(out, "\n") {
		t.Errorf("Errors.Error() = %q, want entries joined by newlines", got)
	}
	return out
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		// Unknown fields and decode errors.
		{"unknown match field", withPDR(`{id: 10, match: {foo: 1}, far: 1}`), `pdrs[0].match.foo: unknown field`},
		{"unknown top-level field", head + "extra: 1\n", `extra: unknown field`},
		{"unknown interface field", "interfaces: [{name: lan0, role: lan, mode: x}]", `interfaces[0].mode: unknown field`},
		{"unknown field suggestion", head + "pdrs: [{id: 10, far: 1, presedence: 4}]", `pdrs[0].presedence: unknown field (did you mean "precedence"?)`},
		{"unknown limits field", head + "limits: {flow: 2048}", `limits.flow: unknown field (did you mean "flows"?)`},
		{"precedence not a number", withPDR(`{id: 10, precedence: abc, far: 1}`), `pdrs[0].precedence: must be an unsigned integer, got "abc"`},
		{"negative id", withPDR(`{id: -3, far: 1}`), `pdrs[0].id: must be an unsigned integer, got -3`},
		{"float far", withPDR(`{id: 10, far: 1.5}`), `pdrs[0].far: must be an unsigned integer, got 1.5`},
		{"id is a list", withPDR(`{id: [1], far: 1}`), `pdrs[0].id: must be an unsigned integer, got a list`},
		{"id too large", withPDR(`{id: 4294967296, far: 1}`), `pdrs[0].id: 4294967296 out of range 0-4294967295`},
		{"interfaces not a list", "interfaces: lan0\n", `interfaces: must be a list, got "lan0"`},
		{"pdr not a mapping", head + "pdrs: [5]\n", `pdrs[0]: must be a mapping, got 5`},
		{"name is a mapping", "interfaces: [{name: {a: b}, role: lan}]", `interfaces[0].name: must be a string, got a mapping`},
		{"duplicate key", "interfaces: [{name: lan0, role: lan, name: lan1}]", `interfaces[0].name: duplicate key (first at line 1)`},

		// Prefixes.
		{"invalid CIDR", withPDR(`{id: 10, far: 1}`, `{id: 11, match: {dst: 10.2.0.0/33}, far: 1}`), `pdrs[1].match.dst: invalid CIDR "10.2.0.0/33"`},
		{"garbage address", withPDR(`{id: 10, match: {src: lan0}, far: 1}`), `pdrs[0].match.src: invalid CIDR "lan0"`},
		{"host bits set", withPDR(`{id: 10, match: {dst: 10.2.3.4/16}, far: 1}`), `pdrs[0].match.dst: host bits set; did you mean 10.2.0.0/16?`},
		{"host bits set v6", withPDR(`{id: 10, match: {src: "2001:db8::1/32"}, far: 1}`), `pdrs[0].match.src: host bits set; did you mean 2001:db8::/32?`},
		{"family mismatch", withPDR(`{id: 10, match: {src: 10.0.0.0/8, dst: "2001:db8::/32"}, far: 1}`), `pdrs[0].match: src is IPv4 but dst is IPv6`},
		{"icmp with IPv6", withPDR(`{id: 10, match: {proto: icmp, dst: "2001:db8::/32"}, far: 1}`), `pdrs[0].match.proto: icmp cannot match IPv6 prefixes (use icmpv6)`},
		{"icmpv6 with IPv4", withPDR(`{id: 10, match: {proto: icmpv6, src: 10.0.0.1}, far: 1}`), `pdrs[0].match.proto: icmpv6 cannot match IPv4 prefixes (use icmp)`},

		// Protocols and ports.
		{"unknown proto", withPDR(`{id: 10, match: {proto: tcpp}, far: 1}`), `pdrs[0].match.proto: unknown protocol "tcpp" (want tcp, udp, icmp, icmpv6, gre, sctp or 0-255)`},
		{"proto out of range", withPDR(`{id: 10, match: {proto: 300}, far: 1}`), `pdrs[0].match.proto: protocol 300 out of range 0-255`},
		{"port range reversed", withPDR(`{id: 10, match: {proto: udp, dport: 9100-9000}, far: 1}`), `pdrs[0].match.dport: port range reversed (9100-9000)`},
		{"port out of range", withPDR(`{id: 10, match: {proto: tcp, dport: 70000}, far: 1}`), `pdrs[0].match.dport: port 70000 out of range 0-65535`},
		{"range end out of range", withPDR(`{id: 10, match: {proto: tcp, sport: 80-70000}, far: 1}`), `pdrs[0].match.sport: port 70000 out of range 0-65535`},
		{"negative port", withPDR(`{id: 10, match: {proto: tcp, sport: -1}, far: 1}`), `pdrs[0].match.sport: port -1 out of range 0-65535`},
		{"port garbage", withPDR(`{id: 10, match: {proto: tcp, sport: http}, far: 1}`), `pdrs[0].match.sport: invalid port range "http" (want a port like 80 or a range like 9000-9100)`},
		{"ports without proto", withPDR(`{id: 10, match: {dport: 80}, far: 1}`), `pdrs[0].match.dport: ports need proto tcp, udp or sctp`},
		{"ports with icmp", withPDR(`{id: 10, match: {proto: icmp, sport: 80}, far: 1}`), `pdrs[0].match.sport: ports need proto tcp, udp or sctp`},
		{"gre key with udp", withPDR(`{id: 10, match: {proto: udp, gre_key: 7}, far: 1}`), `pdrs[0].match.gre_key: needs proto gre (or leave proto empty)`},
		{"dscp out of range", withPDR(`{id: 10, match: {dscp: 64}, far: 1}`), `pdrs[0].match.dscp: 64 out of range 0-63`},
		{"match in unknown", withPDR(`{id: 10, match: {in: lan9}, far: 1}`), `pdrs[0].match.in: unknown interface "lan9"`},

		// References, ids and duplicates.
		{"far dangling", withPDR(`{id: 10, far: 7}`), `pdrs[0].far: no far with id 7`},
		{"far missing", withPDR(`{id: 10}`), `pdrs[0].far: required`},
		{"pdr id missing", withPDR(`{far: 1}`), `pdrs[0].id: required`},
		{"pdr id zero", withPDR(`{id: 0, far: 1}`), `pdrs[0].id: required`},
		{"duplicate pdr id", withPDR(`{id: 10, far: 1}`, `{id: 10, far: 2}`), `pdrs[1].id: duplicate id 10 (first at pdrs[0])`},
		{"far id missing", "interfaces: [{name: lan0, role: lan}]\nfars: [{action: drop}]", `fars[0].id: required`},
		{"duplicate far id", "interfaces: [{name: lan0, role: lan}]\nfars: [{id: 3, action: drop}, {id: 3, action: pass}]", `fars[1].id: duplicate id 3 (first at fars[0])`},
		{"duplicate interface", "interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}, {name: lan0, role: wan}]", `interfaces[2].name: duplicate name "lan0" (first at interfaces[0])`},

		// FARs.
		{"unknown action", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: fwd}]", `fars[0].action: unknown action "fwd" (want pass, drop, redirect, encap, decap, nat or steer)`},
		{"action missing", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1}]", `fars[0].action: required (want pass, drop, redirect, encap, decap, nat or steer)`},
		{"encap without path", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: encap}]", `fars[0].path: required for action encap`},
		{"encap to unknown path", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: encap, path: 4}]", `fars[0].path: no path with id 4`},
		{"path on drop", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: drop, path: 4}]", `fars[0].path: not allowed for action drop`},
		// Steering.
		{"steer without lbr", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: steer}]", `fars[0].lbr: required for action steer (the steering group)`},
		{"lbr on drop", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: drop, lbr: 4}]", `fars[0].lbr: not allowed for action drop`},
		{"steer to a maglev lbr", steerCfg("maglev", "encap", ""), `fars[1].lbr: lbr 5 is maglev; a steer FAR needs a steering algorithm`},
		{"steering member not encap", steerCfg("active-standby", "drop", ""), `lbrs[0].members[0].far: far 1 has action drop; steering members need encap`},
		{"steering with table size", steerCfg("wrr", "encap", ", table_size: 251"), `lbrs[0].table_size: not allowed for wrr (a Maglev setting)`},
		{"steering sla loss", steerCfg("load-balancing", "encap", ", sla: {max_loss: 120%}"), `lbrs[0].sla.max_loss: 120% is outside 0-100%`},
		{"redundant over one member", steerCfg("redundant", "encap", ""), `lbrs[0].members: 1 member(s); redundant sends each packet over two or more`},
		{"redundant per packet", steerCfg("redundant", "encap", ", per_packet: true"), `lbrs[0].per_packet: not allowed for redundant (every packet goes over every path)`},
		{"unknown steering mode", steerCfg("fastest", "encap", ""), `lbrs[0].algorithm: unknown algorithm "fastest" (want maglev, active-standby, smallest-delay, load-balancing, wrr, rtt, dwrr, priority, cmon or redundant)`},
		{"path monitor interval", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {insecure: true, interval: 5ms}}]", `paths[0].monitor.interval: 5ms is outside 10ms-10s`},
		{"path monitor down_after", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {insecure: true, down_after: 99}}]", `paths[0].monitor.down_after: 99 is outside 1-64`},
		{"path monitor without secret", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2}]",
			"paths[0].monitor.secret: required to sign the path's probes: 32 hex digits, the same at both ends (`openssl rand -hex 16`); or insecure: true where the underlay is trusted, or off: true"},
		{"path secret short", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {secret: 00112233445566778899aabbccddee}}]",
			"paths[0].monitor.secret: want 32 hex digits (a 128-bit key, e.g. from `openssl rand -hex 16`), got 30 characters"},
		{"path secret not hex", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {secret: correct-horse-battery-staple-xyz}}]",
			"paths[0].monitor.secret: want 32 hex digits (a 128-bit key, e.g. from `openssl rand -hex 16`), got 32 characters"},
		{"path secret zero", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {secret: \"00000000000000000000000000000000\"}}]",
			"paths[0].monitor.secret: all zero: not a secret"},
		{"path secret and insecure", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {secret: 00112233445566778899aabbccddeeff, insecure: true}}]",
			"paths[0].monitor.insecure: set together with a secret: give one or the other"},
		{"path type", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: vxlan, interface: wan0, local: 192.0.2.1, remote: 192.0.2.2}]", `paths[0].type: unknown type "vxlan" (want gre)`},
		{"path ipv6 outer", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: \"2001:db8::1\", remote: 192.0.2.2, monitor: {insecure: true}}]", `paths[0].local: 2001:db8::1 is not IPv4 (outer headers are IPv4)`},
		{"path bad address", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 192.0.2.300, remote: 192.0.2.2, monitor: {insecure: true}}]", `paths[0].local: invalid IP address "192.0.2.300"`},
		{"path missing remote", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 192.0.2.1, monitor: {insecure: true}}]", `paths[0].remote: required (the outer IPv4 address)`},
		{"path unknown interface", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan7, local: 192.0.2.1, remote: 192.0.2.2, monitor: {insecure: true}}]", `paths[0].interface: unknown interface "wan7"`},
		{"path seq not bool", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 192.0.2.1, remote: 192.0.2.2, seq: 3, monitor: {insecure: true}}]", `paths[0].seq: must be true or false, got 3`},
		{"paths share key", "interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 192.0.2.1, remote: 192.0.2.2, key: 5, monitor: {insecure: true}}, {id: 2, type: gre, interface: wan0, local: 192.0.2.1, remote: 192.0.2.9, key: 5, monitor: {insecure: true}}]", `paths[1].key: key 5 with local 192.0.2.1 is already used by paths[0]; decapsulation could not tell them apart`},
		{"redirect without interface", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: redirect}]", `fars[0].interface: required for action redirect`},
		{"drop with interface", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: pass}, {id: 2, action: drop, interface: wan0}]", `fars[1].interface: not allowed for action drop`},
		{"redirect unknown interface", "interfaces: [{name: wan0, role: wan}]\nfars: [{id: 1, action: redirect, interface: wan9}]", `fars[0].interface: unknown interface "wan9"`},

		// Interfaces.
		{"unknown role", "interfaces: [{name: lan0, role: dmz}]", `interfaces[0].role: unknown role "dmz" (want lan or wan)`},
		{"role missing", "interfaces: [{name: lan0}]", `interfaces[0].role: required (want lan or wan)`},
		{"unknown xdp mode", "interfaces: [{name: lan0, role: lan, xdp: offload}]", `interfaces[0].xdp: unknown mode "offload" (want native, generic or auto)`},
		{"name missing", "interfaces: [{role: lan}]", `interfaces[0].name: required`},
		{"name too long", "interfaces: [{name: abcdefghijklmnop, role: lan}]", `interfaces[0].name: interface name "abcdefghijklmnop" is 16 bytes, longer than 15`},
		{"name with slash", "interfaces: [{name: eth0/1, role: lan}]", `interfaces[0].name: interface name "eth0/1" must not contain '/'`},
		{"name with space", `interfaces: [{name: "eth 0", role: lan}]`, `interfaces[0].name: interface name "eth 0" must not contain whitespace`},
		{"name dot", `interfaces: [{name: "..", role: lan}]`, `interfaces[0].name: interface name ".." not allowed`},

		// Limits and defaults.
		{"flows below minimum", head + "limits: {flows: 100}", `limits.flows: 100 below minimum 1024`},
		{"flows above maximum", head + "limits: {flows: 16777217}", `limits.flows: 16777217 above maximum 16777216`},
		{"rules above maximum", head + "limits: {rules: 2000000}", `limits.rules: 2000000 above maximum 1048576`},
		{"rules exceeded", withPDR(`{id: 10, far: 1}`, `{id: 11, far: 1}`, `{id: 12, far: 2}`) + "limits: {rules: 2}", `pdrs: 3 rules exceed limits.rules 2`},
		{"unknown no_match", head + "defaults: {no_match: reject}", `defaults.no_match: unknown action "reject" (want pass or drop)`},
		{"unknown malformed", head + "defaults: {malformed: redirect}", `defaults.malformed: unknown action "redirect" (want pass or drop)`},

		// Whole document.
		{"empty file", "", `interfaces: at least one interface required`},
		{"comments only", "# nothing here\n", `interfaces: at least one interface required`},
		{"no interfaces", "fars: [{id: 2, action: drop}]", `interfaces: at least one interface required`},
		{"empty interfaces", "interfaces: []", `interfaces: at least one interface required`},
		{"top level list", "- name: lan0\n", `config: top level must be a mapping of interfaces, paths, fars, pdrs, lbrs, services, limits, defaults, qos_classes, flowopt and strategies, got a list`},
		{"top level scalar", "hello\n", `config: top level must be a mapping of interfaces, paths, fars, pdrs, lbrs, services, limits, defaults, qos_classes, flowopt and strategies, got "hello"`},
		{"syntax error", "interfaces: [\n", `config: invalid YAML: line 1: did not find expected node content`},
		{"two documents", head + "---\n" + head, `config: multiple YAML documents are not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseErrors(t, tt.doc)
			for _, g := range got {
				if g == tt.want {
					return
				}
			}
			t.Errorf("missing %q; got:\n%s", tt.want, strings.Join(got, "\n"))
		})
	}
}

func TestParseReportsEveryProblemInDocumentOrder(t *testing.T) {
	doc := `
interfaces:
  - {name: lan0, role: lan, xdp: fast}
  - {name: lan0, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan9}
  - {id: 2, action: fwd}
pdrs:
  - {id: 10, precedence: abc, match: {in: lan9, dst: 10.2.3.4/16, foo: 1}, far: 7}
  - {id: 10, match: {proto: udp, dport: 9100-9000}}
limits: {flows: 100}
`
	want := []string{
		`interfaces[0].xdp: unknown mode "fast" (want native, generic or auto)`,
		`interfaces[1].name: duplicate name "lan0" (first at interfaces[0])`,
		`fars[0].interface: unknown interface "wan9"`,
		`fars[1].action: unknown action "fwd" (want pass, drop, redirect, encap, decap, nat or steer)`,
		`pdrs[0].precedence: must be an unsigned integer, got "abc"`,
		`pdrs[0].match.in: unknown interface "lan9"`,
		`pdrs[0].match.dst: host bits set; did you mean 10.2.0.0/16?`,
		`pdrs[0].match.foo: unknown field`,
		`pdrs[0].far: no far with id 7`,
		`pdrs[1].id: duplicate id 10 (first at pdrs[0])`,
		`pdrs[1].match.dport: port range reversed (9100-9000)`,
		`pdrs[1].far: required`,
		`limits.flows: 100 below minimum 1024`,
	}
	got := parseErrors(t, doc)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseOrderFollowsDocumentNotStruct(t *testing.T) {
	doc := `
limits: {flows: 10}
pdrs: [{id: 1, far: 9}]
interfaces: [{name: lan0, role: lan}]
`
	want := []string{
		`limits.flows: 10 below minimum 1024`,
		`pdrs[0].far: no far with id 9`,
	}
	got := parseErrors(t, doc)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDecodeErrorIsNotReportedTwice(t *testing.T) {
	// A bad id must not also produce "pdrs[0].id: required".
	got := parseErrors(t, withPDR(`{id: abc, far: 1}`))
	want := []string{`pdrs[0].id: must be an unsigned integer, got "abc"`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParseSample(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(sample))
	if err != nil {
		t.Fatalf("yamlcfg.Parse(sample): %v", err)
	}
	want := &config.Config{
		Interfaces: []config.Interface{
			{Name: "lan0", Role: config.RoleLAN, XDP: config.XDPAuto},
			{Name: "wan0", Role: config.RoleWAN, XDP: config.XDPAuto},
		},
		FARs: []config.FAR{
			{ID: 1, Action: config.ActionRedirect, Interface: "wan0"},
			{ID: 2, Action: config.ActionDrop},
		},
		PDRs: []config.PDR{
			{ID: 10, Precedence: 10, FAR: 2, Match: config.Match{
				In:    "lan0",
				Proto: config.Proto{Num: config.IPProtoUDP, Set: true},
				Dport: config.PortRange{Lo: 9000, Hi: 9100, Set: true},
			}},
			{ID: 20, Precedence: 100, FAR: 1, Match: config.Match{
				In:  "lan0",
				Dst: config.Prefix{P: netip.MustParsePrefix("10.2.0.0/16")},
			}},
		},
		Limits:   config.Limits{Flows: 65536, Rules: 65536, MaglevTable: 65537, Connections: 65536, Sessions: config.DefaultSessions},
		Defaults: config.Defaults{NoMatch: config.ActionPass, Malformed: config.ActionDrop},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("yamlcfg.Parse(sample) =\n%+v\nwant\n%+v", c, want)
	}
	if f, ok := c.FAR(1); !ok || f.Interface != "wan0" {
		t.Errorf("FAR(1) = %+v, %v", f, ok)
	}
	if _, ok := c.FAR(3); ok {
		t.Error("FAR(3) found, want not found")
	}
	if i, ok := c.Interface("wan0"); !ok || i.Role != config.RoleWAN {
		t.Errorf("Interface(wan0) = %+v, %v", i, ok)
	}
	if _, ok := c.Interface("wan9"); ok {
		t.Error("Interface(wan9) found, want not found")
	}
}

func TestLoad(t *testing.T) {
	c, err := yamlcfg.Load(filepath.Join("testdata", "sample.yaml"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(c.PDRs) != 2 || c.PDRs[1].Match.Dst.String() != "10.2.0.0/16" {
		t.Errorf("Load: unexpected pdrs %+v", c.PDRs)
	}

	_, err = yamlcfg.Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !strings.HasPrefix(err.Error(), "read config: ") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("yamlcfg.Load(missing) error = %v, want read config: ... wrapping fs.ErrNotExist", err)
	}
}

func TestDefaults(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(`
interfaces: [{name: lan0, role: lan}]
pdrs: [{id: 1, match: {gre_key: 42}, far: 5}]
fars: [{id: 5, action: pass}]
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := c.Interfaces[0].XDP; got != config.XDPAuto {
		t.Errorf("xdp = %q, want auto", got)
	}
	if c.Limits != (config.Limits{Flows: 65536, Rules: 65536, MaglevTable: config.DefaultMaglevTable, Connections: 65536, Sessions: config.DefaultSessions}) {
		t.Errorf("limits = %+v, want 65536/65536", c.Limits)
	}
	if c.Defaults != (config.Defaults{NoMatch: "pass", Malformed: "drop"}) {
		t.Errorf("defaults = %+v, want pass/drop", c.Defaults)
	}
	m := c.PDRs[0].Match
	if m.Proto != (config.Proto{Num: config.IPProtoGRE, Set: true}) || m.GREKey == nil || *m.GREKey != 42 {
		t.Errorf("match = %+v, want proto gre and gre_key 42", m)
	}
	if c.PDRs[0].Precedence != 0 {
		t.Errorf("precedence = %d, want 0", c.PDRs[0].Precedence)
	}
}

func TestExplicitValuesKept(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(`
interfaces: [{name: lan0, role: lan, xdp: native}]
limits: {flows: 1024, rules: 1}
defaults: {no_match: drop, malformed: pass}
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Interfaces[0].XDP != config.XDPNative || c.Limits != (config.Limits{Flows: 1024, Rules: 1, MaglevTable: config.DefaultMaglevTable, Connections: 1024, Sessions: config.DefaultSessions}) ||
		c.Defaults != (config.Defaults{NoMatch: "drop", Malformed: "pass"}) {
		t.Errorf("explicit values changed: %+v", c)
	}
}

func TestMatchValues(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(withPDR(
		`{id: 1, match: {proto: tcp, sport: 80, dport: "443"}, far: 1}`,
		`{id: 2, match: {proto: 132, src: 192.0.2.7, dst: "2001:db8::1", dscp: 46}, far: 1}`,
	)))
	if err == nil || !strings.Contains(err.Error(), "pdrs[1].match: src is IPv4 but dst is IPv6") {
		t.Fatalf("Parse error = %v, want family mismatch", err)
	}
	c, err = yamlcfg.Parse([]byte(withPDR(
		`{id: 1, match: {proto: tcp, sport: 80, dport: "443"}, far: 1}`,
		`{id: 2, match: {proto: 132, src: 192.0.2.7, dscp: 46}, far: 1}`,
		`{id: 3, match: {proto: 0, dst: "2001:db8::1"}, far: 1}`,
	)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	m := c.PDRs[0].Match
	if m.Sport != (config.PortRange{Lo: 80, Hi: 80, Set: true}) || m.Dport != (config.PortRange{Lo: 443, Hi: 443, Set: true}) {
		t.Errorf("ports = %+v %+v", m.Sport, m.Dport)
	}
	m = c.PDRs[1].Match
	if m.Proto.String() != "sctp" || m.Src.String() != "192.0.2.7/32" || m.DSCP == nil || *m.DSCP != 46 {
		t.Errorf("match = %+v", m)
	}
	m = c.PDRs[2].Match
	if m.Proto != (config.Proto{Num: 0, Set: true}) || m.Proto.String() != "0" || m.Dst.String() != "2001:db8::1/128" || m.Src.IsSet() {
		t.Errorf("match = %+v", m)
	}
}

const lbDoc = `interfaces:
  - {name: lan0, role: lan}
  - {name: wan1, role: wan}
paths:
  - {id: 1, type: gre, interface: wan1, local: 172.16.1.1, remote: 172.16.1.2, key: 5, monitor: {insecure: true}}
fars:
  - {id: 1, action: nat, address: 10.6.0.11, port: 8080}
  - {id: 2, action: nat, interface: wan1, address: "fd02::2", port: 8443}
  - {id: 3, action: encap, path: 1}
lbrs:
  - {id: 1, algorithm: maglev, table_size: 1021, members: [{far: 1, weight: 3}, {far: 2, weight: 0}]}
  - {id: 2, algorithm: maglev, members: [{far: 3}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1, health: {type: http, path: /healthz, port: 9000, interval: 500ms, timeout: 200ms, rise: 2, fall: 3}}
  - {id: 2, vip: "fd0f::20", port: 53, proto: udp, lbr: 2, stateless: true}
limits: {flows: 1024, rules: 64, maglev_table: 4099, connections: 2048}
`

func TestRoundTrip(t *testing.T) {
	docs := map[string]string{
		"sample": sample,
		"lb":     lbDoc,
		"rich": withPDR(
			`{id: 1, precedence: 0, match: {in: lan0, proto: tcp, sport: 80, dport: 1-1024, src: "2001:db8::/32", dst: "::1"}, far: 1}`,
			`{id: 2, precedence: 5, match: {proto: 99, dscp: 0, src: 0.0.0.0/0}, far: 2}`,
			`{id: 3, match: {gre_key: 4294967295}, far: 2}`,
			`{id: 4, far: 2}`,
		) + "limits: {flows: 2048, rules: 10}\ndefaults: {no_match: drop, malformed: pass}\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			c, err := yamlcfg.Parse([]byte(doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			out, err := yaml.Marshal(c)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			back, err := yamlcfg.Parse(out)
			if err != nil {
				t.Fatalf("yamlcfg.Parse(Marshal(c)): %v\n%s", err, out)
			}
			if !reflect.DeepEqual(back, c) {
				t.Errorf("round trip changed config:\n%+v\nwant\n%+v\nyaml:\n%s", back, c, out)
			}
		})
	}
}

func TestMarshalShape(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(sample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	s := string(out)
	for _, want := range []string{
		"match: {in: lan0, proto: udp, dport: 9000-9100}",
		"match: {in: lan0, dst: 10.2.0.0/16}",
		"action: drop\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("marshalled config lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "null") || strings.Contains(s, `interface: ""`) {
		t.Errorf("marshalled config has empty fields:\n%s", s)
	}
}

func TestValidateProgrammaticConfig(t *testing.T) {
	c := &config.Config{
		Interfaces: []config.Interface{{Name: "lan0", Role: config.RoleLAN}},
		FARs:       []config.FAR{{ID: 1, Action: config.ActionPass}},
		PDRs: []config.PDR{{ID: 1, FAR: 1, Match: config.Match{
			Dst:   config.Prefix{P: netip.MustParsePrefix("10.1.2.3/8")},
			Sport: config.PortRange{Lo: 9, Hi: 1, Set: true},
			DSCP:  new(uint8(77)),
		}}},
	}
	err := c.Validate()
	var errs config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Validate() = %v, want Errors", err)
	}
	want := config.Errors{
		{Path: "pdrs[0].match.dst", Reason: "host bits set; did you mean 10.0.0.0/8?"},
		{Path: "pdrs[0].match.sport", Reason: "port range reversed (9-1)"},
		{Path: "pdrs[0].match.dscp", Reason: "77 out of range 0-63"},
	}
	if !reflect.DeepEqual(errs, want) {
		t.Errorf("Validate() =\n%v\nwant\n%v", errs, want)
	}
	// Validate judges the normalized config but leaves c alone.
	if c.Interfaces[0].XDP != "" || c.Limits.Flows != 0 {
		t.Errorf("Validate modified the config: %+v", c)
	}

	c.PDRs[0].Match = config.Match{}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v, want nil", err)
	}
}

func TestMergeKeys(t *testing.T) {
	c, err := yamlcfg.Parse([]byte(`
interfaces:
  - &lan {name: lan0, role: lan, xdp: native}
  - <<: *lan
    name: lan1
fars: [{id: 1, action: pass}]
pdrs:
  - &p {id: 1, match: {proto: udp, dport: 53}, far: 1}
  - <<: *p
    id: 2
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := c.Interfaces[1]; got != (config.Interface{Name: "lan1", Role: config.RoleLAN, XDP: config.XDPNative}) {
		t.Errorf("merged interface = %+v", got)
	}
	if got := c.PDRs[1]; got.ID != 2 || got.Match.Dport.Lo != 53 {
		t.Errorf("merged pdr = %+v", got)
	}
}

func TestParseHelpers(t *testing.T) {
	if _, err := config.ParsePortRange("9000-9100"); err != nil {
		t.Errorf("ParsePortRange: %v", err)
	}
	if r, _ := config.ParsePortRange("22"); r.String() != "22" {
		t.Errorf("PortRange.String() = %q, want 22", r.String())
	}
	if _, err := config.ParsePortRange("5-"); err == nil || err.Error() != `invalid port range "5-" (want a port like 80 or a range like 9000-9100)` {
		t.Errorf("ParsePortRange(5-) error = %v", err)
	}
	if p, err := config.ParseProto("47"); err != nil || p.String() != "gre" {
		t.Errorf("ParseProto(47) = %v, %v", p, err)
	}
	if _, err := config.ParsePrefix("fe80::1%eth0"); err == nil || err.Error() != `invalid CIDR "fe80::1%eth0"` {
		t.Errorf("ParsePrefix(zone) error = %v", err)
	}
	if (config.Prefix{}).IsSet() || (config.Prefix{}).String() != "" || (config.Proto{}).String() != "" || (config.PortRange{}).String() != "" {
		t.Error("zero values should be unset with empty strings")
	}
}

// TestRatio: a ratio reads as a percentage or a fraction, is written as
// the shortest percentage that reads back the same (110%, not the
// 110.00000000000001% of 1.1*100), and refuses what no range check
// could (NaN compares false with every bound).
func TestRatio(t *testing.T) {
	for in, want := range map[string]string{
		"110%": "110%", "1.1": "110%", "0.7%": "0.7%", "5%": "5%", "0.05": "5%", "1000%": "1000%", "0": "0%", "12.3456789012345%": "12.3456789012345%",
	} {
		r, err := config.ParseRatio(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseRatio(%q) = %q, %v; want %q", in, r.String(), err, want)
		}
		if back, err := config.ParseRatio(r.String()); err != nil || back != r {
			t.Errorf("%q reads back as %v, %v; want %v", r.String(), back, err, r)
		}
	}
	for _, bad := range []string{"NaN", "inf%", "-Inf", "5 %%", "five"} {
		if r, err := config.ParseRatio(bad); err == nil {
			t.Errorf("ParseRatio(%q) = %v, want an error", bad, r)
		}
	}
	if _, err := config.ParseRatio("nan"); err == nil || err.Error() != `invalid ratio "nan" (want e.g. 5% or 0.05)` {
		t.Errorf("ParseRatio(nan) error = %v", err)
	}
}

func TestFieldErrorString(t *testing.T) {
	e := config.Errors{{Path: "a", Reason: "b"}, {Path: "c.d", Reason: "e f"}}
	if got := e.Error(); got != "a: b\nc.d: e f" {
		t.Errorf("Errors.Error() = %q", got)
	}
}

// TestWriteFileRoundTrip writes normalized configs with WriteFile and
// loads them back: the agent's persisted state must be what it served.
func TestWriteFileRoundTrip(t *testing.T) {
	for name, doc := range map[string]string{
		"sample": sample,
		"lb":     lbDoc,
		"rich": withPDR(
			`{id: 1, precedence: 0, match: {in: lan0, proto: tcp, sport: 80, dport: 1-1024, src: "2001:db8::/32", dst: "::1"}, far: 1}`,
			`{id: 3, match: {gre_key: 4294967295}, far: 2}`,
		),
		"gre": `interfaces:
  - {name: lan0, role: lan}
  - {name: wan1, role: wan, xdp: generic}
paths:
  - {id: 1, type: gre, interface: wan1, local: 172.16.1.1, remote: 172.16.1.2, key: 0, monitor: {insecure: true}}
  - {id: 2, type: gre, interface: wan1, local: 172.16.2.1, remote: 172.16.2.2, seq: true, ttl: 9, dscp: 46, monitor: {insecure: true}}
fars:
  - {id: 1, action: encap, path: 2}
  - {id: 2, action: decap}
  - {id: 3, action: redirect, interface: lan0}
pdrs:
  - {id: 10, precedence: 4294967295, match: {in: lan0, dst: "fd02::/64", proto: 58, dscp: 0}, far: 1}
  - {id: 11, precedence: 0, match: {in: wan1, proto: gre, dst: 172.16.1.1, gre_key: 0}, far: 2}
  - {id: 12, precedence: 7, match: {src: 10.0.0.0/8, proto: udp, sport: 0-65535, dport: 53}, far: 3}
limits: {flows: 1024, rules: 64}
defaults: {no_match: drop, malformed: pass}
`,
	} {
		t.Run(name, func(t *testing.T) {
			c, err := yamlcfg.Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "gw.yaml")
			for _, durable := range []bool{false, true} {
				if err := yamlcfg.WriteFile(path, c, durable, "# edgeplane-journal-seq: 7\n"); err != nil {
					t.Fatal(err)
				}
				back, err := yamlcfg.Load(path)
				if err != nil {
					t.Fatalf("load written file: %v", err)
				}
				if !reflect.DeepEqual(back, c) {
					t.Errorf("written and loaded back:\n%+v\nwant\n%+v", back, c)
				}
			}
		})
	}
}

// steerCfg is a steering group (lbr 5, algorithm alg plus extra fields)
// over FAR 1 (action member) and a steer FAR 2 naming it.
func steerCfg(alg, member, extra string) string {
	f1 := "{id: 1, action: encap, path: 1}"
	if member != "encap" {
		f1 = "{id: 1, action: " + member + "}"
	}
	return "interfaces: [{name: wan0, role: wan}]\n" +
		"paths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {insecure: true}}]\n" +
		"fars: [" + f1 + ", {id: 2, action: steer, lbr: 5}]\n" +
		"lbrs: [{id: 5, algorithm: " + alg + ", members: [{far: 1}]" + extra + "}]"
}
