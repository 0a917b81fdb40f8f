// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestExperiment(t *testing.T) {
	h := newHarness(t, `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
  - {name: wan1, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: redirect, interface: wan1}
pdrs:
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.0.0.0/8}, far: 1}
  - {id: 21, precedence: 100, match: {in: lan0, dst: fd03::/48}, far: 2}
limits: {flows: 1024, rules: 1024}
`)
	for _, dst := range []net.IP{{10, 3, 1, 1}, {10, 6, 1, 1}, {10, 5, 1, 1}, {10, 7, 1, 1}, net.ParseIP("fd03::1")} {
		buf := gopacket.NewSerializeBuffer()
		var l3 gopacket.SerializableLayer
		udp := &layers.UDP{SrcPort: 1234, DstPort: 80}
		et := layers.EthernetTypeIPv4
		if dst.To4() != nil {
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 1, 0, 2}, DstIP: dst}
			udp.SetNetworkLayerForChecksum(ip)
			l3 = ip
		} else {
			et = layers.EthernetTypeIPv6
			ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: net.ParseIP("fd01::2"), DstIP: dst}
			udp.SetNetworkLayerForChecksum(ip)
			l3 = ip
		}
		gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			&layers.Ethernet{SrcMAC: macHostA, DstMAC: macLan0, EthernetType: et}, l3, udp, gopacket.Payload([]byte("hello")))
		before := h.snapshot()
		v, out := h.run(buf.Bytes(), "lan0")
		after := h.snapshot()
		for i := range after.Reasons {
			if d := after.Reasons[i].Packets - before.Reasons[i].Packets; d != 0 {
				t.Logf("%v: reason %s +%d", dst, "x"+string(rune('a'+i)), d)
			}
		}
		t.Logf("%v: verdict %d in %d out %d %x", dst, v, len(buf.Bytes()), len(out), out)
	}
}
