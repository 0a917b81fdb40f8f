// SPDX-License-Identifier: Apache-2.0

// Package endtoend is the bench's end-to-end part: Mpps of 64-byte
// frames from a generator namespace through a gateway namespace to a
// sink, the gateway running edgeplane's program, beside the kernel's own
// forwarding, a minimal XDP forwarder and the senders' ceilings through
// the same topology, measured in the same run.
package endtoend

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// bpfFTestXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES from linux/bpf.h
// (1U << 1): BPF_PROG_TEST_RUN sends XDP_TX and XDP_REDIRECT frames for
// real instead of only returning the verdict.
const bpfFTestXDPLiveFrames = 1 << 1

// liveBatch is the live-frames batch size (the kernel's default, one NAPI
// budget); liveChunk the repeats per BPF_PROG_TEST_RUN call.
const (
	liveBatch = 64
	liveChunk = 1 << 18
)

// Result is the end-to-end part of the report: 64-byte frames from a
// generator namespace through gateway A (LAN -> GRE encap -> WAN) to a
// sink namespace that counts and drops them, beside the kernel's own
// forwarding through the same topology.
type Result struct {
	Topology   string    `json:"topology"`
	FrameBytes int       `json:"frame_bytes"`
	RunSeconds float64   `json:"run_seconds"`
	Rounds     int       `json:"rounds"`
	Figures    []Figure  `json:"figures"`
	Compare    []Compare `json:"ours_vs_kernel"`
	Note       string    `json:"note"`
}

// Figure is one end-to-end scenario: medians over the rounds.
type Figure struct {
	Name   string `json:"name"`
	Sender string `json:"sender"` // live_frames | af_packet
	Path   string `json:"path"`   // xdp_gre_encap | kernel_ip_forward | xdp_drop_on_lan
	// Mpps is frames received at the sink per second, from the start of
	// sending until the sink stopped counting.
	Mpps float64 `json:"mpps"`
	// OfferedMpps is frames generated per second of sending.
	OfferedMpps float64 `json:"offered_mpps"`
	// Loss is (generated - received) / generated.
	Loss float64 `json:"loss"`
	// Generated and Received are summed over the rounds.
	Generated   uint64    `json:"generated"`
	Received    uint64    `json:"received"`
	MppsSamples []float64 `json:"mpps_samples"`
	// OfMinForwarder is Mpps over the minimal XDP forwarder's with the
	// same sender, the median of the per-round ratios: the minimal
	// forwarder (parse, bpf_fib_lookup, redirect) is the ceiling of
	// every forwarding path through this topology.
	OfMinForwarder float64 `json:"of_min_forwarder"`
	// NewFlowsPerSec is, where every frame is a new flow, the new flows
	// forwarded per second: per core, as every stage runs on the
	// sending CPU (see Result.Note).
	NewFlowsPerSec float64 `json:"new_flows_per_sec,omitempty"`
	Method         string  `json:"method"`
}

// Compare sets ours beside the kernel's forwarding for one sender.
type Compare struct {
	Sender string `json:"sender"`
	// Ratio is ours / kernel in Mpps, the median of the per-round ratios
	// (the two runs of a round are back to back).
	Ratio   float64   `json:"ratio_ours_kernel"`
	Samples []float64 `json:"ratio_samples"`
	// NsAboveSender* are the time per packet forwarding (gateway and
	// sink) adds to the sender's own: 1e3/Mpps less 1e3/Mpps of the
	// sender into an XDP drop on the gateway's LAN veth. Every stage runs
	// on the sending CPU (see Result.Note), so the times add up.
	NsAboveSenderOurs   float64 `json:"ns_above_sender_ours"`
	NsAboveSenderKernel float64 `json:"ns_above_sender_kernel"`
	// CostRatio is NsAboveSenderKernel / NsAboveSenderOurs.
	CostRatio float64 `json:"cost_ratio_kernel_ours"`
}

const (
	e2eTopology = "gen eth0 (10.1.0.2) == lan0 [gateway A: 10.1.0.1, 10.2.0.1] wan0 == eth0 sink (10.2.0.2): veths between three namespaces; " +
		"one UDP flow 10.1.0.2 -> 10.7.0.1 (or a new flow every frame); ours: a rule sends 10.7.0.0/16 into GRE path key 1 to 10.3.9.9, " +
		"or (the redirect figures) redirects it to wan0; 10.3.0.0/16 and 10.7.0.0/16 routed via the sink, a static neighbour; IPv6 off"
	e2eNote = "every stage (sender, gateway, sink) runs in softirq on the sending CPU: a veth hands frames to its peer's NAPI on the CPU that sent them, " +
		"so a rate is one CPU's throughput of sender + gateway + sink, and the sender's own cost dilutes the ratios (ns_above_sender takes it out); " +
		"the kernel forwards plain IPv4 (this kernel has no GRE) while ours also encapsulates; " +
		"the minimal XDP forwarder (parse, bpf_fib_lookup, MACs, TTL, bpf_redirect) forwards plain IPv4 too, so ours is set beside it on a plain " +
		"redirect rule as well (ours_redirect_*: the same pipeline, the encap left out), which is the like-for-like comparison; " +
		"of_min_forwarder is every figure over the minimal forwarder's with the same sender; ours can pass it: a flow-cache hit reuses the next hop " +
		"cached with the flow, where the minimal forwarder calls bpf_fib_lookup for every frame"
	methodGen = "BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES (batch 64) of a generator that stamps the whole frame from a template every run " +
		"(live frames recycle pages the gateway rewrote) and bpf_redirect()s it into the veth toward the gateway; "
	methodAFP   = "AF_PACKET sender (PACKET_MMAP TX ring, TPACKET_V2, PACKET_QDISC_BYPASS, 256 frames per send); "
	pathOurs    = "the edgeplane program (native XDP on lan0 and wan0, flow-cache hit) encapsulates and redirects to wan0; an XDP sink counts and drops"
	pathSteered = "as ours_*, the frames to a prefix a steer FAR sends over an active-standby steering group (table on path 1): an established steered flow"
	pathBcast   = "redundant steering's copy mechanism bare: an XDP program on lan0 redirects every frame with BPF_F_BROADCAST to a devmap of wan0 and wan1 " +
		"(the kernel copies the xdp_frame for one), nothing else; the sink counts both copies, the rate is of packets (copies / 2)"
	pathClone = "the other way to copy, bare: lan0 with GRO (so the veth builds an skb per frame, as for the kernel), a TC ingress program (tcx) " +
		"bpf_clone_redirect()s the skb to wan1 and bpf_redirect()s it to wan0; the sink counts both copies, the rate is of packets (copies / 2)"
	pathSteeredPP = "as ours_*, the frames to a prefix a steer FAR sends over a wrr steering group (table on path 1): every packet picks its member"
	pathRedundant = "as ours_*, the frames to a prefix a steer FAR sends over a redundant group of path 1 (wan0) and a path out of wan1 (a second veth to the sink): " +
		"XDP encapsulates once and broadcasts through the group's devmap, the kernel copies the frame for wan1 and runs the copies' program (edge_xdp_dup) " +
		"on each, which rewrites the outer headers for its path; the sink counts both copies, the rate is of packets (copies / 2)"
	pathKern     = "the gateway's XDP detached, kernel IPv4 forwarding (route 10.7.0.0/16 via the sink) does the work; an XDP sink counts and drops"
	pathKernLive = "the gateway's XDP detached and GRO on lan0 (a veth takes redirected frames only when its peer runs NAPI: GRO turns it on), " +
		"so the veth builds an skb per frame and kernel IPv4 forwarding (route 10.7.0.0/16 via the sink) does the work; an XDP sink counts and drops"
	pathKernAFP = "lan0 as the kernel sets up a veth (no XDP, no GRO: netif_rx); " + pathKern
	pathFloor   = "an XDP program on the gateway's lan0 counts and drops: the most this sender offers"
	pathRedir   = "the edgeplane program (native XDP on lan0 and wan0, flow-cache hit) redirects to wan0 by a redirect rule; an XDP sink counts and drops"
	pathN3Down  = "the edgeplane program with a PFCP session for UE 10.45.0.2 (a record as the agent compiles one; N3 at 10.1.0.1): frames from host A " +
		"to the UE are encapsulated in GTP-U (PDU Session Container, QFI 9) toward the gNB 10.2.0.2 (the sink) and redirected to wan0; the sink counts " +
		"UDP to port 2152 and drops"
	pathN3Up = "the same session: host A sends G-PDUs (108 bytes; the long generator stamps every byte) to N3 10.1.0.1 with the TEID that names the " +
		"session's slot, carrying the UE's datagram to 10.7.0.1; decapsulated, routed to wan0 by the FIB; the sink counts UDP and drops"
	pathFwd = "a minimal XDP forwarder (native on lan0 and wan0, as ours: parse Ethernet/IPv4, bpf_fib_lookup, rewrite MACs, decrement TTL, " +
		"bpf_redirect, nothing else) forwards; an XDP sink counts and drops"
	methodGenNew = "as above, and the generator makes every frame a new flow (UDP source port and destination port from a per-CPU counter and the CPU, " +
		"UDP checksum patched; nothing the gateway routes on changes), so the gateway runs unchanged; "
	pathRedirNew = "the edgeplane program (native XDP on lan0 and wan0) misses its flow cache on every frame: classifies by a redirect rule, " +
		"records the flow (the cache full, so every insert evicts) and redirects to wan0; an XDP sink counts and drops"
)

// e2eRedirConfig is testbed.GREConfig's gateway with a plain redirect rule for
// 10.7.0.0/16 in place of the GRE path.
const e2eRedirConfig = `
interfaces: [{name: lan0, role: lan}, {name: wan0, role: wan}]
fars: [{id: 1, action: redirect, interface: wan0}]
pdrs: [{id: 1, precedence: 1, match: {dst: 10.7.0.0/16}, far: 1}]
limits: {flows: 65536, rules: 1024}
`

// Sink counter indexes (enum sink_kind in testdata/bench_e2e.bpf.c).
const (
	sinkAll = iota
	sinkGRE
	sinkUDP
	sinkOther
	sinkSecond // frames that came in from wan1, whatever their kind
	sinkGTPU
	sinkKinds
)

// e2e is the end-to-end topology and what runs in it.
type e2e struct {
	o             Options
	gen, gw, sink *topo.NS
	genIf         uint32 // gen eth0
	lan, wan      uint32 // gateway lan0, wan0
	wan1          uint32 // gateway wan1 (a redundant group's second path)
	sinkIf        uint32 // sink eth0
	sinkIf1       uint32 // sink eth1, wan1's peer
	dp            *loader.Dataplane
	objs          benche2eObjects
	gwLinks       []link.Link // lan0, wan0 while ours is attached
	floorLink     link.Link   // the drop program on lan0
	tcLink        link.Link   // the clone program on lan0's TC ingress
	sinkLink      link.Link   // the sink's program on its eth0
	frame         []byte
	closers       []func() error
	alloc         rules.Allocs
	committed     string // the config of the live generation
	// queues is every veth end's TX and RX queues (0: one), curQueues
	// the ones they have now.
	queues, curQueues int
	// n3Slot is the N3 figures' session's slot + 1 (0: none), n3Uplink
	// its uplink G-PDU.
	n3Slot   uint32
	n3Uplink []byte
}

// Options are what the part takes: the length of one run and the runs
// per figure (the median is reported).
type Options struct {
	Seconds float64
	Rounds  int
	Log     measure.Logf
}

// Run builds the topology, measures every end-to-end figure and
// removes the topology.
func Run(ctx context.Context, o Options) (*Result, error) {
	e := &e2e{o: o, frame: testbed.UDPFrame(testbed.HostA, testbed.EncapDst, 5000)}
	defer e.close()
	if err := e.setup(); err != nil {
		return nil, err
	}
	res := &Result{Topology: e2eTopology, FrameBytes: len(e.frame), RunSeconds: o.Seconds, Rounds: o.Rounds, Note: e2eNote}
	type scenario struct {
		fig   Figure
		setup func() error
		send  func(time.Duration) (uint64, error)
		kind  int
		// newFlows: every frame a new flow
		newFlows bool
		// copies: frames the sink gets per packet sent (0: 1)
		copies uint64
		// n3: the user plane holds the N3 figures' session (only
		// while these run: it costs other packets the UE check)
		n3      bool
		loss    []float64
		offered []float64
	}
	// Ours and the kernel back to back for each sender, then the
	// senders' ceilings, every round.
	scenarios := []*scenario{
		{fig: Figure{Name: "ours_live_frames", Sender: "live_frames", Path: "xdp_gre_encap", Method: methodGen + pathOurs}, setup: e.attachOurs, send: e.sendLive, kind: sinkGRE},
		{fig: Figure{Name: "kernel_live_frames", Sender: "live_frames", Path: "kernel_ip_forward", Method: methodGen + pathKernLive}, setup: e.kernelGRO, send: e.sendLive, kind: sinkUDP},
		{fig: Figure{Name: "ours_af_packet", Sender: "af_packet", Path: "xdp_gre_encap", Method: methodAFP + pathOurs}, setup: e.attachOurs, send: e.sendAFP, kind: sinkGRE},
		{fig: Figure{Name: "ours_n3_downlink_live_frames", Sender: "live_frames", Path: "xdp_gtpu_encap", Method: methodGen + pathN3Down}, setup: e.attachOurs, send: e.sendLiveTo(n3UE), kind: sinkGTPU, n3: true},
		{fig: Figure{Name: "ours_n3_uplink_live_frames", Sender: "live_frames", Path: "xdp_gtpu_decap", Method: methodGen + pathN3Up}, setup: e.attachOurs, send: e.sendLong(&e.n3Uplink), kind: sinkUDP, n3: true},
		{fig: Figure{Name: "ours_steered_live_frames", Sender: "live_frames", Path: "xdp_gre_encap_steered", Method: methodGen + pathSteered}, setup: e.attachOursSteered, send: e.sendLiveTo(testbed.SteerDst), kind: sinkGRE},
		{fig: Figure{Name: "ours_steered_per_packet_live_frames", Sender: "live_frames", Path: "xdp_gre_encap_steered_per_packet", Method: methodGen + pathSteeredPP}, setup: e.attachOursSteered, send: e.sendLiveTo(testbed.WRRDst), kind: sinkGRE},
		{fig: Figure{Name: "ours_redundant_live_frames", Sender: "live_frames", Path: "xdp_gre_encap_redundant", Method: methodGen + pathRedundant}, setup: e.attachOurs, send: e.sendLiveTo(testbed.DupDst), kind: sinkGRE, copies: 2},
		{fig: Figure{Name: "xdp_broadcast_live_frames", Sender: "live_frames", Path: "xdp_devmap_broadcast", Method: methodGen + pathBcast}, setup: e.attachBcast, send: e.sendLive, kind: sinkUDP, copies: 2},
		{fig: Figure{Name: "tc_clone_live_frames", Sender: "live_frames", Path: "tc_clone_redirect", Method: methodGen + pathClone}, setup: e.attachClone, send: e.sendLive, kind: sinkUDP, copies: 2},
		{fig: Figure{Name: "kernel_af_packet", Sender: "af_packet", Path: "kernel_ip_forward", Method: methodAFP + pathKernAFP}, setup: e.detachAll, send: e.sendAFP, kind: sinkUDP},
		{fig: Figure{Name: "ceiling_live_frames", Sender: "live_frames", Path: "xdp_drop_on_lan", Method: methodGen + pathFloor}, setup: e.attachFloor, send: e.sendLive, kind: sinkUDP},
		{fig: Figure{Name: "ceiling_af_packet", Sender: "af_packet", Path: "xdp_drop_on_lan", Method: methodAFP + pathFloor}, setup: e.attachFloor, send: e.sendAFP, kind: sinkUDP},
		{fig: Figure{Name: "min_forwarder_live_frames", Sender: "live_frames", Path: "xdp_min_forwarder", Method: methodGen + pathFwd}, setup: e.attachFwd, send: e.sendLive, kind: sinkUDP},
		{fig: Figure{Name: "ours_redirect_live_frames", Sender: "live_frames", Path: "xdp_redirect", Method: methodGen + pathRedir}, setup: e.attachOursRedirect, send: e.sendLive, kind: sinkUDP},
		{fig: Figure{Name: "ours_new_flows_live_frames", Sender: "live_frames", Path: "xdp_redirect_new_flows", Method: methodGen + methodGenNew + pathRedirNew}, setup: e.attachOursRedirect, send: e.sendLiveNew, kind: sinkUDP, newFlows: true},
		{fig: Figure{Name: "kernel_new_flows_live_frames", Sender: "live_frames", Path: "kernel_ip_forward_new_flows", Method: methodGen + methodGenNew + pathKernLive}, setup: e.kernelGRO, send: e.sendLiveNew, kind: sinkUDP, newFlows: true},
		{fig: Figure{Name: "min_forwarder_af_packet", Sender: "af_packet", Path: "xdp_min_forwarder", Method: methodAFP + pathFwd}, setup: e.attachFwd, send: e.sendAFP, kind: sinkUDP},
		{fig: Figure{Name: "ours_redirect_af_packet", Sender: "af_packet", Path: "xdp_redirect", Method: methodAFP + pathRedir}, setup: e.attachOursRedirect, send: e.sendAFP, kind: sinkUDP},
	}
	d := time.Duration(o.Seconds * float64(time.Second))
	for round := 1; round <= o.Rounds; round++ {
		for _, s := range scenarios {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := e.n3(s.n3); err != nil {
				return nil, fmt.Errorf("%s: %w", s.fig.Name, err)
			}
			if err := s.setup(); err != nil {
				return nil, fmt.Errorf("%s: %w", s.fig.Name, err)
			}
			passed, err := testbed.SumCounter(e.objs.FwdPass, 0)
			if err != nil {
				return nil, err
			}
			m, err := e.measure(s.send, d, s.kind)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.fig.Name, err)
			}
			if s.copies > 1 {
				// Each copy leaves by its own WAN link: a path that
				// lost its copies would still read as a loss under
				// one half wherever the kernel drops, so each link's
				// share is checked, not the loss.
				if first := m.received - m.second; m.second*4 < m.received || first*4 < m.received {
					return nil, fmt.Errorf("%s: copies missing: %d frames from wan0, %d from wan1", s.fig.Name, first, m.second)
				}
				m.received /= s.copies
				m.mpps /= float64(s.copies)
			}
			// The minimal forwarder's frames reach the sink as the
			// kernel's do: check none went through the kernel.
			if after, err := testbed.SumCounter(e.objs.FwdPass, 0); err != nil {
				return nil, err
			} else if (after-passed)*100 > m.received {
				return nil, fmt.Errorf("%s: the forwarder left %d of %d frames to the kernel", s.fig.Name, after-passed, m.received)
			}
			o.Log("%s, round %d: %.3f Mpps received, %.3f offered, loss %.4f", s.fig.Name, round, m.mpps, m.offered, m.loss())
			s.fig.MppsSamples = append(s.fig.MppsSamples, m.mpps)
			s.fig.Generated += m.generated
			s.fig.Received += m.received
			s.loss = append(s.loss, m.loss())
			s.offered = append(s.offered, m.offered)
		}
	}
	byName := map[string]*Figure{}
	for _, s := range scenarios {
		s.fig.Mpps = measure.Median(s.fig.MppsSamples)
		s.fig.Loss = measure.Median(s.loss)
		s.fig.OfferedMpps = measure.Median(s.offered)
		if s.newFlows {
			s.fig.NewFlowsPerSec = s.fig.Mpps * 1e6
		}
		res.Figures = append(res.Figures, s.fig)
		byName[s.fig.Name] = &res.Figures[len(res.Figures)-1]
	}
	for _, sender := range []string{"live_frames", "af_packet"} {
		ours, kern, ceil := byName["ours_"+sender], byName["kernel_"+sender], byName["ceiling_"+sender]
		c := Compare{Sender: sender}
		for i := range ours.MppsSamples {
			c.Samples = append(c.Samples, ours.MppsSamples[i]/kern.MppsSamples[i])
		}
		c.Ratio = measure.Median(c.Samples)
		c.NsAboveSenderOurs = 1e3/ours.Mpps - 1e3/ceil.Mpps
		c.NsAboveSenderKernel = 1e3/kern.Mpps - 1e3/ceil.Mpps
		if c.NsAboveSenderOurs > 0 {
			c.CostRatio = c.NsAboveSenderKernel / c.NsAboveSenderOurs
		}
		res.Compare = append(res.Compare, c)
	}
	for i := range res.Figures {
		f := &res.Figures[i]
		fwd := byName["min_forwarder_"+f.Sender]
		var ratios []float64
		for j := range f.MppsSamples {
			ratios = append(ratios, f.MppsSamples[j]/fwd.MppsSamples[j])
		}
		f.OfMinForwarder = measure.Median(ratios)
	}
	return res, nil
}

// Goals set ours beside the kernel's forwarding (three times its rate
// or more, for each sender) and beside the minimal XDP forwarder: a
// flow-cache hit should forward at 90 % of its rate or more.
func Goals(e *Result) []measure.Goal {
	var goals []measure.Goal
	for _, c := range e.Compare {
		goals = append(goals, measure.Goal{Name: "ours / kernel Mpps end to end, " + c.Sender, Value: c.Ratio, Limit: 3, AtLeast: true})
	}
	for _, f := range e.Figures {
		if f.Name == "ours_redirect_live_frames" {
			return append(goals, measure.Goal{Name: "ours established / minimal XDP forwarder end to end, live_frames", Value: f.OfMinForwarder, Limit: 0.9, AtLeast: true})
		}
	}
	return goals
}

// setup creates the namespaces, links, addresses, routes and programs.
func (e *e2e) setup() error {
	prefix := fmt.Sprintf("epe2e%d", os.Getpid())
	if e.queues > 1 {
		prefix = fmt.Sprintf("epmq%d", os.Getpid())
	}
	for _, n := range []struct {
		p      **topo.NS
		suffix string
	}{{&e.gen, "g"}, {&e.gw, "w"}, {&e.sink, "s"}} {
		ns, err := topo.NewNS(prefix + n.suffix)
		if err != nil {
			return err
		}
		*n.p = ns
		e.closers = append(e.closers, ns.Delete)
		if err := ns.Sysctl("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
			return err
		}
	}
	if err := e.gw.Sysctl("net.ipv4.ip_forward=1"); err != nil {
		return err
	}
	if err := topo.AddVeth(
		topo.End{NS: e.gen, Name: "eth0", MAC: topo.MACHostA, Addrs: []string{topo.AddrHostA + "/24"}, Queues: e.queues},
		topo.End{NS: e.gw, Name: "lan0", MAC: topo.MACLan0, Addrs: []string{topo.AddrLan0 + "/24"}},
	); err != nil {
		return err
	}
	if err := topo.AddVeth(
		topo.End{NS: e.sink, Name: "eth0", MAC: topo.MACWanNeigh, Addrs: []string{topo.AddrWanNeigh + "/24"}, Queues: e.queues},
		topo.End{NS: e.gw, Name: "wan0", MAC: topo.MACWan0, Addrs: []string{topo.AddrWan0 + "/24"}},
	); err != nil {
		return err
	}
	// A second WAN link to the sink, for the redundant group's second
	// path.
	if err := topo.AddVeth(
		topo.End{NS: e.sink, Name: "eth1", MAC: topo.MACWan1Neigh, Addrs: []string{"10.4.0.2/24"}, Queues: e.queues},
		topo.End{NS: e.gw, Name: "wan1", MAC: topo.MACWan1, Addrs: []string{"10.4.0.1/24"}},
	); err != nil {
		return err
	}
	// The sink drops ARP too.
	if err := e.gw.SetNeigh("wan0", topo.AddrWanNeigh, topo.MACWanNeigh); err != nil {
		return err
	}
	if err := e.gw.SetNeigh("wan1", "10.4.0.2", topo.MACWan1Neigh); err != nil {
		return err
	}
	for _, dst := range []string{"10.3.0.0/16", "10.7.0.0/16"} {
		if err := e.gw.AddRoute(dst, topo.AddrWanNeigh, "wan0"); err != nil {
			return err
		}
	}
	if err := e.gw.AddRoute("10.6.0.0/16", "10.4.0.2", "wan1"); err != nil {
		return err
	}
	var err error
	if e.genIf, err = e.gen.Ifindex("eth0"); err != nil {
		return err
	}
	if e.lan, err = e.gw.Ifindex("lan0"); err != nil {
		return err
	}
	if e.wan, err = e.gw.Ifindex("wan0"); err != nil {
		return err
	}
	if e.sinkIf, err = e.sink.Ifindex("eth0"); err != nil {
		return err
	}
	if e.wan1, err = e.gw.Ifindex("wan1"); err != nil {
		return err
	}
	if e.sinkIf1, err = e.sink.Ifindex("eth1"); err != nil {
		return err
	}

	// Generator and sink.
	spec, err := loadBenche2e()
	if err != nil {
		return err
	}
	remote := testbed.GRERemote.As4()
	for name, v := range map[string]any{
		benche2eVarGenIfindex:     e.genIf,
		benche2eVarSinkGreRemote:  remote,
		benche2eVarSinkGreRemote2: testbed.DupRemote.As4(),
		benche2eVarSinkIfindex1:   e.sinkIf1,
		benche2eVarDupIf0:         e.wan,
		benche2eVarDupIf1:         e.wan1,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(&e.objs, nil); err != nil {
		return fmt.Errorf("load generator and sink: %w", err)
	}
	e.closers = append(e.closers, e.objs.Close)
	for _, ifi := range []uint32{e.sinkIf, e.sinkIf1} {
		var l link.Link
		if err := e.sink.Do(func() (err error) {
			l, err = link.AttachXDP(link.XDPOptions{Program: e.objs.BenchSink, Interface: int(ifi), Flags: link.XDPDriverMode})
			return err
		}); err != nil {
			return fmt.Errorf("attach sink: %w", err)
		}
		e.closers = append(e.closers, l.Close)
		if ifi == e.sinkIf {
			e.sinkLink = l
		}
	}

	// Gateway A: the real program, its maps and a compiled config.
	limits := bpf.Limits{Flows: 65536, Rules: 1024}
	if e.dp, err = loader.Open(limits, ""); err != nil {
		return err
	}
	e.closers = append(e.closers, e.dp.Close)
	if _, err := e.dp.LoadProgram(); err != nil {
		return err
	}
	e.alloc = rules.NewAllocs(limits.Rules, nil, nil)
	if err := e.use(testbed.GREConfig); err != nil {
		return err
	}
	// Devmap entries name interfaces of the namespace they are written in;
	// next hops are shared by destination as an agent there would.
	return e.gw.Do(func() error {
		for _, ifi := range []uint32{e.wan, e.wan1} {
			if err := e.objs.DupTx.Put(ifi, ifi); err != nil {
				return fmt.Errorf("broadcast devmap: %w", err)
			}
		}
		if err := e.dp.SetTx([]uint32{e.lan, e.wan, e.wan1}); err != nil {
			return err
		}
		return testbed.ShareNextHops(e.dp)
	})
}

// attachXDP attaches prog natively to ifindex in the gateway namespace.
func (e *e2e) attachXDP(prog *ebpf.Program, ifindex uint32) (link.Link, error) {
	var l link.Link
	err := e.gw.Do(func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: int(ifindex), Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach xdp to gateway ifindex %d: %w", ifindex, err)
	}
	return l, nil
}

// detachAll leaves the gateway to the kernel, lan0 as a veth starts
// (GRO off).
func (e *e2e) detachAll() error {
	errs := []error{e.lanGRO(false)}
	for _, l := range e.gwLinks {
		errs = append(errs, l.Close())
	}
	e.gwLinks = nil
	if e.floorLink != nil {
		errs = append(errs, e.floorLink.Close())
		e.floorLink = nil
	}
	if e.tcLink != nil {
		errs = append(errs, e.tcLink.Close())
		e.tcLink = nil
	}
	return errors.Join(errs...)
}

// kernelGRO leaves the gateway to the kernel with GRO on lan0, so lan0
// runs NAPI and takes frames the generator redirects into its peer.
func (e *e2e) kernelGRO() error {
	if err := e.detachAll(); err != nil {
		return err
	}
	return e.lanGRO(true)
}

func (e *e2e) lanGRO(on bool) error {
	return e.gw.SetGRO("lan0", on)
}

// use commits cfg to the gateway's dataplane unless it is the live one.
func (e *e2e) use(cfg string) error {
	if e.committed == cfg {
		return nil
	}
	c, err := yamlcfg.Parse([]byte(cfg))
	if err != nil {
		return fmt.Errorf("gateway config: %w", err)
	}
	resolve := func(name string) (uint32, error) {
		switch name {
		case "lan0":
			return e.lan, nil
		case "wan0":
			return e.wan, nil
		case "wan1":
			return e.wan1, nil
		}
		return 0, fmt.Errorf("no interface %q", name)
	}
	gen, next, err := rules.Compile(c, resolve, e.alloc, e.dp.Limits)
	if err != nil {
		return fmt.Errorf("compile gateway config: %w", err)
	}
	// In the gateway's namespace: a redundant group's devmap names its
	// interfaces.
	if err := e.gw.Do(func() error { _, err := e.dp.Commit(gen); return err }); err != nil {
		return fmt.Errorf("commit gateway config: %w", err)
	}
	e.alloc, e.committed = next, cfg
	return nil
}

// attachOurs attaches the edgeplane program to lan0 and wan0, with the
// GRE path.
func (e *e2e) attachOurs() error {
	if err := e.use(testbed.GREConfig); err != nil {
		return err
	}
	return e.attachGateway(e.dp.Prog)
}

// attachOursSteered is attachOurs with both steering groups of
// testbed.GREConfig sending everything over their first member (path 1).
func (e *e2e) attachOursSteered() error {
	if err := e.use(testbed.GREConfig); err != nil {
		return err
	}
	var first [bpf.SteerTable]uint8
	for idx := uint32(0); idx < 2; idx++ {
		if ok, err := e.dp.SetSteer(idx, 2, 0b01, first); err != nil || !ok {
			return fmt.Errorf("steering group %d: %v (set %v)", idx, err, ok)
		}
	}
	return e.attachGateway(e.dp.Prog)
}

// sendLiveTo is sendLive with the frame to dst (a steered prefix of
// testbed.GREConfig).
func (e *e2e) sendLiveTo(dst netip.Addr) func(time.Duration) (uint64, error) {
	return func(d time.Duration) (uint64, error) {
		plain := e.frame
		e.frame = testbed.UDPFrame(testbed.HostA, dst, 5000)
		defer func() { e.frame = plain }()
		return e.sendLive(d)
	}
}

// The N3 figures' UE, behind the sink as its gNB (wan0's neighbour);
// N3 is lan0's address, where the generator's G-PDUs go.
var (
	n3UE   = netip.MustParseAddr("10.45.0.2")
	n3GNB  = netip.MustParseAddr(topo.AddrWanNeigh)
	n3Addr = netip.MustParseAddr(topo.AddrLan0)
)

// n3 gives the user plane its N3 address and the UE's session (on), or
// takes both away.
func (e *e2e) n3(on bool) error {
	if on == (e.n3Slot != 0) {
		return nil
	}
	ss, err := e.dp.Sessions()
	if err != nil {
		return err
	}
	if !on {
		slot := e.n3Slot - 1
		e.n3Slot, e.n3Uplink = 0, nil
		if err := ss.Delete(slot); err != nil {
			return err
		}
		return e.dp.SetGTPU(netip.Addr{})
	}
	if err := e.dp.SetGTPU(n3Addr); err != nil {
		return err
	}
	slot, err := ss.Slot()
	if err != nil {
		return err
	}
	// The TEID the user plane would choose: its low bits the slot.
	teid := 1<<20 | slot
	rec, keys := testbed.GTPUSession(teid, 0, 0x9000, 9, n3UE, n3GNB)
	if err := ss.Put(slot, rec, keys); err != nil {
		return err
	}
	// Uplink: the UE's datagram to the GRE figures' destination (routed
	// by wan0 to the sink).
	e.n3Uplink = testbed.GTPUFrame(topo.MACHostA, topo.MACLan0, testbed.HostA, n3Addr, teid, 9,
		testbed.UDPFrame(n3UE, testbed.EncapDst, 5000))
	e.n3Slot = slot + 1
	return nil
}

// sendLong runs the long frames' generator for d, sending *f (read when
// it runs: the N3 figures make theirs in their setup).
func (e *e2e) sendLong(f *[]byte) func(time.Duration) (uint64, error) {
	return func(d time.Duration) (uint64, error) {
		var tmpl [128]byte
		if len(*f) > len(tmpl) {
			return 0, fmt.Errorf("a frame of %d bytes: the long generator stamps %d", len(*f), len(tmpl))
		}
		copy(tmpl[:], *f)
		if err := e.objs.GenFrameLong.Set(tmpl); err != nil {
			return 0, fmt.Errorf("set the long generator's frame: %w", err)
		}
		plain := e.frame
		e.frame = *f
		defer func() { e.frame = plain }()
		return e.runGen(e.objs.BenchGenLong, d)
	}
}

// attachOursRedirect attaches the edgeplane program to lan0 and wan0,
// with the redirect rule.
func (e *e2e) attachOursRedirect() error {
	if err := e.use(e2eRedirConfig); err != nil {
		return err
	}
	return e.attachGateway(e.dp.Prog)
}

// attachFwd attaches the minimal forwarder to lan0 and wan0.
func (e *e2e) attachFwd() error {
	return e.attachGateway(e.objs.BenchFwd)
}

// attachGateway attaches prog to lan0, wan0 and wan1, as the agent
// attaches ours to every interface it is given. (On wan1 it also makes
// the veth advertise that it takes redirected frames: its NDO_XMIT
// feature follows its peer's XDP program only when its own XDP or
// features change, and a devmap broadcast skips a device without it.)
func (e *e2e) attachGateway(prog *ebpf.Program) error {
	if err := e.detachAll(); err != nil {
		return err
	}
	for _, idx := range []uint32{e.lan, e.wan, e.wan1} {
		l, err := e.attachXDP(prog, idx)
		if err != nil {
			return err
		}
		e.gwLinks = append(e.gwLinks, l)
	}
	return nil
}

// attachBcast puts the bare broadcast on lan0 (and, as for ours, an XDP
// program on wan0 and wan1: the sink's, which nothing reaches there).
func (e *e2e) attachBcast() error {
	if err := e.detachAll(); err != nil {
		return err
	}
	for _, c := range []struct {
		prog *ebpf.Program
		idx  uint32
	}{{e.objs.BenchDupBcast, e.lan}, {e.objs.BenchSink, e.wan}, {e.objs.BenchSink, e.wan1}} {
		l, err := e.attachXDP(c.prog, c.idx)
		if err != nil {
			return err
		}
		e.gwLinks = append(e.gwLinks, l)
	}
	return nil
}

// attachClone leaves lan0 to the kernel with GRO on and puts the bare
// clone on its TC ingress.
func (e *e2e) attachClone() error {
	if err := e.kernelGRO(); err != nil {
		return err
	}
	return e.gw.Do(func() (err error) {
		e.tcLink, err = link.AttachTCX(link.TCXOptions{Program: e.objs.BenchDupClone, Interface: int(e.lan), Attach: ebpf.AttachTCXIngress})
		if err != nil {
			err = fmt.Errorf("attach tc clone to lan0: %w", err)
		}
		return err
	})
}

// attachFloor puts the counting drop program on lan0: frames end there.
func (e *e2e) attachFloor() error {
	if err := e.detachAll(); err != nil {
		return err
	}
	l, err := e.attachXDP(e.objs.BenchSink, e.lan)
	if err != nil {
		return err
	}
	e.floorLink = l
	return nil
}

// sendLive runs the live-frames generator for d in the generator
// namespace; it returns the frames generated (runs of the generator).
func (e *e2e) sendLive(d time.Duration) (uint64, error) {
	return e.runGen(e.objs.BenchGen, d)
}

// sendLiveNew is sendLive with every frame a new flow.
func (e *e2e) sendLiveNew(d time.Duration) (uint64, error) {
	return e.runGen(e.objs.BenchGenNew, d)
}

// runGen runs the generator gen for d, sending e.frame.
func (e *e2e) runGen(gen *ebpf.Program, d time.Duration) (uint64, error) {
	var tmpl [64]byte
	copy(tmpl[:], e.frame)
	if err := e.objs.GenFrame.Set(tmpl); err != nil {
		return 0, fmt.Errorf("set the generator's frame: %w", err)
	}
	before, err := testbed.SumCounter(e.objs.GenCount, 0)
	if err != nil {
		return 0, err
	}
	err = e.gen.Do(func() error {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			// The generator's bpf_redirect() names an interface of this
			// namespace: the test run's frames arrive on its loopback.
			// Live mode reports no verdict: what arrives at the sink
			// is checked instead.
			if _, err := gen.Run(&ebpf.RunOptions{Data: e.frame, Repeat: liveChunk, Flags: bpfFTestXDPLiveFrames, BatchSize: liveBatch}); err != nil {
				return fmt.Errorf("live frames: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	after, err := testbed.SumCounter(e.objs.GenCount, 0)
	return after - before, err
}

// sendAFP runs the AF_PACKET sender for d in the generator namespace.
func (e *e2e) sendAFP(d time.Duration) (uint64, error) {
	var sent uint64
	err := e.gen.Do(func() error {
		s, err := newAFPSender(int(e.genIf), e.frame)
		if err != nil {
			return err
		}
		defer s.Close()
		sent, err = s.run(d)
		return err
	})
	return sent, err
}

type e2eSample struct {
	generated, received uint64
	second              uint64 // of received, those from wan1
	mpps, offered       float64
}

func (m e2eSample) loss() float64 {
	if m.generated == 0 {
		return 0
	}
	return float64(int64(m.generated)-int64(m.received)) / float64(m.generated)
}

// measure runs send for d and counts what reaches the sink. The rate is
// frames received over the time from the start of sending until the sink
// stopped counting. It fails when nothing arrived or when what arrived is
// not mostly of the kind the path must produce.
func (e *e2e) measure(send func(time.Duration) (uint64, error), d time.Duration, kind int) (e2eSample, error) {
	var m e2eSample
	before, err := sinkCounts(e.objs.SinkCount)
	if err != nil {
		return m, err
	}
	start := time.Now()
	gen, err := send(d)
	if err != nil {
		return m, err
	}
	sent := time.Since(start)
	// Drain: poll until the sink has been quiet for 20 ms.
	last, lastAt := before[sinkAll], time.Now()
	for {
		c, err := sinkCounts(e.objs.SinkCount)
		if err != nil {
			return m, err
		}
		if c[sinkAll] != last {
			last, lastAt = c[sinkAll], time.Now()
		} else if time.Since(lastAt) > 20*time.Millisecond {
			break
		}
		time.Sleep(time.Millisecond)
	}
	after, err := sinkCounts(e.objs.SinkCount)
	if err != nil {
		return m, err
	}
	var got [sinkKinds]uint64
	for i := range got {
		got[i] = after[i] - before[i]
	}
	m.generated, m.received, m.second = gen, got[sinkAll], got[sinkSecond]
	if m.received == 0 {
		return m, fmt.Errorf("nothing reached the sink (%d generated)", gen)
	}
	// Anything else the namespaces send (nothing, with IPv6 off) must
	// stay noise: the figure times the path it names.
	if got[kind]*100 < m.received*99 {
		return m, fmt.Errorf("sink got %d frames, only %d of the expected kind (gre %d, udp %d, gtp-u %d, other %d)",
			m.received, got[kind], got[sinkGRE], got[sinkUDP], got[sinkGTPU], got[sinkOther])
	}
	elapsed := lastAt.Sub(start)
	if elapsed < sent {
		elapsed = sent
	}
	m.mpps = float64(m.received) / elapsed.Seconds() / 1e6
	m.offered = float64(m.generated) / sent.Seconds() / 1e6
	return m, nil
}

func sinkCounts(m *ebpf.Map) ([sinkKinds]uint64, error) {
	var c [sinkKinds]uint64
	for i := range c {
		v, err := testbed.SumCounter(m, uint32(i))
		if err != nil {
			return c, err
		}
		c[i] = v
	}
	return c, nil
}

// close detaches and removes everything setup made, in reverse.
func (e *e2e) close() {
	_ = e.detachAll()
	for i := len(e.closers) - 1; i >= 0; i-- {
		_ = e.closers[i]()
	}
}

// Text renders the figures and the comparisons, a line each.
func (e *Result) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "end to end, %d-byte frames, %d x %.1f s (median):\n", e.FrameBytes, e.Rounds, e.RunSeconds)
	fmt.Fprintf(&sb, "%-36s %10s %10s %8s\n", "figure", "Mpps", "offered", "loss")
	for _, f := range e.Figures {
		fmt.Fprintf(&sb, "%-36s %10.3f %10.3f %8.4f\n", f.Name, f.Mpps, f.OfferedMpps, f.Loss)
	}
	for _, c := range e.Compare {
		fmt.Fprintf(&sb, "%s sender: ours / kernel %.2f; ns/packet above the sender: ours %.0f, kernel %.0f (kernel / ours %.2f)\n",
			c.Sender, c.Ratio, c.NsAboveSenderOurs, c.NsAboveSenderKernel, c.CostRatio)
	}
	return sb.String()
}
