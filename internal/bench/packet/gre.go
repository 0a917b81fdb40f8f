// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/topo"
)

const methodResize = "wrapper saves the first 56 bytes, runs the pipeline, moves data back by the length change (bpf_xdp_adjust_head) and restores the saved bytes " +
	"(Ethernet, inner TTL and checksum; for decap also the outer headers), so every repeat sees the same frame; " +
	"undo cost = mean of the wrapper alone without and with an adjust_head pair (the helper does the same work in both directions), subtracted, floor added"

// measureGRE adds the encap and decap figures: flow-cache hits through a
// keyed GRE path, IPv4 inside, timed through the resize wrappers.
func (b *bencher) measureGRE(r *Result) error {
	// Decap forwards the inner packet by the FIB toward host A on lan0;
	// nothing answers ARP in the namespace, so the neighbour is static.
	if err := b.ns.SetNeigh("lan0", topo.AddrHostA, topo.MACHostA); err != nil {
		return err
	}
	cfg, err := yamlcfg.Parse([]byte(testbed.GREConfig))
	if err != nil {
		return fmt.Errorf("gre config: %w", err)
	}
	gen, _, err := rules.Compile(cfg, b.ns.Resolve, b.alloc, b.dp.Limits)
	if err != nil {
		return fmt.Errorf("compile gre config: %w", err)
	}
	// In the namespace: a redundant group's devmap names its interfaces.
	if err := b.ns.Do(func() error { _, err := b.dp.Commit(gen); return err }); err != nil {
		return fmt.Errorf("commit gre config: %w", err)
	}

	// Both steering groups (indexes 0 and 1, by LBR id) send everything
	// over their first member, path 1.
	var first [bpf.SteerTable]uint8
	for idx := uint32(0); idx < 2; idx++ {
		if ok, err := b.dp.SetSteer(idx, 2, 0b01, first); err != nil || !ok {
			return fmt.Errorf("steering group %d: %v (set %v)", idx, err, ok)
		}
	}

	encap := testbed.UDPFrame(testbed.HostA, testbed.EncapDst, 5000)
	encapped := func(dst netip.Addr) []byte {
		return greFrame(topo.MACWan0, topo.MACWanNeigh, testbed.GRELocal, testbed.GRERemote, testbed.GREKey, testbed.FrameTTL(testbed.HostA, dst, 5000, 63, topo.MACHostA, topo.MACLan0))
	}
	decap := greFrame(topo.MACWanNeigh, topo.MACWan0, testbed.GRERemote, testbed.GRELocal, testbed.GREKey, testbed.UDPFrame(testbed.EncapDst, testbed.HostA, 5000))
	for _, c := range []struct {
		name  string
		frame []byte
		want  []byte        // what the path makes of frame
		pair  *ebpf.Program // the wrapper alone with the path's adjust_head pair
		// ok checks the output in place of want (nil: want)
		ok     func([]byte) error
		method string // added to the figure's method
	}{
		{name: "gre_encap_ip4_hit", frame: encap, want: encapped(testbed.EncapDst), pair: b.progs.BenchWrapGrow},
		// An established steered flow: its entry names the member.
		{name: "steer_per_flow_hit", frame: testbed.UDPFrame(testbed.HostA, testbed.SteerDst, 5000), want: encapped(testbed.SteerDst), pair: b.progs.BenchWrapGrow},
		// Per packet: every packet picks its member (random entry).
		{name: "steer_per_packet_hit", frame: testbed.UDPFrame(testbed.HostA, testbed.WRRDst, 5000), want: encapped(testbed.WRRDst), pair: b.progs.BenchWrapGrow},
		// Redundant: encapsulated for the first member with the group's
		// sequence number (one more every run) and broadcast.
		{name: "steer_redundant_hit", frame: testbed.UDPFrame(testbed.HostA, testbed.DupDst, 5000), pair: b.progs.BenchWrapGrow,
			ok: redundantOut(testbed.FrameTTL(testbed.HostA, testbed.DupDst, 5000, 63, topo.MACHostA, topo.MACLan0)),
			method: "; the XDP program's part only: the broadcast's copies and their per-interface rewrite (edge_xdp_dup) run after it, " +
				"in the devmap flush, and are in ours_redundant_live_frames"},
		{name: "gre_decap_ip4_hit", frame: decap, want: testbed.FrameTTL(testbed.EncapDst, testbed.HostA, 5000, 63, topo.MACLan0, topo.MACHostA), pair: b.progs.BenchWrapShrink},
	} {
		var err error
		if c.ok != nil {
			err = b.checkOut(b.dp.Prog, c.frame, c.ok)
		} else {
			err = b.check(b.dp.Prog, c.frame, c.want)
		}
		if err != nil {
			return fmt.Errorf("%s, the dataplane program: %w", c.name, err)
		}
		if err := b.check(b.progs.BenchResize, c.frame, c.frame); err != nil {
			return fmt.Errorf("%s, the wrapper does not restore the frame: %w", c.name, err)
		}
		raw, undo, err := b.resized(c.name, c.frame, c.pair)
		if err != nil {
			return err
		}
		r.add(Figure{Name: c.name, RawNs: raw, NsPerPacket: r.FloorNs + raw - undo, UndoNs: undo,
			Rules: len(cfg.PDRs), Groups: len(gen.Groups), Method: methodResize + c.method, Verdict: "redirect"})
	}
	return nil
}

// resized times the pipeline on frame through the resize wrapper (raw)
// and the wrapper's undo alone: the mean of the wrapper without and with
// pair, its adjust_head pair.
func (b *bencher) resized(name string, frame []byte, pair *ebpf.Program) (raw, undo float64, err error) {
	if raw, err = b.median(b.progs.BenchResize, frame, bpf.XDPRedirect); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	w0, err := b.median(b.progs.BenchWrapResize, frame, bpf.XDPPass)
	if err != nil {
		return 0, 0, fmt.Errorf("%s wrapper: %w", name, err)
	}
	w2, err := b.median(pair, frame, bpf.XDPPass)
	if err != nil {
		return 0, 0, fmt.Errorf("%s wrapper with adjust_head pair: %w", name, err)
	}
	undo = (w0 + w2) / 2
	b.o.Log("%s: %.1f ns raw, undo %.1f ns (wrapper %.1f, with adjust_head pair %.1f)", name, raw, undo, w0, w2)
	return raw, undo, nil
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
		case ip.DstIP.String() != testbed.GRERemote.String() || !gre.KeyPresent || gre.Key != testbed.GREKey:
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

// greFrame is testbed.GREFrame: the end-to-end part sends the same
// frames.
var greFrame = testbed.GREFrame
