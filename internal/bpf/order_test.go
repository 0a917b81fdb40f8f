// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

// orderConfig has a NAT service (1), a stateless NAT service (2) and a
// dsr-gre service (3), all at precedence 10, and a catch-all PDR at
// precedence 100 that stands before none of them. %s adds PDRs.
const orderConfig = `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}, {name: wan1, role: wan}]
paths:
  - {id: 1, type: gre, interface: wan1, local: 10.4.0.1, remote: 10.6.0.21, key: 1, monitor: {insecure: true}}
fars:
  - {id: 1, action: redirect, interface: wan1}
  - {id: 11, action: nat, address: 10.6.0.11, port: 8080}
  - {id: 12, action: nat, address: 10.6.0.12, port: 8080}
  - {id: 21, action: encap, path: 1}
  - {id: 30, action: drop}
lbrs:
  - {id: 1, algorithm: maglev, members: [{far: 11}]}
  - {id: 2, algorithm: maglev, members: [{far: 12}]}
  - {id: 3, algorithm: maglev, members: [{far: 21}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1, precedence: 10}
  - {id: 2, vip: 203.0.113.53, port: 53, proto: udp, lbr: 2, stateless: true, precedence: 10}
  - {id: 3, vip: 203.0.113.20, port: 9053, proto: udp, lbr: 3, precedence: 10}
pdrs:
  - {id: 1, precedence: 100, match: {in: wan0}, far: 1}
%slimits: {flows: 1024, rules: 64, maglev_table: 251, connections: 1024}
`

// blocked is a drop PDR in front of the services' VIPs for one client.
const blocked = "  - {id: 5, precedence: %d, match: {src: 10.3.9.9/32, dst: 203.0.113.0/24}, far: 30}\n"

// guardFlags returns each service's EDGE_SVC_GUARDED bit as the live
// generation has it.
func guardFlags(t *testing.T, h *harness) map[uint32]bool {
	t.Helper()
	_, svcs, err := h.dp.ActiveFARs()
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]bool{}
	for _, s := range svcs {
		out[s.Id] = s.Flags&bpf.SvcGuarded != 0
	}
	return out
}

// TestPDRBeforeService puts a drop PDR in front of three services' VIPs
// for one client: at the services' precedence or a lower one it stops
// that client's packets (a connection's first, an established one's
// next, a stateless service's every packet, an ICMP error toward a VIP)
// while other clients are balanced; at a higher precedence it stands
// behind them. Without such a PDR the services are not marked guarded,
// so their packets skip the classifier as before.
func TestPDRBeforeService(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(orderConfig, ""))
	for id, g := range guardFlags(t, h) {
		if g {
			t.Errorf("service %d guarded by a catch-all at precedence 100", id)
		}
	}
	apply := func(pdrs string) {
		t.Helper()
		cfg, err := yamlcfg.Parse([]byte(fmt.Sprintf(orderConfig, pdrs)))
		if err != nil {
			t.Fatal(err)
		}
		h.apply(cfg)
	}
	// An established connection from the client to be blocked, made
	// before the rule exists.
	est := lbPkt{src: "10.3.9.9", dst: "203.0.113.10", sport: 41000, dport: 80, smac: macWanNeigh, dmac: macWan0, flags: "S"}
	if v, out := h.send(est, "wan0"); v != bpf.XDPRedirect || backendOf(t, out) != "10.6.0.11:8080" {
		t.Fatalf("before the rule: verdict %s", verdictName(v))
	}

	type want struct {
		verdict uint32
		backend string // NAT'd to; "" when not NAT'd
	}
	check := func(name string, p lbPkt, w want) {
		t.Helper()
		before := snap(t, h)
		v, out := h.send(p, "wan0")
		after := snap(t, h)
		if v != w.verdict {
			t.Errorf("%s: verdict %s, want %s", name, verdictName(v), verdictName(w.verdict))
			return
		}
		if w.backend != "" && backendOf(t, out) != w.backend {
			t.Errorf("%s: to %s, want %s", name, backendOf(t, out), w.backend)
		}
		dropped := after.PDRs[5].Packets - before.PDRs[5].Packets
		if wantDrop := w.verdict == bpf.XDPDrop; (dropped == 1) != wantDrop {
			t.Errorf("%s: PDR 5 counted %d packets", name, dropped)
		}
	}
	blockedClient := func(dst string, dport uint16, udp bool, sport uint16) lbPkt {
		return lbPkt{src: "10.3.9.9", dst: dst, sport: sport, dport: dport, udp: udp, smac: macWanNeigh, dmac: macWan0, flags: "S"}
	}
	other := func(dst string, dport uint16, udp bool, sport uint16) lbPkt {
		p := blockedClient(dst, dport, udp, sport)
		p.src = "10.3.9.8"
		return p
	}
	dsr := want{bpf.XDPRedirect, ""}

	for _, prec := range []int{10, 3} {
		t.Run(fmt.Sprintf("drop at precedence %d", prec), func(t *testing.T) {
			apply(fmt.Sprintf(blocked, prec))
			for id, g := range guardFlags(t, h) {
				if !g {
					t.Errorf("service %d not guarded", id)
				}
			}
			for n := uint16(0); n < 3; n++ {
				check("blocked client, nat", blockedClient("203.0.113.10", 80, false, 42000+n), want{verdict: bpf.XDPDrop})
				check("blocked client, stateless", blockedClient("203.0.113.53", 53, true, 42000), want{verdict: bpf.XDPDrop})
				check("blocked client, dsr-gre", blockedClient("203.0.113.20", 9053, true, 42000+n), want{verdict: bpf.XDPDrop})
				check("other client, nat", other("203.0.113.10", 80, false, 42000+n), want{bpf.XDPRedirect, "10.6.0.11:8080"})
				check("other client, stateless", other("203.0.113.53", 53, true, 42000), want{bpf.XDPRedirect, "10.6.0.12:8080"})
				check("other client, dsr-gre", other("203.0.113.20", 9053, true, 42000+n), dsr)
			}
			// The connection made before the rule: its next packet is
			// classified again (a commit) and stopped.
			est.flags = "A"
			check("blocked client, established", est, want{verdict: bpf.XDPDrop})
			// An ICMP error from the blocked client toward the VIP is
			// not translated to the backend.
			quote := lbPkt{src: "203.0.113.10", dst: "10.3.9.8", sport: 80, dport: 42000, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "A"}.frame(t)[14:]
			before := snap(t, h)
			if v, _ := h.run(icmpErr(t, macWanNeigh, macWan0, "10.3.9.9", "203.0.113.10", 64, 3, 4, 1400, quote), "wan0"); v != bpf.XDPDrop {
				t.Errorf("ICMP error from the blocked client: verdict %s, want drop", verdictName(v))
			}
			if n := snap(t, h).PDRs[5].Packets - before.PDRs[5].Packets; n != 1 {
				t.Errorf("ICMP error from the blocked client: PDR 5 counted %d", n)
			}
		})
	}

	t.Run("drop behind the services", func(t *testing.T) {
		apply(fmt.Sprintf(blocked, 11))
		for id, g := range guardFlags(t, h) {
			if g {
				t.Errorf("service %d guarded by a PDR at precedence 11", id)
			}
		}
		check("blocked client, nat", blockedClient("203.0.113.10", 80, false, 43000), want{bpf.XDPRedirect, "10.6.0.11:8080"})
		check("blocked client, stateless", blockedClient("203.0.113.53", 53, true, 43000), want{bpf.XDPRedirect, "10.6.0.12:8080"})
	})

	// A PDR whose match cannot reach the VIPs' packets (another port,
	// another protocol) guards nothing.
	t.Run("unrelated PDRs", func(t *testing.T) {
		apply(strings.Join([]string{
			"  - {id: 6, precedence: 1, match: {dst: 203.0.113.10/32, proto: tcp, dport: 443}, far: 30}\n",
			"  - {id: 7, precedence: 1, match: {dst: 203.0.113.0/24, proto: sctp}, far: 30}\n",
			"  - {id: 8, precedence: 1, match: {dst: 198.51.100.0/24}, far: 30}\n",
		}, ""))
		for id, g := range guardFlags(t, h) {
			if g {
				t.Errorf("service %d guarded by PDRs that match none of its packets", id)
			}
		}
	})
}
