// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"fmt"
	"net/netip"

	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// The user plane's figures: a UE's session, its gNB (routed by wan0
// like a GRE peer), the TEIDs each way.
var (
	gtpuUE   = netip.MustParseAddr("10.45.0.2")
	gtpuGNB  = testbed.GRERemote
	gtpuN3   = testbed.GRELocal
	gtpuUL   = uint32(0x100)
	gtpuDL   = uint32(0x9000)
	gtpuQFI  = uint8(9)
	gtpuSize = []int{1, 10000, 100000}
)

// gtpuFrame is a G-PDU from the gNB to the N3 address, TEID teid, a
// PDU Session Container with the QFI, carrying inner (an Ethernet frame:
// its IP packet).
func gtpuFrame(teid uint32, inner []byte) []byte {
	return testbed.GTPUFrame(topo.MACWanNeigh, topo.MACWan0, gtpuGNB, gtpuN3, teid, gtpuQFI, inner)
}

// gtpuRings are the rings of sessions timed at each count held (above
// it: none): 4,096 UEs active at once, up to 32,768 (their addresses
// stay in 10.46.0.0/16, whose low half the ring's stamp rewrites).
var gtpuRings = []int{4096, 16384, 32768}

// gtpuRing adds, for the figure name (one session's packets among n
// held, uplink G-PDUs or downlink, undo its wrapper's cost), the same
// with every packet another session's, cycling through each ring of gtpuRings below n:
// many UEs active, their records, keys and counters out of the caches.
// The wrapper's stamp (its cost timed apart and taken off) names the
// next session by its UE (downlink) or by the TEID the user plane chose
// for it (uplink: session i in slot i).
func (b *bencher) gtpuRing(r *Result, name string, uplink bool, n int, slots []uint32, undo float64) error {
	// The ring's first frame: session 0's G-PDU (the stamp then names
	// sessions 0 to ring - 1 by TEID), or the downlink to session 1's
	// UE (then UEs 10.46.0.1 up).
	kind, frame := uint32(1), testbed.UDPFrame(testbed.HostA, netip.MustParseAddr("10.46.0.1"), 5000)
	if uplink {
		kind, frame = 2, gtpuFrame(1<<20|slots[0], testbed.UDPFrame(gtpuUE, testbed.HostA, 5000))
	}
	for _, ring := range gtpuRings {
		if ring >= n {
			continue
		}
		for _, order := range []struct {
			suffix string
			stride uint32
		}{{"", 1}, {"_shuffled", scaleStride}} {
			if err := b.gtpuRingOrder(r, name, kind, frame, n, ring, order.suffix, order.stride, slots, undo); err != nil {
				return err
			}
		}
	}
	return nil
}

// gtpuRingOrder times one ring of gtpuRing, its sessions visited in the
// order the counter times stride gives (1: by slot, in the order they
// were made; scaleStride: scattered, as traffic comes).
func (b *bencher) gtpuRingOrder(r *Result, name string, kind uint32, frame []byte, n, ring int, suffix string, stride uint32,
	slots []uint32, undo float64) error {
	for i := range ring + 1 {
		if slots[i] != uint32(i) {
			return fmt.Errorf("%s ring: session %d in slot %d: the ring's TEIDs name slot = session", name, i, slots[i])
		}
	}
	// bench_cycle: [0] the ring's mask, [1] its stride, [2] what
	// next_session stamps.
	for k, v := range []uint32{uint32(ring - 1), stride, kind} {
		if err := b.progs.Cycle.Put(uint32(k), v); err != nil {
			return err
		}
	}
	raw, err := b.median(b.progs.BenchResizeSess, frame, bpf.XDPRedirect)
	if err == nil {
		var stamped, plain float64
		if stamped, err = b.median(b.progs.BenchWrapResizeSess, frame, bpf.XDPPass); err == nil {
			plain, err = b.median(b.progs.BenchWrapResize, frame, bpf.XDPPass)
		}
		stamp := stamped - plain
		if err == nil {
			ringName := fmt.Sprintf("%s_ring_%d%s", name, ring, suffix)
			order := "by slot, the order they were made"
			if stride != 1 {
				order = "scattered (the counter times an odd constant)"
			}
			b.o.Log("%s: %.1f ns raw, its stamp %.1f ns", ringName, raw, stamp)
			r.add(Figure{Name: ringName, RawNs: raw, NsPerPacket: r.FloorNs + raw - undo - stamp, UndoNs: undo + stamp,
				Method: methodResize + fmt.Sprintf("; %d sessions held, every packet the next of %d sessions' %s (the wrapper rewrites the UE "+
					"address or the TEID; its cost, %.1f ns, timed alone and taken off)", n, ring, order, stamp), Verdict: "redirect"})
		}
	}
	for k := range uint32(2) {
		if cerr := b.progs.Cycle.Put(k, uint32(0)); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("%s ring of %d: %w", name, ring, err)
	}
	return nil
}

// measureGTPU adds the user plane's figures beside GRE's (measured just
// before, same wrappers): a G-PDU decapsulated toward N6 (to a TEID the
// user plane chose, which names the session's slot, and to one the SMF
// chose, looked up in the TEID hash) and a UE's downlink encapsulated
// toward its gNB, with 1, 10,000 and 100,000
// sessions held (the one timed among the others in the TEID and UE
// hashes), and what holding sessions costs a packet that is no
// session's (a flow-cache hit, which then looks for its destination
// among the UEs). The sessions are taken away after, so the figures
// after these are as without a user plane.
func (b *bencher) measureGTPU(r *Result) error {
	if err := b.dp.SetGTPU(gtpuN3); err != nil {
		return err
	}
	ss, err := b.dp.Sessions()
	if err != nil {
		return err
	}
	hitFrame := testbed.UDPFrame(testbed.HostA, testbed.EncapDst, 5000)
	before, err := b.median(b.progs.BenchResize, hitFrame, bpf.XDPRedirect)
	if err != nil {
		return err
	}
	var slots []uint32
	defer func() {
		for _, s := range slots {
			_ = ss.Delete(s)
		}
		_ = b.dp.SetGTPU(netip.Addr{})
	}()
	// Session 0's slot is the first: its own TEID is 1<<20 | slot.
	decapSMF := gtpuFrame(gtpuUL, testbed.UDPFrame(gtpuUE, testbed.HostA, 5000))
	encap := testbed.UDPFrame(testbed.HostA, gtpuUE, 5000)
	for _, n := range gtpuSize {
		for len(slots) < n {
			i := uint32(len(slots))
			slot, err := ss.Slot()
			if err != nil {
				return fmt.Errorf("session %d: %w", i, err)
			}
			ue := gtpuUE
			if i > 0 {
				ue = netip.AddrFrom4([4]byte{10, 46 + byte(i>>16), byte(i >> 8), byte(i)})
			}
			// The TEID names the slot, as the user plane chooses
			// it; the first session also has one its SMF chose.
			smf := uint32(0)
			if i == 0 {
				smf = gtpuUL
			}
			rec, keys := testbed.GTPUSession((i+1)<<20|slot, smf, gtpuDL+i, gtpuQFI, ue, gtpuGNB)
			if err := ss.Put(slot, rec, keys); err != nil {
				return fmt.Errorf("session %d: %w", i, err)
			}
			slots = append(slots, slot)
		}
		decap := gtpuFrame(1<<20|slots[0], testbed.UDPFrame(gtpuUE, testbed.HostA, 5000))
		for _, c := range []struct {
			name   string
			frame  []byte
			uplink bool
			ring   bool // timed in rings of sessions too
		}{
			{fmt.Sprintf("gtpu_decap_ip4_%d", n), decap, true, true},
			{fmt.Sprintf("gtpu_decap_smf_teid_ip4_%d", n), decapSMF, true, false},
			{fmt.Sprintf("gtpu_encap_ip4_%d", n), encap, false, true},
		} {
			if err := b.check(b.progs.BenchResize, c.frame, c.frame); err != nil {
				return fmt.Errorf("%s, the wrapper does not restore the frame: %w", c.name, err)
			}
			raw, undo, err := b.resized(c.name, c.frame, b.progs.BenchWrapGrow)
			if err != nil {
				return err
			}
			r.add(Figure{Name: c.name, RawNs: raw, NsPerPacket: r.FloorNs + raw - undo, UndoNs: undo,
				Method: methodResize + fmt.Sprintf("; %d sessions held, one session's packets", n), Verdict: "redirect"})
			if c.ring {
				if err := b.gtpuRing(r, c.name, c.uplink, n, slots, undo); err != nil {
					return err
				}
			}
		}
	}
	after, err := b.median(b.progs.BenchResize, hitFrame, bpf.XDPRedirect)
	if err != nil {
		return err
	}
	b.o.Log("a GRE flow's hit with no session held %.1f ns, with %d: %.1f ns", before, len(slots), after)
	r.add(Figure{Name: "gre_encap_ip4_hit_with_sessions", RawNs: after, NsPerPacket: r.find("gre_encap_ip4_hit").NsPerPacket + after - before,
		Method: fmt.Sprintf("gre_encap_ip4_hit plus what the same frame's run costs more with %d sessions held than with none (%.1f vs %.1f ns raw, "+
			"same wrapper): the UE lookup every packet makes while the user plane holds sessions", len(slots), after, before), Verdict: "redirect"})
	return nil
}
