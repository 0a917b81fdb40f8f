// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// Flood is the established ring, 4,096 dsr-gre connections cycled, timed
// quiet and then between rounds of a flood of new flows from spoofed
// sources to the same service: what a flood does to established
// connections.
type Flood struct {
	RingFlows int `json:"ring_flows"`
	// FloodPerRound new flows come before each timed pass of the ring:
	// as many as the flow cache holds, so by age alone every ring entry
	// would be evicted between two of its packets.
	FloodPerRound int `json:"flood_flows_per_round"`
	Rounds        int `json:"rounds"`
	CPU           int `json:"cpu"`
	// QuietNs and FloodNs are the two figures' ns above the floor,
	// Ratio is FloodNs / QuietNs.
	QuietNs float64 `json:"quiet_ns_above_floor"`
	FloodNs float64 `json:"flood_ns_above_floor"`
	Ratio   float64 `json:"ratio_flood_quiet"`
	// FloodRawNs is what one flood packet took (a new connection, wrapper
	// included), the median over the flood rounds.
	FloodRawNs float64 `json:"flood_raw_ns"`
	// Redecided counts the ring's connections balanced again (the
	// service's edge_lb_new) in the ring passes after the flood rounds,
	// summed over the rounds; RedecidedMax is the most after one flood
	// round (of RingFlows); RedecidedQuiet the same count in the quiet
	// passes (0 unless the ring evicts itself).
	Redecided      uint64 `json:"redecided"`
	RedecidedMax   uint64 `json:"redecided_max_round"`
	RedecidedQuiet uint64 `json:"redecided_quiet"`
	// Moved counts the ring's connections whose backend (GRE remote
	// and key of the output frame) after the flood is not the one
	// before it, all RingFlows checked.
	Moved int `json:"moved"`
	// QuietTable and FloodTable count what the flow table did in the
	// quiet passes and in the flood rounds with their passes (reason
	// counters: flow_evict_cold, flow_evict_idle, flow_full, flow_busy).
	QuietTable map[string]uint64 `json:"flow_table_quiet"`
	FloodTable map[string]uint64 `json:"flow_table_flood"`
	Method     string            `json:"method"`
}

// tableReasons are the reasons the flow table counts.
var tableReasons = []int{bpf.ReasonFlowEvictCold, bpf.ReasonFlowEvictIdle, bpf.ReasonFlowFull, bpf.ReasonFlowBusy}

// tableCounts reads dp's flow-table reason counters.
func tableCounts(dp *loader.Dataplane) (map[string]uint64, error) {
	s, err := dp.Snapshot()
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, r := range tableReasons {
		out[dataplane.ReasonNames[r]] = s.Reasons[r].Packets
	}
	return out, nil
}

// since returns now's counts less then's.
func since(now, then map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range now {
		out[k] = v - then[k]
	}
	return out
}

// Addresses of the flood figures: the ring's service (its own, so its
// new-connection counter counts the ring and the flood only) and where
// the flood's spoofed sources come from (another /16 than the ring's,
// so the flood never makes one of the ring's flows).
var (
	ringVIP   = netip.MustParseAddr("203.0.113.40")
	floodSrc  = netip.MustParseAddr("198.18.0.1")
	ringSrc   = netip.MustParseAddr("10.1.0.0") // next_flow's low half is 0 below 65,536 flows
	ringSvcID = uint32(4)
)

// floodPerRound is the flood between two passes of the ring: the flow
// cache's size.
const floodPerRound = 65536

const methodFlood = "the ring (4,096 dsr-gre connections to a service of their own, cycled by next_flow, one pass of 4,096 runs per round) " +
	"and its wrapper alone timed in alternating rounds on one CPU, the median per-round difference added to the floor, undo subtracted; " +
	"quiet: rounds back to back; flood: before each round, 65,536 new flows (every packet a new connection from 198.18.0.0/16 to the same " +
	"service, from a counter shared by all CPUs) on the same CPU, untimed"

// measureFlood adds the established ring quiet and under a flood, and
// r.Flood. Everything runs on one CPU: the exact-match copies are per
// CPU (and the LRU tables of builds before the flow table kept a list
// per CPU, which a flood evicted from where RSS spread it); one CPU takes
// the chance out. undo is the resize wrappers' cost beyond the
// plain save/restore (as for lb_dsr_gre).
func (b *bencher) measureFlood(r *Result, undo float64) error {
	cpus, err := allowedCPUs()
	if err != nil {
		return err
	}
	rounds := 4 * b.o.Rounds
	f := &Flood{RingFlows: ringFlows, FloodPerRound: floodPerRound, Rounds: rounds, CPU: cpus[0], Method: methodFlood}
	decided := func() (uint64, error) { return serviceNew(b.dp, ringSvcID) }
	if err := b.progs.setCycle(ringFlows - 1); err != nil {
		return err
	}
	defer b.progs.setCycle(0)
	probe := testbed.UDPFrame(testbed.HostA, netip.MustParseAddr("10.3.0.1"), 80)
	flood := testbed.UDPFrame(floodSrc, ringVIP, 80)
	var quiet, loud pairs
	var floodRaw []float64
	var before, after []uint64
	err = b.ns.Do(func() error {
		if err := pinTo(f.CPU); err != nil {
			return err
		}
		// A pass of ringFlows runs starts from the frame given and
		// makes the next flow after each run: the frame given must be
		// the flow the pass's last run makes, so that a pass is every
		// ring flow once. Passes are ringFlows runs (the wrapper's
		// too: it counts alike), so every pass starts at the same
		// place in the cycle.
		seqs, err := runSeqs(b.progs.Front)
		if err != nil {
			return err
		}
		ring := ringFrame(seqs[f.CPU]&(ringFlows-1) + 1)
		pass := func() (float64, float64, uint64, error) {
			w, err := timeRun(b.progs.BenchWrapResizeMiss, probe, bpf.XDPPass, ringFlows)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("wrapper: %w", err)
			}
			n0, err := decided()
			if err != nil {
				return 0, 0, 0, err
			}
			t, err := timeRun(b.progs.BenchResizeMiss, ring, bpf.XDPRedirect, ringFlows)
			if err != nil {
				return 0, 0, 0, err
			}
			n1, err := decided()
			return t, w, n1 - n0, err
		}
		// Establish the ring: every connection decided once.
		if _, _, n, err := pass(); err != nil {
			return fmt.Errorf("establish the ring: %w", err)
		} else if n != ringFlows {
			return fmt.Errorf("establishing the ring made %d new connections, want %d: the ring is not what it names", n, ringFlows)
		}
		if before, err = b.backends(b.dp); err != nil {
			return err
		}
		t0, err := tableCounts(b.dp)
		if err != nil {
			return err
		}
		for range rounds {
			t, w, n, err := pass()
			if err != nil {
				return fmt.Errorf("quiet ring: %w", err)
			}
			quiet.add(t, w)
			f.RedecidedQuiet += n
		}
		t1, err := tableCounts(b.dp)
		if err != nil {
			return err
		}
		f.QuietTable = since(t1, t0)
		for range rounds {
			fl, err := timeRun(b.progs.BenchResizeFlood, flood, bpf.XDPRedirect, floodPerRound)
			if err != nil {
				return fmt.Errorf("flood: %w", err)
			}
			floodRaw = append(floodRaw, fl)
			t, w, n, err := pass()
			if err != nil {
				return fmt.Errorf("ring under flood: %w", err)
			}
			loud.add(t, w)
			f.Redecided += n
			f.RedecidedMax = max(f.RedecidedMax, n)
		}
		t2, err := tableCounts(b.dp)
		if err != nil {
			return err
		}
		f.FloodTable = since(t2, t1)
		after, err = b.backends(b.dp)
		return err
	})
	if err != nil {
		return err
	}
	for i := range before {
		if before[i] != after[i] {
			f.Moved++
		}
	}
	f.FloodRawNs = medianOf(floodRaw)
	for _, p := range []struct {
		name string
		v    *pairs
	}{{"lb_dsr_gre_established_ring", &quiet}, {"lb_dsr_gre_established_ring_flood", &loud}} {
		r.add(Figure{Name: p.name, RawNs: medianOf(p.v.raw), NsPerPacket: r.FloorNs + medianOf(p.v.diff) - undo,
			UndoNs: medianOf(p.v.alone) + undo, Method: methodFlood, Verdict: "redirect"})
	}
	f.QuietNs = r.find("lb_dsr_gre_established_ring").AboveFloor
	f.FloodNs = r.find("lb_dsr_gre_established_ring_flood").AboveFloor
	if f.QuietNs > 0 {
		f.Ratio = f.FloodNs / f.QuietNs
	}
	b.o.Log("ring quiet %.1f ns, under flood %.1f ns above floor (x%.2f); flood packet %.1f ns raw; %d decided again (most %d in a round, %d quiet), %d moved",
		f.QuietNs, f.FloodNs, f.Ratio, f.FloodRawNs, f.Redecided, f.RedecidedMax, f.RedecidedQuiet, f.Moved)
	r.Flood = f
	return nil
}

// backends runs every ring flow through the dataplane program once, on
// this thread, and returns each one's backend: the GRE remote and key of
// the frame it sends.
func (b *bencher) backends(dp *loader.Dataplane) ([]uint64, error) {
	out := make([]uint64, ringFlows)
	for i := range out {
		ret, o, err := dp.Prog.Test(ringFrame(uint32(i + 1)))
		if err != nil {
			return nil, err
		}
		if ret != bpf.XDPRedirect {
			return nil, fmt.Errorf("ring flow %d: verdict %d, want %d", i+1, ret, bpf.XDPRedirect)
		}
		pk := gopacket.NewPacket(o, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		gre, _ := pk.Layer(layers.LayerTypeGRE).(*layers.GRE)
		if ip == nil || gre == nil {
			return nil, fmt.Errorf("ring flow %d: not GRE: %v", i+1, pk)
		}
		out[i] = uint64(binary.BigEndian.Uint32(ip.DstIP.To4()))<<32 | uint64(gre.Key)
	}
	return out, nil
}

// ringFrame is ring flow n as next_flow makes it: from ringSrc, UDP
// source port n, to the ring's service.
func ringFrame(n uint32) []byte {
	return testbed.FrameFrom(ringSrc, uint16(n), ringVIP, 80, 64, topo.MACHostA, topo.MACLan0)
}

// pairs are the rounds of a wrapped path and its wrapper alone.
type pairs struct{ raw, alone, diff []float64 }

func (p *pairs) add(raw, alone float64) {
	p.raw, p.alone, p.diff = append(p.raw, raw), append(p.alone, alone), append(p.diff, raw-alone)
}
