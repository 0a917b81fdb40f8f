// SPDX-License-Identifier: Apache-2.0

package bpf_test

// Packet tests: tables of frames run through the loaded program with
// BPF_PROG_TEST_RUN inside the harness namespace, each checked for its
// verdict, the frame the program leaves behind and the counters it moves.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// spec builds a test packet as fresh gopacket layers on every call, so a
// case can serialize it once as sent and once, edited, as a redirect must
// send it on.
type spec func() []gopacket.SerializableLayer

// upper makes a transport header with its payload and names its protocol.
type upper func() (layers.IPProtocol, []gopacket.SerializableLayer)

// pktDesc holds what pktOpts change in a packet built by v4 or v6.
type pktDesc struct {
	tpids []layers.EthernetType // VLAN tag protocol IDs, outermost first
	ttl   uint8                 // TTL or hop limit
	tos   uint8                 // IPv4 TOS or IPv6 traffic class
	exts  []ext                 // IPv6 extension headers, in order
	edit4 func(*layers.IPv4)
}

type pktOpt func(*pktDesc)

func tagged(tpids ...layers.EthernetType) pktOpt {
	return func(d *pktDesc) { d.tpids = tpids }
}

func ttl(n uint8) pktOpt { return func(d *pktDesc) { d.ttl = n } }

// dscp sets the DSCP, the upper six bits of the TOS / traffic class
// octet (RFC 2474).
func dscp(n uint8) pktOpt { return func(d *pktDesc) { d.tos = n << 2 } }

func exts(e ...ext) pktOpt { return func(d *pktDesc) { d.exts = e } }

func edit4(f func(*layers.IPv4)) pktOpt { return func(d *pktDesc) { d.edit4 = f } }

func describe(opts []pktOpt) pktDesc {
	d := pktDesc{ttl: 64}
	for _, o := range opts {
		o(&d)
	}
	return d
}

// l2 returns the Ethernet header from host A to lan0, with VLAN tags of
// the given TPIDs, carrying et.
func l2(et layers.EthernetType, tpids []layers.EthernetType) []gopacket.SerializableLayer {
	if len(tpids) == 0 {
		return []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: macHostA, DstMAC: macLan0, EthernetType: et}}
	}
	ls := []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: macHostA, DstMAC: macLan0, EthernetType: tpids[0]}}
	for i := range tpids {
		next := et
		if i+1 < len(tpids) {
			next = tpids[i+1]
		}
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: uint16(10 * (i + 1)), Type: next})
	}
	return ls
}

// v4 is an IPv4 packet from 10.1.0.2 (a host on lan0) to dst.
func v4(dst string, u upper, opts ...pktOpt) spec {
	return func() []gopacket.SerializableLayer {
		d := describe(opts)
		proto, up := u()
		ip := &layers.IPv4{
			Version: 4, IHL: 5, TOS: d.tos, Id: 0x1234, TTL: d.ttl, Protocol: proto,
			SrcIP: net.IP{10, 1, 0, 2}, DstIP: net.ParseIP(dst).To4(),
		}
		if d.edit4 != nil {
			d.edit4(ip)
		}
		return append(append(l2(layers.EthernetTypeIPv4, d.tpids), ip), up...)
	}
}

// v6 is an IPv6 packet from fd01::2 (a host on lan0) to dst.
func v6(dst string, u upper, opts ...pktOpt) spec {
	return func() []gopacket.SerializableLayer {
		d := describe(opts)
		proto, up := u()
		ip := &layers.IPv6{
			Version: 6, TrafficClass: d.tos, HopLimit: d.ttl, NextHeader: proto,
			SrcIP: net.ParseIP("fd01::2"), DstIP: net.ParseIP(dst),
		}
		ls := append(l2(layers.EthernetTypeIPv6, d.tpids), ip)
		if len(d.exts) > 0 {
			ip.NextHeader = d.exts[0].proto
			var raw []byte
			for i, e := range d.exts {
				next := proto
				if i+1 < len(d.exts) {
					next = d.exts[i+1].proto
				}
				raw = append(raw, e.build(next)...)
			}
			ls = append(ls, gopacket.Payload(raw))
		}
		return append(ls, up...)
	}
}

func udpU(sport, dport uint16) upper {
	return func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		return layers.IPProtocolUDP, []gopacket.SerializableLayer{
			&layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)},
			gopacket.Payload("edgeplane udp"),
		}
	}
}

func tcpU(sport, dport uint16) upper {
	return func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		return layers.IPProtocolTCP, []gopacket.SerializableLayer{
			&layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1000, SYN: true, Window: 64240},
			gopacket.Payload("edgeplane tcp"),
		}
	}
}

func icmp4U() upper {
	return func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		return layers.IPProtocolICMPv4, []gopacket.SerializableLayer{
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 7, Seq: 1},
			gopacket.Payload("ping"),
		}
	}
}

func icmp6U() upper {
	return func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		return layers.IPProtocolICMPv6, []gopacket.SerializableLayer{
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)},
			&layers.ICMPv6Echo{Identifier: 7, SeqNumber: 1},
			gopacket.Payload("ping"),
		}
	}
}

// sctpU is an SCTP common header (RFC 9260 section 3.1) followed by a
// chunk-shaped payload.
func sctpU(sport, dport uint16) upper {
	return func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		return layers.IPProtocolSCTP, []gopacket.SerializableLayer{
			&layers.SCTP{SrcPort: layers.SCTPPort(sport), DstPort: layers.SCTPPort(dport), VerificationTag: 0xdeadbeef},
			gopacket.Payload{0, 3, 0, 8, 'e', 'd', 'g', 'e'},
		}
	}
}

// greU is a GRE header as g describes it, carrying an opaque IPv4 payload.
func greU(g layers.GRE) upper {
	return func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		c := g
		c.Protocol = layers.EthernetTypeIPv4
		return layers.IPProtocolGRE, []gopacket.SerializableLayer{&c, gopacket.Payload("inner ipv4 packet")}
	}
}

// rawU is a transport payload given byte for byte.
func rawU(proto layers.IPProtocol, b []byte) upper {
	return func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		return proto, []gopacket.SerializableLayer{gopacket.Payload(bytes.Clone(b))}
	}
}

// ext is an IPv6 extension header; build returns its bytes given the
// header that follows it.
type ext struct {
	proto layers.IPProtocol
	build func(next layers.IPProtocol) []byte
}

// optsExt is an 8-byte hop-by-hop or destination options header holding
// one PadN option (RFC 8200 section 4.2).
func optsExt(proto layers.IPProtocol) ext {
	return ext{proto, func(n layers.IPProtocol) []byte { return []byte{byte(n), 0, 1, 4, 0, 0, 0, 0} }}
}

var (
	hopByHop = optsExt(layers.IPProtocolIPv6HopByHop)
	destOpts = optsExt(layers.IPProtocolIPv6Destination)
	// routingExt is a segment routing header (RFC 8754) with one segment
	// and Segments Left 0, which a node processes as if it were absent
	// (RFC 8200 section 4.4): 8 + 16 bytes, Hdr Ext Len 2.
	routingExt = ext{layers.IPProtocolIPv6Routing, func(n layers.IPProtocol) []byte {
		return append([]byte{byte(n), 2, 4, 0, 0, 0, 0, 0}, net.ParseIP("fd03::1")...)
	}}
	// authExt is an AH header (RFC 4302) with a 12-byte ICV: Payload Len
	// 4 means (4+2)*4 = 24 bytes.
	authExt = ext{layers.IPProtocolAH, func(n layers.IPProtocol) []byte {
		return append([]byte{byte(n), 4, 0, 0, 0, 0, 0x10, 0x01, 0, 0, 0, 1}, make([]byte, 12)...)
	}}
)

// fragExt is an IPv6 fragment header (RFC 8200 section 4.5) with the
// offset in 8-byte units.
func fragExt(offset uint16, more bool) ext {
	return ext{layers.IPProtocolIPv6Fragment, func(n layers.IPProtocol) []byte {
		fo := offset << 3
		if more {
			fo |= 1
		}
		return []byte{byte(n), 0, byte(fo >> 8), byte(fo), 0xca, 0xfe, 0, 1}
	}}
}

var serializeOpts = gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}

// serialize builds the frame of ls with lengths and checksums filled in,
// the way a sender's stack would.
func serialize(t testing.TB, ls []gopacket.SerializableLayer) []byte {
	t.Helper()
	var nl gopacket.NetworkLayer
	for _, l := range ls {
		switch x := l.(type) {
		case *layers.IPv4:
			if nl == nil {
				nl = x
			}
		case *layers.IPv6:
			if nl == nil {
				nl = x
			}
		case interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}:
			if nl != nil {
				if err := x.SetNetworkLayerForChecksum(nl); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, serializeOpts, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return bytes.Clone(buf.Bytes())
}

// egressMACs returns the source and destination MAC a redirect out of
// egress writes: the interface's own and its neighbour's.
func egressMACs(egress string) (src, dst net.HardwareAddr) {
	if egress == "wan1" {
		return macWan1, macWan1Neigh
	}
	return macWan0, macWanNeigh
}

// forwarded builds, independently of the dataplane, the frame a redirect
// of s out of egress must produce: the next hop's MAC as destination,
// egress's MAC as source, TTL or hop limit one lower and (gopacket
// recomputing it from scratch) a fresh IPv4 header checksum.
func forwarded(t testing.TB, s spec, egress string) []byte {
	t.Helper()
	ls := s()
	src, dst := egressMACs(egress)
	done := false
	for _, l := range ls {
		switch x := l.(type) {
		case *layers.Ethernet:
			x.SrcMAC, x.DstMAC = src, dst
		case *layers.IPv4:
			if !done {
				x.TTL--
				done = true
			}
		case *layers.IPv6:
			if !done {
				x.HopLimit--
				done = true
			}
		}
	}
	return serialize(t, ls)
}

// inetSum is the one's complement sum of b (RFC 1071), folded to 16 bits.
// A header whose checksum is right sums to 0xffff.
func inetSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// fixIP4Csum rewrites the checksum of the IPv4 header at off, over ihl
// words or as much of them as the frame holds.
func fixIP4Csum(f []byte, off int) {
	end := min(off+int(f[off]&0x0f)*4, len(f))
	end = max(end, off+20)
	f[off+10], f[off+11] = 0, 0
	binary.BigEndian.PutUint16(f[off+10:], ^inetSum(f[off:end]))
}

// cut4 trims an untagged IPv4 frame with a 20-byte header to that header
// plus n bytes of transport, with tot_len and checksum to match: a short
// but otherwise consistent packet.
func cut4(f []byte, n int) []byte {
	f = bytes.Clone(f[:14+20+n])
	binary.BigEndian.PutUint16(f[16:], uint16(20+n))
	fixIP4Csum(f, 14)
	return f
}

// cut6 trims an untagged IPv6 frame without extension headers to its
// fixed header plus n bytes, with payload_len to match.
func cut6(f []byte, n int) []byte {
	f = bytes.Clone(f[:14+40+n])
	binary.BigEndian.PutUint16(f[18:], uint16(n))
	return f
}

// errShortFrame reports whether err is BPF_PROG_TEST_RUN refusing frame
// for being shorter than an Ethernet header: the kernel rejects such XDP
// input with EINVAL, metadata or not (net/bpf/test_run.c), so the
// parser's bad_eth path cannot be driven from a test run.
func errShortFrame(err error, frame []byte) bool {
	return len(frame) < 14 && errors.Is(err, syscall.EINVAL)
}

// pktCase is one frame through the dataplane and what it must do.
type pktCase struct {
	name    string
	in      string // ingress interface; lan0 when empty
	frame   []byte
	verdict uint32 // with defaults.malformed drop
	out     []byte // expected output frame; nil when it must be unchanged
	pdr     uint32 // PDR that must count the packet; 0 for none
	reason  int    // reason that must count it; bpf.ReasonNone for none
}

// isMalformed reports whether reason is one that defaults.malformed
// decides.
func isMalformed(reason int) bool {
	switch reason {
	case bpf.ReasonBadEth, bpf.ReasonBadVLAN, bpf.ReasonBadIP4, bpf.ReasonBadIHL, bpf.ReasonBadIP4Csum,
		bpf.ReasonBadIP6, bpf.ReasonBadIP6Ext, bpf.ReasonBadL4, bpf.ReasonBadGRE, bpf.ReasonVLANDepth:
		return true
	}
	return false
}

// classified reports whether a packet punted for reason got as far as the
// flow cache: every reason but the parser's.
func classified(reason int) bool {
	return reason == bpf.ReasonNone || reason >= bpf.ReasonNoMatch
}

func verdictName(v uint32) string {
	if int(v) < len(dataplane.VerdictNames) {
		return dataplane.VerdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", v)
}

func reasonName(r int) string {
	if r >= 0 && r < len(dataplane.ReasonNames) {
		return dataplane.ReasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", r)
}

func snap(t testing.TB, h *harness) *dataplane.Snapshot {
	t.Helper()
	s, err := h.dp.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkOne checks that counter want (-1 for none) grew by exactly one
// packet of n bytes between before and after, and no other counter moved.
func checkOne(t *testing.T, kind string, names func(int) string, before, after []dataplane.Counter, want int, n uint64) {
	t.Helper()
	for i := range after {
		dp := after[i].Packets - before[i].Packets
		db := after[i].Bytes - before[i].Bytes
		var wp, wb uint64
		if i == want {
			wp, wb = 1, n
		}
		if dp != wp || db != wb {
			t.Errorf("%s counter %s: +%d packets +%d bytes, want +%d +%d", kind, names(i), dp, db, wp, wb)
		}
	}
}

// checkPDRs checks that PDR want (0 for none) counted one packet of n
// bytes and no other PDR moved.
func checkPDRs(t *testing.T, before, after map[uint32]dataplane.Counter, want uint32, n uint64) {
	t.Helper()
	if _, ok := after[want]; want != 0 && !ok {
		t.Errorf("PDR %d has no counter", want)
	}
	for id, a := range after {
		b := before[id]
		var wp, wb uint64
		if id == want {
			wp, wb = 1, n
		}
		if dp, db := a.Packets-b.Packets, a.Bytes-b.Bytes; dp != wp || db != wb {
			t.Errorf("PDR %d: +%d packets +%d bytes, want +%d +%d", id, dp, db, wp, wb)
		}
	}
}

// checkForwardedFrame decodes a redirected frame with gopacket and checks
// that its IPv4 header checksum, if it has one, verifies.
func checkForwardedFrame(t *testing.T, out []byte) {
	t.Helper()
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		if s := inetSum(ip.Contents); s != 0xffff {
			t.Errorf("output IPv4 header checksum %#04x does not verify (sum %#04x)", ip.Checksum, s)
		}
		return
	}
	if p.Layer(layers.LayerTypeIPv6) == nil {
		t.Errorf("output frame decodes as neither IPv4 nor IPv6: %v", p)
	}
}

// runCase sends c through h and checks verdict, output and counters. With
// malformedPass the harness runs with defaults.malformed pass.
func runCase(t *testing.T, h *harness, c pktCase, malformedPass bool) {
	in := c.in
	if in == "" {
		in = "lan0"
	}
	want := c.verdict
	if malformedPass && isMalformed(c.reason) {
		want = bpf.XDPPass
	}
	wantOut := c.out
	if wantOut == nil || want != bpf.XDPRedirect {
		wantOut = c.frame
	}

	before := snap(t, h)
	got, out, err := h.runErr(c.frame, in, 1)
	if errShortFrame(err, c.frame) {
		t.Logf("%d-byte frame refused by BPF_PROG_TEST_RUN: %v", len(c.frame), err)
		return
	}
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	after := snap(t, h)
	defer func() {
		if t.Failed() {
			t.Logf("input and output frames: %s", writePcap(t, t.Name(), c.frame, out))
		}
	}()

	if got != want {
		t.Errorf("verdict %s, want %s", verdictName(got), verdictName(want))
	}
	if !bytes.Equal(out, wantOut) {
		t.Errorf("output frame\n got %x\nwant %x", out, wantOut)
	}
	if got == bpf.XDPRedirect {
		checkForwardedFrame(t, out)
	}
	n := uint64(len(c.frame))
	checkOne(t, "verdict", func(i int) string { return verdictName(uint32(i)) }, before.Verdicts, after.Verdicts, int(want), n)
	wantReason := c.reason
	if wantReason == bpf.ReasonNone {
		wantReason = -1
	}
	checkOne(t, "reason", reasonName, before.Reasons, after.Reasons, wantReason, n)
	checkPDRs(t, before.PDRs, after.PDRs, c.pdr, n)
	lookups := after.CacheHit + after.CacheMiss - before.CacheHit - before.CacheMiss
	var wantLookups uint64
	if classified(c.reason) {
		wantLookups = 1
	}
	if lookups != wantLookups {
		t.Errorf("%d flow-cache lookups, want %d", lookups, wantLookups)
	}
}

// tableConfig is the rule set of TestPackets. Harness routes: 10.3.0.0/16
// and fd03::/48 via the wan0 neighbour, 10.5.0.0/16 via a next hop on wan1
// without neighbour entry, 10.6.0.0/16 via the wan1 neighbour.
const tableConfig = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
  - {name: wan1, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
  - {id: 3, action: pass}
  - {id: 4, action: redirect, interface: wan1}
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0, proto: udp, dport: 9000-9100}, far: 2}
  - {id: 11, precedence: 11, match: {in: lan0, proto: tcp, sport: 1000-1999}, far: 3}
  - {id: 12, precedence: 12, match: {in: lan0, dscp: 46}, far: 2}
  - {id: 13, precedence: 13, match: {in: lan0, proto: gre, gre_key: 42}, far: 3}
  - {id: 14, precedence: 14, match: {in: wan1, dst: 10.3.0.0/16}, far: 2}
  - {id: 15, precedence: 15, match: {in: lan0, proto: sctp, dport: 3868}, far: 2}
  - {id: 16, precedence: 16, match: {in: lan0, proto: udp, dport: 4500}, far: 3}
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.3.0.0/16}, far: 1}
  # Overlapping prefixes: the lowest precedence value wins, whatever the
  # prefix length.
  - {id: 40, precedence: 50, match: {dst: 172.16.0.0/16}, far: 2}
  - {id: 41, precedence: 40, match: {dst: 172.0.0.0/8}, far: 3}
  - {id: 42, precedence: 30, match: {dst: 172.16.5.0/24}, far: 2}
  # Equal precedence: the lower PDR id wins, whatever the prefix length.
  - {id: 50, precedence: 60, match: {dst: 192.168.1.0/24}, far: 3}
  - {id: 51, precedence: 60, match: {dst: 192.168.0.0/16}, far: 2}
  - {id: 52, precedence: 60, match: {dst: 192.168.2.0/24}, far: 3}
  - {id: 60, precedence: 100, match: {in: lan0, dst: "fd03::/48"}, far: 1}
  - {id: 61, precedence: 90, match: {in: lan0, dst: "fd03:0:0:77::/64"}, far: 2}
  - {id: 62, precedence: 90, match: {in: lan0, dst: "fd03:0:0:99::/64"}, far: 4}
  - {id: 70, precedence: 100, match: {in: lan0, dst: 10.5.0.0/16}, far: 4}
  - {id: 71, precedence: 100, match: {in: lan0, dst: 10.6.0.0/16}, far: 1}
  - {id: 72, precedence: 90, match: {in: lan0, dst: 10.6.1.0/24}, far: 4}
limits: {flows: 4096, rules: 1024}
`

const (
	dst4 = "10.3.1.1"
	dst6 = "fd03::1"
)

// udpLike is 16 bytes that read as a UDP header to port dport: the data
// of a non-first fragment, which must not be taken for one.
func udpLike(dport uint16) []byte {
	b := []byte{0x9c, 0x40, 0, 0, 0, 16, 0, 0, 'n', 'o', 't', ' ', 'u', 'd', 'p', '!'}
	binary.BigEndian.PutUint16(b[2:], dport)
	return b
}

// bigICMP is an n-byte ICMP message body, to make packets of a given
// size (checksum left zero: the fast path does not verify it).
func bigICMP(n int) []byte {
	b := make([]byte, n)
	b[0] = 8 // echo request
	return b
}

// udpFirstFragment returns the first n bytes of a UDP datagram of size
// bytes in total, built by gopacket for the given family and destination:
// the transport part of a first fragment, whose UDP length counts bytes
// that only later fragments carry (RFC 768, RFC 791 section 2.3).
func udpFirstFragment(t testing.TB, six bool, dst string, dport uint16, size, n int) []byte {
	big := func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		return layers.IPProtocolUDP, []gopacket.SerializableLayer{
			&layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(dport)},
			gopacket.Payload(bytes.Repeat([]byte{0xab}, size-8)),
		}
	}
	if six {
		return serialize(t, v6(dst, big)())[14+40:][:n]
	}
	return serialize(t, v4(dst, big)())[14+20:][:n]
}

func moreFragments(ip *layers.IPv4) { ip.Flags = layers.IPv4MoreFragments }

// packetCases is the table of TestPackets.
func packetCases(t *testing.T) []pktCase {
	fwd := func(name string, s spec, egress string, pdr uint32) pktCase {
		return pktCase{name: name, frame: serialize(t, s()), verdict: bpf.XDPRedirect, out: forwarded(t, s, egress), pdr: pdr}
	}
	act := func(name string, s spec, verdict uint32, pdr uint32, reason int) pktCase {
		return pktCase{name: name, frame: serialize(t, s()), verdict: verdict, pdr: pdr, reason: reason}
	}
	from := func(in string, c pktCase) pktCase {
		c.in = in
		c.name += " from " + in
		return c
	}
	const (
		q  = layers.EthernetTypeDot1Q
		ad = layers.EthernetTypeQinQ
	)

	cases := []pktCase{
		// Header combinations.
		fwd("ip4/tcp", v4(dst4, tcpU(40000, 443)), "wan0", 20),
		fwd("ip4/udp", v4(dst4, udpU(40000, 53)), "wan0", 20),
		fwd("ip4/icmp", v4(dst4, icmp4U()), "wan0", 20),
		fwd("ip4/sctp", v4(dst4, sctpU(2905, 2905)), "wan0", 20),
		act("ip4/sctp dport rule", v4(dst4, sctpU(40000, 3868)), bpf.XDPDrop, 15, 0),
		fwd("ip4/gre no key", v4(dst4, greU(layers.GRE{})), "wan0", 20),
		act("ip4/gre key 42", v4(dst4, greU(layers.GRE{KeyPresent: true, Key: 42})), bpf.XDPPass, 13, 0),
		fwd("ip4/gre other key", v4(dst4, greU(layers.GRE{KeyPresent: true, Key: 7})), "wan0", 20),
		act("ip4/gre key 42+seq", v4(dst4, greU(layers.GRE{KeyPresent: true, Key: 42, SeqPresent: true, Seq: 9})), bpf.XDPPass, 13, 0),
		fwd("ip4/gre seq", v4(dst4, greU(layers.GRE{SeqPresent: true, Seq: 9})), "wan0", 20),
		fwd("ip4/gre csum", v4(dst4, greU(layers.GRE{ChecksumPresent: true})), "wan0", 20),
		// The key follows the checksum word when C is set (RFC 2890).
		act("ip4/gre csum+key 42", v4(dst4, greU(layers.GRE{ChecksumPresent: true, KeyPresent: true, Key: 42})), bpf.XDPPass, 13, 0),
		fwd("ip4/gre csum+other key+seq", v4(dst4, greU(layers.GRE{ChecksumPresent: true, KeyPresent: true, Key: 7, SeqPresent: true, Seq: 1})), "wan0", 20),
		// RFC 2784 section 2.5: discard when bits 1-5 are set (routing,
		// strict source route, recursion's high bit) but K and S; the
		// other recursion bits are ignored.
		act("ip4/gre strict source route", v4(dst4, greU(layers.GRE{StrictSourceRoute: true})), bpf.XDPDrop, 0, bpf.ReasonBadGRE),
		act("ip4/gre recursion 4", v4(dst4, greU(layers.GRE{RecursionControl: 4})), bpf.XDPDrop, 0, bpf.ReasonBadGRE),
		fwd("ip4/gre recursion 3", v4(dst4, greU(layers.GRE{RecursionControl: 3})), "wan0", 20),
		act("vlan/802.1q", v4(dst4, udpU(40000, 53), tagged(q)), bpf.XDPPass, 20, bpf.ReasonVLANFwd),
		act("vlan/802.1ad+802.1q", v4(dst4, udpU(40000, 53), tagged(ad, q)), bpf.XDPPass, 20, bpf.ReasonVLANFwd),
		act("vlan/802.1q+802.1q ip6", v6(dst6, tcpU(40000, 443), tagged(q, q)), bpf.XDPPass, 60, bpf.ReasonVLANFwd),
		act("vlan/two tags dport rule", v4(dst4, udpU(40000, 9050), tagged(ad, q)), bpf.XDPDrop, 10, 0),
		// Too deep to classify: defaults.malformed, never the kernel
		// past the rules.
		act("vlan/three tags", v4(dst4, udpU(40000, 53), tagged(ad, q, q)), bpf.XDPDrop, 0, bpf.ReasonVLANDepth),
		fwd("ip6/tcp", v6(dst6, tcpU(40000, 443)), "wan0", 60),
		fwd("ip6/udp", v6(dst6, udpU(40000, 53)), "wan0", 60),
		fwd("ip6/icmpv6", v6(dst6, icmp6U()), "wan0", 60),
		act("ip6/udp dport rule", v6(dst6, udpU(40000, 9050)), bpf.XDPDrop, 10, 0),
		fwd("ip6/hbh+dst+rh+frag tcp", v6(dst6, tcpU(40000, 443), exts(hopByHop, destOpts, routingExt, fragExt(0, false))), "wan0", 60),
		act("ip6/hbh+dst+rh+frag udp dport rule", v6(dst6, udpU(40000, 9050), exts(hopByHop, destOpts, routingExt, fragExt(0, false))), bpf.XDPDrop, 10, 0),
		fwd("ip6/ah udp", v6(dst6, udpU(40000, 53), exts(authExt)), "wan0", 60),
		act("ip6/hbh+ah+dst udp dport rule", v6(dst6, udpU(40000, 9100), exts(hopByHop, authExt, destOpts)), bpf.XDPDrop, 10, 0),
		fwd("ip6/7 ext headers", v6(dst6, udpU(40000, 53), exts(hopByHop, destOpts, routingExt, fragExt(0, false), authExt, destOpts, destOpts)), "wan0", 60),
		// EDGE_MAX_IP6_EXT is 8: eight extension headers are walked, a
		// ninth is too many.
		fwd("ip6/8 ext headers", v6(dst6, udpU(40000, 53), exts(hopByHop, destOpts, routingExt, fragExt(0, false), authExt, destOpts, destOpts, destOpts)), "wan0", 60),
		// Non-first fragments have no transport header: ports 0, so the
		// dport rule 10 cannot match and the /48 rule does.
		fwd("ip6/non-first fragment", v6(dst6, rawU(layers.IPProtocolUDP, udpLike(9050)), exts(fragExt(185, false))), "wan0", 60),
		fwd("ip6/middle fragment", v6(dst6, rawU(layers.IPProtocolUDP, udpLike(9050)), exts(fragExt(370, true))), "wan0", 60),
		// First fragments carry the transport header and are classified
		// on its ports; rule 16 passes UDP 4500 (IPsec NAT traversal,
		// RFC 3948, whose large datagrams are routinely fragmented).
		act("ip6/first fragment udp dport rule", v6(dst6, rawU(layers.IPProtocolUDP, udpFirstFragment(t, true, dst6, 4500, 3000, 1232)), exts(fragExt(0, true))), bpf.XDPPass, 16, 0),
		act("ip6/first fragment tcp sport rule", v6(dst6, tcpU(1500, 443), exts(fragExt(0, true))), bpf.XDPPass, 11, 0),
		fwd("ip4/non-first fragment", v4(dst4, rawU(layers.IPProtocolUDP, udpLike(9050)), edit4(func(ip *layers.IPv4) { ip.FragOffset = 185 })), "wan0", 20),
		fwd("ip4/last fragment", v4(dst4, rawU(layers.IPProtocolUDP, udpLike(9050)), edit4(func(ip *layers.IPv4) { ip.FragOffset = 370 })), "wan0", 20),
		act("ip4/first fragment udp dport rule", v4(dst4, rawU(layers.IPProtocolUDP, udpFirstFragment(t, false, dst4, 4500, 3000, 1480)), edit4(moreFragments)), bpf.XDPPass, 16, 0),
		act("ip4/unfragmented udp dport rule", v4(dst4, udpU(40000, 4500)), bpf.XDPPass, 16, 0),
		act("ip4/first fragment tcp sport rule", v4(dst4, tcpU(1500, 443), edit4(moreFragments)), bpf.XDPPass, 11, 0),
		fwd("ip4/dont-fragment udp", v4(dst4, udpU(40000, 53), edit4(func(ip *layers.IPv4) { ip.Flags = layers.IPv4DontFragment })), "wan0", 20),

		// Port range edges of rule 10 (udp dport 9000-9100) and rule 11
		// (tcp sport 1000-1999).
		act("port/udp dport 9000", v4(dst4, udpU(40000, 9000)), bpf.XDPDrop, 10, 0),
		act("port/udp dport 9100", v4(dst4, udpU(40000, 9100)), bpf.XDPDrop, 10, 0),
		act("port/udp dport 9050", v4(dst4, udpU(40000, 9050)), bpf.XDPDrop, 10, 0),
		fwd("port/udp dport 8999", v4(dst4, udpU(40000, 8999)), "wan0", 20),
		fwd("port/udp dport 9101", v4(dst4, udpU(40000, 9101)), "wan0", 20),
		fwd("port/tcp dport 9050", v4(dst4, tcpU(40000, 9050)), "wan0", 20),
		act("port/tcp sport 1000", v4(dst4, tcpU(1000, 443)), bpf.XDPPass, 11, 0),
		act("port/tcp sport 1999", v4(dst4, tcpU(1999, 443)), bpf.XDPPass, 11, 0),
		act("port/tcp sport 1024", v4(dst4, tcpU(1024, 443)), bpf.XDPPass, 11, 0),
		fwd("port/tcp sport 999", v4(dst4, tcpU(999, 443)), "wan0", 20),
		fwd("port/tcp sport 2000", v4(dst4, tcpU(2000, 443)), "wan0", 20),
		fwd("port/udp sport 1500", v4(dst4, udpU(1500, 53)), "wan0", 20),

		act("dscp/46", v4(dst4, udpU(40000, 53), dscp(46)), bpf.XDPDrop, 12, 0),
		fwd("dscp/45", v4(dst4, udpU(40000, 53), dscp(45)), "wan0", 20),
		fwd("dscp/47", v4(dst4, udpU(40000, 53), dscp(47)), "wan0", 20),
		act("dscp/46 ip6", v6(dst6, udpU(40000, 53), dscp(46)), bpf.XDPDrop, 12, 0),

		// Ingress interface: rule 14 is rule 20's prefix from wan1.
		from("wan1", act("ingress/10.3.1.1", v4(dst4, udpU(40000, 53)), bpf.XDPDrop, 14, 0)),
		from("wan0", act("ingress/10.3.1.1", v4(dst4, udpU(40000, 53)), bpf.XDPPass, 0, bpf.ReasonNoMatch)),

		act("prefix/24 beats 16 and 8", v4("172.16.5.1", udpU(40000, 53)), bpf.XDPDrop, 42, 0),
		act("prefix/8 beats 16", v4("172.16.9.1", udpU(40000, 53)), bpf.XDPPass, 41, 0),
		act("prefix/8 alone", v4("172.20.0.1", udpU(40000, 53)), bpf.XDPPass, 41, 0),
		from("wan1", act("prefix/8 beats 16", v4("172.16.9.1", udpU(40000, 53)), bpf.XDPPass, 41, 0)),
		act("tie/lower id narrower", v4("192.168.1.1", udpU(40000, 53)), bpf.XDPPass, 50, 0),
		act("tie/lower id broader", v4("192.168.2.1", udpU(40000, 53)), bpf.XDPDrop, 51, 0),
		act("tie/single match", v4("192.168.3.1", udpU(40000, 53)), bpf.XDPDrop, 51, 0),
		act("prefix/ip6 /64 beats /48", v6("fd03:0:0:77::1", udpU(40000, 53)), bpf.XDPDrop, 61, 0),
		fwd("prefix/ip6 /48", v6("fd03:0:0:1::1", udpU(40000, 53)), "wan0", 60),

		fwd("fwd/wan1", v4("10.6.1.1", udpU(40000, 53)), "wan1", 72),
		act("fwd/ttl 1", v4(dst4, udpU(40000, 53), ttl(1)), bpf.XDPPass, 20, bpf.ReasonTTL),
		act("fwd/ttl 0", v4(dst4, udpU(40000, 53), ttl(0)), bpf.XDPPass, 20, bpf.ReasonTTL),
		fwd("fwd/ttl 2", v4(dst4, udpU(40000, 53), ttl(2)), "wan0", 20),
		act("fwd/ip6 hop limit 1", v6(dst6, udpU(40000, 53), ttl(1)), bpf.XDPPass, 60, bpf.ReasonTTL),
		// Larger than wan0's 1500-byte MTU: the kernel fragments or sends
		// ICMP (RFC 1191, RFC 8201).
		act("fwd/frag needed", v4(dst4, rawU(layers.IPProtocolICMPv4, bigICMP(1600))), bpf.XDPPass, 20, bpf.ReasonFragNeeded),
		fwd("fwd/exactly mtu", v4(dst4, rawU(layers.IPProtocolICMPv4, bigICMP(1500-20))), "wan0", 20),
		act("fwd/ip6 frag needed", v6(dst6, rawU(layers.IPProtocolICMPv6, bigICMP(1600))), bpf.XDPPass, 60, bpf.ReasonFragNeeded),
		fwd("fwd/ip6 exactly mtu", v6(dst6, rawU(layers.IPProtocolICMPv6, bigICMP(1500-40))), "wan0", 60),
		act("fwd/no neighbour", v4("10.5.1.1", udpU(40000, 53)), bpf.XDPPass, 70, bpf.ReasonNoNeigh),
		// The route to 10.6.2.0 leaves by wan1, rule 71's FAR by wan0.
		act("fwd/route via other interface", v4("10.6.2.1", udpU(40000, 53)), bpf.XDPPass, 71, bpf.ReasonRouteMismatch),
		act("fwd/ip6 route via other interface", v6("fd03:0:0:99::1", udpU(40000, 53)), bpf.XDPPass, 62, bpf.ReasonRouteMismatch),
		act("other/arp", arpRequest, bpf.XDPPass, 0, bpf.ReasonNonIP),
		act("other/no match", v4("10.9.9.9", udpU(40000, 53)), bpf.XDPPass, 0, bpf.ReasonNoMatch),
		act("other/ip6 no match", v6("fd09::1", udpU(40000, 53)), bpf.XDPPass, 0, bpf.ReasonNoMatch),
	}

	// IPv4 options, ihl 6 to 15: a router alert option (RFC 2113) padded
	// with no-operations. The header checksum covers them.
	for ihl := 6; ihl <= 15; ihl++ {
		opts := []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}}
		for i := 4; i < (ihl-5)*4; i++ {
			opts = append(opts, layers.IPv4Option{OptionType: 1})
		}
		s := v4(dst4, udpU(40000, 53), edit4(func(ip *layers.IPv4) { ip.Options = opts }))
		cases = append(cases, fwd(fmt.Sprintf("ip4/options ihl %d", ihl), s, "wan0", 20))
		if ihl == 15 {
			cases = append(cases, act("ip4/options ihl 15 dport rule", v4(dst4, udpU(40000, 9000), edit4(func(ip *layers.IPv4) { ip.Options = opts })), bpf.XDPDrop, 10, 0))
		}
	}
	return append(cases, malformedCases(t)...)
}

// arpRequest is an ARP who-has for lan0's address.
func arpRequest() []gopacket.SerializableLayer {
	return []gopacket.SerializableLayer{
		&layers.Ethernet{SrcMAC: macHostA, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{
			AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
			SourceHwAddress: macHostA, SourceProtAddress: []byte{10, 1, 0, 2},
			DstHwAddress: make([]byte, 6), DstProtAddress: []byte{10, 1, 0, 1},
		},
	}
}

// malformedCases are frames with one defect each, built by damaging a
// valid frame to 10.3.1.1 that rule 20 would redirect.
func malformedCases(t *testing.T) []pktCase {
	bad := func(name string, f []byte, reason int) pktCase {
		return pktCase{name: "malformed/" + name, frame: f, verdict: bpf.XDPDrop, reason: reason}
	}
	mk := func(s spec) []byte { return serialize(t, s()) }
	// edit clones f and applies fn to the clone.
	edit := func(f []byte, fn func(f []byte)) []byte {
		f = bytes.Clone(f)
		fn(f)
		return f
	}
	udp4 := cut4(mk(v4(dst4, udpU(40000, 53))), 8+13)
	tcp4 := cut4(mk(v4(dst4, tcpU(40000, 443))), 20+13)
	icmp4 := mk(v4(dst4, icmp4U()))
	sctp4 := mk(v4(dst4, sctpU(40000, 3868)))
	gre4 := mk(v4(dst4, greU(layers.GRE{})))
	greKey := mk(v4(dst4, greU(layers.GRE{KeyPresent: true, Key: 42})))
	greAll := mk(v4(dst4, greU(layers.GRE{ChecksumPresent: true, KeyPresent: true, Key: 42, SeqPresent: true, Seq: 1})))
	opts8 := mk(v4(dst4, udpU(40000, 53), edit4(func(ip *layers.IPv4) {
		ip.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}}
		for range 8 {
			ip.Options = append(ip.Options, layers.IPv4Option{OptionType: 1})
		}
	})))
	udp6 := cut6(mk(v6(dst6, udpU(40000, 53))), 8+13)
	icmp6 := mk(v6(dst6, icmp6U()))
	tagged1 := mk(v4(dst4, udpU(40000, 53), tagged(layers.EthernetTypeDot1Q)))
	tagged2 := mk(v4(dst4, udpU(40000, 53), tagged(layers.EthernetTypeQinQ, layers.EthernetTypeDot1Q)))
	withExt := func(e ...ext) []byte { return mk(v6(dst6, udpU(40000, 53), exts(e...))) }
	const l4 = 14 + 20 // transport offset in untagged IPv4 frames without options
	const l4v6 = 14 + 40
	nine := []ext{hopByHop, destOpts, routingExt, fragExt(0, false), authExt, destOpts, destOpts, destOpts, destOpts}

	return []pktCase{
		bad("eth/13 bytes", udp4[:13], bpf.ReasonBadEth),
		bad("eth/1 byte", udp4[:1], bpf.ReasonBadEth),
		bad("vlan/truncated tag", tagged1[:14+2], bpf.ReasonBadVLAN),
		bad("vlan/truncated inner tag", tagged2[:14+4+2], bpf.ReasonBadVLAN),
		bad("ip4/truncated header", udp4[:14+10], bpf.ReasonBadIP4),
		bad("ip4/ihl 4", edit(udp4, func(f []byte) { f[14] = 0x44; fixIP4Csum(f, 14) }), bpf.ReasonBadIHL),
		bad("ip4/ihl 0", edit(udp4, func(f []byte) { f[14] = 0x40; fixIP4Csum(f, 14) }), bpf.ReasonBadIHL),
		bad("ip4/ihl past end", edit(udp4[:14+20+8], func(f []byte) { f[14] = 0x4f; binary.BigEndian.PutUint16(f[16:], 28) }), bpf.ReasonBadIHL),
		bad("ip4/tot_len past end", edit(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[16:], uint16(len(f)-14+1)); fixIP4Csum(f, 14) }), bpf.ReasonBadIP4),
		bad("ip4/tot_len below ihl", edit(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[16:], 19); fixIP4Csum(f, 14) }), bpf.ReasonBadIP4),
		bad("ip4/bad checksum", edit(udp4, func(f []byte) { f[14+10] ^= 0x5a }), bpf.ReasonBadIP4Csum),
		bad("ip4/bad checksum over options", edit(opts8, func(f []byte) { f[14+20+6] ^= 0x80 }), bpf.ReasonBadIP4Csum),
		bad("ip4/version 6", edit(udp4, func(f []byte) { f[14] = 0x65; fixIP4Csum(f, 14) }), bpf.ReasonBadIP4),
		bad("ip6/version 4", edit(udp6, func(f []byte) { f[14] = 0x40 }), bpf.ReasonBadIP6),
		bad("ip6/truncated header", udp6[:14+30], bpf.ReasonBadIP6),
		bad("ip6/payload_len past end", edit(udp6, func(f []byte) { binary.BigEndian.PutUint16(f[18:], uint16(len(f)-l4v6+1)) }), bpf.ReasonBadIP6),
		bad("ip6/payload_len 0", edit(udp6, func(f []byte) { binary.BigEndian.PutUint16(f[18:], 0) }), bpf.ReasonBadIP6),
		bad("ip6/truncated hop-by-hop", edit(withExt(hopByHop), func(f []byte) { f[l4v6+1] = 20 }), bpf.ReasonBadIP6Ext),
		bad("ip6/truncated routing", edit(withExt(hopByHop, routingExt), func(f []byte) { f[l4v6+8+1] = 30 }), bpf.ReasonBadIP6Ext),
		bad("ip6/truncated ah", edit(withExt(authExt), func(f []byte) { f[l4v6+1] = 60 }), bpf.ReasonBadIP6Ext),
		bad("ip6/truncated fragment header", edit(cut6(udp6, 4), func(f []byte) { f[14+6] = byte(layers.IPProtocolIPv6Fragment) }), bpf.ReasonBadIP6Ext),
		bad("ip6/9 ext headers", withExt(nine...), bpf.ReasonBadIP6Ext),
		bad("tcp/truncated", cut4(tcp4, 10), bpf.ReasonBadL4),
		bad("tcp/doff 4", edit(tcp4, func(f []byte) { f[l4+12] = 4 << 4 }), bpf.ReasonBadL4),
		bad("tcp/doff 0", edit(tcp4, func(f []byte) { f[l4+12] = 0 }), bpf.ReasonBadL4),
		bad("tcp/doff past end", edit(tcp4, func(f []byte) { f[l4+12] = 15 << 4 }), bpf.ReasonBadL4),
		bad("udp/truncated", cut4(udp4, 6), bpf.ReasonBadL4),
		bad("udp/len 7", edit(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[l4+4:], 7) }), bpf.ReasonBadL4),
		bad("udp/len 0", edit(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[l4+4:], 0) }), bpf.ReasonBadL4),
		bad("udp/len past end", edit(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[l4+4:], uint16(len(f)-l4+1)) }), bpf.ReasonBadL4),
		bad("udp/ip6 truncated", cut6(udp6, 6), bpf.ReasonBadL4),
		bad("udp/ip6 len past end", edit(udp6, func(f []byte) { binary.BigEndian.PutUint16(f[l4v6+4:], uint16(len(f)-l4v6+1)) }), bpf.ReasonBadL4),
		bad("icmp/truncated", cut4(icmp4, 7), bpf.ReasonBadL4),
		bad("icmp/ip6 truncated", cut6(icmp6, 4), bpf.ReasonBadL4),
		bad("sctp/truncated", cut4(sctp4, 8), bpf.ReasonBadL4),
		bad("gre/truncated", cut4(gre4, 2), bpf.ReasonBadGRE),
		bad("gre/truncated key", cut4(greKey, 6), bpf.ReasonBadGRE),
		bad("gre/truncated seq", cut4(greAll, 14), bpf.ReasonBadGRE),
		bad("gre/version 1", edit(gre4, func(f []byte) { f[l4+1] |= 1 }), bpf.ReasonBadGRE),
		bad("gre/version 7", edit(gre4, func(f []byte) { f[l4+1] |= 7 }), bpf.ReasonBadGRE),
		bad("gre/routing bit", edit(gre4, func(f []byte) { f[l4] |= 0x40 }), bpf.ReasonBadGRE),
		// The IP header bounds the transport header, not the frame: bytes
		// after tot_len / payload_len are link-layer padding (RFC 791
		// section 3.1, RFC 8200 section 3), which the kernel trims before
		// the transport layer sees the packet.
		bad("udp/len past tot_len into padding", edit(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[16:], 20+8); fixIP4Csum(f, 14) }), bpf.ReasonBadL4),
		bad("tcp/header after tot_len", edit(tcp4, func(f []byte) { binary.BigEndian.PutUint16(f[16:], 20); fixIP4Csum(f, 14) }), bpf.ReasonBadL4),
		bad("udp/ip6 len past payload_len into padding", edit(udp6, func(f []byte) { binary.BigEndian.PutUint16(f[18:], 8) }), bpf.ReasonBadL4),
		bad("ip6/hop-by-hop past payload_len", edit(withExt(hopByHop), func(f []byte) { binary.BigEndian.PutUint16(f[18:], 4) }), bpf.ReasonBadIP6Ext),
	}
}

// TestPackets runs every case of packetCases once with defaults.malformed
// left at its default, drop, and once with pass.
func TestPackets(t *testing.T) {
	cases := packetCases(t)
	for _, v := range []struct {
		name, defaults string
		pass           bool
	}{
		{"malformed=drop", "", false},
		{"malformed=pass", "defaults: {malformed: pass}\n", true},
	} {
		h := newHarness(t, tableConfig+v.defaults)
		t.Run(v.name, func(t *testing.T) {
			seen := map[string]bool{}
			for _, c := range cases {
				if seen[c.name] {
					t.Fatalf("duplicate case name %q", c.name)
				}
				seen[c.name] = true
				t.Run(c.name, func(t *testing.T) { runCase(t, h, c, v.pass) })
			}
		})
	}
	t.Logf("%d cases, each with defaults.malformed drop and pass", len(cases))
}

// TestNoMatchDrop checks defaults.no_match: drop.
func TestNoMatchDrop(t *testing.T) {
	h := newHarness(t, tableConfig+"defaults: {no_match: drop}\n")
	for _, c := range []pktCase{
		{name: "ip4", frame: serialize(t, v4("10.9.9.9", udpU(40000, 53))()), verdict: bpf.XDPDrop, reason: bpf.ReasonNoMatch},
		{name: "ip6", frame: serialize(t, v6("fd09::1", udpU(40000, 53))()), verdict: bpf.XDPDrop, reason: bpf.ReasonNoMatch},
		{name: "ip4 from wan0", in: "wan0", frame: serialize(t, v4(dst4, udpU(40000, 53))()), verdict: bpf.XDPDrop, reason: bpf.ReasonNoMatch},
		{name: "arp still passes", frame: serialize(t, arpRequest()), verdict: bpf.XDPPass, reason: bpf.ReasonNonIP},
		{name: "match still redirects", frame: serialize(t, v4(dst4, udpU(40000, 53))()), verdict: bpf.XDPRedirect,
			out: forwarded(t, v4(dst4, udpU(40000, 53)), "wan0"), pdr: 20},
	} {
		t.Run(c.name, func(t *testing.T) { runCase(t, h, c, false) })
	}
}

// TestFlowCacheGeneration checks that a flow's second packet is a cache
// hit redirected with the cached next hop, that a later packet of the flow
// too large for the egress MTU is still punted, and that committing a new
// config makes cached decisions misses: an entry carries the generation it
// was classified under.
func TestFlowCacheGeneration(t *testing.T) {
	const rulesFmt = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
pdrs:
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.3.0.0/16}, far: %d}
limits: {flows: 1024, rules: 64}
`
	h := newHarness(t, fmt.Sprintf(rulesFmt, 1))
	// Two sizes of one flow: same addresses, protocol and ports.
	small := v4(dst4, udpU(40000, 53))
	big := v4(dst4, func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		return layers.IPProtocolUDP, []gopacket.SerializableLayer{
			&layers.UDP{SrcPort: 40000, DstPort: 53},
			gopacket.Payload(make([]byte, 1600)),
		}
	})

	step := func(name string, s spec, verdict uint32, reason int, hit, miss uint64) {
		t.Helper()
		frame := serialize(t, s())
		before := snap(t, h)
		got, out, err := h.runErr(frame, "lan0", 1)
		if err != nil {
			t.Fatal(err)
		}
		after := snap(t, h)
		if got != verdict {
			t.Errorf("%s: verdict %s, want %s", name, verdictName(got), verdictName(verdict))
		}
		if want := forwarded(t, s, "wan0"); verdict == bpf.XDPRedirect && !bytes.Equal(out, want) {
			t.Errorf("%s: output\n got %x\nwant %x", name, out, want)
		}
		if reason != bpf.ReasonNone {
			if d := after.Reasons[reason].Packets - before.Reasons[reason].Packets; d != 1 {
				t.Errorf("%s: reason %s +%d, want +1", name, reasonName(reason), d)
			}
		}
		if d := after.CacheHit - before.CacheHit; d != hit {
			t.Errorf("%s: cache hits +%d, want +%d", name, d, hit)
		}
		if d := after.CacheMiss - before.CacheMiss; d != miss {
			t.Errorf("%s: cache misses +%d, want +%d", name, d, miss)
		}
		n := uint64(len(frame))
		if d := after.PDRs[20].Packets - before.PDRs[20].Packets; d != 1 {
			t.Errorf("%s: PDR 20 +%d packets, want +1", name, d)
		}
		if d := after.PDRs[20].Bytes - before.PDRs[20].Bytes; d != n {
			t.Errorf("%s: PDR 20 +%d bytes, want +%d", name, d, n)
		}
		if t.Failed() {
			t.Logf("frames: %s", writePcap(t, t.Name()+"_"+name, frame, out))
		}
	}

	step("first packet", small, bpf.XDPRedirect, bpf.ReasonNone, 0, 1)
	step("second packet, admitted", small, bpf.XDPRedirect, bpf.ReasonNone, 0, 1)
	step("third packet", small, bpf.XDPRedirect, bpf.ReasonNone, 1, 0)
	step("larger than the mtu", big, bpf.XDPPass, bpf.ReasonFragNeeded, 1, 0)
	step("small again", small, bpf.XDPRedirect, bpf.ReasonNone, 1, 0)
	cfg, err := yamlcfg.Parse([]byte(fmt.Sprintf(rulesFmt, 2)))
	if err != nil {
		t.Fatal(err)
	}
	h.apply(cfg)
	step("after commit", small, bpf.XDPDrop, bpf.ReasonNone, 0, 1)
	step("after commit again", small, bpf.XDPDrop, bpf.ReasonNone, 1, 0)
}

// TestManyRulesAgainstReference classifies random packets against 2,000
// generated rules and compares every verdict and PDR counter with a
// brute-force classifier: among the rules whose prefix holds the
// destination, the lowest (precedence, id) wins.
func TestManyRulesAgainstReference(t *testing.T) {
	const (
		nRules   = 2000
		nPackets = 200
		seed     = 20240917
	)
	rng := rand.New(rand.NewPCG(seed, seed))
	type rule struct {
		id, prec uint32
		pfx      netip.Prefix
		drop     bool
	}
	// Mostly /24s inside 10.128.0.0/13, drawn with repeats so some share a
	// prefix, plus /20s and /16s over 10.128.0.0/12 that overlap them:
	// with random precedences the broader rule often wins.
	precs := rng.Perm(nRules * 10)
	rules := make([]rule, nRules)
	var y strings.Builder
	y.WriteString(`
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: drop}
  - {id: 2, action: pass}
limits: {flows: 4096, rules: 4096}
pdrs:
`)
	for i := range rules {
		var a [4]byte
		bits := 24
		switch {
		case i < 1800:
			a = [4]byte{10, byte(128 + rng.IntN(8)), byte(rng.IntN(256)), 0}
		case i < 1990:
			a = [4]byte{10, byte(128 + rng.IntN(16)), byte(rng.IntN(16) << 4), 0}
			bits = 20
		default:
			a = [4]byte{10, byte(128 + rng.IntN(16)), 0, 0}
			bits = 16
		}
		r := rule{id: uint32(1000 + i), prec: uint32(precs[i]), pfx: netip.PrefixFrom(netip.AddrFrom4(a), bits), drop: rng.IntN(2) == 0}
		rules[i] = r
		far := 2
		if r.drop {
			far = 1
		}
		fmt.Fprintf(&y, "  - {id: %d, precedence: %d, match: {in: lan0, dst: %s}, far: %d}\n", r.id, r.prec, r.pfx, far)
	}
	h := newHarness(t, y.String())

	best := func(dst netip.Addr) *rule {
		var b *rule
		for i := range rules {
			r := &rules[i]
			if r.pfx.Contains(dst) && (b == nil || r.prec < b.prec || (r.prec == b.prec && r.id < b.id)) {
				b = r
			}
		}
		return b
	}

	want := map[uint32]uint64{}
	var wantNoMatch uint64
	before := snap(t, h)
	for i := range nPackets {
		// One packet in ten from 10.144.0.0/12, where no rule is.
		second := 128 + rng.IntN(16)
		if i%10 == 9 {
			second += 16
		}
		dst := netip.AddrFrom4([4]byte{10, byte(second), byte(rng.IntN(256)), byte(1 + rng.IntN(254))})
		frame := serialize(t, v4(dst.String(), udpU(uint16(10000+i), 53))())
		got, out, err := h.runErr(frame, "lan0", 1)
		if err != nil {
			t.Fatal(err)
		}
		ref := best(dst)
		wantV, what := uint32(bpf.XDPPass), "no match"
		switch {
		case ref == nil:
			wantNoMatch++
		case ref.drop:
			wantV, what = bpf.XDPDrop, fmt.Sprintf("PDR %d (%s, precedence %d, drop)", ref.id, ref.pfx, ref.prec)
		default:
			what = fmt.Sprintf("PDR %d (%s, precedence %d, pass)", ref.id, ref.pfx, ref.prec)
		}
		if ref != nil {
			want[ref.id]++
		}
		if got != wantV {
			t.Errorf("packet to %s: verdict %s, reference says %s: %s", dst, verdictName(got), verdictName(wantV), what)
			t.Logf("frames: %s", writePcap(t, fmt.Sprintf("%s_%s", t.Name(), dst), frame, out))
		}
	}
	after := snap(t, h)
	for _, r := range rules {
		if got := after.PDRs[r.id].Packets - before.PDRs[r.id].Packets; got != want[r.id] {
			t.Errorf("PDR %d (%s, precedence %d): +%d packets, reference says +%d", r.id, r.pfx, r.prec, got, want[r.id])
		}
	}
	if got := after.Reasons[bpf.ReasonNoMatch].Packets - before.Reasons[bpf.ReasonNoMatch].Packets; got != wantNoMatch {
		t.Errorf("no_match +%d packets, reference says +%d", got, wantNoMatch)
	}
	t.Logf("%d rules, %d packets, %d matched, %d distinct winners", nRules, nPackets, nPackets-int(wantNoMatch), len(want))
}
