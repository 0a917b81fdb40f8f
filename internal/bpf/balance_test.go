// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// lbConfig puts services in front of backends in the PacketNS topology:
// clients in 10.3.0.0/16 and fd03::/48 behind wan0's neighbour, NAT
// backends in 10.6.0.0/16 behind wan1's (weights of far 11 and 12 from
// the arguments), an IPv6 backend at wan0's neighbour fd02::2, and two
// GRE (dsr-gre) backends at 10.6.0.21 and .22. The flow table holds the
// tests' few thousand connections with room to spare: its keyed hash
// places them at random, and in a table of 8,192 some bucket of eight
// fills up often enough (2,000 one-packet connections in 1,024 buckets)
// to evict one a test still counts on.
const lbConfig = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
  - {name: wan1, role: wan}
paths:
  - {id: 1, type: gre, interface: wan1, local: 10.4.0.1, remote: 10.6.0.21, key: 1, monitor: {insecure: true}}
  - {id: 2, type: gre, interface: wan1, local: 10.4.0.1, remote: 10.6.0.22, key: 2, monitor: {insecure: true}}
fars:
  - {id: 1, action: redirect, interface: wan0}
%s
  - {id: 12, action: nat, address: 10.6.0.12, port: 8080}
  - {id: 13, action: nat, interface: wan0, address: "fd02::2", port: 8443}
  - {id: 21, action: encap, path: 1}
  - {id: 22, action: encap, path: 2}
lbrs:
  - {id: 1, algorithm: maglev, table_size: 1021, members: [%s]}
  - {id: 2, algorithm: maglev, members: [{far: 13}]}
  - {id: 3, algorithm: maglev, members: [{far: 21}, {far: 22}]}
  - {id: 4, algorithm: maglev, members: [{far: 12}]}
  - {id: 5, algorithm: maglev, members: [{far: 21}, {far: 22}]}
services:
  - {id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1}
  - {id: 2, vip: "fd0f::10", port: 443, proto: tcp, lbr: 2}
  - {id: 3, vip: 203.0.113.20, port: 9053, proto: udp, lbr: 3}
  - {id: 4, vip: 203.0.113.10, port: 9999, proto: udp, lbr: 4}
  - {id: 5, vip: "fd0f::20", port: 9053, proto: udp, lbr: 5}
pdrs:
  - {id: 1, precedence: 100, match: {in: lan0}, far: 1}
limits: {flows: 65536, rules: 64, maglev_table: 4099, connections: 65536}
`

const far11 = "  - {id: 11, action: nat, address: 10.6.0.11, port: 8080}"

func lbCfg(t *testing.T, far11Line, members string) *config.Config {
	t.Helper()
	cfg, err := yamlcfg.Parse(fmt.Appendf(nil, lbConfig, far11Line, members))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// lbPkt is one TCP or UDP packet between src:sport and dst:dport, as
// received from smac to dmac. Lengths and checksums are computed by
// gopacket, independently of the dataplane.
type lbPkt struct {
	src, dst     string
	sport, dport uint16
	udp          bool
	ttl          uint8
	smac, dmac   net.HardwareAddr
	noUDPCsum    bool // IPv4 UDP without checksum
	flags        string
	tos          uint8 // IPv4 TOS (DSCP << 2)
}

func (p lbPkt) frame(t testing.TB) []byte {
	t.Helper()
	src, dst := net.ParseIP(p.src), net.ParseIP(p.dst)
	ttl := p.ttl
	if ttl == 0 {
		ttl = 64
	}
	var ip gopacket.NetworkLayer
	var ls []gopacket.SerializableLayer
	proto := layers.IPProtocolTCP
	if p.udp {
		proto = layers.IPProtocolUDP
	}
	if s4 := src.To4(); s4 != nil {
		ip4 := &layers.IPv4{Version: 4, IHL: 5, Id: 7, TOS: p.tos, TTL: ttl, Protocol: proto, SrcIP: s4, DstIP: dst.To4()}
		ls = append(ls, &layers.Ethernet{SrcMAC: p.smac, DstMAC: p.dmac, EthernetType: layers.EthernetTypeIPv4}, ip4)
		ip = ip4
	} else {
		ip6 := &layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: proto, SrcIP: src, DstIP: dst}
		ls = append(ls, &layers.Ethernet{SrcMAC: p.smac, DstMAC: p.dmac, EthernetType: layers.EthernetTypeIPv6}, ip6)
		ip = ip6
	}
	if p.udp {
		u := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		_ = u.SetNetworkLayerForChecksum(ip)
		ls = append(ls, u, gopacket.Payload("edgeplane lb udp"))
	} else {
		tc := &layers.TCP{SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport), Seq: 1000, Ack: 77, Window: 64240,
			SYN: p.flags == "S", ACK: p.flags != "S"}
		_ = tc.SetNetworkLayerForChecksum(ip)
		ls = append(ls, tc, gopacket.Payload("edgeplane lb tcp"))
	}
	f := serialize(t, ls)
	if p.noUDPCsum {
		f[14+20+6], f[14+20+7] = 0, 0
	}
	return f
}

// out is p as a router that rewrote it must send it: from egress's MAC to
// its neighbour's, TTL one lower, with the given addresses and ports.
func (p lbPkt) out(egress, src, dst string, sport, dport uint16) lbPkt {
	q := p
	q.src, q.dst, q.sport, q.dport = src, dst, sport, dport
	q.smac, q.dmac = egressMACs(egress)
	if q.ttl == 0 {
		q.ttl = 64
	}
	q.ttl--
	return q
}

// client returns a TCP packet of flow n from 10.3.0.0/16 to the service
// at vip:port, received on wan0.
func client(n int, vip string, port uint16, flags string) lbPkt {
	return lbPkt{src: fmt.Sprintf("10.3.%d.%d", 1+n/250, 1+n%250), dst: vip, sport: 40000 + uint16(n%1000), dport: port,
		smac: macWanNeigh, dmac: macWan0, flags: flags}
}

// backendOf returns the destination address and port of a NAT'd frame.
func backendOf(t *testing.T, out []byte) string {
	t.Helper()
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	var addr net.IP
	if l := pk.Layer(layers.LayerTypeIPv4); l != nil {
		addr = l.(*layers.IPv4).DstIP
	} else if l := pk.Layer(layers.LayerTypeIPv6); l != nil {
		addr = l.(*layers.IPv6).DstIP
	}
	var port uint16
	if l := pk.Layer(layers.LayerTypeTCP); l != nil {
		port = uint16(l.(*layers.TCP).DstPort)
	} else if l := pk.Layer(layers.LayerTypeUDP); l != nil {
		port = uint16(l.(*layers.UDP).DstPort)
	}
	return net.JoinHostPort(addr.String(), fmt.Sprint(port))
}

// sendTo runs p through the program from inIf and returns the verdict and
// output.
func (h *harness) send(p lbPkt, inIf string) (uint32, []byte) {
	h.t.Helper()
	return h.run(p.frame(h.t), inIf)
}

// lbCounters sums edge_lb_new and edge_lb_stats packets over all CPUs,
// by counter index.
func lbCounters(t *testing.T, dp *loader.Dataplane) (newFlows, packets map[uint32]uint64) {
	t.Helper()
	newFlows, packets = map[uint32]uint64{}, map[uint32]uint64{}
	for i := uint32(0); i < bpf.MaxServices*bpf.MaxMembers; i++ {
		var n []uint64
		var c []bpf.Ctr
		if err := dp.EdgeLbNew.Lookup(i, &n); err != nil {
			t.Fatal(err)
		}
		if err := dp.EdgeLbStats.Lookup(i, &c); err != nil {
			t.Fatal(err)
		}
		for j := range n {
			newFlows[i] += n[j]
			packets[i] += c[j].Packets
		}
	}
	return newFlows, packets
}

// TestBalanceNAT sends connections to an IPv4 and an IPv6 NAT service:
// the first packet of each picks a backend, later ones keep it, replies
// go back from the VIP, and every frame is exactly what a router doing
// the NAT must send (built independently by gopacket, checksums
// included).
func TestBalanceNAT(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}, {far: 12}"))
	var frames [][]byte
	seen := map[string]int{}
	for n := 0; n < 40; n++ {
		syn := client(n, "203.0.113.10", 80, "S")
		v, out := h.send(syn, "wan0")
		if v != bpf.XDPRedirect {
			t.Fatalf("flow %d SYN: verdict %s, want redirect", n, verdictName(v))
		}
		be := backendOf(t, out)
		seen[be]++
		host, _, _ := net.SplitHostPort(be)
		if want := syn.out("wan1", syn.src, host, syn.sport, 8080).frame(t); !bytes.Equal(out, want) {
			t.Fatalf("flow %d SYN out:\n got %x\nwant %x", n, out, want)
		}
		// Later packets hit the flow cache: same backend, same rewrite.
		ack := client(n, "203.0.113.10", 80, "A")
		v, out2 := h.send(ack, "wan0")
		if v != bpf.XDPRedirect || !bytes.Equal(out2, ack.out("wan1", ack.src, host, ack.sport, 8080).frame(t)) {
			t.Fatalf("flow %d ACK: verdict %s, out %x", n, verdictName(v), out2)
		}
		// The backend's reply leaves from the VIP.
		reply := lbPkt{src: host, dst: syn.src, sport: 8080, dport: syn.sport, smac: macWan1Neigh, dmac: macWan1, flags: "A"}
		v, out3 := h.send(reply, "wan1")
		want := reply.out("wan0", "203.0.113.10", syn.src, 80, syn.sport).frame(t)
		if v != bpf.XDPRedirect || !bytes.Equal(out3, want) {
			t.Fatalf("flow %d reply: verdict %s\n got %x\nwant %x", n, verdictName(v), out3, want)
		}
		if n < 2 {
			frames = append(frames, out, out2, out3)
		}
	}
	if len(seen) != 2 {
		t.Errorf("40 connections went to %v, want both backends", seen)
	}

	// IPv6: client fd03::7 -> [fd0f::10]:443 -> [fd02::2]:8443 and back.
	syn := lbPkt{src: "fd03::7", dst: "fd0f::10", sport: 41000, dport: 443, smac: macWanNeigh, dmac: macWan0, flags: "S"}
	v, out := h.send(syn, "wan0")
	if want := syn.out("wan0", "fd03::7", "fd02::2", 41000, 8443).frame(t); v != bpf.XDPRedirect || !bytes.Equal(out, want) {
		t.Fatalf("IPv6 SYN: verdict %s\n got %x\nwant %x", verdictName(v), out, want)
	}
	reply := lbPkt{src: "fd02::2", dst: "fd03::7", sport: 8443, dport: 41000, smac: macWanNeigh, dmac: macWan0, flags: "A"}
	v, out6 := h.send(reply, "wan0")
	if want := reply.out("wan0", "fd0f::10", "fd03::7", 443, 41000).frame(t); v != bpf.XDPRedirect || !bytes.Equal(out6, want) {
		t.Fatalf("IPv6 reply: verdict %s\n got %x\nwant %x", verdictName(v), out6, want)
	}
	frames = append(frames, out, out6)

	// UDP, with a checksum and without one (IPv4 allows 0: it must stay 0).
	for i, noCsum := range []bool{false, true} {
		q := lbPkt{src: "10.3.9.9", dst: "203.0.113.10", sport: 5000 + uint16(i), dport: 9999, udp: true, noUDPCsum: noCsum, smac: macWanNeigh, dmac: macWan0}
		v, out := h.send(q, "wan0")
		want := q.out("wan1", "10.3.9.9", "10.6.0.12", q.sport, 8080).frame(t)
		if noCsum {
			want[14+20+6], want[14+20+7] = 0, 0
		}
		if v != bpf.XDPRedirect || !bytes.Equal(out, want) {
			t.Fatalf("UDP (no checksum %v): verdict %s\n got %x\nwant %x", noCsum, verdictName(v), out, want)
		}
		frames = append(frames, out)
	}

	// Traffic to the VIP on a port no service has is not balanced.
	if v, _ := h.send(client(1, "203.0.113.10", 81, "S"), "wan0"); v != bpf.XDPPass {
		t.Errorf("VIP port 81: verdict %s, want pass (no service, no PDR)", verdictName(v))
	}

	newFlows, _ := lbCounters(t, h.dp)
	var total uint64
	for _, n := range newFlows {
		total += n
	}
	if total != 40+1+2 {
		t.Errorf("%d new connections counted, want 43", total)
	}
	checkTshark(t, frames, 2*3+2+2)
}

// checkTshark has tshark verify every IP, TCP and UDP checksum of frames.
func checkTshark(t *testing.T, frames [][]byte, n int) {
	t.Helper()
	testutil.RequireTool(t, "tshark")
	pcap := writePcap(t, filepath.Join(t.TempDir(), "lb"), frames...)
	b, err := exec.Command("tshark", "-r", pcap, "-V", "-o", "ip.check_checksum:TRUE",
		"-o", "udp.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, b)
	}
	text := string(b)
	good := strings.Count(text, "[Checksum Status: Good]") + strings.Count(text, "[Header checksum status: Good]") +
		strings.Count(text, "Header checksum status: Good")
	if good < n {
		t.Errorf("tshark verified %d checksums good, want at least %d", good, n)
	}
	for _, bad := range []string{"Bad]", "incorrect", "Malformed"} {
		if strings.Contains(text, bad) {
			t.Errorf("tshark found %q:\n%s", bad, text)
		}
	}
}

// TestBalanceWeightsAndPCC spreads connections by weight, then drains,
// removes and deletes a backend: established connections stay on their
// backend while it exists (the connection table), new ones avoid it.
func TestBalanceWeightsAndPCC(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11, weight: 1}, {far: 12, weight: 3}"))
	const flows = 2000
	owner := make([]string, flows)
	count := map[string]int{}
	for n := 0; n < flows; n++ {
		_, out := h.send(client(n, "203.0.113.10", 80, "S"), "wan0")
		owner[n] = backendOf(t, out)
		count[owner[n]]++
	}
	share := float64(count["10.6.0.11:8080"]) / flows
	t.Logf("weights 1:3 -> %.3f of %d connections on 10.6.0.11", share, flows)
	if share < 0.22 || share > 0.28 {
		t.Errorf("share of the weight-1 backend %.3f, want 0.25 +- 0.03", share)
	}

	check := func(stage string, established int, wantOld func(old string) string) {
		t.Helper()
		for n := 0; n < established; n++ {
			_, out := h.send(client(n, "203.0.113.10", 80, "A"), "wan0")
			if got, want := backendOf(t, out), wantOld(owner[n]); got != want {
				t.Fatalf("%s: connection %d went to %s, want %s", stage, n, got, want)
			}
		}
		for n := flows; n < flows+300; n++ {
			_, out := h.send(client(n, "203.0.113.10", 80, "S"), "wan0")
			if got := backendOf(t, out); got != "10.6.0.12:8080" {
				t.Fatalf("%s: new connection %d went to %s", stage, n, got)
			}
		}
	}
	same := func(old string) string { return old }

	// Drain 10.6.0.11: weight 0.
	h.apply(lbCfg(t, far11, "{far: 11, weight: 0}, {far: 12, weight: 3}"))
	check("drained", 400, same)
	// Remove it from the LBR (its FAR stays): still pinned.
	h.apply(lbCfg(t, far11, "{far: 12}"))
	check("removed", 400, same)
	// Delete its FAR: its connections have nowhere to go but the rest.
	h.apply(lbCfg(t, "", "{far: 12}"))
	check("deleted", 400, func(string) string { return "10.6.0.12:8080" })

	// Every weight 0: nothing to send to, dropped and counted.
	h.apply(lbCfg(t, "", "{far: 12, weight: 0}"))
	before := snap(t, h)
	if v, _ := h.send(client(5000, "203.0.113.10", 80, "S"), "wan0"); v != bpf.XDPDrop {
		t.Errorf("no backend: verdict %s, want drop", verdictName(v))
	}
	after := snap(t, h)
	if d := after.Reasons[bpf.ReasonLBNoBackend].Packets - before.Reasons[bpf.ReasonLBNoBackend].Packets; d != 1 {
		t.Errorf("lb_no_backend counted %d, want 1", d)
	}
}

// TestBalanceDSR sends to a dsr-gre service: packets leave encapsulated
// toward the backend's tunnel address, the inner packet unchanged but
// for its TTL, and a connection keeps its backend.
func TestBalanceDSR(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}, {far: 12}"))
	remotes := map[string]int{}
	var frames [][]byte
	for n := 0; n < 30; n++ {
		q := lbPkt{src: fmt.Sprintf("10.3.7.%d", n+1), dst: "203.0.113.20", sport: 7000, dport: 9053, udp: true, smac: macWanNeigh, dmac: macWan0}
		var first string
		for i := 0; i < 2; i++ {
			v, out := h.send(q, "wan0")
			if v != bpf.XDPRedirect {
				t.Fatalf("flow %d: verdict %s, want redirect", n, verdictName(v))
			}
			pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
			outer, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			if outer == nil || outer.Protocol != layers.IPProtocolGRE || outer.SrcIP.String() != "10.4.0.1" {
				t.Fatalf("flow %d: not GRE from 10.4.0.1: %v", n, pk)
			}
			if i == 0 {
				first = outer.DstIP.String()
				remotes[first]++
			} else if outer.DstIP.String() != first {
				t.Fatalf("flow %d moved from %s to %s", n, first, outer.DstIP)
			}
			// The inner packet without the Ethernet padding of the sent
			// frame (encap does not carry it into the tunnel).
			inner := q.out("wan1", q.src, q.dst, q.sport, q.dport).frame(t)[14:]
			inner = inner[:binary.BigEndian.Uint16(inner[2:])]
			if !bytes.Equal(out[14+20+8:], inner) {
				t.Fatalf("flow %d inner:\n got %x\nwant %x", n, out[14+20+8:], inner)
			}
			if n == 0 {
				frames = append(frames, out)
			}
		}
	}
	if len(remotes) != 2 {
		t.Errorf("30 flows went to %v, want both tunnel endpoints", remotes)
	}
	// IPv6 inside the tunnel: an IPv6 VIP balanced over the same paths.
	q6 := lbPkt{src: "fd03::5", dst: "fd0f::20", sport: 7000, dport: 9053, udp: true, smac: macWanNeigh, dmac: macWan0}
	v, out := h.send(q6, "wan0")
	if v != bpf.XDPRedirect {
		t.Fatalf("IPv6 dsr-gre: verdict %s", verdictName(v))
	}
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	if outer, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4); outer == nil || outer.Protocol != layers.IPProtocolGRE {
		t.Fatalf("IPv6 dsr-gre: not GRE over IPv4: %v", pk)
	}
	inner6 := q6.out("wan1", q6.src, q6.dst, q6.sport, q6.dport).frame(t)[14:]
	if !bytes.Equal(out[14+20+8:], inner6) {
		t.Fatalf("IPv6 dsr-gre inner:\n got %x\nwant %x", out[14+20+8:], inner6)
	}
	frames = append(frames, out)
	checkTshark(t, frames, 3)
	if got := binary.BigEndian.Uint16(frames[0][12:]); got != 0x0800 {
		t.Errorf("ethertype %#x", got)
	}
}

// TestBalanceFullFARTable fills every FAR place the rules limit allows and
// adds a NAT service: its reply rewrite has a place of its own beyond them.
func TestBalanceFullFARTable(t *testing.T) {
	var fars strings.Builder
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&fars, "  - {id: %d, action: nat, address: 10.6.0.%d, port: 8080}\n", i, i)
	}
	h := newHarness(t, `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}, {name: wan1, role: wan}]
fars:
`+fars.String()+`lbrs: [{id: 1, algorithm: maglev, members: [{far: 1}, {far: 8}]}]
services: [{id: 1, vip: 203.0.113.10, port: 80, proto: tcp, lbr: 1}]
limits: {flows: 1024, rules: 8, maglev_table: 251}
`)
	syn := client(1, "203.0.113.10", 80, "S")
	if v, _ := h.send(syn, "wan0"); v != bpf.XDPRedirect {
		t.Fatalf("verdict %s, want redirect", verdictName(v))
	}
}

// statelessCfg is lbConfig with the IPv4 NAT service (1) and the IPv6
// dsr-gre service (5) stateless; the IPv4 dsr-gre service (3) keeps its
// connection table.
func statelessCfg(t *testing.T, members string) string {
	t.Helper()
	s := fmt.Sprintf(lbConfig, far11, members)
	for _, svc := range []string{"port: 80, proto: tcp, lbr: 1", `port: 9053, proto: udp, lbr: 5`} {
		if !strings.Contains(s, svc+"}") {
			t.Fatalf("lbConfig has no service %q", svc)
		}
		s = strings.Replace(s, svc+"}", svc+", stateless: true}", 1)
	}
	return s
}

// countEntries returns how many keys of a hash map pass keep.
func countEntries[K any](t *testing.T, m interface {
	Iterate() *ebpf.MapIterator
}, keep func(K) bool) int {
	t.Helper()
	var k K
	var v []byte
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		if keep(k) {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// countFlows counts the flow table's entries keep chooses.
func countFlows(t *testing.T, dp *loader.Dataplane, keep func(*bpf.FTWay) bool) int {
	t.Helper()
	ws, _, err := dp.FlowWays()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range ws {
		if keep(&ws[i]) {
			n++
		}
	}
	return n
}

// toAddr chooses the flows toward a.
func toAddr(a netip.Addr) func(*bpf.FTWay) bool {
	return func(w *bpf.FTWay) bool {
		if a.Is4() {
			return w.K.Family == 4 && [4]byte(w.K.Dst[:4]) == a.As4()
		}
		return w.K.Family == 6 && w.K.Dst == a.As16()
	}
}

// connsOf chooses the connections of service svc.
func connsOf(svc uint32) func(*bpf.FTWay) bool {
	return func(w *bpf.FTWay) bool { return w.F.Flags&bpf.FlowConn != 0 && w.F.Svc == svc }
}

// TestBalanceStateless sends to stateless services: every packet picks
// its backend from the Maglev table alone, nothing is recorded but a NAT
// reply's reverse entry, replies still leave from the VIP, and a drained
// backend's connections move (the price of keeping no state), while a
// stateful service beside them keeps its connections pinned.
func TestBalanceStateless(t *testing.T) {
	h := newHarness(t, statelessCfg(t, "{far: 11}, {far: 12}"))
	missBefore := cacheMisses(t, h.dp)
	const flows = 300
	owner := make([]string, flows)
	for n := 0; n < flows; n++ {
		for i, flags := range []string{"S", "A", "A"} {
			q := client(n, "203.0.113.10", 80, flags)
			v, out := h.send(q, "wan0")
			be := backendOf(t, out)
			host, _, _ := net.SplitHostPort(be)
			if want := q.out("wan1", q.src, host, q.sport, 8080).frame(t); v != bpf.XDPRedirect || !bytes.Equal(out, want) {
				t.Fatalf("flow %d packet %d: verdict %s\n got %x\nwant %x", n, i, verdictName(v), out, want)
			}
			if i == 0 {
				owner[n] = be
			} else if be != owner[n] {
				t.Fatalf("flow %d moved from %s to %s with no change", n, owner[n], be)
			}
		}
		q := client(n, "203.0.113.10", 80, "A")
		host, _, _ := net.SplitHostPort(owner[n])
		reply := lbPkt{src: host, dst: q.src, sport: 8080, dport: q.sport, smac: macWan1Neigh, dmac: macWan1, flags: "A"}
		v, out := h.send(reply, "wan1")
		if want := reply.out("wan0", "203.0.113.10", q.src, 80, q.sport).frame(t); v != bpf.XDPRedirect || !bytes.Equal(out, want) {
			t.Fatalf("flow %d reply: verdict %s\n got %x\nwant %x", n, verdictName(v), out, want)
		}
	}
	vip := [4]byte{203, 0, 113, 10}
	toVIP4 := func(k bpf.FlowKey4) bool { return k.Dst == binary.NativeEndian.Uint32(vip[:]) }
	if n := countFlows(t, h.dp, toAddr(netip.AddrFrom4(vip))); n != 0 {
		t.Errorf("%d flow-table entries toward the stateless VIP, want 0", n)
	}
	// Nor exact-match copies (a flood of a stateless service's flows
	// would evict every other flow's), nor cache misses counted: its
	// packets are decided before the caches.
	if n := emcCopies(t, h.dp, toVIP4); n != 0 {
		t.Errorf("%d exact-match copies of flows toward the stateless VIP, want 0", n)
	}
	if miss := cacheMisses(t, h.dp) - missBefore; miss != flows {
		t.Errorf("%d flow-cache misses, want one per reply flow (%d; the replies are cached as usual) and none for the stateless packets", miss, flows)
	}
	conns := func(svc uint32) int { return countFlows(t, h.dp, connsOf(svc)) }
	if n := conns(1); n != 0 {
		t.Errorf("%d connections of the stateless service recorded, want 0", n)
	}
	// Its replies are flows of their own (cached as any), told apart by
	// their backend (edge_nat_backends, one entry per backend and slot
	// the agent wrote): nothing per client on the way in, so a flood of
	// clients evicts nobody's entries.
	if n := countEntries(t, h.dp.EdgeNatBackends, func(bpf.SvcKey) bool { return true }); n < 2 {
		t.Errorf("%d backend entries for the stateless NAT service's replies, want its 2 backends (in each slot)", n)
	}
	newFlows, packets := lbCounters(t, h.dp)
	var nw, pk uint64
	for i := uint32(0); i < bpf.MaxMembers; i++ { // service 1 has tag 0
		nw += newFlows[i]
		pk += packets[i]
	}
	if nw != 0 || pk != 4*flows {
		t.Errorf("service 1 counted %d new connections and %d packets, want 0 and %d", nw, pk, 4*flows)
	}

	// The stateful dsr-gre service beside it still records and pins.
	q := lbPkt{src: "10.3.7.1", dst: "203.0.113.20", sport: 7000, dport: 9053, udp: true, smac: macWanNeigh, dmac: macWan0}
	if v, _ := h.send(q, "wan0"); v != bpf.XDPRedirect {
		t.Fatalf("stateful dsr-gre: verdict %s", verdictName(v))
	}
	if n := conns(3); n != 1 {
		t.Errorf("%d connections of the stateful service recorded, want 1", n)
	}
	// IPv6, stateless dsr-gre: consistent, not recorded.
	q6 := lbPkt{src: "fd03::5", dst: "fd0f::20", sport: 7000, dport: 9053, udp: true, smac: macWanNeigh, dmac: macWan0}
	var remote string
	for i := 0; i < 3; i++ {
		v, out := h.send(q6, "wan0")
		pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
		outer, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if v != bpf.XDPRedirect || outer == nil || outer.Protocol != layers.IPProtocolGRE {
			t.Fatalf("IPv6 stateless dsr-gre: verdict %s, %v", verdictName(v), pk)
		}
		if i == 0 {
			remote = outer.DstIP.String()
		} else if outer.DstIP.String() != remote {
			t.Fatalf("IPv6 stateless flow moved from %s to %s", remote, outer.DstIP)
		}
	}
	if n := countFlows(t, h.dp, func(w *bpf.FTWay) bool { return w.K.Family == 6 }); n != 0 {
		t.Errorf("%d IPv6 flow-table entries, want 0", n)
	}
	if n := conns(5); n != 0 {
		t.Errorf("%d connections of the stateless IPv6 service recorded, want 0", n)
	}

	// Drain 10.6.0.11: with no connection table its connections move to
	// 10.6.0.12; those already there stay.
	h.apply(lbCfg(t, far11, "{far: 11, weight: 0}, {far: 12}"))
	moved := 0
	for n := 0; n < flows; n++ {
		_, out := h.send(client(n, "203.0.113.10", 80, "A"), "wan0")
		if got := backendOf(t, out); got != "10.6.0.12:8080" {
			t.Fatalf("drained: flow %d on %s, want 10.6.0.12:8080", n, got)
		}
		if owner[n] != "10.6.0.12:8080" {
			moved++
		}
	}
	if moved == 0 || moved == flows {
		t.Errorf("%d of %d flows were on the drained backend, want some", moved, flows)
	}
}

// emcCopies counts the exact-match cache slots, on every CPU, whose key
// passes keep.
func emcCopies(t *testing.T, dp *loader.Dataplane, keep func(bpf.FlowKey4) bool) int {
	t.Helper()
	n := 0
	var slots []bpf.EMC4
	for i := uint32(0); i < dp.EdgeEmc4.MaxEntries(); i++ {
		if err := dp.EdgeEmc4.Lookup(i, &slots); err != nil {
			t.Fatal(err)
		}
		for _, e := range slots {
			if e.F.Gen != 0 && keep(e.K) {
				n++
			}
		}
	}
	return n
}

// cacheMisses sums the flow-cache miss counter over the CPUs.
func cacheMisses(t *testing.T, dp *loader.Dataplane) uint64 {
	t.Helper()
	var per []uint64
	if err := dp.EdgeCacheStats.Lookup(uint32(1), &per); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// TestBalanceStatelessBitShared puts a stateful service, and an address
// served by no service, on the stateless_vips bit of a stateless service:
// the bit only sends their packets through the service lookup first, and
// they are decided (and recorded) as without it. A slot whose stateless
// service goes away clears its bits.
func TestBalanceStatelessBitShared(t *testing.T) {
	key := func(a netip.Addr, port uint16) bpf.SvcKey {
		k := bpf.SvcKey{Port: port<<8 | port>>8, Proto: 17, Family: 4}
		copy(k.Vip[:], a.AsSlice())
		return k
	}
	stateless := netip.MustParseAddr("203.0.113.30")
	bit := bpf.StatelessBit(key(stateless, 53))
	var shared []netip.Addr
	for i := 1; i < 65536 && len(shared) < 2; i++ {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		if bpf.StatelessBit(key(a, 53)) == bit {
			shared = append(shared, a)
		}
	}
	if len(shared) < 2 {
		t.Fatal("no two addresses share the stateless service's bit")
	}
	other := netip.MustParseAddr("198.18.255.1")
	if bpf.StatelessBit(key(other, 53)) == bit {
		other = netip.MustParseAddr("198.18.255.2")
	}
	cfg := fmt.Sprintf(`
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}, {name: wan1, role: wan}]
fars:
  - {id: 1, action: redirect, interface: wan1}
  - {id: 11, action: nat, address: 10.6.0.11, port: 8080}
  - {id: 12, action: nat, address: 10.6.0.12, port: 8080}
lbrs:
  - {id: 1, algorithm: maglev, members: [{far: 11}]}
  - {id: 2, algorithm: maglev, members: [{far: 12}]}
services:
  - {id: 1, vip: %s, port: 53, proto: udp, lbr: 1, stateless: true}
  - {id: 2, vip: %s, port: 53, proto: udp, lbr: 2}
pdrs:
  - {id: 1, precedence: 100, match: {in: wan0}, far: 1}
limits: {flows: 1024, rules: 64, maglev_table: 251, connections: 1024}
`, stateless, shared[0])
	h := newHarness(t, cfg)
	var st bpf.State
	if err := h.dp.EdgeGlobal.Lookup(uint32(0), &st); err != nil {
		t.Fatal(err)
	}
	if got := st.StatelessVips[st.Gen&1]; got != 1<<bit {
		t.Fatalf("stateless_vips %#x, want %#x", got, uint64(1)<<bit)
	}
	for n := 0; n < 3; n++ {
		q := lbPkt{src: "10.3.9.9", dst: stateless.String(), sport: uint16(6000 + n), dport: 53, udp: true, smac: macWanNeigh, dmac: macWan0}
		if v, out := h.send(q, "wan0"); v != bpf.XDPRedirect || backendOf(t, out) != "10.6.0.11:8080" {
			t.Fatalf("stateless service: verdict %s", verdictName(v))
		}
		q.dst = shared[0].String()
		if v, out := h.send(q, "wan0"); v != bpf.XDPRedirect || backendOf(t, out) != "10.6.0.12:8080" {
			t.Fatalf("stateful service on the same bit: verdict %s", verdictName(v))
		}
		// An address served by no service: decided as one whose bit
		// is clear (twice: a flow a rule decides is recorded on its
		// second packet).
		for range 2 {
			q.dst = shared[1].String()
			v, _ := h.send(q, "wan0")
			q.dst = other.String()
			if want, _ := h.send(q, "wan0"); v != want {
				t.Fatalf("no service, same bit: verdict %s, another bit: %s", verdictName(v), verdictName(want))
			}
		}
	}
	// The stateful service (on its first packet) and the plain address
	// (on its second) are cached and recorded as usual; the stateless
	// service is not.
	for a, want := range map[netip.Addr]int{stateless: 0, shared[0]: 3, shared[1]: 3, other: 3} {
		if n := countFlows(t, h.dp, toAddr(a)); n != want {
			t.Errorf("%s: %d flow-table entries, want %d", a, n, want)
		}
	}
	if n := countFlows(t, h.dp, func(w *bpf.FTWay) bool { return w.F.Flags&bpf.FlowConn != 0 }); n != 3 {
		t.Errorf("%d connections recorded, want the stateful service's 3", n)
	}

	cfg2, err := yamlcfg.Parse([]byte(strings.Replace(cfg, ", stateless: true", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	h.apply(cfg2)
	if err := h.dp.EdgeGlobal.Lookup(uint32(0), &st); err != nil {
		t.Fatal(err)
	}
	if st.StatelessVips[st.Gen&1] != 0 {
		t.Errorf("stateless_vips %#x with no stateless service, want 0", st.StatelessVips[st.Gen&1])
	}
}

// TestBalanceServiceIndexSpill gives six services keys that share a
// service-index bucket: four fit in the buckets a lookup probes, the
// other two are found in edge_services, and every one is balanced.
func TestBalanceServiceIndexSpill(t *testing.T) {
	var vips []string
	byBucket := map[uint32][]string{}
	for i := 0; i < 4096 && len(vips) == 0; i++ {
		vip := fmt.Sprintf("198.51.%d.%d", 100+i/250, 1+i%250)
		k := bpf.SvcKey{Vip: [16]byte{198, 51, byte(100 + i/250), byte(1 + i%250)}, Port: 80 << 8, Proto: 17, Family: 4}
		b := bpf.SvcIndexHash(k) & (bpf.SvcIndexSize - 1)
		byBucket[b] = append(byBucket[b], vip)
		if len(byBucket[b]) == 6 {
			vips = byBucket[b]
		}
	}
	if vips == nil {
		t.Fatal("no six keys share a bucket")
	}
	var lbrs, svcs strings.Builder
	for i, vip := range vips {
		fmt.Fprintf(&lbrs, "  - {id: %d, algorithm: maglev, members: [{far: 12}]}\n", 10+i)
		fmt.Fprintf(&svcs, "  - {id: %d, vip: %s, port: 80, proto: udp, lbr: %d}\n", 10+i, vip, 10+i)
	}
	h := newHarness(t, `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}, {name: wan1, role: wan}]
fars:
  - {id: 12, action: nat, address: 10.6.0.12, port: 8080}
lbrs:
`+lbrs.String()+`services:
`+svcs.String()+`limits: {flows: 1024, rules: 64, maglev_table: 251}
`)
	services := map[bpf.SvcKey]bpf.Svc{}
	var k bpf.SvcKey
	var v bpf.Svc
	it := h.dp.EdgeServices.Iterate()
	for it.Next(&k, &v) {
		services[k] = v
	}
	if _, spilled := bpf.SvcIndex(services); spilled < 2 {
		t.Errorf("%d services left out of the index, want at least 2", spilled)
	}
	for i, vip := range vips {
		q := lbPkt{src: "10.3.8.8", dst: vip, sport: 5000, dport: 80, udp: true, smac: macWanNeigh, dmac: macWan0}
		v, out := h.send(q, "wan0")
		if v != bpf.XDPRedirect || backendOf(t, out) != "10.6.0.12:8080" {
			t.Errorf("service %d (%s): verdict %s, out %x", i, vip, verdictName(v), out)
		}
		// The same VIP on a port with no service is not balanced.
		q.dport = 81
		if v, _ := h.send(q, "wan0"); v != bpf.XDPPass {
			t.Errorf("%s port 81: verdict %s, want pass", vip, verdictName(v))
		}
	}
}

// TestBalanceReplyEntryRestored: a NAT'd connection costs one entry, its
// own; its reply is found through it (no reverse entry is made on the
// way in), gets an entry of its own, and when that entry is evicted the
// next reply is found through the connection again, after a commit too.
func TestBalanceReplyEntryRestored(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}, {far: 12}"))
	q := client(3, "203.0.113.10", 80, "S")
	_, out := h.send(q, "wan0")
	host, _, _ := net.SplitHostPort(backendOf(t, out))
	replies := func(w *bpf.FTWay) bool { return w.F.Flags&bpf.FlowReply != 0 }
	if n, c := countFlows(t, h.dp, func(*bpf.FTWay) bool { return true }), countFlows(t, h.dp, connsOf(1)); n != 1 || c != 1 {
		t.Fatalf("after the first packet: %d entries, %d connections; want the connection's one", n, c)
	}
	reply := lbPkt{src: host, dst: q.src, sport: 8080, dport: q.sport, smac: macWan1Neigh, dmac: macWan1, flags: "SA"}
	want := reply.out("wan0", "203.0.113.10", q.src, 80, q.sport).frame(t)
	if v, out := h.send(reply, "wan1"); v != bpf.XDPRedirect || !bytes.Equal(out, want) {
		t.Fatalf("first reply: verdict %s\n got %x\nwant %x", verdictName(v), out, want)
	}
	if n := countFlows(t, h.dp, replies); n != 1 {
		t.Fatalf("%d reply entries after the first reply, want 1", n)
	}
	if n, err := h.dp.ClearFlows(replies); err != nil || n != 1 {
		t.Fatalf("evict the reply's entry: %d, %v", n, err)
	}
	// A commit makes the flows look their decisions up again.
	h.apply(lbCfg(t, far11, "{far: 11, weight: 2}, {far: 12}"))
	q.flags = "A"
	if _, out := h.send(q, "wan0"); backendOf(t, out) != net.JoinHostPort(host, "8080") {
		t.Fatalf("connection moved to %s", backendOf(t, out))
	}
	reply.flags = "A"
	want = reply.out("wan0", "203.0.113.10", q.src, 80, q.sport).frame(t)
	if v, out3 := h.send(reply, "wan1"); v != bpf.XDPRedirect || !bytes.Equal(out3, want) {
		t.Fatalf("reply after its entry was evicted: verdict %s\n got %x\nwant %x", verdictName(v), out3, want)
	}
	// Without the connection, a packet from the backend to the client
	// is not a reply: it is not rewritten to come from the VIP (a commit
	// makes the exact-match copies stale).
	if _, err := h.dp.ClearFlows(func(*bpf.FTWay) bool { return true }); err != nil {
		t.Fatal(err)
	}
	h.apply(lbCfg(t, far11, "{far: 11}, {far: 12}"))
	if v, out := h.send(reply, "wan1"); v == bpf.XDPRedirect && bytes.Equal(out, want) {
		t.Fatalf("a backend's packet to a client with no connection left as a reply from the VIP")
	}
}

// icmpErr is an ICMP (IPv4) or ICMPv6 error frame from src to dst,
// received from smac for dmac, whose rest-of-header is rest and which
// quotes quote (an IP packet).
func icmpErr(t *testing.T, smac, dmac net.HardwareAddr, src, dst string, ttl uint8, typ, code uint8, rest uint32, quote []byte) []byte {
	t.Helper()
	s, d := net.ParseIP(src), net.ParseIP(dst)
	if s.To4() != nil {
		return serialize(t, []gopacket.SerializableLayer{
			&layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, IHL: 5, TTL: ttl, Protocol: layers.IPProtocolICMPv4, SrcIP: s.To4(), DstIP: d.To4()},
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Id: uint16(rest >> 16), Seq: uint16(rest)},
			gopacket.Payload(quote),
		})
	}
	body := binary.BigEndian.AppendUint32(nil, rest)
	return serialize(t, []gopacket.SerializableLayer{
		&layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: layers.IPProtocolICMPv6, SrcIP: s, DstIP: d},
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)},
		gopacket.Payload(append(body, quote...)),
	})
}

// TestBalanceNATICMP sends ICMP errors about NAT'd connections both ways:
// toward the VIP (a router on the client's side quoting the VIP's reply:
// fragmentation needed, packet too big) they reach the backend quoting
// the backend's own packet; toward the client (the backend's host, or a
// router on its side, quoting the client's packet as the backend got it)
// they reach the client quoting its packet to the VIP, from the VIP when
// the backend sent them. Byte-exact against frames gopacket builds,
// checksums verified by tshark. Errors about unknown connections, and
// ICMP that is no error, pass untranslated.
func TestBalanceNATICMP(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}"))
	const vip, backend, client4 = "203.0.113.10", "10.6.0.11", "10.3.1.2"
	q := client(1, vip, 80, "S")
	if q.src != client4 {
		t.Fatalf("client address %s", q.src)
	}
	if _, out := h.send(q, "wan0"); backendOf(t, out) != backend+":8080" {
		t.Fatalf("SYN went to %s", backendOf(t, out))
	}
	// The connection's two packets as the far side of each router saw
	// them: the VIP's reply (leaving wan0) and the client's packet
	// (leaving wan1).
	replyOut := lbPkt{src: vip, dst: client4, sport: 80, dport: q.sport, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "A"}.frame(t)[14:]
	replyIn := lbPkt{src: backend, dst: client4, sport: 8080, dport: q.sport, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "A"}.frame(t)[14:]
	synIn := lbPkt{src: client4, dst: backend, sport: q.sport, dport: 8080, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "S"}.frame(t)[14:]
	synOut := lbPkt{src: client4, dst: vip, sport: q.sport, dport: 80, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "S"}.frame(t)[14:]

	var frames [][]byte
	w0src, w0dst := egressMACs("wan0")
	w1src, w1dst := egressMACs("wan1")
	reasons := func() uint64 {
		var per []bpf.Ctr
		if err := h.dp.EdgeReasons.Lookup(uint32(bpf.ReasonNATICMP), &per); err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range per {
			n += c.Packets
		}
		return n
	}
	for _, c := range []struct {
		name, in  string
		pkt, want []byte
	}{
		{"frag needed toward the VIP, whole quote", "wan0",
			icmpErr(t, macWanNeigh, macWan0, "10.3.200.1", vip, 64, 3, 4, 1400, replyOut),
			icmpErr(t, w1src, w1dst, "10.3.200.1", backend, 63, 3, 4, 1400, replyIn)},
		{"frag needed toward the VIP, IP header and 8 bytes", "wan0",
			icmpErr(t, macWanNeigh, macWan0, "10.3.200.1", vip, 64, 3, 4, 1400, replyOut[:28]),
			icmpErr(t, w1src, w1dst, "10.3.200.1", backend, 63, 3, 4, 1400, replyIn[:28])},
		{"port unreachable from the backend", "wan1",
			icmpErr(t, macWan1Neigh, macWan1, backend, client4, 64, 3, 3, 0, synIn),
			icmpErr(t, w0src, w0dst, vip, client4, 63, 3, 3, 0, synOut)},
		{"time exceeded from a router on the backend's side", "wan1",
			icmpErr(t, macWan1Neigh, macWan1, "10.6.0.254", client4, 64, 11, 0, 0, synIn),
			icmpErr(t, w0src, w0dst, "10.6.0.254", client4, 63, 11, 0, 0, synOut)},
	} {
		before := reasons()
		v, out := h.run(c.pkt, c.in)
		if v != bpf.XDPRedirect || !bytes.Equal(out, c.want) {
			t.Fatalf("%s: verdict %s\n got %x\nwant %x", c.name, verdictName(v), out, c.want)
		}
		if reasons() != before+1 {
			t.Errorf("%s: nat_icmp counted %d, want 1", c.name, reasons()-before)
		}
		frames = append(frames, out)
	}

	// IPv6: client fd03::7 -> [fd0f::10]:443 -> [fd02::2]:8443; a router
	// on the client's side says the VIP's reply is too big.
	syn6 := lbPkt{src: "fd03::7", dst: "fd0f::10", sport: 41000, dport: 443, smac: macWanNeigh, dmac: macWan0, flags: "S"}
	if v, _ := h.send(syn6, "wan0"); v != bpf.XDPRedirect {
		t.Fatalf("IPv6 SYN: verdict %s", verdictName(v))
	}
	reply6Out := lbPkt{src: "fd0f::10", dst: "fd03::7", sport: 443, dport: 41000, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "A"}.frame(t)[14:]
	reply6In := lbPkt{src: "fd02::2", dst: "fd03::7", sport: 8443, dport: 41000, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "A"}.frame(t)[14:]
	v, out := h.run(icmpErr(t, macWanNeigh, macWan0, "fd03::1", "fd0f::10", 64, 2, 0, 1280, reply6Out), "wan0")
	if want := icmpErr(t, w0src, w0dst, "fd03::1", "fd02::2", 63, 2, 0, 1280, reply6In); v != bpf.XDPRedirect || !bytes.Equal(out, want) {
		t.Fatalf("IPv6 packet too big toward the VIP: verdict %s\n got %x\nwant %x", verdictName(v), out, want)
	}
	frames = append(frames, out)
	checkTsharkICMP(t, frames)

	// A packet whose TTL runs out at the gateway reaches the kernel as
	// the client sent it (its time-exceeded then quotes the VIP), not
	// rewritten toward the backend.
	ttl1 := client(1, vip, 80, "A")
	ttl1.ttl = 1
	if v, out := h.send(ttl1, "wan0"); v != bpf.XDPPass || !bytes.Equal(out, ttl1.frame(t)) {
		t.Errorf("TTL 1 to the VIP: verdict %s, frame changed: %v", verdictName(v), !bytes.Equal(out, ttl1.frame(t)))
	}

	// Not translated: an error about a connection never seen, and an
	// echo request to the VIP.
	other := lbPkt{src: vip, dst: client4, sport: 80, dport: q.sport + 1, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "A"}.frame(t)[14:]
	before := reasons()
	for name, pkt := range map[string][]byte{
		"unknown connection": icmpErr(t, macWanNeigh, macWan0, "10.3.200.1", vip, 64, 3, 4, 1400, other),
		"echo request":       icmpErr(t, macWanNeigh, macWan0, client4, vip, 64, 8, 0, 0x10001, []byte("ping")),
	} {
		if v, out := h.run(pkt, "wan0"); v == bpf.XDPRedirect && bytes.Contains(out, net.ParseIP(backend).To4()) {
			t.Errorf("%s: sent to the backend", name)
		}
	}
	if n := reasons() - before; n != 0 {
		t.Errorf("nat_icmp counted %d untranslatable packets", n)
	}

	// A stateless service keeps no connection: the Maglev table gives
	// the error to the backend the connection's packets go to.
	hs := newHarness(t, statelessCfg(t, "{far: 11}, {far: 12}"))
	for n := 0; n < 20; n++ {
		q := client(n, vip, 80, "A")
		_, out := hs.send(q, "wan0")
		host, _, _ := net.SplitHostPort(backendOf(t, out))
		replyOut := lbPkt{src: vip, dst: q.src, sport: 80, dport: q.sport, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "A"}.frame(t)[14:]
		replyIn := lbPkt{src: host, dst: q.src, sport: 8080, dport: q.sport, ttl: 63, smac: macWanNeigh, dmac: macWan0, flags: "A"}.frame(t)[14:]
		v, got := hs.run(icmpErr(t, macWanNeigh, macWan0, "10.3.200.1", vip, 64, 3, 4, 1400, replyOut), "wan0")
		if want := icmpErr(t, w1src, w1dst, "10.3.200.1", host, 63, 3, 4, 1400, replyIn); v != bpf.XDPRedirect || !bytes.Equal(got, want) {
			t.Fatalf("stateless, flow %d: verdict %s\n got %x\nwant %x", n, verdictName(v), got, want)
		}
	}
}

// checkTsharkICMP has tshark verify the outer and quoted IP header
// checksums and the ICMP checksums of frames.
func checkTsharkICMP(t *testing.T, frames [][]byte) {
	t.Helper()
	testutil.RequireTool(t, "tshark")
	pcap := writePcap(t, filepath.Join(t.TempDir(), "icmp"), frames...)
	b, err := exec.Command("tshark", "-r", pcap, "-V", "-o", "ip.check_checksum:TRUE").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, b)
	}
	text := string(b)
	if n := strings.Count(text, "[Checksum Status: Good]"); n < len(frames) {
		t.Errorf("tshark verified %d ICMP checksums good, want %d:\n%s", n, len(frames), text)
	}
	for _, bad := range []string{"Bad]", "incorrect", "Malformed"} {
		if strings.Contains(text, bad) {
			t.Errorf("tshark found %q:\n%s", bad, text)
		}
	}
}

// TestBalanceNATTooBig sends the NAT service a packet too big for the
// route to its backend: the gateway answers the client with ICMP
// fragmentation needed quoting the packet as the client sent it (to the
// VIP, which the client can match), from the address of the interface it
// came in on, instead of handing the rewritten packet to the kernel,
// whose error would go to the packet's new address.
func TestBalanceNATTooBig(t *testing.T) {
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}"))
	// The address the agent writes for XDP's ICMP errors: wan0's.
	wan0 := [4]byte{10, 2, 0, 1}
	if err := h.dp.SetIfAddrs(map[uint32]bpf.IfAddr{h.idx["wan0"]: {V4: binary.NativeEndian.Uint32(wan0[:])}}); err != nil {
		t.Fatal(err)
	}
	q := lbPkt{src: "10.3.1.2", dst: "203.0.113.10", sport: 40001, dport: 80, smac: macWanNeigh, dmac: macWan0, flags: "A"}
	small := q.frame(t)
	// 1,600 bytes of IP: the frame the test run takes is not held to
	// wan0's MTU, the route out of wan1 is (1500).
	big := bytes.Clone(small)
	big = append(big, make([]byte, 1600-(len(small)-14))...)
	binary.BigEndian.PutUint16(big[14+2:], 1600)
	fixIP4Csum(big, 14)
	// The connection first, with a packet that fits.
	if v, out := h.run(small, "wan0"); v != bpf.XDPRedirect || backendOf(t, out) != "10.6.0.11:8080" {
		t.Fatalf("small packet: verdict %s", verdictName(v))
	}
	v, out := h.run(big, "wan0")
	if v != bpf.XDPRedirect {
		t.Fatalf("too big: verdict %s, want the ICMP answer redirected", verdictName(v))
	}
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	ic, _ := pk.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	if ip == nil || ic == nil || ic.TypeCode != layers.CreateICMPv4TypeCode(3, 4) || ic.Seq != 1500 {
		t.Fatalf("too big: want ICMP frag needed, MTU 1500: %v", pk)
	}
	if ip.DstIP.String() != q.src || !bytes.Equal(ip.SrcIP.To4(), wan0[:]) {
		t.Errorf("ICMP from %s to %s, want from wan0's 10.2.0.1 to the client %s", ip.SrcIP, ip.DstIP, q.src)
	}
	// The quote is the packet as the client sent it: to the VIP, port 80.
	quote := ic.Payload
	if len(quote) < 28 || !bytes.Equal(quote[16:20], []byte{203, 0, 113, 10}) || binary.BigEndian.Uint16(quote[22:]) != 80 ||
		!bytes.Equal(quote[:20], big[14:34]) {
		t.Errorf("quote %x, want the client's packet to the VIP %x", quote[:min(28, len(quote))], big[14:42])
	}
	checkTsharkICMP(t, [][]byte{out})
}
