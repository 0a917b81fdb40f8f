// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// What a sender outside the gateway can compute about where its flows
// land. Before the secret, the flows' hash was public: a sum of the
// tuple's words times constants, then SplitMix64's finaliser, both
// invertible. These tests compute, as such a sender would from the
// source, tuples that collide with a victim's under that hash, send
// them, and check the victim is unharmed: on a build placing flows by
// that hash each of them fails; with the keyed hash the tuples land at
// random, and records are matched by their whole key.

// unkeyedSum and unkeyedFinal are the flows' hash of the builds before
// the secret (flowtab.h's ft_hash), as anyone could compute it: the
// tuple's words times constants, summed, then SplitMix64's finaliser.
// Both steps are invertible.
func unkeyedSum(s0, s1, d0, d1, ports uint64) uint64 {
	return s0*0x9e3779b97f4a7c15 + s1*0xbf58476d1ce4e5b9 + d0*0x94d049bb133111eb + d1*0xd6e8feb86659fd93 +
		ports*0xc2b2ae3d27d4eb4f
}

func unkeyedFinal(h uint64) uint64 {
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return h
}

// be16 is a port as a flow key holds it (network order, read as host).
func be16(p uint16) uint64 { return uint64(bits.ReverseBytes16(p)) }

// udpWords are the words the unkeyed hash summed for a UDP packet from
// src:sport to dst:dport: the addresses as a flow key's 64-bit words and
// the ports word; sorted puts the lower endpoint (address words, then
// port) first, as FlowOpt's direction-free hash did.
func udpWords(src, dst string, sport, dport uint16, sorted bool) (a0, a1, b0, b1, ports uint64) {
	word := func(ip net.IP) (uint64, uint64) {
		var b [16]byte
		if v4 := ip.To4(); v4 != nil {
			copy(b[:], v4)
		} else {
			copy(b[:], ip.To16())
		}
		return binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])
	}
	a0, a1 = word(net.ParseIP(src))
	b0, b1 = word(net.ParseIP(dst))
	ap, bp := be16(sport), be16(dport)
	if sorted && (a0 > b0 || (a0 == b0 && (a1 > b1 || (a1 == b1 && ap > bp)))) {
		a0, a1, b0, b1, ap, bp = b0, b1, a0, a1, bp, ap
	}
	fam := uint64(6)
	if net.ParseIP(src).To4() != nil {
		fam = 4
	}
	return a0, a1, b0, b1, ap | bp<<16 | 17<<32 | fam<<40
}

// unkeyedBucket is the flow-table bucket the unkeyed hash gave a UDP
// flow, of buckets.
func unkeyedBucket(src, dst string, sport, dport uint16, buckets uint32) uint32 {
	return uint32(unkeyedFinal(unkeyedSum(udpWords(src, dst, sport, dport, false)))) & (buckets - 1)
}

// unkeyedFOPlace is where fo_place's unkeyed hash put the UDP connection
// between src:sport and dst:dport: the first of its pair of slots and
// its check.
func unkeyedFOPlace(src, dst string, sport, dport uint16, slots uint32) (idx, check uint32) {
	h := unkeyedFinal(unkeyedSum(udpWords(src, dst, sport, dport, true)))
	return uint32(h) & (slots - 1) &^ 1, uint32(h>>32) | 1
}

// inverse64 is x's inverse modulo 2^64 (x odd), by Newton's iteration.
func inverse64(x uint64) uint64 {
	y := x
	for range 6 {
		y *= 2 - x*y
	}
	return y
}

// TestFlowTableBucketAttack: a sender that knows which bucket a victim's
// next flow will need fills it first with eight flows of three packets
// each (admitted on their second, and flows past that are never evicted
// for a new one),
// and the victim's flow then finds no room: never recorded, decided
// again at every packet, and a connection to a service so kept by no
// entry moves to another backend at the next change (flow_full). Under
// the unkeyed hash eight such tuples took the sender a few thousand
// guesses of its own source port; under the keyed hash they land
// anywhere, and the victim's flow is recorded.
func TestFlowTableBucketAttack(t *testing.T) {
	h := newHarness(t, greConfig)
	buckets := h.dp.Limits.FTEntries() / bpf.FTWays
	const victim, attacker, dst = "10.1.0.2", "10.1.0.66", "10.7.1.1"
	const vport, dport = 40000, 5000
	target := unkeyedBucket(victim, dst, vport, dport, buckets)
	var ports []uint16
	for p := uint16(1024); len(ports) < bpf.FTWays && p < 65535; p++ {
		if unkeyedBucket(attacker, dst, p, dport, buckets) == target {
			ports = append(ports, p)
		}
	}
	if len(ports) < bpf.FTWays {
		t.Fatalf("found %d tuples in the victim's bucket under the unkeyed hash", len(ports))
	}
	udpFrom := func(src string, sport uint16) []byte {
		return greIP{src: src, dst: dst, u: udpU(sport, dport)}.frame(t, macHostA, macLan0, 64)
	}
	for _, p := range ports {
		for range 3 {
			if v, _ := h.run(udpFrom(attacker, p), "lan0"); v != bpf.XDPRedirect {
				t.Fatalf("attacker's flow from port %d: verdict %s", p, verdictName(v))
			}
		}
	}
	before := snap(t, h).Reasons
	for range 2 { // admitted to the flow table on its second packet
		if v, _ := h.run(udpFrom(victim, vport), "lan0"); v != bpf.XDPRedirect {
			t.Fatalf("victim's packet: verdict %s", verdictName(v))
		}
	}
	after := snap(t, h).Reasons
	if d := after[bpf.ReasonFlowFull].Packets - before[bpf.ReasonFlowFull].Packets; d != 0 {
		t.Errorf("the victim's new flow found its bucket full of the attacker's (flow_full %d)", d)
	}
	ways, _, err := h.dp.FlowWays()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ways, func(w bpf.FTWay) bool { return w.K.Sport == uint16(be16(vport)) && w.K.Src[3] == 2 }) {
		t.Errorf("the victim's flow is not in the flow table after %d attacker flows computed for its bucket", len(ports))
	}
}

// foAttackConfig is foConfig with UDP from the LAN to port 5100, IPv4
// and IPv6, in class 7: a flow's quantum of 1,000 bytes a second
// (nothing refilled while a test runs), and a burst no test reaches, so
// what a flow passes is its own tokens' doing, not the class's phantom
// queue's.
var foAttackConfig = strings.NewReplacer(
	"qos_classes:\n", "qos_classes:\n  - {id: 7, type: embb, rate: 8kbit, quantum: 1000, burst: 100000}\n",
	"pdrs:\n", "pdrs:\n  - {id: 16, precedence: 5, match: {in: lan0, dst: \"fd07::/48\", proto: udp, dport: 5100}, far: 1, qos: 7}\n"+
		"  - {id: 17, precedence: 5, match: {in: lan0, dst: 10.7.0.0/16, proto: udp, dport: 5100}, far: 1, qos: 7}\n",
).Replace(foConfig)

// TestFlowOptSharedRecordAttack: a sender on the LAN picks its own IPv6
// interface identifier. Under the unkeyed hash it solved one equation
// for an address whose flow to a victim's server landed on the victim's
// FlowOpt record, same slots and same check; records were matched by
// the check alone, so its flow spent the victim's tokens (its packets
// then dropped) and could set its congestion hint. Under the keyed hash
// the address lands anywhere, and a record is the connection's whose
// whole key matches.
func TestFlowOptSharedRecordAttack(t *testing.T) {
	h := newHarness(t, foAttackConfig)
	greLanNeighbours(t, h)
	const victim, server = "fd01::2", "fd07::1:1"
	const vport, aport, dport = 41000, 41001, 5100
	// The attacker keeps the victim's /64 prefix (the lower endpoint
	// still) and solves for the interface identifier whose sum equals
	// the victim's: the sum is linear in it.
	sum := unkeyedSum(udpWords(victim, server, vport, dport, true))
	rest := sum - unkeyedSum(udpWords("fd01::", server, aport, dport, true))
	iid := rest * inverse64(0xbf58476d1ce4e5b9)
	ip := make(net.IP, 16)
	copy(ip, net.ParseIP("fd01::"))
	binary.LittleEndian.PutUint64(ip[8:], iid)
	attacker := ip.String()
	slots := h.dp.Limits.FOEntries()
	vi, vc := unkeyedFOPlace(victim, server, vport, dport, slots)
	ai, ac := unkeyedFOPlace(attacker, server, aport, dport, slots)
	if vi != ai || vc != ac {
		t.Fatalf("the computed address %s lands at slot %d check %#x, the victim at %d %#x", attacker, ai, ac, vi, vc)
	}
	t.Logf("attacker %s port %d: the victim's slot %d and check %#x under the unkeyed hash", attacker, aport, vi, vc)

	send := func(src string, sport uint16, n int) (passed int) {
		t.Helper()
		f := greIP{src: src, dst: server, u: udpU(sport, dport)}.frame(t, macHostA, macLan0, 64)
		for range n {
			switch v, _ := h.run(f, "lan0"); v {
			case bpf.XDPRedirect:
				passed++
			case bpf.XDPDrop:
			default:
				t.Fatalf("verdict %s", verdictName(v))
			}
		}
		return passed
	}
	if got := send(victim, vport, 2); got != 2 {
		t.Fatalf("the victim's first 2 packets: %d passed", got)
	}
	atk := send(attacker, aport, 60)
	t.Logf("attacker: %d of 60 passed", atk)
	// The victim has spent 2 of the 13 packets its quantum covers.
	if got := send(victim, vport, 5); got != 5 {
		t.Errorf("after the attacker's flow: %d of the victim's next 5 packets within its share passed, want 5", got)
	}
	vs, _, ok, err := h.dp.FOLookup(foKeyOf(victim, server, vport, dport))
	if err != nil || !ok {
		t.Fatalf("no FlowOpt record for the victim (%v)", err)
	}
	if vs.Packets != 7 {
		t.Errorf("the victim's record counted %d packets, want its own 7", vs.Packets)
	}
	// The program and the agent place IPv6 flows alike.
	if n, err := h.dp.CheckFlowPlaces(); err != nil || n < 2 {
		t.Errorf("flow places: %d entries, %v", n, err)
	}
}

// harnessEdited is a harness for config cfg with old replaced by new,
// and the LAN hosts' neighbours.
func harnessEdited(t *testing.T, cfg, old, new string) *harness {
	t.Helper()
	edited := strings.Replace(cfg, old, new, 1)
	if edited == cfg {
		t.Fatalf("the config no longer holds %q", old)
	}
	h := newHarness(t, edited)
	greLanNeighbours(t, h)
	return h
}

// tcpKeyOf is the flow key of a TCP packet from src:sport to dst:dport.
func tcpKeyOf(src, dst string, sport, dport uint16) bpf.FlowKey {
	k := foKeyOf(src, dst, sport, dport)
	k.Proto = 6
	return k
}

// foKeyOf is the flow key of a UDP packet from src:sport to dst:dport.
func foKeyOf(src, dst string, sport, dport uint16) bpf.FlowKey {
	var k bpf.FlowKey
	s, d := net.ParseIP(src), net.ParseIP(dst)
	k.Family = 6
	if s4 := s.To4(); s4 != nil {
		copy(k.Src[:], s4)
		copy(k.Dst[:], d.To4())
		k.Family = 4
	} else {
		copy(k.Src[:], s.To16())
		copy(k.Dst[:], d.To16())
	}
	k.Sport, k.Dport, k.Proto = uint16(be16(sport)), uint16(be16(dport)), 17
	return k
}

// TestFlowOptFullKey: two connections whose keyed hashes agree on their
// pair of slots and on the 32-bit check (the agent, holding the secret,
// finds such a pair by the birthday bound) still have a record each:
// the second does not spend the first's tokens.
func TestFlowOptFullKey(t *testing.T) {
	h := harnessEdited(t, foAttackConfig, "limits: {flows: 4096, rules: 1024}", "limits: {flows: 1024, rules: 1024}")
	const dst, dport = "10.7.1.1", 5100
	// Connection i: from 10.1.x.y, port 2000 + i % 60000.
	flow := func(i int) (string, uint16) {
		h := i / 60000
		return fmt.Sprintf("10.1.%d.%d", 1+h/250, 1+h%250), uint16(2000 + i%60000)
	}
	base := foKeyOf("10.1.0.0", dst, 0, dport)
	const n = 1 << 22 // 40 bits to agree on: no two agree once in a thousand runs
	seen := make([]uint64, 0, n)
	a, b := -1, -1
	for i := range n {
		k := base
		hi := i / 60000
		k.Src[2], k.Src[3] = byte(1+hi/250), byte(1+hi%250)
		k.Sport = uint16(be16(uint16(2000 + i%60000)))
		idx, check, _, _ := h.dp.FOPlace(k)
		seen = append(seen, (uint64(idx>>1)<<31|uint64(check>>1))<<22|uint64(i))
	}
	slices.Sort(seen)
	for i := 1; i < len(seen); i++ {
		if seen[i]>>22 == seen[i-1]>>22 {
			a, b = int(seen[i-1]&(1<<22-1)), int(seen[i]&(1<<22-1))
			break
		}
	}
	if a < 0 {
		t.Fatalf("no two of %d connections share slots and check", n)
	}
	srcA, portA := flow(a)
	srcB, portB := flow(b)
	t.Logf("%s:%d and %s:%d share their slots and check", srcA, portA, srcB, portB)
	send := func(src string, sport uint16, n int) (passed int) {
		t.Helper()
		f := greIP{src: src, dst: dst, u: udpU(sport, dport)}.frame(t, macHostA, macLan0, 64)
		for range n {
			if v, _ := h.run(f, "lan0"); v == bpf.XDPRedirect {
				passed++
			}
		}
		return passed
	}
	if got := send(srcA, portA, 2); got != 2 {
		t.Fatalf("the first connection's 2 packets: %d passed", got)
	}
	send(srcB, portB, 60)
	if got := send(srcA, portA, 5); got != 5 {
		t.Errorf("after the second connection's 60 packets, %d of the first's next 5 within its share passed", got)
	}
	ea, _, okA, errA := h.dp.FOLookup(foKeyOf(srcA, dst, portA, dport))
	eb, _, okB, errB := h.dp.FOLookup(foKeyOf(srcB, dst, portB, dport))
	if errA != nil || errB != nil || !okA || !okB {
		t.Fatalf("records: %v %v (%v, %v)", okA, okB, errA, errB)
	}
	if ea.Packets != 7 || eb.Packets != 60 {
		t.Errorf("records counted %d and %d packets, want 7 and 60", ea.Packets, eb.Packets)
	}
}

// TestFlowOptUnrecordedHeld: a flow whose pair of slots both hold
// established connections gets no record of its own. Such a flow was
// let through unjudged: a sender filling a pair with two established
// flows of its own (under the unkeyed hash, a few thousand guesses of
// its source port) then sent a third at any rate its class had. Now
// such a flow is judged in one of its class's shares (fail closed,
// counted fo_full, its drops fo_share_drop) and held to a flow's share.
func TestFlowOptUnrecordedHeld(t *testing.T) {
	h := newHarness(t, foAttackConfig)
	greLanNeighbours(t, h)
	frame := len(foUDP(t, 1, 5100, 0))
	quantum := 1000 / frame
	send := func(sport uint16, n int) (passed int) {
		t.Helper()
		for range n {
			if v, _ := h.run(foUDP(t, sport, 5100, 0), "lan0"); v == bpf.XDPRedirect {
				passed++
			}
		}
		return passed
	}
	// Three flows to one pair, as the sender computes them (under the
	// unkeyed hash), then as the agent does (under the secret): either
	// way the third is held to a share.
	slots := h.dp.Limits.FOEntries()
	for _, c := range []struct {
		name  string
		first uint16
		place func(sport uint16) uint32
	}{
		{"the sender's guess", 50000, func(p uint16) uint32 {
			idx, _ := unkeyedFOPlace("10.1.0.2", "10.7.1.1", p, 5100, slots)
			return idx
		}},
		{"a pair the secret fills", 20000, func(p uint16) uint32 {
			idx, _, _, _ := h.dp.FOPlace(foKey(17, p, 5100))
			return idx
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ports []uint16
			want := c.place(c.first)
			// Every port, wrapping: under the secret 15,000 ports once held
			// only two for a pair, so the search is not cut short.
			for p := c.first; len(ports) < 3 && p != c.first-1; p++ {
				if p >= 1024 && c.place(p) == want {
					ports = append(ports, p)
				}
			}
			if len(ports) < 3 {
				t.Fatalf("found %d flows for one pair", len(ports))
			}
			for _, p := range ports[:2] {
				send(p, 5) // established, spent
			}
			before := snap(t, h).Reasons
			passed := send(ports[2], 60)
			after := snap(t, h).Reasons
			t.Logf("third flow: %d of 60 passed (fo_full %d, fo_share_drop %d)", passed,
				after[bpf.ReasonFOFull].Packets-before[bpf.ReasonFOFull].Packets,
				after[bpf.ReasonFOShareDrop].Packets-before[bpf.ReasonFOShareDrop].Packets)
			if passed > quantum+1 {
				t.Errorf("the third flow: %d of 60 passed, want at most its share's %d", passed, quantum+1)
			}
		})
	}
	// Under the secret the third flow had no record, and its drops are
	// counted.
	if c := snap(t, h).Reasons; c[bpf.ReasonFOFull].Packets < 60 || c[bpf.ReasonFOShareDrop].Packets < uint64(60-quantum-1) {
		t.Errorf("fo_full %d, fo_share_drop %d: want the unrecorded flow's 60 packets counted, %d and more dropped",
			c[bpf.ReasonFOFull].Packets, c[bpf.ReasonFOShareDrop].Packets, 60-quantum-1)
	}
}

// TestFlowOptRTTForgedAnswers: a sender on another WAN link than the one
// a TCP connection leaves by answers for it: a SYN-ACK right after the
// SYN (the outbound direction's minimum RTT becomes microseconds, so
// every honest sample after it is "congested" and the fairness stage
// marks the connection CE though its path is idle), and an echo of a
// data segment's TSval. Neither came in where the outbound direction
// leaves (wan0, its path): neither is a sample, and the honest answers
// 30 ms later are.
func TestFlowOptRTTForgedAnswers(t *testing.T) {
	h := newHarness(t, foConfig)
	greLanNeighbours(t, h)
	const sport, dport = 40000, 80
	k := foKey(6, sport, dport)
	out := func(syn, ack bool, tsval, tsecr uint32, payload int) {
		t.Helper()
		if ret, _ := h.run(serialize(t, v4("10.7.1.1", tcpSeg(sport, dport, syn, ack, true, tsval, tsecr, payload))()), "lan0"); ret != bpf.XDPRedirect {
			t.Fatalf("TCP out over path 1: verdict %s, want redirect", verdictName(ret))
		}
	}
	back := func(syn, ack bool, tsval, tsecr uint32) {
		t.Helper()
		in := greIP{src: "10.7.1.1", dst: "10.1.0.2", u: tcpSeg(dport, sport, syn, ack, true, tsval, tsecr, 0)}.bytes(t, 64)
		if ret, _ := h.run(greFromRemote("10.3.9.9", layers.GRE{KeyPresent: true, Key: 1}).frame(t, in), "wan0"); ret != bpf.XDPRedirect {
			t.Fatalf("TCP back over path 1: verdict %s, want redirect to the LAN", verdictName(ret))
		}
	}
	forged := func(syn, ack bool, tsval, tsecr uint32) {
		t.Helper()
		h.run(greIP{src: "10.7.1.1", dst: "10.1.0.2", u: tcpSeg(dport, sport, syn, ack, true, tsval, tsecr, 0)}.frame(t, macWanNeigh, macWan0, 64), "wan1")
	}
	outbound := func() bpf.FODir {
		t.Helper()
		e, dir, ok, err := h.dp.FOLookup(k)
		if err != nil || !ok {
			t.Fatalf("no flowopt state for the connection (%v)", err)
		}
		return e.D[dir]
	}

	out(true, false, 100, 0, 0) // SYN
	forged(true, true, 900, 100)
	time.Sleep(30 * time.Millisecond)
	back(true, true, 500, 100)
	out(false, true, 101, 500, 0)
	o := outbound()
	t.Logf("after the handshake: %d samples, min %d us", o.Samples, o.MinUs)
	if o.Samples != 1 || o.MinUs < 25000 {
		t.Errorf("handshake with a forged SYN-ACK from wan1: outbound %d samples, min %d us; want the honest one, about 30 ms", o.Samples, o.MinUs)
	}

	out(false, true, 1000, 500, 100)
	forged(false, true, 901, 1000)
	time.Sleep(30 * time.Millisecond)
	back(false, true, 501, 1000)
	o = outbound()
	t.Logf("after a data segment: %d samples, min %d us, srtt %d us, flags %#x", o.Samples, o.MinUs, o.SrttUs, o.Flags)
	if o.Samples != 2 || o.MinUs < 25000 || o.Flags&bpf.FODHint != 0 {
		t.Errorf("an echo forged from wan1: outbound %d samples, min %d us, hint %v; want 2 honest samples, about 30 ms, no hint",
			o.Samples, o.MinUs, o.Flags&bpf.FODHint != 0)
	}
}

// TestTCPRTTForgedEchoOtherLink: a path's passive RTT (tcprtt.h) ends its
// sample with a TCP echo decapsulated from the path. With a decap rule
// that names no ingress interface, a sender on another link (wan1) that
// knows the path's outer addresses and key sends the echo first: it was
// taken as the path's RTT (microseconds, so the path monitor judged the
// path by it). An echo counts only when it came in by the interface the
// sample left by: the forged one is not, the honest one 30 ms later is.
func TestTCPRTTForgedEchoOtherLink(t *testing.T) {
	h := harnessEdited(t, greConfig, "match: {in: wan0, proto: gre, dst: 10.2.0.1}", "match: {proto: gre, dst: 10.2.0.1}")
	idx := pathStats(t, h, 1)
	if ret, _ := h.run(serialize(t, v4("10.7.1.1", tcpTS(40000, 80, true, 1000, 7))()), "lan0"); ret != bpf.XDPRedirect {
		t.Fatalf("TCP out of path 1: verdict %s", verdictName(ret))
	}
	echo := greIP{src: "10.7.1.1", dst: "10.1.0.2", u: tcpTS(80, 40000, true, 99, 1000)}.bytes(t, 64)
	forged := greOuter{srcMAC: macWanNeigh, dstMAC: macWan0, src: "10.3.9.9", dst: "10.2.0.1", ttl: 61, gre: layers.GRE{KeyPresent: true, Key: 1}}
	h.run(forged.frame(t, echo), "wan1")
	time.Sleep(30 * time.Millisecond)
	if ret, _ := h.run(greFromRemote("10.3.9.9", layers.GRE{KeyPresent: true, Key: 1}).frame(t, echo), "wan0"); ret != bpf.XDPRedirect {
		t.Fatalf("the honest echo over path 1: verdict %s", verdictName(ret))
	}
	r, err := h.dp.ReadPathTCPRTT(idx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("path 1: %d samples, last %d us", r.Samples, r.LastNs/1000)
	if r.Samples != 1 || r.LastNs < 25e6 {
		t.Errorf("path 1 after an echo forged on wan1 and the honest one: %d samples, last %d us; want the honest one, about 30 ms", r.Samples, r.LastNs/1000)
	}
}

// TestFlowCountsAcrossEMCEvictions: 3,000 IPv4 flows round robin on one
// CPU, more than its 1,024 exact-match slots, so each packet's copy
// pushes out another flow's, whose counts go back into its table entry
// at the place the copy noted (no second hash), or through a lookup
// when the entry has moved: every flow ends with exactly its packets.
func TestFlowCountsAcrossEMCEvictions(t *testing.T) {
	h := harnessEdited(t, greConfig, "limits: {flows: 4096, rules: 1024}", "limits: {flows: 65536, rules: 1024}")
	h.pin = 1
	const flows, rounds = 3000, 4
	frames := make([][]byte, flows)
	for i := range frames {
		frames[i] = greIP{src: fmt.Sprintf("10.1.%d.%d", 1+i/250, 1+i%250), dst: "10.7.1.1", u: udpU(40000, 5000)}.frame(t, macHostA, macLan0, 64)
	}
	for range rounds {
		for _, f := range frames {
			if v, _ := h.run(f, "lan0"); v != bpf.XDPRedirect {
				t.Fatalf("verdict %s", verdictName(v))
			}
		}
	}
	got, err := h.dp.Flows(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != flows {
		t.Fatalf("%d flows listed, want %d", len(got), flows)
	}
	for _, f := range got {
		if f.Packets != rounds {
			t.Fatalf("flow from %s: %d packets, want %d", f.Src, f.Packets, rounds)
		}
	}
}
