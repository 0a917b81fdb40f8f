// SPDX-License-Identifier: Apache-2.0

package endtoend

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// Relief is FlowOpt's relief where it matters: in the two-queue
// topology, every frame arrives on CPU 0 (one sender, pinned there), so
// CPU 0 is the hot receive CPU and CPU 1 idles; runs with relief off and
// on alternate, each with bulk flows new to the gateway and a URLLC
// flow among them.
type Relief struct {
	Method string `json:"method"`
	// Flows is the bulk flows of a run (new ones every run), URLLCEvery
	// one frame in how many is a URLLC one.
	Flows      int        `json:"bulk_flows"`
	URLLCEvery int        `json:"urllc_every"`
	Off        ReliefMode `json:"off"`
	On         ReliefMode `json:"on"`
}

// ReliefMode is relief off or on: medians over the rounds, counts summed.
type ReliefMode struct {
	Mpps        float64   `json:"mpps"`
	OfferedMpps float64   `json:"offered_mpps"`
	Loss        float64   `json:"loss"`
	MppsSamples []float64 `json:"mpps_samples"`
	// HotShare is the share of the frames the gateway forwarded on the
	// hot CPU (CPU 0): the sink runs where the gateway's redirect ran.
	HotShare        float64   `json:"hot_cpu_share"`
	HotShareSamples []float64 `json:"hot_cpu_share_samples"`
	// GatewayCPU is the packets edgeplane's programs handled on each CPU
	// (a packet relief hands over counts on both), SinkCPU the frames
	// the sink counted on each.
	GatewayCPU []uint64  `json:"gateway_cpu_packets"`
	SinkCPU    []uint64  `json:"sink_cpu_packets"`
	CPUTime    []CPUTime `json:"cpu_time"`
	// Moved is the packets relief handed to another CPU (reason
	// cpu_moved).
	Moved uint64 `json:"moved"`
	// URLLC: frames sent and received, the share lost, and the latency
	// from their making in the sender to the sink (1 us buckets, over
	// every round's frames).
	URLLCSent     uint64  `json:"urllc_sent"`
	URLLCReceived uint64  `json:"urllc_received"`
	URLLCLoss     float64 `json:"urllc_loss"`
	URLLCP50Us    float64 `json:"urllc_p50_us"`
	URLLCP99Us    float64 `json:"urllc_p99_us"`
	offered, loss []float64
	lat           []uint64
	ticks         cpuTime
}

const (
	// reliefFlows bulk flows a run, one frame in reliefURLLCEvery URLLC.
	reliefFlows      = 256
	reliefURLLCEvery = 64
	// latBuckets is bench_sink_lat's (LAT_BUCKETS).
	latBuckets = 4096
)

const methodRelief = "one sender pinned to CPU 0 (live frames, batch 64, bench_gen_mix) into the two-queue topology: every frame on queue 0, so CPU 0 " +
	"does the sender's, the gateway's and the sink's work and CPU 1 idles; 256 bulk UDP flows (source ports new every run, so new to the gateway " +
	"while relief is on) and every 64th frame a URLLC one (UDP 7050 -> 7000, stamped with bpf_ktime_get_ns when made, timed by the sink in 1 us buckets); " +
	"the gateway's redirect rule puts port 7000 in a urllc class and the rest in an embb class; " +
	"relief off: the relief module listed off; on: listed, the cpumap filled (SetRelief) and CPU 0 written hot with both CPUs' rates from the run " +
	"before (what the agent's loop writes every 100 ms, done once here, no agent running); runs alternate off, on; hot_cpu_share from the sink's per-CPU counts"

// reliefConfig is the redirect gateway with a URLLC class for port 7000,
// an eMBB class for the rest, and relief listed (off when off).
func reliefConfig(on bool) string {
	off := ", off: true"
	if on {
		off = ""
	}
	return `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}]
qos_classes: [{id: 1, type: urllc}, {id: 2, type: embb}]
fars: [{id: 1, action: redirect, interface: wan0}]
pdrs:
  - {id: 1, precedence: 1, match: {dst: 10.7.0.0/16, proto: udp, dport: 7000}, far: 1, qos: 1}
  - {id: 2, precedence: 2, match: {dst: 10.7.0.0/16}, far: 1, qos: 2}
flowopt: [{module: relief` + off + `}]
limits: {flows: 65536, rules: 1024}
`
}

// relief measures the relief figures, rounds runs of d in each mode,
// alternated, in the two-queue topology.
func (e *e2e) relief(rounds int, d time.Duration) (*Relief, error) {
	if err := e.setQueues(mqQueues); err != nil {
		return nil, err
	}
	if err := e.sinkLink.Update(e.objs.BenchSinkLat); err != nil {
		return nil, fmt.Errorf("sink with latency: %w", err)
	}
	defer func() { _ = e.sinkLink.Update(e.objs.BenchSink) }()
	defer func() { _ = e.dp.SetRelief(false) }()
	// The sender stamps the frame and makes it bulk or URLLC: UDP
	// without a checksum.
	e.frame = testbed.FrameFrom(testbed.HostA, 40000, testbed.EncapDst, 5000, 64, topo.MACHostA, topo.MACLan0)
	e.frame[40], e.frame[41] = 0, 0
	var tmpl [64]byte
	copy(tmpl[:], e.frame)
	for _, v := range []struct {
		name string
		set  func() error
	}{
		{"frame", func() error { return e.objs.GenFrame.Set(tmpl) }},
		{"flows", func() error { return e.objs.GenFlows.Set(uint32(reliefFlows)) }},
		{"urllc share", func() error { return e.objs.GenUrllcEvery.Set(uint32(reliefURLLCEvery)) }},
	} {
		if err := v.set(); err != nil {
			return nil, fmt.Errorf("generator's %s: %w", v.name, err)
		}
	}
	r := &Relief{Method: methodRelief, Flows: reliefFlows, URLLCEvery: reliefURLLCEvery}
	var loads []bpf.CPULoad
	sport := uint32(1024)
	for round := 1; round <= rounds; round++ {
		for _, on := range []bool{false, true} {
			m := &r.Off
			if on {
				m = &r.On
			}
			// New flows every run: relief places a flow on its first
			// packets only.
			if err := e.objs.GenSportBase.Set(sport); err != nil {
				return nil, fmt.Errorf("generator's flows: %w", err)
			}
			sport += reliefFlows
			if err := e.reliefMode(on, loads); err != nil {
				return nil, err
			}
			l, err := e.reliefRun(m, on, d)
			if err != nil {
				return nil, fmt.Errorf("relief on %v: %w", on, err)
			}
			if !on {
				loads = l
			}
		}
	}
	for _, m := range []*ReliefMode{&r.Off, &r.On} {
		m.Mpps, m.OfferedMpps, m.Loss = measure.Median(m.MppsSamples), measure.Median(m.offered), measure.Median(m.loss)
		m.HotShare, m.CPUTime = measure.Median(m.HotShareSamples), cpuShares(m.ticks)
		m.URLLCP50Us, m.URLLCP99Us = latQuantile(m.lat, 0.5), latQuantile(m.lat, 0.99)
		if m.URLLCSent > 0 {
			m.URLLCLoss = 1 - float64(m.URLLCReceived)/float64(m.URLLCSent)
		}
	}
	return r, nil
}

// reliefMode commits the config with relief off or on and, on, fills
// the cpumap and writes the CPUs' loads (CPU 0 hot) as the agent would.
func (e *e2e) reliefMode(on bool, loads []bpf.CPULoad) error {
	if err := e.use(reliefConfig(on)); err != nil {
		return err
	}
	if err := e.attachGateway(e.dp.Prog); err != nil {
		return err
	}
	if err := e.dp.SetRelief(on); err != nil {
		return err
	}
	if !on {
		return nil
	}
	if len(loads) < 2 {
		return fmt.Errorf("no loads from a run with relief off: %v", loads)
	}
	return e.dp.SetCPULoads(loads)
}

// reliefRun runs the mix once into m and returns the CPUs' loads the
// run gave (CPU 0 hot).
func (e *e2e) reliefRun(m *ReliefMode, on bool, d time.Duration) ([]bpf.CPULoad, error) {
	before, err := e.mqCounters("eth0")
	if err != nil {
		return nil, err
	}
	latBefore, movedBefore, err := e.reliefCounters()
	if err != nil {
		return nil, err
	}
	send := func(d time.Duration) (uint64, error) {
		before, err := testbed.SumCounter(e.objs.GenCount, 0)
		if err != nil {
			return 0, err
		}
		if err := e.gen.Do(func() error { return sendPinned(e.objs.BenchGenMix, e.frame, 0, d) }); err != nil {
			return 0, err
		}
		after, err := testbed.SumCounter(e.objs.GenCount, 0)
		return after - before, err
	}
	var t0, t1 [][cpuFields]uint64
	s, err := e.measure(timedSend(send, &t0, &t1), d, sinkUDP)
	if err != nil {
		return nil, err
	}
	after, err := e.mqCounters("eth0")
	if err != nil {
		return nil, err
	}
	latAfter, movedAfter, err := e.reliefCounters()
	if err != nil {
		return nil, err
	}
	sink, gw := diff(after.sinkCPU, before.sinkCPU), diff(after.gwCPU, before.gwCPU)
	lat := diff(latAfter, latBefore)
	m.MppsSamples = append(m.MppsSamples, s.mpps)
	m.offered, m.loss = append(m.offered, s.offered), append(m.loss, s.loss())
	if all := sum(sink); all > 0 {
		m.HotShareSamples = append(m.HotShareSamples, float64(sink[0])/float64(all))
	}
	m.SinkCPU, m.GatewayCPU, m.lat = addTo(m.SinkCPU, sink), addTo(m.GatewayCPU, gw), addTo(m.lat, lat)
	m.Moved += movedAfter - movedBefore
	m.URLLCSent += s.generated / reliefURLLCEvery
	m.URLLCReceived += sum(lat)
	m.ticks.add(t0, t1)
	e.o.Log("relief on %v: %.3f Mpps, loss %.4f, sink CPUs %v, gateway CPUs %v, moved %d, urllc %d of %d, p99 %.0f us",
		on, s.mpps, s.loss(), sink, gw, movedAfter-movedBefore, sum(lat), s.generated/reliefURLLCEvery, latQuantile(lat, 0.99))
	// The loads the agent would write: each CPU's rate over the run,
	// CPU 0 hot (every frame arrived there).
	secs := d.Seconds()
	loads := make([]bpf.CPULoad, len(gw))
	for c := range gw {
		loads[c] = bpf.CPULoad{Pps: uint32(float64(gw[c]) / secs)}
	}
	if len(loads) > 0 {
		loads[0].Hot = 1
	}
	return loads, nil
}

// reliefCounters reads the sink's URLLC latency buckets and the packets
// relief handed over.
func (e *e2e) reliefCounters() ([]uint64, uint64, error) {
	lat := make([]uint64, latBuckets)
	for b := range lat {
		v, err := testbed.SumCounter(e.objs.SinkLat, uint32(b))
		if err != nil {
			return nil, 0, err
		}
		lat[b] = v
	}
	snap, err := e.dp.Snapshot()
	if err != nil {
		return nil, 0, err
	}
	var moved uint64
	if int(bpf.ReasonCPUMoved) < len(snap.Reasons) {
		moved = snap.Reasons[bpf.ReasonCPUMoved].Packets
	}
	return lat, moved, nil
}

// latQuantile is the q-quantile of 1-us buckets, in us (the bucket's
// upper edge).
func latQuantile(buckets []uint64, q float64) float64 {
	total := sum(buckets)
	if total == 0 {
		return 0
	}
	var seen uint64
	for b, n := range buckets {
		seen += n
		if float64(seen) >= q*float64(total) {
			return float64(b + 1)
		}
	}
	return float64(len(buckets))
}

func sum(v []uint64) uint64 {
	var s uint64
	for _, x := range v {
		s += x
	}
	return s
}

// Text renders relief off and on, a line each.
func (r *Relief) Text() string {
	var sb strings.Builder
	for _, m := range []struct {
		name string
		m    ReliefMode
	}{{"off", r.Off}, {"on", r.On}} {
		fmt.Fprintf(&sb, "relief %-3s %7.3f Mpps, loss %.4f, hot CPU's share %.2f (sink CPUs %v), moved %d; urllc %d of %d, p50 %.0f us, p99 %.0f us\n",
			m.name, m.m.Mpps, m.m.Loss, m.m.HotShare, m.m.SinkCPU, m.m.Moved, m.m.URLLCReceived, m.m.URLLCSent, m.m.URLLCP50Us, m.m.URLLCP99Us)
	}
	return sb.String()
}
