// SPDX-License-Identifier: Apache-2.0

package icmptest

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// XDP verdicts (enum xdp_action).
const (
	xdpDrop = 1
	xdpTX   = 3
)

var (
	macClient = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x0a}
	macGW     = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
)

const (
	client4 = "192.0.2.10"
	server4 = "198.51.100.20"
	gw4     = "192.0.2.1"
	client6 = "2001:db8:1::10"
	server6 = "2001:db8:2::20"
	gw6     = "2001:db8:1::1"
)

// cfg is what the test program reads from its volatile const globals.
type cfg struct {
	mtu  uint32
	src4 string
	src6 string
}

var defCfg = cfg{mtu: 1400, src4: gw4, src6: gw6}

// progs are the test programs of one build of test_icmp.bpf.c.
type progs struct {
	TooBig4 *ebpf.Program `ebpf:"test_too_big4"`
	TooBig6 *ebpf.Program `ebpf:"test_too_big6"`
}

// builds are the two builds of the test program: clang's default CPU, and
// -mcpu=v3 as the dataplane is compiled.
var builds = []struct {
	name string
	spec func() (*ebpf.CollectionSpec, error)
}{
	{"default", loadIcmptest},
	{"v3", loadIcmptestv3},
}

type loadKey struct {
	build string
	cfg   cfg
}

// loaded caches the programs per build and cfg: loading verifies both
// programs, which dominates the run time.
var (
	loadedMu sync.Mutex
	loaded   = map[loadKey]*progs{}
)

func load(t *testing.T, build int, c cfg) *progs {
	t.Helper()
	testutil.RequireRoot(t)
	loadedMu.Lock()
	defer loadedMu.Unlock()
	key := loadKey{builds[build].name, c}
	if p, ok := loaded[key]; ok {
		return p
	}
	spec, err := builds[build].spec()
	if err != nil {
		t.Fatalf("load spec: %v", err)
	}
	var src4 [4]byte
	var src6 [16]byte
	copy(src4[:], net.ParseIP(c.src4).To4())
	copy(src6[:], net.ParseIP(c.src6).To16())
	for name, v := range map[string]any{"icmp_mtu": c.mtu, "icmp_src4": src4, "icmp_src6": src6} {
		if err := spec.Variables[name].Set(v); err != nil {
			t.Fatalf("set %s: %v", name, err)
		}
	}
	p := &progs{}
	opts := &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}}
	if err := spec.LoadAndAssign(p, opts); err != nil {
		// Again with the whole verifier log, to say why.
		opts.Programs.LogLevel = ebpf.LogLevelBranch
		if err := spec.LoadAndAssign(&progs{}, opts); err != nil {
			var ve *ebpf.VerifierError
			if errors.As(err, &ve) {
				t.Fatalf("load: %+v", ve)
			}
			t.Fatalf("load: %v", err)
		}
		t.Fatalf("load: %v", err)
	}
	t.Logf("verifier, %s build: test_too_big4: %s; test_too_big6: %s", key.build,
		lastLine(p.TooBig4.VerifierLog), lastLine(p.TooBig6.VerifierLog))
	loaded[key] = p
	return p
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, p := range loaded {
		p.TooBig4.Close()
		p.TooBig6.Close()
	}
	os.Exit(code)
}

// run passes frame through prog and returns the verdict and the frame as
// the program left it.
func run(t *testing.T, prog *ebpf.Program, frame []byte) (uint32, []byte) {
	t.Helper()
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	ret, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

func serialize(t *testing.T, opts gopacket.SerializeOptions, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

var fix = gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}

// pattern is n recognisable payload bytes.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

func ip4(proto layers.IPProtocol, src, dst string) *layers.IPv4 {
	return &layers.IPv4{
		Version: 4, IHL: 5, TTL: 63, Id: 0x1234, Flags: layers.IPv4DontFragment,
		Protocol: proto, SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4(),
	}
}

func ip6(next layers.IPProtocol, src, dst string) *layers.IPv6 {
	return &layers.IPv6{
		Version: 6, TrafficClass: 0x28, FlowLabel: 0x12345, HopLimit: 63,
		NextHeader: next, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst),
	}
}

func udp(nl gopacket.NetworkLayer) *layers.UDP {
	u := &layers.UDP{SrcPort: 40000, DstPort: 50000}
	_ = u.SetNetworkLayerForChecksum(nl)
	return u
}

func tcp(nl gopacket.NetworkLayer) *layers.TCP {
	tc := &layers.TCP{SrcPort: 40000, DstPort: 443, Seq: 0x01020304, Ack: 0x0a0b0c0d,
		ACK: true, PSH: true, Window: 512}
	_ = tc.SetNetworkLayerForChecksum(nl)
	return tc
}

// frame builds Ethernet + ip + upper, with a pattern payload that makes
// the IP packet size bytes long.
func frame(t *testing.T, size int, ip gopacket.NetworkLayer, upper ...gopacket.SerializableLayer) []byte {
	t.Helper()
	et := layers.EthernetTypeIPv4
	if _, ok := ip.(*layers.IPv6); ok {
		et = layers.EthernetTypeIPv6
	}
	ls := append([]gopacket.SerializableLayer{
		&layers.Ethernet{SrcMAC: macClient, DstMAC: macGW, EthernetType: et},
		ip.(gopacket.SerializableLayer),
	}, upper...)
	f := serialize(t, fix, ls...)
	if pad := size - ipLen(f); pad > 0 {
		f = serialize(t, fix, append(ls, gopacket.Payload(pattern(pad)))...)
	}
	if ipLen(f) != size {
		t.Fatalf("built a %d-byte IP packet, want %d", ipLen(f), size)
	}
	return f
}

// ipLen is the IP packet length its header gives.
func ipLen(f []byte) int {
	if binary.BigEndian.Uint16(f[12:]) == uint16(layers.EthernetTypeIPv6) {
		return 40 + int(binary.BigEndian.Uint16(f[18:]))
	}
	return int(binary.BigEndian.Uint16(f[16:]))
}

// ext is one IPv6 extension header; chain fills in its next-header byte.
type ext struct {
	kind layers.IPProtocol
	b    []byte
}

// ext6 is a hop-by-hop, routing or destination options header of
// (units+1)*8 bytes, padded with a PadN option.
func ext6(kind layers.IPProtocol, units int) ext {
	b := make([]byte, 8*(units+1))
	b[1] = byte(units)
	b[2] = 1 // PadN
	b[3] = byte(len(b) - 4)
	return ext{kind, b}
}

// frag6 is an IPv6 fragment header.
func frag6(offset uint16, more bool) ext {
	b := make([]byte, 8)
	fo := offset << 3
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(b[2:], fo)
	binary.BigEndian.PutUint32(b[4:], 0xcafe)
	return ext{layers.IPProtocolIPv6Fragment, b}
}

// chain links exts between ip and an upper layer of protocol upper and
// returns them as layers to serialize after ip.
func chain(ip *layers.IPv6, upper layers.IPProtocol, exts []ext) []gopacket.SerializableLayer {
	ip.NextHeader = upper
	var ls []gopacket.SerializableLayer
	for i, e := range exts {
		if i == 0 {
			ip.NextHeader = e.kind
		}
		b := append([]byte(nil), e.b...)
		b[0] = byte(upper)
		if i+1 < len(exts) {
			b[0] = byte(exts[i+1].kind)
		}
		ls = append(ls, gopacket.Payload(b))
	}
	return ls
}

// want4 builds, with gopacket alone, the ICMP fragmentation needed that
// answers the IPv4 frame in.
func want4(t *testing.T, in []byte, c cfg) []byte {
	t.Helper()
	p := gopacket.NewPacket(in, layers.LayerTypeEthernet, gopacket.Default)
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	q := int(ip.IHL)*4 + 8 // RFC 792: IP header + 64 bits of data
	if q > int(ip.Length) {
		q = int(ip.Length)
	}
	return serialize(t, fix,
		&layers.Ethernet{SrcMAC: eth.DstMAC, DstMAC: eth.SrcMAC, EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, IHL: 5, TOS: 0xc0, TTL: 64, Protocol: layers.IPProtocolICMPv4,
			SrcIP: net.ParseIP(c.src4).To4(), DstIP: ip.SrcIP},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable,
			layers.ICMPv4CodeFragmentationNeeded), Seq: uint16(c.mtu)},
		gopacket.Payload(in[14:14+q]))
}

// want6 builds, with gopacket alone, the ICMPv6 packet too big that
// answers the IPv6 frame in.
func want6(t *testing.T, in []byte, c cfg) []byte {
	t.Helper()
	p := gopacket.NewPacket(in, layers.LayerTypeEthernet, gopacket.Default)
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	q := 40 + int(ip.Length)
	if q > 1280-40-8 { // RFC 4443 2.4(c): the error fits the minimum MTU
		q = 1280 - 40 - 8
	}
	rip := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 64,
		SrcIP: net.ParseIP(c.src6), DstIP: ip.SrcIP}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0)}
	_ = ic.SetNetworkLayerForChecksum(rip)
	body := binary.BigEndian.AppendUint32(nil, c.mtu)
	return serialize(t, fix,
		&layers.Ethernet{SrcMAC: eth.DstMAC, DstMAC: eth.SrcMAC, EthernetType: layers.EthernetTypeIPv6},
		rip, ic, gopacket.Payload(append(body, in[14:14+q]...)))
}

// checkDecodes decodes out with gopacket and serializes the decoded layers
// again with checksums computed: the bytes must not change, so every
// checksum in out is valid.
func checkDecodes(t *testing.T, out []byte) {
	t.Helper()
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil {
		t.Fatalf("no Ethernet layer: %v", p)
	}
	var again []byte
	if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		ic, ok := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if !ok {
			t.Fatalf("no ICMPv4 layer: %v", p)
		}
		if ic.TypeCode.Type() != 3 || ic.TypeCode.Code() != 4 {
			t.Errorf("ICMP %v, want destination unreachable / fragmentation needed", ic.TypeCode)
		}
		again = serialize(t, gopacket.SerializeOptions{ComputeChecksums: true},
			eth, ip, ic, gopacket.Payload(ic.Payload))
	} else if ip, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		ic, ok := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		if !ok {
			t.Fatalf("no ICMPv6 layer: %v", p)
		}
		if ic.TypeCode.Type() != 2 || ic.TypeCode.Code() != 0 {
			t.Errorf("ICMPv6 %v, want packet too big", ic.TypeCode)
		}
		if len(ip.Contents)+len(ip.Payload) > 1280 {
			t.Errorf("ICMPv6 error of %d bytes, more than the minimum MTU", len(ip.Contents)+len(ip.Payload))
		}
		_ = ic.SetNetworkLayerForChecksum(ip)
		again = serialize(t, gopacket.SerializeOptions{ComputeChecksums: true},
			eth, ip, ic, gopacket.Payload(ic.Payload))
	} else {
		t.Fatalf("neither IPv4 nor IPv6: %v", p)
	}
	if !bytes.Equal(again, out) {
		t.Errorf("checksums do not verify:\n got %x\nwant %x", out, again)
	}
}

// writePcap saves frames for a failing case so it can be opened in
// Wireshark; returns the path.
func writePcap(t *testing.T, path string, frames ...[]byte) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("pcap: %v", err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatalf("pcap: %v", err)
	}
	for _, fr := range frames {
		if err := w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(fr), Length: len(fr)}, fr); err != nil {
			t.Fatalf("pcap: %v", err)
		}
	}
	return path
}

func failPcap(t *testing.T, frames ...[]byte) string {
	dir := os.Getenv("EDGE_PCAP_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return writePcap(t, filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+".pcap"), frames...)
}

type icmpCase struct {
	name string
	six  bool   // run through test_too_big6, else test_too_big4
	in   []byte // input frame
	c    *cfg   // nil: defCfg
	tx   bool   // answered (XDP_TX), else refused (XDP_DROP)
}

func cases(t *testing.T) []icmpCase {
	v4 := func(proto layers.IPProtocol, edit func(*layers.IPv4)) *layers.IPv4 {
		ip := ip4(proto, client4, server4)
		if edit != nil {
			edit(ip)
		}
		return ip
	}
	v6 := func(next layers.IPProtocol, src string) *layers.IPv6 { return ip6(next, src, server6) }
	udp4 := func(size int, edit func(*layers.IPv4)) []byte {
		ip := v4(layers.IPProtocolUDP, edit)
		return frame(t, size, ip, udp(ip))
	}
	udp6 := func(size int, src string, exts ...ext) []byte {
		ip := v6(layers.IPProtocolUDP, src)
		ls := chain(ip, layers.IPProtocolUDP, exts)
		return frame(t, size, ip, append(ls, udp(ip))...)
	}
	icmp4 := func(typ, code uint8, edit func(*layers.IPv4)) []byte {
		ip := v4(layers.IPProtocolICMPv4, edit)
		return frame(t, 600, ip, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Id: 7, Seq: 1})
	}
	icmp6 := func(typ uint8, exts ...ext) []byte {
		ip := v6(layers.IPProtocolICMPv6, client6)
		ls := chain(ip, layers.IPProtocolICMPv6, exts)
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
		_ = ic.SetNetworkLayerForChecksum(ip)
		return frame(t, 1400, ip, append(ls, ic, gopacket.Payload(make([]byte, 4)))...)
	}
	ipOpts := func(ip *layers.IPv4) {
		ip.Options = []layers.IPv4Option{
			{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}},        // router alert
			{OptionType: 7, OptionLength: 7, OptionData: []byte{4, 0, 0, 0, 0}}, // record route
			{OptionType: 0, OptionLength: 1},                                    // end of list
		}
	}
	trunc := func(f []byte, n int) []byte { return f[:len(f)-n] }
	lowMTU4 := &cfg{mtu: 67, src4: gw4, src6: gw6}
	lowMTU6 := &cfg{mtu: 1279, src4: gw4, src6: gw6}
	noSrc := &cfg{mtu: 1400, src4: "0.0.0.0", src6: "::"}
	bigMTU4 := &cfg{mtu: 70000, src4: gw4, src6: gw6}
	tcp4 := v4(layers.IPProtocolTCP, nil)
	tcp6 := v6(layers.IPProtocolTCP, client6)
	tiny4 := v4(253, nil) // experimental protocol: 5 bytes of payload, no UDP length to honour
	rawUDP6 := v6(layers.IPProtocolUDP, client6)
	proto59 := v6(layers.IPProtocolNoNextHeader, client6)
	padded := append(udp4(100, nil), make([]byte, 30)...) // Ethernet trailer past tot_len

	return []icmpCase{
		// Answered.
		{name: "ip4 udp 1400", in: udp4(1400, nil), tx: true},
		{name: "ip4 udp 1400 options", in: udp4(1400, ipOpts), tx: true},
		{name: "ip4 tcp 1400", in: frame(t, 1400, tcp4, tcp(tcp4)), tx: true},
		{name: "ip4 udp no DF", in: udp4(1400, func(ip *layers.IPv4) { ip.Flags = 0 }), tx: true},
		{name: "ip4 first fragment", in: udp4(1400, func(ip *layers.IPv4) { ip.Flags = layers.IPv4MoreFragments }), tx: true},
		{name: "ip4 echo request", in: icmp4(8, 0, nil), tx: true},
		{name: "ip4 5-byte payload", in: frame(t, 25, tiny4, gopacket.Payload(pattern(5))), tx: true},
		{name: "ip4 ethernet trailer", in: padded, tx: true},
		{name: "ip4 mtu clamped", in: udp4(1400, nil), c: bigMTU4, tx: true},
		{name: "ip6 udp 1400", six: true, in: udp6(1400, client6), tx: true},
		{name: "ip6 udp 200", six: true, in: udp6(200, client6), tx: true},
		{name: "ip6 udp 201", six: true, in: udp6(201, client6), tx: true},
		{name: "ip6 udp 202", six: true, in: udp6(202, client6), tx: true},
		{name: "ip6 udp 203", six: true, in: udp6(203, client6), tx: true},
		{name: "ip6 udp 1272", six: true, in: udp6(1272, client6), tx: true},
		{name: "ip6 udp 1233", six: true, in: udp6(1233, client6), tx: true},
		{name: "ip6 tcp 1400", six: true, in: frame(t, 1400, tcp6, tcp(tcp6)), tx: true},
		{name: "ip6 hop-by-hop dstopts udp 1400", six: true,
			in: udp6(1400, client6, ext6(layers.IPProtocolIPv6HopByHop, 0), ext6(layers.IPProtocolIPv6Destination, 1)), tx: true},
		{name: "ip6 first fragment", six: true,
			in: udp6(1400, client6, frag6(0, true)), tx: true},
		{name: "ip6 echo request", six: true, in: icmp6(128), tx: true},
		{name: "ip6 echo request behind dstopts", six: true, in: icmp6(128, ext6(layers.IPProtocolIPv6Destination, 0)), tx: true},
		{name: "ip6 no next header", six: true, in: frame(t, 1400, proto59, gopacket.Payload(pattern(1360))), tx: true},

		// Refused.
		{name: "ip4 icmp dest unreachable", in: icmp4(3, 1, nil)},
		{name: "ip4 icmp frag needed", in: icmp4(3, 4, nil)},
		{name: "ip4 icmp source quench", in: icmp4(4, 0, nil)},
		{name: "ip4 icmp redirect", in: icmp4(5, 1, nil)},
		{name: "ip4 icmp time exceeded", in: icmp4(11, 0, nil)},
		{name: "ip4 icmp parameter problem", in: icmp4(12, 0, nil)},
		{name: "ip4 icmp unassigned type", in: icmp4(42, 0, nil)},
		{name: "ip4 non-first fragment", in: udp4(1400, func(ip *layers.IPv4) { ip.FragOffset = 185 })},
		{name: "ip4 last fragment", in: udp4(1400, func(ip *layers.IPv4) { ip.Flags = 0; ip.FragOffset = 1 })},
		{name: "ip4 multicast source", in: udp4(1400, func(ip *layers.IPv4) { ip.SrcIP = net.IPv4(224, 0, 0, 5).To4() })},
		{name: "ip4 broadcast source", in: udp4(1400, func(ip *layers.IPv4) { ip.SrcIP = net.IPv4bcast.To4() })},
		{name: "ip4 unspecified source", in: udp4(1400, func(ip *layers.IPv4) { ip.SrcIP = net.IPv4zero.To4() })},
		{name: "ip4 loopback source", in: udp4(1400, func(ip *layers.IPv4) { ip.SrcIP = net.IPv4(127, 0, 0, 1).To4() })},
		{name: "ip4 reserved source", in: udp4(1400, func(ip *layers.IPv4) { ip.SrcIP = net.IPv4(240, 1, 2, 3).To4() })},
		{name: "ip4 multicast destination", in: udp4(1400, func(ip *layers.IPv4) { ip.DstIP = net.IPv4(239, 1, 1, 1).To4() })},
		{name: "ip4 broadcast destination", in: udp4(1400, func(ip *layers.IPv4) { ip.DstIP = net.IPv4bcast.To4() })},
		{name: "ip4 link-layer broadcast", in: ethDst(udp4(1400, nil), layers.EthernetBroadcast)},
		{name: "ip4 truncated", in: trunc(udp4(1400, nil), 1)},
		{name: "ip4 truncated header", in: udp4(1400, nil)[:14+19]},
		{name: "ip4 ethernet only", in: udp4(1400, nil)[:14]},
		{name: "ip4 ihl 4", in: setByte(udp4(1400, nil), 14, 0x44)},
		{name: "ip4 version 6", in: setByte(udp4(1400, nil), 14, 0x65)},
		{name: "ip4 tot_len below ihl", in: setU16(udp4(1400, nil), 16, 19)},
		{name: "ip4 options past frame", in: setByte(udp4(1400, nil)[:14+28], 14, 0x4f)},
		{name: "ip4 icmp without type", in: frame(t, 20, v4(layers.IPProtocolICMPv4, nil))},
		{name: "ip4 mtu below 68", in: udp4(1400, nil), c: lowMTU4},
		{name: "ip4 no source address", in: udp4(1400, nil), c: noSrc},
		{name: "ip4 frame to ip6 program", six: true, in: udp4(1400, nil)},
		{name: "ip6 icmp dest unreachable", six: true, in: icmp6(1)},
		{name: "ip6 icmp packet too big", six: true, in: icmp6(2)},
		{name: "ip6 icmp time exceeded", six: true, in: icmp6(3)},
		{name: "ip6 icmp error behind hop-by-hop", six: true, in: icmp6(1, ext6(layers.IPProtocolIPv6HopByHop, 0))},
		{name: "ip6 non-first fragment", six: true, in: udp6(1400, client6, frag6(100, true))},
		{name: "ip6 last fragment", six: true, in: udp6(1400, client6, frag6(100, false))},
		{name: "ip6 non-first fragment behind hop-by-hop", six: true,
			in: udp6(1400, client6, ext6(layers.IPProtocolIPv6HopByHop, 0), frag6(100, true))},
		{name: "ip6 multicast source", six: true, in: udp6(1400, "ff02::1")},
		{name: "ip6 unspecified source", six: true, in: udp6(1400, "::")},
		{name: "ip6 loopback source", six: true, in: udp6(1400, "::1")},
		{name: "ip6 nine extension headers", six: true, in: udp6(1400, client6, nineExts()...)},
		{name: "ip6 truncated", six: true, in: trunc(udp6(1400, client6), 1)},
		{name: "ip6 truncated header", six: true, in: udp6(1400, client6)[:14+39]},
		{name: "ip6 extension header past payload", six: true,
			in: setU16(udp6(1400, client6, ext6(layers.IPProtocolIPv6HopByHop, 0)), 18, 4)},
		{name: "ip6 jumbo payload length 0", six: true, in: setU16(udp6(1400, client6), 18, 0)},
		{name: "ip6 version 4", six: true, in: setByte(udp6(1400, client6), 14, 0x42)},
		{name: "ip6 udp header only in frame", six: true, in: frame(t, 48, rawUDP6, udp(rawUDP6))[:14+40]},
		{name: "ip6 mtu below 1280", six: true, in: udp6(1400, client6), c: lowMTU6},
		{name: "ip6 no source address", six: true, in: udp6(1400, client6), c: noSrc},
		{name: "ip6 frame to ip4 program", in: udp6(1400, client6)},
	}
}

func nineExts() []ext {
	var e []ext
	for range 9 {
		e = append(e, ext6(layers.IPProtocolIPv6Destination, 0))
	}
	return e
}

func ethDst(f []byte, mac net.HardwareAddr) []byte { copy(f[0:6], mac); return f }
func setByte(f []byte, off int, v byte) []byte     { f[off] = v; return f }
func setU16(f []byte, off int, v uint16) []byte {
	binary.BigEndian.PutUint16(f[off:], v)
	return f
}

func TestICMPTooBig(t *testing.T) {
	testutil.RequireRoot(t)
	for b := range builds {
		t.Run(builds[b].name, func(t *testing.T) {
			for _, c := range cases(t) {
				t.Run(c.name, func(t *testing.T) { runCase(t, b, c) })
			}
		})
	}
}

func runCase(t *testing.T, build int, c icmpCase) {
	cf := defCfg
	if c.c != nil {
		cf = *c.c
	}
	p := load(t, build, cf)
	prog := p.TooBig4
	if c.six {
		prog = p.TooBig6
	}
	in := append([]byte(nil), c.in...)
	ret, out := run(t, prog, in)
	if !c.tx {
		if ret != xdpDrop {
			t.Fatalf("verdict %d, want XDP_DROP (pcap %s)", ret, failPcap(t, c.in, out))
		}
		return
	}
	if ret != xdpTX {
		t.Fatalf("verdict %d, want XDP_TX (pcap %s)", ret, failPcap(t, c.in))
	}
	want4or6 := want4
	if c.six {
		want4or6 = want6
	}
	want := want4or6(t, c.in, clampMTU(cf, c.six))
	if !bytes.Equal(out, want) {
		t.Errorf("reply differs (pcap %s)\n got %s\nwant %s", failPcap(t, c.in, out, want),
			hex.EncodeToString(out), hex.EncodeToString(want))
	}
	checkDecodes(t, out)
}

// clampMTU is c with the MTU an IPv4 reply can carry in its 16-bit field.
func clampMTU(c cfg, six bool) cfg {
	if !six && c.mtu > 0xffff {
		c.mtu = 0xffff
	}
	return c
}

// TestTshark has Wireshark's dissectors check one reply of each family:
// the right message, and every checksum good.
func TestTshark(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "tshark")
	p := load(t, len(builds)-1, defCfg)
	ip := ip4(layers.IPProtocolUDP, client4, server4)
	ret4, out4 := run(t, p.TooBig4, frame(t, 1400, ip, udp(ip)))
	ip6 := ip6(layers.IPProtocolUDP, client6, server6)
	ret6, out6 := run(t, p.TooBig6, frame(t, 1400, ip6, udp(ip6)))
	if ret4 != xdpTX || ret6 != xdpTX {
		t.Fatalf("verdicts %d, %d, want XDP_TX", ret4, ret6)
	}
	pcap := writePcap(t, filepath.Join(t.TempDir(), "replies.pcap"), out4, out6)
	cmd := exec.Command("tshark", "-r", pcap, "-V",
		"-o", "ip.check_checksum:TRUE",
		"-o", "udp.check_checksum:TRUE",
		"-o", "tcp.check_checksum:TRUE")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, b)
	}
	text := string(b)
	for _, want := range []string{
		"Type: 3 (Destination unreachable)",
		"Code: 4 (Fragmentation needed)",
		"MTU of next hop: 1400",
		"Type: Packet Too Big (2)",
		"MTU: 1400",
		"Header checksum status: Good",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("tshark output lacks %q", want)
		}
	}
	if n := strings.Count(text, "[Checksum Status: Good]"); n < 2 {
		t.Errorf("tshark verified %d ICMP checksums, want 2", n)
	}
	for _, bad := range []string{"Malformed", "Bad", "incorrect", "Expert Info (Error", "Expert Info (Warning"} {
		if strings.Contains(text, bad) {
			t.Errorf("tshark output has %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("tshark output:\n%s", text)
	}
}
