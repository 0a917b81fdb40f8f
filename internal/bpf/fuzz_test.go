// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// fuzzConfig redirects everything from lan0 to wan0 and drops malformed
// packets: any redirect of a malformed frame is then the parser's fault.
const fuzzConfig = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
  - {name: wan1, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
pdrs:
  - {id: 1, precedence: 10, match: {in: lan0, dst: "fd03::/48"}, far: 1}
  - {id: 2, precedence: 100, match: {in: lan0}, far: 1}
defaults: {malformed: drop}
limits: {flows: 65536, rules: 64}
`

// maxFuzzFrame is the longest frame tried: an Ethernet frame with two VLAN
// tags. Longer test-run input would not fit the linear XDP buffer.
const maxFuzzFrame = 1514 + 8

// FuzzNoMalformedRedirect feeds arbitrary frames from lan0 to a dataplane
// that redirects every packet it accepts, and checks that it redirects only
// well-formed packets, and those exactly as a router must: MACs rewritten,
// TTL or hop limit one lower, IPv4 checksum valid. It never aborts.
//
//	go test -run XXX -fuzz FuzzNoMalformedRedirect -fuzztime 30s ./internal/bpf/
//
// Add -fuzzminimizetime 2s for steadier throughput: by default the engine
// spends up to a minute minimizing each input that finds new coverage,
// and executes nothing else meanwhile.
func FuzzNoMalformedRedirect(f *testing.F) {
	h := newHarness(f, fuzzConfig)
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) > maxFuzzFrame {
			return
		}
		checkNoMalformedRedirect(t, h, frame)
		// The fuzzer gets no coverage from inside the BPF program, and a
		// random change to an IPv4 header almost never keeps its checksum
		// right: also try the frame with the checksum repaired, so changes
		// reach the checks behind it.
		if fixed, ok := withIP4Checksum(frame); ok {
			checkNoMalformedRedirect(t, h, fixed)
		}
	})
}

func fuzzSeeds(t testing.TB) [][]byte {
	valid := [][]byte{
		serialize(t, v4("10.3.1.1", udpU(40000, 53))()),
		serialize(t, v6("fd03::1", tcpU(40000, 443))()),
		serialize(t, v4("10.3.1.1", udpU(40000, 53), tagged(layers.EthernetTypeDot1Q))()),
		serialize(t, v4("10.3.1.1", greU(layers.GRE{ChecksumPresent: true, KeyPresent: true, Key: 42, SeqPresent: true, Seq: 1}))()),
		serialize(t, v4("10.3.1.1", tcpU(40000, 443), edit4(func(ip *layers.IPv4) {
			ip.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}, {OptionType: 1}, {OptionType: 0}}
		}))()),
		serialize(t, v4("10.3.1.1", icmp4U())()),
		serialize(t, v4("10.3.1.1", sctpU(40000, 3868))()),
		serialize(t, v4("10.3.1.1", rawU(layers.IPProtocolUDP, udpLike(53)), edit4(func(ip *layers.IPv4) { ip.FragOffset = 185 }))()),
		serialize(t, v6("fd03::1", udpU(40000, 53), exts(hopByHop, destOpts, routingExt, fragExt(0, false), authExt))()),
		serialize(t, v6("fd03::1", rawU(layers.IPProtocolUDP, udpLike(53)), exts(fragExt(185, true)))()),
		serialize(t, v6("fd03::1", icmp6U())()),
		serialize(t, arpRequest()),
	}
	seeds := append([][]byte(nil), valid...)
	for _, v := range valid[:4] {
		for _, n := range []int{13, 14, 20, 33, 38, 40, 53, len(v) - 1} {
			if n < len(v) {
				seeds = append(seeds, v[:n])
			}
		}
	}
	return seeds
}

// withIP4Checksum returns frame with its IPv4 header checksum made right,
// if it is an untagged IPv4 frame whose header fits and it was wrong.
func withIP4Checksum(frame []byte) ([]byte, bool) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != uint16(layers.EthernetTypeIPv4) {
		return nil, false
	}
	ihl := int(frame[14] & 0x0f)
	if ihl < 5 || 14+ihl*4 > len(frame) || inetSum(frame[14:14+ihl*4]) == 0xffff {
		return nil, false
	}
	fixed := bytes.Clone(frame)
	fixIP4Csum(fixed, 14)
	return fixed, true
}

// checkNoMalformedRedirect runs frame from lan0 and checks the verdict
// against wellFormed and, for a redirect, the frame sent on.
func checkNoMalformedRedirect(t *testing.T, h *harness, frame []byte) {
	t.Helper()
	// Decoded whatever the verdict: the oracle mirrors the parser, so its
	// coverage steers the fuzzer towards the parser's deeper paths.
	info, malformed := wellFormed(frame)
	got, out, err := h.runErr(frame, "lan0", 1)
	if errShortFrame(err, frame) {
		return
	}
	if err != nil {
		t.Fatalf("run %d-byte frame: %v", len(frame), err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("input and output frames: %s", writePcap(t, t.Name(), frame, out))
		}
	}()
	switch got {
	case bpf.XDPDrop, bpf.XDPPass:
		if !bytes.Equal(out, frame) {
			t.Fatalf("%s changed the frame\n in %x\nout %x", verdictName(got), frame, out)
		}
	case bpf.XDPRedirect:
		if malformed != nil {
			t.Fatalf("redirected a malformed frame: %v\n%x", malformed, frame)
		}
		want := bytes.Clone(frame)
		copy(want[0:6], macWanNeigh)
		copy(want[6:12], macWan0)
		if info.v4 {
			want[14+8]--
			fixIP4Csum(want, 14)
		} else {
			want[14+7]--
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("redirected frame\n got %x\nwant %x", out, want)
		}
		if info.v4 {
			if s := inetSum(out[14 : 14+info.ihl*4]); s != 0xffff {
				t.Fatalf("redirected IPv4 header checksum does not verify (sum %#04x)", s)
			}
		}
	default:
		t.Fatalf("verdict %s", verdictName(got))
	}
}

// l3Info describes a well-formed frame's network header.
type l3Info struct {
	v4  bool
	ihl int // IPv4 header length in 32-bit words
}

// truncFeedback records gopacket's truncation reports.
type truncFeedback struct{ truncated bool }

func (f *truncFeedback) SetTruncated() { f.truncated = true }

var errTruncated = errors.New("truncated")

// decode runs gopacket's decoder of l over b and fails on errors and on
// truncation.
func decode(l gopacket.DecodingLayer, b []byte) error {
	var fb truncFeedback
	if err := l.DecodeFromBytes(b, &fb); err != nil {
		return err
	}
	if fb.truncated {
		return errTruncated
	}
	return nil
}

// maxIP6Ext mirrors EDGE_MAX_IP6_EXT: more extension headers are
// malformed.
const maxIP6Ext = 8

// wellFormed decides, independently of the dataplane, whether frame is one
// the dataplane may forward: an untagged Ethernet frame with a complete
// IPv4 or IPv6 packet whose transport header, unless it is a non-first
// fragment, is complete inside the IP packet. It decodes layer by layer
// with gopacket and adds what gopacket does not check (versions, the IPv4
// header checksum, the ICMP minimum of 8 bytes, the extension-header
// limit). It returns a non-nil error saying what is wrong otherwise.
func wellFormed(frame []byte) (l3Info, error) {
	var eth layers.Ethernet
	if err := decode(&eth, frame); err != nil {
		return l3Info{}, fmt.Errorf("ethernet: %w", err)
	}
	switch eth.EthernetType {
	case layers.EthernetTypeIPv4:
		return wellFormed4(eth.Payload)
	case layers.EthernetTypeIPv6:
		return wellFormed6(eth.Payload)
	}
	return l3Info{}, fmt.Errorf("ethertype %v: not an untagged IP packet", eth.EthernetType)
}

func wellFormed4(b []byte) (l3Info, error) {
	if len(b) < 20 {
		return l3Info{}, fmt.Errorf("ipv4: %d-byte header", len(b))
	}
	ihl := int(b[0] & 0x0f)
	// gopacket parses option TLVs strictly; the dataplane checks ihl and
	// the checksum but, like the kernel's fast paths, not option contents.
	// Blank the options (End of Option List) before decoding.
	c := bytes.Clone(b)
	clear(c[20:min(max(ihl*4, 20), len(c))])
	var ip layers.IPv4
	if err := decode(&ip, c); err != nil {
		return l3Info{}, fmt.Errorf("ipv4: %w", err)
	}
	switch {
	case ip.Version != 4:
		return l3Info{}, fmt.Errorf("ipv4: version %d", ip.Version)
	case int(binary.BigEndian.Uint16(b[2:])) < ihl*4:
		// gopacket reads tot_len 0 as "segmentation offload, use the
		// buffer"; on the wire it is malformed.
		return l3Info{}, fmt.Errorf("ipv4: tot_len %d below header length", binary.BigEndian.Uint16(b[2:]))
	case inetSum(b[:ihl*4]) != 0xffff:
		return l3Info{}, errors.New("ipv4: header checksum")
	}
	info := l3Info{v4: true, ihl: ihl}
	if ip.FragOffset != 0 {
		return info, nil // non-first fragment: no transport header
	}
	return info, wellFormedL4(ip.Protocol, ip.Payload, ip.Flags&layers.IPv4MoreFragments != 0)
}

func wellFormed6(b []byte) (l3Info, error) {
	if len(b) < 40 {
		return l3Info{}, fmt.Errorf("ipv6: %d-byte header", len(b))
	}
	// gopacket's IPv6 decoder also parses a hop-by-hop header's options;
	// present it with No Next Header so it decodes only the fixed header,
	// and walk the extension headers below by their lengths, as a router
	// does.
	c := bytes.Clone(b)
	c[6] = byte(layers.IPProtocolNoNextHeader)
	var ip layers.IPv6
	if err := decode(&ip, c); err != nil {
		return l3Info{}, fmt.Errorf("ipv6: %w", err)
	}
	if ip.Version != 6 {
		return l3Info{}, fmt.Errorf("ipv6: version %d", ip.Version)
	}
	nh, pl, first := layers.IPProtocol(b[6]), ip.Payload, false
	for n := 0; ; n++ {
		switch nh {
		case layers.IPProtocolIPv6HopByHop, layers.IPProtocolIPv6Routing, layers.IPProtocolIPv6Destination,
			layers.IPProtocolAH, layers.IPProtocolIPv6Fragment:
			if n == maxIP6Ext {
				return l3Info{}, fmt.Errorf("ipv6: more than %d extension headers", maxIP6Ext)
			}
		}
		switch nh {
		case layers.IPProtocolIPv6HopByHop, layers.IPProtocolIPv6Routing, layers.IPProtocolIPv6Destination:
			var e layers.IPv6ExtensionSkipper
			if err := decode(&e, pl); err != nil {
				return l3Info{}, fmt.Errorf("ipv6 %v header: %w", nh, err)
			}
			nh, pl = e.NextHeader, e.Payload
		case layers.IPProtocolAH:
			// RFC 4302 section 2.2: Payload Len is the length in 4-byte
			// units minus 2. gopacket's AH decoder needs a packet builder.
			if len(pl) < 2 || len(pl) < (int(pl[1])+2)*4 {
				return l3Info{}, errors.New("ipv6 AH header: truncated")
			}
			nh, pl = layers.IPProtocol(pl[0]), pl[(int(pl[1])+2)*4:]
		case layers.IPProtocolIPv6Fragment:
			if len(pl) < 8 {
				return l3Info{}, errors.New("ipv6 fragment header: truncated")
			}
			offset, more := binary.BigEndian.Uint16(pl[2:])>>3, pl[3]&1 != 0
			nh, pl = layers.IPProtocol(pl[0]), pl[8:]
			if offset != 0 {
				return l3Info{}, nil // non-first fragment: no transport header
			}
			first = more
		default:
			return l3Info{}, wellFormedL4(nh, pl, first)
		}
	}
}

// wellFormedL4 checks that the transport header of protocol proto is
// complete in the IP payload pl. In a first fragment a UDP length counts
// bytes the later fragments carry.
func wellFormedL4(proto layers.IPProtocol, pl []byte, firstFragment bool) error {
	switch proto {
	case layers.IPProtocolTCP:
		// As for IPv4, blank the options: only the data offset matters.
		c := bytes.Clone(pl)
		if len(c) >= 20 {
			clear(c[20:min(max(int(c[12]>>4)*4, 20), len(c))])
		}
		var tcp layers.TCP
		if err := decode(&tcp, c); err != nil {
			return fmt.Errorf("tcp: %w", err)
		}
	case layers.IPProtocolUDP:
		var udp layers.UDP
		var fb truncFeedback
		if err := udp.DecodeFromBytes(pl, &fb); err != nil {
			return fmt.Errorf("udp: %w", err)
		}
		// gopacket reads length 0 as an IPv6 jumbogram (RFC 2675), which
		// needs a jumbo payload option no Ethernet frame carries.
		if udp.Length < 8 {
			return fmt.Errorf("udp: length %d", udp.Length)
		}
		if fb.truncated && !firstFragment {
			return fmt.Errorf("udp: length %d past the IP payload of %d bytes", udp.Length, len(pl))
		}
	case layers.IPProtocolICMPv4:
		var icmp layers.ICMPv4
		if err := decode(&icmp, pl); err != nil {
			return fmt.Errorf("icmp: %w", err)
		}
	case layers.IPProtocolICMPv6:
		var icmp layers.ICMPv6
		if err := decode(&icmp, pl); err != nil {
			return fmt.Errorf("icmpv6: %w", err)
		}
		// gopacket wants 4 bytes; type, code, checksum and the 4-byte
		// rest of header make 8 (RFC 4443 section 2.1).
		if len(pl) < 8 {
			return fmt.Errorf("icmpv6: %d bytes", len(pl))
		}
	case layers.IPProtocolSCTP:
		var sctp layers.SCTP
		if err := decode(&sctp, pl); err != nil {
			return fmt.Errorf("sctp: %w", err)
		}
	case layers.IPProtocolGRE:
		// gopacket's GRE decoder reads without bounds checks; check the
		// lengths here (RFC 2784, RFC 2890) before handing it the header.
		if len(pl) < 4 {
			return errors.New("gre: truncated")
		}
		flags := binary.BigEndian.Uint16(pl)
		if flags&0x0007 != 0 {
			return fmt.Errorf("gre: version %d", flags&7)
		}
		if flags&0x4000 != 0 {
			return errors.New("gre: routing present (RFC 1701)")
		}
		n := 4
		for _, bit := range []uint16{0x8000, 0x2000, 0x1000} {
			if flags&bit != 0 {
				n += 4
			}
		}
		if len(pl) < n {
			return fmt.Errorf("gre: %d bytes, header needs %d", len(pl), n)
		}
		var g layers.GRE
		c := bytes.Clone(pl[:n])
		c[1] &^= 0x80 // the acknowledgment bit is version 1's (RFC 2637)
		if err := decode(&g, c); err != nil {
			return fmt.Errorf("gre: %w", err)
		}
	}
	return nil
}
