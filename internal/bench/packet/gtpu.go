// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
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
	// N3 over IPv6: the user plane's address on wan0, a gNB routed by
	// it.
	gtpuN3v6  = netip.MustParseAddr("fd02::1")
	gtpuGNBv6 = netip.MustParseAddr("fd03::9")
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

// gtpuBare adds the downlink baseline beside figure name: one UE's
// packets (frame), the wrapper stamping nothing.
func (b *bencher) gtpuBare(r *Result, name string, frame []byte, undo float64) error {
	for k, v := range []uint32{0, 0, 0} {
		if err := b.progs.Cycle.Put(uint32(k), v); err != nil {
			return err
		}
	}
	// The baseline sends what the pipeline sends.
	pipe := b.dp.Prog
	if pipe == nil {
		var err error
		if pipe, err = b.dp.LoadProgram(); err != nil {
			return err
		}
	}
	if err := b.checkOut(b.progs.BenchUeBareOnce, frame, func(out []byte) error {
		_, want, err := pipe.Test(append([]byte(nil), frame...))
		if err != nil {
			return err
		}
		if !bytes.Equal(out, want) {
			return fmt.Errorf("baseline sends\n%x\nthe pipeline\n%x", out, want)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%s baseline: %w", name, err)
	}
	bare, stamp, err := b.sessTimed(b.progs.BenchUeRingRun, frame)
	if err != nil {
		return fmt.Errorf("%s baseline: %w", name, err)
	}
	r.add(Figure{Name: bareName(name, ""), RawNs: bare, NsPerPacket: r.FloorNs + bare - undo - stamp, UndoNs: undo + stamp,
		Method: methodUEBare + "; one session's packets", Verdict: "redirect"})
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
	raw, stamp, err := b.sessTimed(b.progs.BenchResizeSess, frame)
	var bare float64
	if err == nil && kind == 1 {
		bare, err = b.median(b.progs.BenchUeRingRun, frame, bpf.XDPRedirect)
	}
	if err == nil {
		ringName := fmt.Sprintf("%s_ring_%d%s", name, ring, suffix)
		order := "by slot, the order they were made"
		if stride != 1 {
			order = "scattered (the counter times an odd constant)"
		}
		b.o.Log("%s: %.1f ns raw, its stamp %.1f ns", ringName, raw, stamp)
		method := fmt.Sprintf("; %d sessions held, every packet the next of %d sessions' %s (the wrapper rewrites the UE "+
			"address or the TEID; its cost, %.1f ns, timed alone and taken off)", n, ring, order, stamp)
		r.add(Figure{Name: ringName, RawNs: raw, NsPerPacket: r.FloorNs + raw - undo - stamp, UndoNs: undo + stamp,
			Method: methodResize + method, Verdict: "redirect"})
		if kind == 1 {
			r.add(Figure{Name: bareName(name, fmt.Sprintf("_ring_%d%s", ring, suffix)), RawNs: bare,
				NsPerPacket: r.FloorNs + bare - undo - stamp, UndoNs: undo + stamp,
				Method: methodUEBare + method, Verdict: "redirect"})
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

// measureGTPU6 adds one session's figures with N3 over IPv6 (an IPv6
// gNB: G-PDUs in UDP/IPv6 to the user plane's IPv6 address, the
// downlink encapsulated in GTP-U/UDP/IPv6 with the UDP checksum IPv6
// requires), inner IPv4 as the figures over IPv4.
func (b *bencher) measureGTPU6(r *Result) error {
	if err := b.dp.SetGTPU(gtpuN3, gtpuN3v6); err != nil {
		return err
	}
	defer func() { _ = b.dp.SetGTPU(netip.Addr{}) }()
	ss, err := b.dp.Sessions()
	if err != nil {
		return err
	}
	slot, err := ss.Slot()
	if err != nil {
		return err
	}
	rec, keys := testbed.GTPUSession(1<<20|slot, 0, gtpuDL, gtpuQFI, gtpuUE, gtpuGNBv6)
	if err := ss.Put(slot, rec, keys); err != nil {
		return err
	}
	defer func() { _ = ss.Delete(slot) }()
	decap := testbed.GTPUFrame(topo.MACWanNeigh, topo.MACWan0, gtpuGNBv6, gtpuN3v6, 1<<20|slot, gtpuQFI,
		testbed.UDPFrame(gtpuUE, testbed.HostA, 5000))
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"gtpu_decap_n3v6_1", decap},
		{"gtpu_encap_n3v6_1", testbed.UDPFrame(testbed.HostA, gtpuUE, 5000)},
	} {
		if _, err := b.gtpuOne(r, c.name, c.frame,
			"N3 over IPv6 (outer IPv6, the UDP checksum summed over the datagram on encap), one session held"); err != nil {
			return err
		}
	}
	return nil
}

// gtpuOne adds figure name: the pipeline on frame through the resize
// wrapper (checked to restore it), its undo taken off; the undo.
func (b *bencher) gtpuOne(r *Result, name string, frame []byte, method string) (float64, error) {
	if err := b.check(b.progs.BenchResize, frame, frame); err != nil {
		return 0, fmt.Errorf("%s, the wrapper does not restore the frame: %w", name, err)
	}
	raw, undo, err := b.resized(name, frame, b.progs.BenchWrapGrow)
	if err != nil {
		return 0, err
	}
	r.add(Figure{Name: name, RawNs: raw, NsPerPacket: r.FloorNs + raw - undo, UndoNs: undo,
		Method: methodResize + "; " + method, Verdict: "redirect"})
	return undo, nil
}

// gtpuGoals are the user plane's per-packet goals: GTP-U no dearer than
// GRE, a packet no dearer with 100,000 sessions held than with one, and
// the downlink with many UEs active no dearer than its minimal baseline.
func gtpuGoals(r *Result) []measure.Goal {
	top := gtpuSize[len(gtpuSize)-1]
	goals := []measure.Goal{
		{Name: "GTP-U decap / GRE decap hit (ns above floor)", Value: r.find("gtpu_decap_ip4_1").AboveFloor / r.find("gre_decap_ip4_hit").AboveFloor, Limit: 1},
		{Name: "GTP-U encap / GRE encap hit (ns above floor)", Value: r.find("gtpu_encap_ip4_1").AboveFloor / r.find("gre_encap_ip4_hit").AboveFloor, Limit: 1},
	}
	for _, dir := range []string{"decap", "encap"} {
		one := r.find(fmt.Sprintf("gtpu_%s_ip4_1", dir)).AboveFloor
		goals = append(goals, measure.Goal{Name: fmt.Sprintf("GTP-U %s, one session's packets among %d held / among 1", dir, top),
			Value: r.find(fmt.Sprintf("gtpu_%s_ip4_%d", dir, top)).AboveFloor / one, Limit: 1.2})
	}
	for _, ring := range gtpuRings {
		name := fmt.Sprintf("gtpu_encap_ip4_%d_ring_%d_shuffled", top, ring)
		goals = append(goals, measure.Goal{Name: fmt.Sprintf("GTP-U downlink, %d of %d UEs active, scattered / minimal baseline", ring, top),
			Value: r.find(name).AboveFloor / r.find(bareName(fmt.Sprintf("gtpu_encap_ip4_%d", top), fmt.Sprintf("_ring_%d_shuffled", ring))).AboveFloor,
			Limit: 1})
	}
	return goals
}

// methodUEBare is how the downlink's minimal baseline is timed.
const methodUEBare = "the minimal downlink baseline (bench_ue_ring_run: an XDP program that parses Ethernet and IPv4, looks the " +
	"destination up in a plain BPF hash of the UEs of the sessions held, and puts the packet into GTP-U/UDP/IPv4 with a PDU Session " +
	"Container toward the gNB and TEID the entry names (from the N3 address it holds), inner TTL decremented, redirected; no rules, counters, gates or meters) in " +
	"the pipeline's wrapper, its resize undone and subtracted"

// bareName is the baseline's figure beside the downlink figure name
// (gtpu_encap_ip4_N) with suffix: gtpu_encap_bare_ip4_N suffix.
func bareName(name, suffix string) string {
	return strings.Replace(name, "gtpu_encap_", "gtpu_encap_bare_", 1) + suffix
}

// sessTimed times prog (bench_resize_sess or the baseline's) on frame
// as bench_cycle is set, and the wrapper's stamp alone (the session
// wrapper less the plain one).
func (b *bencher) sessTimed(prog *ebpf.Program, frame []byte) (raw, stamp float64, err error) {
	if raw, err = b.median(prog, frame, bpf.XDPRedirect); err != nil {
		return 0, 0, err
	}
	stamped, err := b.median(b.progs.BenchWrapResizeSess, frame, bpf.XDPPass)
	if err != nil {
		return 0, 0, err
	}
	plain, err := b.median(b.progs.BenchWrapResize, frame, bpf.XDPPass)
	return raw, stamped - plain, err
}

// ueBare mirrors the baseline's struct ue_bare.
type ueBare struct {
	Local   [4]byte
	Peer    [4]byte
	TEID    [4]byte
	Ifindex uint32
	QFI     uint8
	DMAC    [6]byte
	SMAC    [6]byte
	_       [3]uint8 // pad and the tail to 4-byte alignment
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
	var ues [][4]byte
	defer func() {
		for _, s := range slots {
			_ = ss.Delete(s)
		}
		for _, ue := range ues {
			_ = b.progs.UEBare.Delete(ue)
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
			// The baseline's entry for the same UE: its downlink's
			// TEID and gNB, out of wan0 as the FIB sends it.
			bare := ueBare{Local: gtpuN3.As4(), Peer: gtpuGNB.As4(), Ifindex: b.ns.Ifindex["wan0"], QFI: gtpuQFI}
			binary.BigEndian.PutUint32(bare.TEID[:], gtpuDL+i)
			copy(bare.DMAC[:], topo.MACWanNeigh)
			copy(bare.SMAC[:], topo.MACWan0)
			if err := b.progs.UEBare.Put(ue.As4(), &bare); err != nil {
				return fmt.Errorf("baseline entry of session %d: %w", i, err)
			}
			ues = append(ues, ue.As4())
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
			undo, err := b.gtpuOne(r, c.name, c.frame, fmt.Sprintf("%d sessions held, one session's packets", n))
			if err != nil {
				return err
			}
			if !c.uplink {
				if err := b.gtpuBare(r, c.name, c.frame, undo); err != nil {
					return err
				}
			}
			if c.ring {
				if err := b.gtpuRing(r, c.name, c.uplink, n, slots, undo); err != nil {
					return err
				}
			}
		}
		if err := b.measureMA(r, ss, slots[0], n); err != nil {
			return fmt.Errorf("multi-access, %d sessions: %w", n, err)
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
