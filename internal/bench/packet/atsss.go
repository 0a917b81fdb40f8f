// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"fmt"
	"net/netip"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
)

// A multi-access session's second access: an N3IWF routed by wan0 as
// the gNB is, with its own downlink TEID.
var (
	maN3IWF     = netip.MustParseAddr("10.3.9.7")
	maN3IWFTEID = uint32(0xa000)
)

// maModes are the multi-access downlink's figures: one per steering
// mode, and active-standby with its active access's peer down (the
// packet over the second access). rtt1 and rtt2 are the peers' RTTs set for the run (µs).
var maModes = []struct {
	name       string
	mode       uint8
	weight1    uint8
	down1      bool
	rtt1, rtt2 uint32
}{
	{"active_standby", bpf.MAActiveStandby, 0, false, 0, 0},
	{"failed_over", bpf.MAActiveStandby, 0, true, 0, 0},
	{"smallest_delay", bpf.MASmallestDelay, 0, false, 4000, 900},
	{"load_balancing", bpf.MALoadBalancing, 70, false, 0, 0},
}

// measureMA adds, with n sessions held (slot, the UE's session of the
// one-session figures, among them), the downlink of that UE's session
// made multi-access: its downlink PDR steered by a MAR between the gNB
// and an N3IWF, whose peers' states are set for each mode. At n = 1
// every mode, at larger n active-standby only. The session's plain
// record is put back after.
func (b *bencher) measureMA(r *Result, ss *commit.Sessions, slot uint32, n int) error {
	for i, a := range []netip.Addr{gtpuGNB, maN3IWF} {
		if err := b.dp.SetGTPUPeer(uint32(i), a); err != nil {
			return err
		}
	}
	plain, keys := testbed.GTPUSession(1<<20|slot, gtpuUL, gtpuDL, gtpuQFI, gtpuUE, gtpuGNB)
	defer func() {
		_ = ss.Put(slot, plain, keys)
		_ = b.dp.ClearGTPUPeers()
	}()
	encap := testbed.UDPFrame(testbed.HostA, gtpuUE, 5000)
	for _, m := range maModes {
		if n > 1 && m.name != "active_standby" {
			continue
		}
		rec, _ := testbed.GTPUSession(1<<20|slot, gtpuUL, gtpuDL, gtpuQFI, gtpuUE, gtpuGNB)
		rec.Pdr[1].Ma = 1
		alt := rec.Pdr[1]
		alt.Ma, alt.OhcTeid, alt.OhcAddr = 0, bpf.BE32(maN3IWFTEID), bpf.Addr4(maN3IWF)
		rec.Ma[0] = bpf.SessMA{Mode: m.mode, Weight1: m.weight1, Peer1: 1, Peer2: 2, Alt: alt}
		if err := ss.Put(slot, rec, keys); err != nil {
			return err
		}
		for i, st := range []bpf.GTPUPeer{{RttUs: m.rtt1}, {RttUs: m.rtt2}} {
			if i == 0 && m.down1 {
				st.Down = 1
			}
			if err := b.dp.PutGTPUPeer(uint32(i), st); err != nil {
				return err
			}
		}
		name := fmt.Sprintf("gtpu_ma_encap_%s_ip4_%d", m.name, n)
		if _, err := b.gtpuOne(r, name, encap, fmt.Sprintf("%d sessions held, one multi-access session's downlink (%s)", n,
			maMethod[m.name])); err != nil {
			return err
		}
	}
	return nil
}

// maMethod says what each multi-access figure's packet does.
var maMethod = map[string]string{
	"active_standby": "active-standby, the gNB active and up: the PDR's own outer header",
	"failed_over":    "active-standby, the gNB's peer down: over the N3IWF (the PDR as its FAR makes it)",
	"smallest_delay": "smallest delay, the N3IWF's echo RTT the smaller: over the N3IWF",
	"load_balancing": "load balancing 70/30: the flow's keyed hash picks the access",
}

// maGoals are the multi-access downlink's goals: a steered packet no
// dearer than the plain downlink in the same run by more than a fifth
// (each mode, one session held), and no dearer with 100,000 sessions
// held than with one.
func maGoals(r *Result) []measure.Goal {
	top := gtpuSize[len(gtpuSize)-1]
	plain := r.find("gtpu_encap_ip4_1").AboveFloor
	var goals []measure.Goal
	for _, m := range maModes {
		goals = append(goals, measure.Goal{Name: fmt.Sprintf("multi-access downlink, %s / plain GTP-U encap (ns above floor)",
			m.name), Value: r.find(fmt.Sprintf("gtpu_ma_encap_%s_ip4_1", m.name)).AboveFloor / plain, Limit: 1.2})
	}
	goals = append(goals, measure.Goal{Name: fmt.Sprintf("multi-access downlink, one session's packets among %d held / among 1", top),
		Value: r.find(fmt.Sprintf("gtpu_ma_encap_active_standby_ip4_%d", top)).AboveFloor /
			r.find("gtpu_ma_encap_active_standby_ip4_1").AboveFloor, Limit: 1.2})
	return goals
}
