// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// ScaleFlows are the established rings timed by default: the 4,096 of
// the ring figure, and where a gateway lives, tens of thousands to a
// million active flows.
var ScaleFlows = []int{4096, 65536, 1 << 20}

// Scale is the established ring at each size, beside its minimal
// baseline in the same run.
type Scale struct {
	CPU    int         `json:"cpu"`
	Rounds int         `json:"rounds"`
	Sizes  []ScaleSize `json:"sizes"`
	Method string      `json:"method"`
}

// ScaleSize is one size of the ring. The dataplane's flow table and the
// baseline's LRU hash have TableEntries entries each.
type ScaleSize struct {
	Flows        int `json:"flows"`
	TableEntries int `json:"table_entries"`
	// Used is the flow table's ways in use once the ring is established,
	// Occupancy Used / TableEntries.
	Used      int     `json:"flow_table_used"`
	Occupancy float64 `json:"flow_table_occupancy"`
	// Redecided counts the ring's connections balanced again in the
	// timed passes (0 unless the table lost some), NotRecorded the
	// packets the table had no way for (flow_full, flow_busy) in them,
	// BaselineMisses the baseline's LRU misses in its timed passes.
	Redecided      uint64 `json:"redecided"`
	NotRecorded    uint64 `json:"not_recorded"`
	BaselineMisses uint64 `json:"baseline_misses"`
	// FlowTable counts what the flow table did in the timed passes
	// (reason counters, as the flood's).
	FlowTable map[string]uint64 `json:"flow_table"`
	// NsAboveFloor and BaselineNsAboveFloor are the two figures
	// (lb_dsr_gre_established_ring_N, lru_encap_ring_N); Ratio the
	// first over the second.
	NsAboveFloor         float64 `json:"ns_above_floor"`
	BaselineNsAboveFloor float64 `json:"baseline_ns_above_floor"`
	Ratio                float64 `json:"ratio_to_baseline"`
	// The same with the ring visited in another order than its flows
	// were made in (_shuffled figures).
	ShuffledNsAboveFloor         float64 `json:"shuffled_ns_above_floor"`
	BaselineShuffledNsAboveFloor float64 `json:"baseline_shuffled_ns_above_floor"`
	RatioShuffled                float64 `json:"ratio_to_baseline_shuffled"`
}

// scaleStride is the shuffled order's step through the ring (odd: every
// flow once a pass at every power-of-two size).
const scaleStride = 0x9e3779b1

const methodScale = "for each size N, a dataplane of its own whose flow table has max(65,536, 4N) entries, and the ring service (dsr-gre, " +
	"ten backends) committed; N connections cycled by next_flow (UDP source port and the low half of the source address), one pass of " +
	"N runs (each flow as often, at least 4,096 runs) per round on one CPU: the pipeline, its wrapper alone, and the baseline (an XDP program that parses Ethernet, IPv4 and the " +
	"ports, looks the 5-tuple up in a plain BPF LRU hash of as many entries as the flow table, and encapsulates in GRE with key toward " +
	"the backend the entry names, inner TTL decremented, redirected) in the same wrapper, in alternating order; one untimed pass each " +
	"establishes the ring first; the ring visited in the order its flows were made (as Katran's ring was timed), then, _shuffled, " +
	"in another (the counter times an odd constant); the median per-round difference to the wrapper added to the floor, the resize undo subtracted"

// scaleProgs are what a size's ring needs of the benchmark object,
// loaded against that size's dataplane.
type scaleProgs struct {
	Ring     *ebpf.Program `ebpf:"bench_resize_miss"`
	Wrap     *ebpf.Program `ebpf:"bench_wrap_resize_miss"`
	Baseline *ebpf.Program `ebpf:"bench_lru_ring_run"`
	Cycle    *ebpf.Map     `ebpf:"bench_cycle"`
	Front    *ebpf.Map     `ebpf:"bench_front"`
	LRU      *ebpf.Map     `ebpf:"bench_lru_ring"`
	Backends *ebpf.Map     `ebpf:"bench_lru_backends"`
	Miss     *ebpf.Map     `ebpf:"bench_lru_miss"`
}

func (p *scaleProgs) Close() {
	for _, c := range []interface{ Close() error }{p.Ring, p.Wrap, p.Baseline, p.Cycle, p.Front, p.LRU, p.Backends, p.Miss} {
		_ = c.Close()
	}
}

// scaleTable is the flow table's entries for n flows: four ways for
// each flow (a quarter full, so hardly a bucket of 8 ways overflows),
// at least the default.
func scaleTable(n int) uint32 { return uint32(max(65536, 4*n)) }

// measureScale adds, for each of o.ScaleFlows, the established ring of
// that many dsr-gre connections and its minimal baseline, and r.Scale.
// undo is the resize wrappers' cost beyond the plain save/restore.
func (b *bencher) measureScale(r *Result) error {
	if b.o.Quick {
		return nil
	}
	undo := b.grow
	cpus, err := allowedCPUs()
	if err != nil {
		return err
	}
	s := &Scale{CPU: cpus[0], Rounds: 3 * b.o.Rounds, Method: methodScale}
	for _, n := range b.o.scaleFlows() {
		z, err := b.scaleSize(r, s, n, undo)
		if err != nil {
			return fmt.Errorf("ring of %d flows: %w", n, err)
		}
		b.o.Log("ring of %d flows: %.1f ns above floor, baseline %.1f (x%.2f); shuffled %.1f, baseline %.1f (x%.2f); table %d entries, %.1f %% used; %d decided again, %d not recorded, %d baseline misses",
			n, z.NsAboveFloor, z.BaselineNsAboveFloor, z.Ratio, z.ShuffledNsAboveFloor, z.BaselineShuffledNsAboveFloor, z.RatioShuffled,
			z.TableEntries, 100*z.Occupancy, z.Redecided, z.NotRecorded, z.BaselineMisses)
		s.Sizes = append(s.Sizes, z)
	}
	r.Scale = s
	return nil
}

// scaleMinRuns is the fewest runs a timed pass makes.
const scaleMinRuns = 4096

// maxScaleFlows is the largest ring: its flow table (4N ways of 128
// bytes) and the baseline's LRU hash take about 2 GiB at 2^21 flows.
const maxScaleFlows = 1 << 21

// checkScaleFlows refuses sizes the ring cannot cycle (a power of two
// from 2 on: next_flow masks its counter) or that would allocate past
// maxScaleFlows, before anything is measured.
func checkScaleFlows(sizes []int) error {
	for _, n := range sizes {
		if n < 2 || n&(n-1) != 0 || n > maxScaleFlows {
			return fmt.Errorf("scale flows %d: want a power of two from 2 to %d", n, maxScaleFlows)
		}
	}
	return nil
}

// scaleFlows are the sizes o asks for: ScaleFlows unless set.
func (o Options) scaleFlows() []int {
	if len(o.ScaleFlows) > 0 {
		return o.ScaleFlows
	}
	return ScaleFlows
}

// scaleSize times the ring of n flows and its baseline in a dataplane
// of their own.
func (b *bencher) scaleSize(r *Result, s *Scale, n int, undo float64) (ScaleSize, error) {
	z := ScaleSize{Flows: n, TableEntries: int(scaleTable(n))}
	dp, p, err := b.scaleDataplane(uint32(z.TableEntries))
	if err != nil {
		return z, err
	}
	defer dp.Close()
	defer p.Close()
	if err := p.Cycle.Put(uint32(0), uint32(n-1)); err != nil {
		return z, fmt.Errorf("set the ring's cycle: %w", err)
	}
	decided := func() (uint64, error) { return serviceNew(dp, ringSvcID) }
	// The ring in the order its flows were made (as Katran's ring was
	// timed: an LRU hash's entries then lie in the order they are
	// used), then in another (stride scaleStride: as traffic comes).
	var timed [2][2]pairs // [order][edgeplane, baseline]
	var c0, c1 scaleCounts
	err = b.ns.Do(func() error {
		if err := pinTo(s.CPU); err != nil {
			return err
		}
		// Each pass starts from the flow the last run of the pass
		// before made (see measureFlood), so every pass is each flow
		// the same number of times: once, or for a small ring enough
		// times that a pass is scaleMinRuns runs (a test run's own
		// cost, spread over a few runs, would be timed as theirs).
		stride := uint32(1)
		runs := n * max(1, scaleMinRuns/n)
		pass := func(prog *ebpf.Program, want uint32) (float64, error) {
			seqs, err := runSeqs(p.Front)
			if err != nil {
				return 0, err
			}
			return timeRun(prog, scaleFrame((seqs[s.CPU]*stride)&uint32(n-1)+1), want, runs)
		}
		d0, err := decided()
		if err != nil {
			return err
		}
		for _, prog := range []*ebpf.Program{p.Ring, p.Baseline} {
			if _, err := pass(prog, bpf.XDPRedirect); err != nil {
				return fmt.Errorf("establish: %w", err)
			}
		}
		if d1, err := decided(); err != nil {
			return err
		} else if d1-d0 != uint64(n) {
			return fmt.Errorf("establishing the ring made %d new connections, want %d", d1-d0, n)
		}
		if c0, err = readScaleCounts(dp, p); err != nil {
			return err
		}
		for order, st := range []uint32{1, scaleStride} {
			if err := p.Cycle.Put(uint32(1), st); err != nil {
				return fmt.Errorf("set the ring's order: %w", err)
			}
			stride = st
			for i := range s.Rounds {
				w, err := pass(p.Wrap, bpf.XDPPass)
				if err != nil {
					return fmt.Errorf("wrapper: %w", err)
				}
				// Alternate which goes first, so neither always finds
				// the caches as the other left them.
				for j := range 2 {
					k := (i + j) % 2
					t, err := pass([]*ebpf.Program{p.Ring, p.Baseline}[k], bpf.XDPRedirect)
					if err != nil {
						return err
					}
					timed[order][k].add(t, w)
				}
			}
		}
		c1, err = readScaleCounts(dp, p)
		return err
	})
	if err != nil {
		return z, err
	}
	z.Redecided, z.NotRecorded, z.BaselineMisses = c1.decided-c0.decided, c1.notRecorded-c0.notRecorded, c1.baselineMiss-c0.baselineMiss
	z.FlowTable = since(c1.table, c0.table)
	if z.Used, err = tableUsed(dp); err != nil {
		return z, err
	}
	z.Occupancy = float64(z.Used) / float64(z.TableEntries)
	for _, f := range []struct {
		name string
		v    *pairs
		at   *float64
	}{
		{fmt.Sprintf("lb_dsr_gre_established_ring_%d", n), &timed[0][0], &z.NsAboveFloor},
		{fmt.Sprintf("lru_encap_ring_%d", n), &timed[0][1], &z.BaselineNsAboveFloor},
		{fmt.Sprintf("lb_dsr_gre_established_ring_%d_shuffled", n), &timed[1][0], &z.ShuffledNsAboveFloor},
		{fmt.Sprintf("lru_encap_ring_%d_shuffled", n), &timed[1][1], &z.BaselineShuffledNsAboveFloor},
	} {
		r.add(Figure{Name: f.name, RawNs: medianOf(f.v.raw), NsPerPacket: r.FloorNs + medianOf(f.v.diff) - undo,
			UndoNs: medianOf(f.v.alone) + undo, Method: methodScale, Verdict: "redirect"})
		*f.at = r.find(f.name).AboveFloor
	}
	if z.BaselineNsAboveFloor > 0 {
		z.Ratio = z.NsAboveFloor / z.BaselineNsAboveFloor
	}
	if z.BaselineShuffledNsAboveFloor > 0 {
		z.RatioShuffled = z.ShuffledNsAboveFloor / z.BaselineShuffledNsAboveFloor
	}
	return z, nil
}

// scaleDataplane makes a dataplane whose flow table has entries ways,
// with the balancer's configuration committed, and loads the ring's
// programs against it, the baseline's LRU hash of as many entries and
// its backends those of the ring's service.
func (b *bencher) scaleDataplane(entries uint32) (*loader.Dataplane, *scaleProgs, error) {
	limits := bpf.Limits{Flows: entries, Rules: 1024}
	dp, err := loader.Open(limits, "")
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*loader.Dataplane, *scaleProgs, error) {
		dp.Close()
		return nil, nil, err
	}
	if _, err := dp.LoadProgram(); err != nil {
		return fail(err)
	}
	ns := b.ns
	if err := ns.Do(func() error {
		if err := dp.SetTx([]uint32{ns.Ifindex["lan0"], ns.Ifindex["wan0"], ns.Ifindex["wan1"]}); err != nil {
			return err
		}
		return testbed.ShareNextHops(dp)
	}); err != nil {
		return fail(err)
	}
	cfg, err := yamlcfg.Parse([]byte(lbConfig()))
	if err != nil {
		return fail(fmt.Errorf("lb config: %w", err))
	}
	gen, _, err := rules.Compile(cfg, ns.Resolve, rules.NewAllocs(limits.Rules, nil, nil), dp.Limits)
	if err != nil {
		return fail(fmt.Errorf("compile lb config: %w", err))
	}
	if _, err := dp.Commit(gen); err != nil {
		return fail(fmt.Errorf("commit lb config: %w", err))
	}
	spec, err := loadBenchobj()
	if err != nil {
		return fail(err)
	}
	if err := dp.ApplyTo(spec); err != nil {
		return fail(err)
	}
	spec.Maps["bench_lru_ring"].MaxEntries = entries
	var p scaleProgs
	if err := spec.LoadAndAssign(&p, &ebpf.CollectionOptions{MapReplacements: dp.MapReplacements()}); err != nil {
		return fail(fmt.Errorf("load the ring's programs: %w", err))
	}
	for i := range 10 {
		be := lruBackend{Remote: [4]byte{10, 6, 1, byte(i + 1)}, Ifindex: ns.Ifindex["wan1"]}
		be.Key[3] = byte(i + 1)
		copy(be.DMAC[:], topo.MACWan1Neigh)
		copy(be.SMAC[:], topo.MACWan1)
		if err := p.Backends.Put(uint32(i), &be); err != nil {
			p.Close()
			return fail(fmt.Errorf("baseline backend %d: %w", i, err))
		}
	}
	return dp, &p, nil
}

// lruBackend mirrors the baseline's struct lru_backend.
type lruBackend struct {
	Remote  [4]byte
	Key     [4]byte
	Ifindex uint32
	DMAC    [6]byte
	SMAC    [6]byte
}

// scaleFrame is ring flow n as next_flow makes it: UDP source port the
// low 16 bits of n, the low half of the source address the high 16.
func scaleFrame(n uint32) []byte {
	src := ringSrc.As4()
	src[2], src[3] = byte(n>>24), byte(n>>16)
	return testbed.FrameFrom(netip.AddrFrom4(src), uint16(n), ringVIP, 80, 64, net.HardwareAddr(topo.MACHostA), topo.MACLan0)
}

// scaleCounts are the counters a size's figures are checked by.
type scaleCounts struct {
	decided, notRecorded, baselineMiss uint64
	table                              map[string]uint64
}

func readScaleCounts(dp *loader.Dataplane, p *scaleProgs) (c scaleCounts, err error) {
	if c.decided, err = serviceNew(dp, ringSvcID); err != nil {
		return c, err
	}
	if c.table, err = tableCounts(dp); err != nil {
		return c, err
	}
	for _, r := range []int{bpf.ReasonFlowFull, bpf.ReasonFlowBusy} {
		c.notRecorded += c.table[dataplane.ReasonNames[r]]
	}
	c.baselineMiss, err = testbed.SumCounter(p.Miss, 0)
	return c, err
}

// tableUsed counts the ways of dp's flow table that hold a flow.
func tableUsed(dp *loader.Dataplane) (int, error) {
	t, err := dp.FlowTable()
	if err != nil {
		return 0, fmt.Errorf("map the flow table: %w", err)
	}
	defer t.Unmap()
	n := 0
	t.Each(func(*bpf.FTWay, bool) bool { n++; return true })
	return n, nil
}

// serviceNew sums the new connections dp's balancer counted for service
// svc, over its members.
func serviceNew(dp *loader.Dataplane, svc uint32) (uint64, error) {
	var sum uint64
	found := false
	for idx, m := range dp.ActiveMembers() {
		if m.Service != svc {
			continue
		}
		found = true
		v, err := testbed.SumCounter(dp.EdgeLbNew, idx)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	if !found {
		return 0, fmt.Errorf("service %d has no counters", svc)
	}
	return sum, nil
}
