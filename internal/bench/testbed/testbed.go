// SPDX-License-Identifier: Apache-2.0

// Package testbed is the gateway the bench's per-packet and end-to-end
// parts both set up: its GRE overlay's config and addresses, the frames
// they send through it, next hops shared as an agent shares them, and
// per-CPU counters summed.
package testbed

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// GREConfig is gateway A of a GRE overlay in the PacketNS: traffic for
// 10.7.0.0/16 goes into a keyed GRE path toward 10.3.9.9 (routed via
// wan0's neighbour), and GRE from that remote to our WAN address is
// decapsulated (path 1's probes signed, path 2's not). 10.8.0.0/16 and
// 10.9.0.0/16 are steered over that path
// and a second one (toward 10.3.9.8), per flow (active-standby) and per
// packet (wrr); the benchmark gives both groups' tables to the first
// path only, so every run makes the same frame. 10.10.0.0/16 goes over
// path 1 and a third path out of wan1 (toward 10.6.9.9) at once
// (redundant).
const GREConfig = `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}, {name: wan1, role: wan}]
paths:
  - {id: 1, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.3.9.9, key: 1, monitor: {secret: 5ec7e70102030405060708090a0b0c0d}}
  - {id: 2, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.3.9.8, key: 2, monitor: {insecure: true}}
  - {id: 3, type: gre, interface: wan1, local: 10.4.0.1, remote: 10.6.9.9, key: 3, monitor: {insecure: true}}
fars:
  - {id: 1, action: encap, path: 1}
  - {id: 2, action: decap}
  - {id: 3, action: encap, path: 2}
  - {id: 4, action: steer, lbr: 1}
  - {id: 5, action: steer, lbr: 2}
  - {id: 6, action: encap, path: 3}
  - {id: 7, action: steer, lbr: 3}
lbrs:
  - {id: 1, algorithm: active-standby, members: [{far: 1}, {far: 3}]}
  - {id: 2, algorithm: wrr, members: [{far: 1}, {far: 3}]}
  - {id: 3, algorithm: redundant, members: [{far: 1}, {far: 6}]}
pdrs:
  - {id: 1, precedence: 1, match: {dst: 10.7.0.0/16}, far: 1}
  - {id: 2, precedence: 2, match: {proto: gre, dst: 10.2.0.1}, far: 2}
  - {id: 3, precedence: 1, match: {dst: 10.8.0.0/16}, far: 4}
  - {id: 4, precedence: 1, match: {dst: 10.9.0.0/16}, far: 5}
  - {id: 5, precedence: 1, match: {dst: 10.10.0.0/16}, far: 7}
limits: {flows: 65536, rules: 1024}
`

// Addresses of the GRE figures.
var (
	GRELocal  = netip.MustParseAddr("10.2.0.1")
	GRERemote = netip.MustParseAddr("10.3.9.9")
	GREKey    = uint32(1)
	// GRERemote2 and GREKey2 are path 2's (insecure: probes unsigned).
	GRERemote2 = netip.MustParseAddr("10.3.9.8")
	GREKey2    = uint32(2)
	EncapDst   = netip.MustParseAddr("10.7.0.1")
	SteerDst   = netip.MustParseAddr("10.8.0.1")
	WRRDst     = netip.MustParseAddr("10.9.0.1")
	DupDst     = netip.MustParseAddr("10.10.0.1")
	// DupRemote is the redundant group's second path's remote (wan1).
	DupRemote = netip.MustParseAddr("10.6.9.9")
	HostA     = netip.MustParseAddr(topo.AddrHostA)
)

// ShareNextHops lets flows share next hops by destination as an agent's
// FIB watcher would in the calling thread's namespace: the benchmark's
// namespaces route by destination alone, and one that does not is an
// error, not a slower figure.
func ShareNextHops(dp *loader.Dataplane) error {
	ok, why, err := dp.ScanRouting()
	if err == nil && !ok {
		err = fmt.Errorf("routing in the benchmark's namespace depends on more than the destination: %s", why)
	}
	return err
}

// UDPFrame is a 64-byte Ethernet/IPv4/UDP frame from host A on lan0.
func UDPFrame(src, dst netip.Addr, dport uint16) []byte {
	return FrameTTL(src, dst, dport, 64, topo.MACHostA, topo.MACLan0)
}

// FrameTTL is a 64-byte Ethernet/IPv4/UDP frame with the given TTL and
// MACs, from UDP port 40000.
func FrameTTL(src, dst netip.Addr, dport uint16, ttl uint8, smac, dmac net.HardwareAddr) []byte {
	return FrameFrom(src, 40000, dst, dport, ttl, smac, dmac)
}

// FrameFrom is FrameTTL from the given UDP port.
func FrameFrom(src netip.Addr, sport uint16, dst netip.Addr, dport uint16, ttl uint8, smac, dmac net.HardwareAddr) []byte {
	ip := &layers.IPv4{Version: 4, TTL: ttl, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	_ = udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4}
	payload := make([]byte, 64-14-20-8)
	_ = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(payload))
	return buf.Bytes()
}

// GREFrame wraps inner (an Ethernet frame) into Ethernet + IPv4 (DF, TTL
// 64) + GRE with key from src to dst.
func GREFrame(smac, dmac net.HardwareAddr, src, dst netip.Addr, key uint32, inner []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolGRE, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	gre := &layers.GRE{KeyPresent: true, Key: key, Protocol: layers.EthernetTypeIPv4}
	buf := gopacket.NewSerializeBuffer()
	_ = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, gre, gopacket.Payload(inner[14:]))
	return buf.Bytes()
}

// SumCounter sums per-CPU counter key of m.
func SumCounter(m *ebpf.Map, key uint32) (uint64, error) {
	var vals []uint64
	if err := m.Lookup(key, &vals); err != nil {
		return 0, fmt.Errorf("read %s: %w", m, err)
	}
	var sum uint64
	for _, v := range vals {
		sum += v
	}
	return sum, nil
}

// GTPUFrame is a G-PDU from gnb to n3 (UDP 2152 both ends; IPv4: DF,
// TTL 64; IPv6: hop limit 64, the UDP checksum), TEID teid, with a PDU
// Session Container (UL PDU SESSION INFORMATION) carrying qfi, around
// inner (an Ethernet frame: its IP packet).
func GTPUFrame(smac, dmac net.HardwareAddr, gnb, n3 netip.Addr, teid uint32, qfi uint8, inner []byte) []byte {
	g := make([]byte, 16, 16+len(inner)-14)
	g[0], g[1] = 0x34, 255
	binary.BigEndian.PutUint16(g[2:], uint16(8+len(inner)-14))
	binary.BigEndian.PutUint32(g[4:], teid)
	g[11] = 0x85
	g[12], g[13], g[14] = 1, 0x10, qfi
	g = append(g, inner[14:]...)
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4}
	var ip gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	if gnb.Is6() {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: gnb.AsSlice(), DstIP: n3.AsSlice()}
		ip, nl = ip6, ip6
	} else {
		ip4 := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
			SrcIP: gnb.AsSlice(), DstIP: n3.AsSlice()}
		ip, nl = ip4, ip4
	}
	udp := &layers.UDP{SrcPort: 2152, DstPort: 2152}
	_ = udp.SetNetworkLayerForChecksum(nl)
	buf := gopacket.NewSerializeBuffer()
	_ = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(g))
	return buf.Bytes()
}

// GTPUSession is a session's record as the agent compiles it for UE
// ue: uplink by the TEID the user plane chose for it (ul, naming its
// slot) or by one the SMF chose (smf, 0: none), decapsulated toward N6;
// downlink to its address encapsulated toward gnb's TEID dl with qfi
// (over IPv6 for an IPv6 gnb).
func GTPUSession(ul, smf, dl uint32, qfi uint8, ue, gnb netip.Addr) (*bpf.Sess, commit.SessionKeys) {
	r := &bpf.Sess{Npdr: 2, Own: bpf.BE32(ul)}
	r.Pdr[0] = bpf.SessPDR{Prec: 100, Flags: bpf.SessUL | bpf.SessRemove | bpf.SessAny, Teid: bpf.BE32(ul), Action: bpf.SessForw, Qfi: qfi}
	r.Pdr[1] = bpf.SessPDR{Prec: 100, Flags: bpf.SessUEIP | bpf.SessOHC | bpf.SessAny, Ueip: bpf.Addr4(ue), Action: bpf.SessForw,
		Qfi: qfi, OhcTeid: bpf.BE32(dl), Cnt: 1}
	if gnb.Is6() {
		// Toward an IPv6 gNB: the record's first IPv6 peer.
		r.Pdr[1].Ohc6, r.Peer6[0] = 1, gnb.As16()
	} else {
		r.Pdr[1].OhcAddr = bpf.Addr4(gnb)
	}
	keys := commit.SessionKeys{TEIDs: []uint32{ul}, UEs: []netip.Addr{ue}}
	if smf != 0 {
		r.Pdr[2] = r.Pdr[0]
		r.Pdr[2].Teid, r.Pdr[2].Cnt = bpf.BE32(smf), 2
		r.Npdr = 3
		keys.TEIDs = append(keys.TEIDs, smf)
	}
	return r, keys
}
