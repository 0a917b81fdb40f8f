// SPDX-License-Identifier: Apache-2.0

package api

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

// richYAML sets every field of every kind the API carries.
const richYAML = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan}
paths:
  - {id: 1, type: gre, interface: wan0, local: 192.0.2.1, remote: 198.51.100.1, key: 7, seq: true, ttl: 9, dscp: 46, monitor: {insecure: true}}
fars:
  - {id: 1, action: pass}
  - {id: 2, action: encap, path: 1}
  - {id: 4, action: nat, interface: lan0, address: 10.1.0.11, port: 8080}
pdrs:
  - {id: 10, precedence: 100, match: {in: lan0, src: "2001:db8::/48", dst: "2001:db8:1::/48", proto: tcp, sport: 1-1024, dport: 443, dscp: 0, in_path: 1}, far: 2}
  - {id: 11, match: {}, far: 1}
  - {id: 12, match: {gre_key: 5}, far: 1, qos: 2}
qos_classes:
  - {id: 1, name: control, type: urllc, dscp: 46}
  - {id: 2, type: embb, dscp: "10,12", rate: 200mbit, burst: 30000, quantum: 3000, over: drop}
flowopt:
  - {module: probe, rtt_factor: 1.25}
  - {module: fairness, off: true}
  - {module: relief, hot: 110%, min_pps: 5000}
strategies:
  - {id: 1, name: gnb, command_regex: "^nr-gnb$", selectors: {pod_labels: {app: gnb, tier: ran}, cgroup: /kubepods.slice, user: "0", env: A=1},
     priority: true, policy: rr, rt_priority: 60, cpus: "0,2-3", irq_affinity: [lan0, wan0], others_weight: 2}
  - {id: 2, command_regex: upf, selectors: {user: upf}, priority: true, policy: deadline, execution_time: 300us, period: 2ms}
lbrs:
  - {id: 1, algorithm: maglev, table_size: 251, members: [{far: 4}, {far: 2, weight: 0}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1, stateless: true, precedence: 7,
     health: {type: http, path: /h, port: 9000, interval: 500ms, timeout: 200ms, rise: 4, fall: 5}}
`

// TestConversionsCoverEveryField carries every object of every kind to
// the API and back unchanged, which also shows each kind's fields have
// message fields of their names.
func TestConversionsCoverEveryField(t *testing.T) {
	cfg, err := yamlcfg.Parse([]byte(richYAML))
	if err != nil {
		t.Fatal(err)
	}
	s := config.Builtin()
	for _, k := range s.Kinds() {
		if !Carries(k) {
			t.Errorf("the API does not carry %s", k)
			continue
		}
		for _, obj := range s.Objects(cfg, k) {
			m := ToPB(k, obj)
			back, errs := FromPB(s, k, m, string(k))
			if len(errs) > 0 || !reflect.DeepEqual(back, obj) {
				t.Errorf("%s %v: back %+v, %v; want %+v", k, s.KeyOf(k, obj), back, errs, obj)
			}
		}
	}
}

// TestConvertInPathAndPrecedence carries a PDR's in_path and a service's
// precedence to the API and back; a precedence of 0 is left out.
func TestConvertInPathAndPrecedence(t *testing.T) {
	p := ToPB(config.KindPDR, config.PDR{ID: 10, Precedence: 5, FAR: 1, Match: config.Match{InPath: 3}}).(*pb.Pdr)
	if p.GetMatch().GetInPath() != 3 {
		t.Errorf("in_path = %d, want 3", p.GetMatch().GetInPath())
	}
	s := ToPB(config.KindService, config.Service{ID: 1, Port: 80, LBR: 2, Precedence: 100}).(*pb.Service)
	if s.Precedence == nil || s.GetPrecedence() != 100 {
		t.Errorf("precedence = %v, want 100", s.Precedence)
	}
	if s := ToPB(config.KindService, config.Service{ID: 1}).(*pb.Service); s.Precedence != nil {
		t.Errorf("precedence 0 sent as %v, want left out", s.GetPrecedence())
	}
	ops, err := Ops([]*pb.Operation{{Op: &pb.Operation_Create{Create: Object(config.KindPDR, p)}}})
	if err != nil || ops[0].Object.(config.PDR).Match.InPath != 3 || ops[0].At != "operations[0].create.pdr" {
		t.Errorf("Ops: %+v, %v", ops, err)
	}
}

// TestFromPBErrors names every field that does not convert, at its path.
func TestFromPBErrors(t *testing.T) {
	s := config.Builtin()
	_, errs := FromPB(s, config.KindService, &pb.Service{Id: 1, Vip: "10.0.0.300", Port: 70000, Proto: "tcpp",
		Health: &pb.Health{Interval: "soon", Port: 65536}}, "service")
	want := []string{
		`service.vip: invalid IP address "10.0.0.300"`,
		"service.port: must be 0-65535, got 70000",
		`service.proto: unknown protocol "tcpp" (want tcp, udp, icmp, icmpv6, gre, sctp or 0-255)`,
		"service.health.port: must be 0-65535, got 65536",
		`service.health.interval: invalid duration "soon" (want e.g. 500ms or 2s)`,
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	_, errs = FromPB(s, config.KindFlowOpt, &pb.FlowOptModule{Module: "probe", RttFactor: "fast", Hot: "warm"}, "flowopt")
	if len(errs) != 2 || errs[0].Error() != `flowopt.rtt_factor: invalid factor "fast" (want a number such as 1.5)` || errs[1].Error() != `flowopt.hot: invalid ratio "warm" (want e.g. 5% or 0.05)` {
		t.Errorf("flowopt errors: %v", errs)
	}
	_, errs = FromPB(s, config.KindStrategy, &pb.Strategy{Id: 1, ExecutionTime: "soon", Cpus: "3-1", Selectors: &pb.Selectors{PodLabels: map[string]string{"app": "gnb"}}}, "strategy")
	if len(errs) != 2 || errs[0].Error() != `strategy.execution_time: invalid duration "soon" (want e.g. 500ms or 2s)` || errs[1].Error() != `strategy.cpus: cpu list "3-1": range 3-1 is reversed` {
		t.Errorf("strategy errors: %v", errs)
	}
	_, errs = FromPB(s, config.KindPDR, &pb.Pdr{Id: 1, Match: &pb.Match{Dscp: proto.Uint32(64), Dst: "10.0.0.0/33"}}, "pdr")
	if len(errs) != 2 || errs[0].Error() != `pdr.match.dst: invalid CIDR "10.0.0.0/33"` || errs[1].Error() != "pdr.match.dscp: must be 0-63, got 64" {
		t.Errorf("pdr errors: %v", errs)
	}
}

// TestConvertSecret: a path's secret goes out redacted in what the API
// shows (ToPB) and whole only where it is carried to be applied
// (ToPBRevealed); either form converts back, the shown one as no key.
func TestConvertSecret(t *testing.T) {
	const key = "00112233445566778899aabbccddeeff"
	cfg, err := yamlcfg.Parse([]byte("interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {secret: " + key + "}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	shown := ToPB(config.KindPath, cfg.Paths[0]).(*pb.Path)
	if s := shown.GetMonitor().GetSecret(); !strings.HasPrefix(s, "redacted:") || strings.Contains(s, key[:8]) {
		t.Errorf("shown secret %q", s)
	}
	carried := ToPBRevealed(config.KindPath, cfg.Paths[0]).(*pb.Path)
	if s := carried.GetMonitor().GetSecret(); s != key {
		t.Errorf("carried secret %q, want the key", s)
	}
	for _, m := range []*pb.Path{shown, carried} {
		obj, errs := FromPB(config.Builtin(), config.KindPath, m, "")
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		got := obj.(config.Path).Monitor.Secret
		if _, hasKey := got.Key(); !got.Same(cfg.Paths[0].Monitor.Secret) || hasKey != (m == carried) {
			t.Errorf("%q back: %v (key %v)", m.GetMonitor().GetSecret(), got, hasKey)
		}
	}
}
