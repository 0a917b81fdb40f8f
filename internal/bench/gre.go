// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// greConfig is gateway A of a GRE overlay in the PacketNS: traffic for
// 10.7.0.0/16 goes into a keyed GRE path toward 10.3.9.9 (routed via
// wan0's neighbour), and GRE from that remote to our WAN address is
// decapsulated (path 1's probes signed, path 2's not). 10.8.0.0/16 and
// 10.9.0.0/16 are steered over that path
// and a second one (toward 10.3.9.8), per flow (active-standby) and per
// packet (wrr); the benchmark gives both groups' tables to the first
// path only, so every run makes the same frame. 10.10.0.0/16 goes over
// path 1 and a third path out of wan1 (toward 10.6.9.9) at once
// (redundant).
const greConfig = `
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
	greLocal  = netip.MustParseAddr("10.2.0.1")
	greRemote = netip.MustParseAddr("10.3.9.9")
	greKey    = uint32(1)
	// greRemote2 and greKey2 are path 2's (insecure: probes unsigned).
	greRemote2 = netip.MustParseAddr("10.3.9.8")
	greKey2    = uint32(2)
	encapDst   = netip.MustParseAddr("10.7.0.1")
	steerDst   = netip.MustParseAddr("10.8.0.1")
	wrrDst     = netip.MustParseAddr("10.9.0.1")
	dupDst     = netip.MustParseAddr("10.10.0.1")
	// dupRemote is the redundant group's second path's remote (wan1).
	dupRemote = netip.MustParseAddr("10.6.9.9")
	hostA     = netip.MustParseAddr(topo.AddrHostA)
)

const methodResize = "wrapper saves the first 56 bytes, runs the pipeline, moves data back by the length change (bpf_xdp_adjust_head) and restores the saved bytes " +
	"(Ethernet, inner TTL and checksum; for decap also the outer headers), so every repeat sees the same frame; " +
	"undo cost = mean of the wrapper alone without and with an adjust_head pair (the helper does the same work in both directions), subtracted, floor added"

// measureGRE adds the encap and decap figures: flow-cache hits through a
// keyed GRE path, IPv4 inside, timed through the resize wrappers.
func (b *bencher) measureGRE(r *Report, dp *bpf.Dataplane, progs *wrappers, alloc rules.Allocs) error {
	// Decap forwards the inner packet by the FIB toward host A on lan0;
	// nothing answers ARP in the namespace, so the neighbour is static.
	if err := b.ns.SetNeigh("lan0", topo.AddrHostA, topo.MACHostA); err != nil {
		return err
	}
	cfg, err := yamlcfg.Parse([]byte(greConfig))
	if err != nil {
		return fmt.Errorf("gre config: %w", err)
	}
	gen, _, err := rules.Compile(cfg, b.ns.Resolve, alloc, dp.Limits)
	if err != nil {
		return fmt.Errorf("compile gre config: %w", err)
	}
	// In the namespace: a redundant group's devmap names its interfaces.
	if err := b.ns.Do(func() error { _, err := dp.Commit(gen); return err }); err != nil {
		return fmt.Errorf("commit gre config: %w", err)
	}

	// Both steering groups (indexes 0 and 1, by LBR id) send everything
	// over their first member, path 1.
	var first [bpf.SteerTable]uint8
	for idx := uint32(0); idx < 2; idx++ {
		if ok, err := dp.SetSteer(idx, 2, 0b01, first); err != nil || !ok {
			return fmt.Errorf("steering group %d: %v (set %v)", idx, err, ok)
		}
	}

	encap := udpFrame(hostA, encapDst, 5000)
	encapped := func(dst netip.Addr) []byte {
		return greFrame(topo.MACWan0, topo.MACWanNeigh, greLocal, greRemote, greKey, frameTTL(hostA, dst, 5000, 63, topo.MACHostA, topo.MACLan0))
	}
	decap := greFrame(topo.MACWanNeigh, topo.MACWan0, greRemote, greLocal, greKey, udpFrame(encapDst, hostA, 5000))
	for _, c := range []struct {
		name  string
		frame []byte
		want  []byte        // what the path makes of frame
		pair  *ebpf.Program // the wrapper alone with the path's adjust_head pair
		// ok checks the output in place of want (nil: want)
		ok     func([]byte) error
		method string // added to the figure's method
	}{
		{name: "gre_encap_ip4_hit", frame: encap, want: encapped(encapDst), pair: progs.BenchWrapGrow},
		// An established steered flow: its entry names the member.
		{name: "steer_per_flow_hit", frame: udpFrame(hostA, steerDst, 5000), want: encapped(steerDst), pair: progs.BenchWrapGrow},
		// Per packet: every packet picks its member (random entry).
		{name: "steer_per_packet_hit", frame: udpFrame(hostA, wrrDst, 5000), want: encapped(wrrDst), pair: progs.BenchWrapGrow},
		// Redundant: encapsulated for the first member with the group's
		// sequence number (one more every run) and broadcast.
		{name: "steer_redundant_hit", frame: udpFrame(hostA, dupDst, 5000), pair: progs.BenchWrapGrow,
			ok: redundantOut(frameTTL(hostA, dupDst, 5000, 63, topo.MACHostA, topo.MACLan0)),
			method: "; the XDP program's part only: the broadcast's copies and their per-interface rewrite (edge_xdp_dup) run after it, " +
				"in the devmap flush, and are in ours_redundant_live_frames"},
		{name: "gre_decap_ip4_hit", frame: decap, want: frameTTL(encapDst, hostA, 5000, 63, topo.MACLan0, topo.MACHostA), pair: progs.BenchWrapShrink},
	} {
		var err error
		if c.ok != nil {
			err = b.checkOut(dp.Prog, c.frame, c.ok)
		} else {
			err = b.check(dp.Prog, c.frame, c.want)
		}
		if err != nil {
			return fmt.Errorf("%s, the dataplane program: %w", c.name, err)
		}
		if err := b.check(progs.BenchResize, c.frame, c.frame); err != nil {
			return fmt.Errorf("%s, the wrapper does not restore the frame: %w", c.name, err)
		}
		raw, err := b.median(progs.BenchResize, c.frame, bpf.XDPRedirect)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		w0, err := b.median(progs.BenchWrapResize, c.frame, bpf.XDPPass)
		if err != nil {
			return fmt.Errorf("%s wrapper: %w", c.name, err)
		}
		w2, err := b.median(c.pair, c.frame, bpf.XDPPass)
		if err != nil {
			return fmt.Errorf("%s wrapper with adjust_head pair: %w", c.name, err)
		}
		undo := (w0 + w2) / 2
		b.o.Log("%s: %.1f ns raw, undo %.1f ns (wrapper %.1f, with adjust_head pair %.1f)", c.name, raw, undo, w0, w2)
		r.add(Figure{Name: c.name, RawNs: raw, NsPerPacket: r.FloorNs + raw - undo, UndoNs: undo,
			Rules: len(cfg.PDRs), Groups: len(gen.Groups), Method: methodResize + c.method, Verdict: "redirect"})
	}
	return nil
}

// redundantOut checks what XDP makes of a redundant group's packet
// before the broadcast: inner (an Ethernet frame) in GRE over path 1
// (key 1) with a sequence number and the group's mark in the outer id.
func redundantOut(inner []byte) func([]byte) error {
	return func(out []byte) error {
		pkt := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		gre, _ := pkt.Layer(layers.LayerTypeGRE).(*layers.GRE)
		switch {
		case ip == nil || gre == nil:
			return fmt.Errorf("not GRE: %v", pkt)
		case ip.DstIP.String() != greRemote.String() || !gre.KeyPresent || gre.Key != greKey:
			return fmt.Errorf("to %s key %d, want path 1's", ip.DstIP, gre.Key)
		case !gre.SeqPresent || ip.Id == 0:
			return fmt.Errorf("no sequence number (%v) or group mark (id %d)", gre.SeqPresent, ip.Id)
		case !bytes.Equal(gre.Payload, inner[14:]):
			return fmt.Errorf("inner packet\n%x\nwant\n%x", gre.Payload, inner[14:])
		}
		return nil
	}
}

// check runs prog once on frame and fails unless it redirects and
// leaves exactly want: the figure then times the path it names, and a
// wrapper that gets want == frame leaves every repeat the same input.
func (b *bencher) check(prog *ebpf.Program, frame, want []byte) error {
	return b.ns.Do(func() error {
		ret, out, err := prog.Test(append([]byte(nil), frame...))
		if err != nil {
			return err
		}
		if ret != bpf.XDPRedirect {
			return fmt.Errorf("verdict %d, want %d", ret, bpf.XDPRedirect)
		}
		if !bytes.Equal(out, want) {
			return fmt.Errorf("output\n%x\nwant\n%x", out, want)
		}
		return nil
	})
}

// greFrame wraps inner (an Ethernet frame) into Ethernet + IPv4 (DF, TTL
// 64) + GRE with key from src to dst.
func greFrame(smac, dmac net.HardwareAddr, src, dst netip.Addr, key uint32, inner []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolGRE, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	gre := &layers.GRE{KeyPresent: true, Key: key, Protocol: layers.EthernetTypeIPv4}
	buf := gopacket.NewSerializeBuffer()
	_ = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, gre, gopacket.Payload(inner[14:]))
	return buf.Bytes()
}
