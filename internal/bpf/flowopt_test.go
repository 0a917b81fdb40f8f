// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

// foConfig sends lan0's traffic to 10.7.0.0/16 over GRE path 1 and takes
// path 1's back; UDP to ports 5000-5999 is in eMBB class 2 (a flow earns
// its 1,000-byte quantum a second: nothing refills while a test runs;
// the class's phantom queue takes 2,000 bytes before it marks), to 5500
// in class 5 (the same), to 7001 in mMTC class 3 (dropped over its
// share), to 7002 in class 6 (flows' shares of 3,000 bytes, the class's
// burst as much), DSCP 46 in URLLC class 1 (never held), TCP in eMBB
// class 4 (a rate no test reaches).
const foConfig = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
  - {name: wan1, role: wan}
paths:
  - {id: 1, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.3.9.9, key: 1, monitor: {insecure: true}}
fars:
  - {id: 1, action: encap, path: 1}
  - {id: 9, action: decap}
qos_classes:
  - {id: 1, type: urllc, dscp: "46"}
  - {id: 2, type: embb, rate: 8kbit, quantum: 1000, burst: 2000}
  - {id: 3, type: mmtc, rate: 8kbit, quantum: 256, burst: 256, over: drop}
  - {id: 4, type: embb, rate: 10gbit}
  - {id: 5, type: embb, rate: 8kbit, quantum: 1000, burst: 2000}
  - {id: 6, type: custom, rate: 8kbit, quantum: 3000, burst: 3000}
pdrs:
  - {id: 14, precedence: 5, match: {in: lan0, dst: 10.7.0.0/16, proto: udp, dport: 5500}, far: 1, qos: 5}
  - {id: 15, precedence: 5, match: {in: lan0, dst: 10.7.0.0/16, proto: udp, dport: 7002}, far: 1, qos: 6}
  - {id: 13, precedence: 15, match: {in: lan0, dst: 10.7.0.0/16, proto: tcp}, far: 1, qos: 4}
  - {id: 10, precedence: 10, match: {in: lan0, dst: 10.7.0.0/16, proto: udp, dport: 5000-5999}, far: 1, qos: 2}
  - {id: 11, precedence: 10, match: {in: lan0, dst: 10.7.0.0/16, proto: udp, dport: 7001}, far: 1, qos: 3}
  - {id: 12, precedence: 20, match: {in: lan0, dst: 10.7.0.0/16}, far: 1}
  - {id: 90, precedence: 10, match: {in: wan0, proto: gre, dst: 10.2.0.1}, far: 9}
flowopt:
  - {module: probe}
  - {module: fairness}
limits: {flows: 4096, rules: 1024}
`

// foKey is the flow key of a packet from 10.1.0.2:sport to 10.7.1.1:dport.
func foKey(proto uint8, sport, dport uint16) bpf.FlowKey {
	var k bpf.FlowKey
	copy(k.Src[:], []byte{10, 1, 0, 2})
	copy(k.Dst[:], []byte{10, 7, 1, 1})
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], sport)
	k.Sport = binary.LittleEndian.Uint16(p[:])
	binary.BigEndian.PutUint16(p[:], dport)
	k.Dport = binary.LittleEndian.Uint16(p[:])
	k.Proto, k.Family = proto, 4
	return k
}

// tcpSeg is a TCP segment from sport to dport with flags (SYN, ACK), the
// timestamps option when ts, and payload bytes.
func tcpSeg(sport, dport uint16, syn, ack bool, ts bool, tsval, tsecr uint32, payload int) upper {
	return func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1, Ack: 1, SYN: syn, ACK: ack, Window: 500}
		if ts {
			v := make([]byte, 8)
			binary.BigEndian.PutUint32(v, tsval)
			binary.BigEndian.PutUint32(v[4:], tsecr)
			tcp.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
				{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: v}}
		}
		return layers.IPProtocolTCP, []gopacket.SerializableLayer{tcp, gopacket.Payload(make([]byte, payload))}
	}
}

// TestFlowOptRTT: the probe times both directions of a TCP connection
// the gateway forwards (out over path 1, back decapsulated from it): the
// handshake gives each direction its first sample (SYN to SYN-ACK times
// the outbound one, SYN-ACK to ACK the inbound one); after it, a data
// segment with a new TSval is a sample its echo ends. A retransmission
// (a new TSval while the first is in flight) is not timed from the
// first: the echo of the retransmission goes past the sample, which is
// given up. TSvals across the 32-bit wrap compare by serial arithmetic.
// A sample far over the minimum raises the congestion hint, and the
// fairness stage then marks the flow's ECN-capable packets CE though it
// is within its share.
func TestFlowOptRTT(t *testing.T) {
	h := newHarness(t, foConfig)
	greLanNeighbours(t, h)
	const sport, dport = 40000, 80
	k := foKey(6, sport, dport)
	out := func(syn, ack, ts bool, tsval, tsecr uint32, payload int) {
		t.Helper()
		if ret, _ := h.run(serialize(t, v4("10.7.1.1", tcpSeg(sport, dport, syn, ack, ts, tsval, tsecr, payload))()), "lan0"); ret != bpf.XDPRedirect {
			t.Fatalf("TCP out over path 1: verdict %s, want redirect", verdictName(ret))
		}
	}
	back := func(syn, ack, ts bool, tsval, tsecr uint32, payload int) {
		t.Helper()
		in := greIP{src: "10.7.1.1", dst: "10.1.0.2", u: tcpSeg(dport, sport, syn, ack, ts, tsval, tsecr, payload)}.bytes(t, 64)
		if ret, _ := h.run(greFromRemote("10.3.9.9", layers.GRE{KeyPresent: true, Key: 1}).frame(t, in), "wan0"); ret != bpf.XDPRedirect {
			t.Fatalf("TCP back over path 1: verdict %s, want redirect to the LAN", verdictName(ret))
		}
	}
	state := func() (me, other bpf.FODir) {
		t.Helper()
		e, dir, ok, err := h.dp.FOLookup(k)
		if err != nil || !ok {
			t.Fatalf("no flowopt state for the connection (%v)", err)
		}
		return e.D[dir], e.D[1-dir]
	}
	want := func(what string, outSamples, inSamples uint32, outInFlight bool, outTSval uint32) {
		t.Helper()
		o, i := state()
		if o.Samples != outSamples || i.Samples != inSamples || (o.SentNs != 0) != outInFlight || (outInFlight && o.Tsval != outTSval) {
			t.Fatalf("%s: outbound %d samples (in flight %v, TSval %d), inbound %d; want %d (in flight %v, TSval %d), %d",
				what, o.Samples, o.SentNs != 0, o.Tsval, i.Samples, outSamples, outInFlight, outTSval, inSamples)
		}
	}

	out(true, false, true, 100, 0, 0) // SYN
	back(true, true, true, 500, 100, 0)
	want("SYN-ACK", 1, 0, false, 0)
	out(false, true, true, 101, 500, 0) // the handshake's ACK
	want("the handshake's ACK", 1, 1, false, 0)
	o, i := state()
	if o.MinUs == 0 || o.SrttUs == 0 || i.MinUs == 0 || o.SrttUs > 1e6 {
		t.Fatalf("handshake samples: outbound %+v, inbound %+v", o, i)
	}

	out(false, true, true, 1000, 500, 100)
	want("data", 1, 1, true, 1000)
	out(false, true, true, 1000, 500, 100) // same TSval: not a new sample
	out(false, true, true, 1005, 500, 100) // a retransmission, later
	want("more data while one is in flight", 1, 1, true, 1000)
	back(false, true, true, 501, 999, 0)
	want("an echo before the sample", 1, 1, true, 1000)
	back(false, true, true, 502, 1005, 0)
	want("the retransmission's echo: the sample given up", 1, 1, false, 0)
	out(false, true, true, 1006, 502, 100)
	back(false, true, true, 503, 1006, 0)
	want("echoed", 2, 1, false, 0)

	// Across the wrap.
	out(false, true, true, 0xfffffffe, 503, 100)
	back(false, true, true, 504, 0xfffffffd, 0)
	want("an echo before the sample, at the wrap", 2, 1, true, 0xfffffffe)
	back(false, true, true, 505, 1, 0)
	want("an echo past it, across the wrap", 2, 1, false, 0)
	out(false, true, true, 0xffffffff, 505, 100)
	back(false, true, true, 506, 0xffffffff, 0)
	want("echoed at the wrap", 3, 1, false, 0)

	// A pure ACK's TSval waits for data to echo it: no sample.
	out(false, true, true, 7, 506, 0)
	want("a pure ACK", 3, 1, false, 0)

	// Slow echoes: RTTs far over the minimum raise the hint (the test's
	// own runs, tens of microseconds apart, may already have).
	for n := range 4 {
		out(false, true, true, uint32(10+n), 506, 100)
		time.Sleep(30 * time.Millisecond)
		back(false, true, true, uint32(507+n), uint32(10+n), 0)
	}
	o, _ = state()
	t.Logf("after slow echoes: srtt %d us, min %d us, %d samples", o.SrttUs, o.MinUs, o.Samples)
	if o.Flags&1 == 0 || uint64(o.SrttUs) < 3*uint64(o.MinUs)/2 {
		t.Fatalf("four 30 ms echoes over a minimum of %d us: srtt %d us, flags %#x; want the hint", o.MinUs, o.SrttUs, o.Flags)
	}
	if o.Rate == 0 && o.RateBytes == 0 {
		t.Fatalf("no rate estimate: %+v", o)
	}
	for _, c := range []struct {
		tos  uint8
		want uint8
	}{{0x02, 3}, {0x00, 0}} { // ECT(0): marked CE; not ECN-capable: as it was
		ret, f := h.run(serialize(t, v4("10.7.1.1", tcpSeg(sport, dport, false, true, true, 20, 510, 100), func(d *pktDesc) { d.tos = c.tos })()), "lan0")
		if ret != bpf.XDPRedirect {
			t.Fatalf("a congested flow's packet within its share: verdict %s, want redirect", verdictName(ret))
		}
		if ecn := f[14+20+8+1] & 3; ecn != c.want {
			t.Errorf("a congested flow's packet with ECN %d went out with ECN %d, want %d", c.tos&3, ecn, c.want)
		}
	}
}

// foUDP is a UDP packet from 10.1.0.2:sport to 10.7.1.1:dport with the
// whole TOS octet tos (DSCP << 2 | ECN).
func foUDP(t *testing.T, sport, dport uint16, tos uint8) []byte {
	return serialize(t, v4("10.7.1.1", udpU(sport, dport), func(d *pktDesc) { d.tos = tos })())
}

// qosCtr returns class id's counters (the class index is its order here:
// classes 1 to 6 take indexes 0 to 5).
func qosCtr(t *testing.T, h *harness, id uint32) bpf.QoSCounters {
	t.Helper()
	st, err := h.dp.QoSStats()
	if err != nil {
		t.Fatal(err)
	}
	return st[id-1]
}

// TestFlowOptFairness: token accounting per flow. A new eMBB flow has one
// quantum (1,000 bytes): its packets pass until it is spent; after that
// an ECN-capable flow's packets are marked CE (the inner header's
// checksum still right, the outer header copying the mark) until the
// flow is a whole burst in debt, then dropped; a flow that is not
// ECN-capable is dropped at once. The mMTC class drops even ECN-capable
// packets over the share, and a burst of new mMTC sources takes no more
// than one quantum each and the class's burst in all (its phantom
// queue). Flows each within their share are marked once their class
// together is past its burst. URLLC (DSCP 46) is never held back. With
// fairness off, no packet is.
func TestFlowOptFairness(t *testing.T) {
	h := newHarness(t, foConfig)
	greLanNeighbours(t, h)
	send := func(sport, dport uint16, tos uint8, n int) (passed, marked int) {
		t.Helper()
		for range n {
			ret, out := h.run(foUDP(t, sport, dport, tos), "lan0")
			switch ret {
			case bpf.XDPRedirect:
				passed++
				p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
				ips := p.Layers()
				var inner *layers.IPv4
				var outer *layers.IPv4
				for _, l := range ips {
					if ip, ok := l.(*layers.IPv4); ok {
						if outer == nil {
							outer = ip
						} else {
							inner = ip
						}
					}
				}
				if inner == nil || outer == nil {
					t.Fatalf("forwarded frame is not GRE over IPv4: %v", p)
				}
				if inner.TOS&3 == 3 {
					marked++
					if outer.TOS&3 != 3 {
						t.Fatalf("inner packet marked CE, outer ECN %d: want CE copied (RFC 6040)", outer.TOS&3)
					}
				}
				if inetSum(inner.Contents) != 0xffff && inetSum(inner.Contents) != 0 {
					t.Fatalf("inner IPv4 header checksum wrong after marking: %x", inner.Checksum)
				}
				if inner.TOS>>2 != tos>>2 {
					t.Fatalf("DSCP %d became %d", tos>>2, inner.TOS>>2)
				}
			case bpf.XDPDrop:
			default:
				t.Fatalf("verdict %s", verdictName(ret))
			}
		}
		return passed, marked
	}
	frame := len(foUDP(t, 1, 5000, 0))
	quantum := 1000 / frame // packets a new flow's quantum covers

	// ECN-capable (ECT(0)): marked once spent, dropped a burst later.
	passed, marked := send(41000, 5000, 0x02, 60)
	t.Logf("ECT flow, %d-byte frames: %d of 60 passed, %d of them marked", frame, passed, marked)
	if passed-marked < quantum || passed-marked > quantum+1 {
		t.Errorf("ECT flow: %d passed unmarked, want its quantum's %d", passed-marked, quantum)
	}
	if wantMarked := 2000 / frame; marked < wantMarked-1 || marked > wantMarked+1 {
		t.Errorf("ECT flow: %d marked, want a burst's worth (%d)", marked, wantMarked)
	}
	c := qosCtr(t, h, 2)
	if int(c.Marked) != marked || int(c.Packets) != passed || int(c.Dropped) != 60-passed {
		t.Errorf("class 2 counters %+v: want %d passed, %d marked, %d dropped", c, passed, marked, 60-passed)
	}

	// Not ECN-capable (class 5: its phantom queue empty): dropped once
	// spent, counted.
	before := snap(t, h).Reasons[bpf.ReasonFODrop].Packets
	passed, marked = send(41001, 5500, 0, 30)
	if marked != 0 || passed < quantum || passed > quantum+1 {
		t.Errorf("not-ECT flow: %d passed (%d marked), want %d unmarked", passed, marked, quantum)
	}
	if d := snap(t, h).Reasons[bpf.ReasonFODrop].Packets - before; d != uint64(30-passed) {
		t.Errorf("fo_drop counted %d, want %d", d, 30-passed)
	}

	// mMTC: ECT or not, dropped over its 256-byte quantum; each new
	// source (port) gets one quantum at most, and all of them together
	// four times the class's burst (its phantom queue's hard limit: new
	// sources are within their share; the rate adds 1 byte a
	// millisecond).
	start, total := time.Now(), 0
	for sport := uint16(42000); sport < 42020; sport++ {
		passed, marked = send(sport, 7001, 0x02, 10)
		if passed > 256/frame || marked != 0 {
			t.Fatalf("mMTC source %d: %d of 10 passed (%d marked), want at most %d, unmarked", sport, passed, marked, 256/frame)
		}
		total += passed
	}
	if most := (4*256+int(time.Since(start).Milliseconds()))/frame + 1; total < 256/frame || total > most {
		t.Errorf("20 new mMTC sources: %d packets passed, want %d to %d (four bursts of the class)", total, 256/frame, most)
	}

	// Class 6 (shares and burst of 3,000 bytes): two light flows, then a
	// heavy one that takes the class's phantom queue past its burst:
	// from there every ECN-capable packet is marked, light or heavy,
	// within their shares; past two bursts the heavy flow (using its
	// share) loses packets, the light ones none.
	for sport := uint16(43001); sport < 43003; sport++ {
		if passed, marked = send(sport, 7002, 0x02, 10); passed != 10 || marked != 0 {
			t.Fatalf("light flow %d: %d of 10 passed, %d marked", sport, passed, marked)
		}
	}
	passed, marked = send(43000, 7002, 0x02, 50)
	if want := 50 - (3000-1200)/frame; passed != 50 || marked < want-1 || marked > want+1 {
		t.Errorf("a heavy flow past the class's burst: %d of 50 passed, %d marked; want all, %d marked", passed, marked, want)
	}
	if passed, marked = send(43001, 7002, 0x02, 5); passed != 5 || marked != 5 {
		t.Errorf("a light flow while the class is past its burst: %d of 5 passed, %d marked; want all, marked", passed, marked)
	}
	if c := qosCtr(t, h, 6); c.Marked != 0 || c.Dropped != 0 {
		t.Errorf("class 6 counters %+v: want no flow over its share yet", c)
	}
	if passed, _ = send(43000, 7002, 0x02, 60); passed == 60 {
		t.Errorf("the heavy flow past two bursts: all 60 passed, want losses")
	}
	if passed, marked = send(43002, 7002, 0x02, 5); passed != 5 || marked != 5 {
		t.Errorf("a light flow past two bursts: %d of 5 passed, %d marked; want all, marked", passed, marked)
	}

	// URLLC by DSCP (46), to a port no class's PDR names (a PDR's class
	// comes first: a host cannot mark its way out of it): never held.
	if passed, marked = send(41002, 6000, 46<<2|2, 200); passed != 200 || marked != 0 {
		t.Errorf("URLLC: %d of 200 passed, %d marked; want all, unmarked", passed, marked)
	}
	if c := qosCtr(t, h, 1); c.Packets != 200 || c.Dropped != 0 || c.Marked != 0 {
		t.Errorf("URLLC class counters %+v", c)
	}

	// Fairness off: the spent flows pass again.
	cfg := mustParse(t, foConfig)
	cfg.FlowOpt = cfg.FlowOpt[:1]
	h.apply(cfg)
	if passed, marked = send(41001, 5500, 0, 20); passed != 20 || marked != 0 {
		t.Errorf("fairness off: %d of 20 passed, %d marked", passed, marked)
	}
}

// pairPorts returns the source ports, from first on, of three UDP flows
// to port 5000 (foKey) whose connections share a pair of FlowOpt slots
// (the agent holds the secret that places them).
func pairPorts(t *testing.T, h *harness, first uint16) []uint16 {
	t.Helper()
	var ports []uint16
	want, _, _, _ := h.dp.FOPlace(foKey(17, first, 5000))
	for p := first; len(ports) < 3 && p < 65000; p++ {
		if idx, _, _, _ := h.dp.FOPlace(foKey(17, p, 5000)); idx == want {
			ports = append(ports, p)
		}
	}
	if len(ports) < 3 {
		t.Fatalf("found %d flows sharing a pair of slots", len(ports))
	}
	return ports
}

// TestFlowOptNoEviction: a flood of new connections takes FlowOpt state
// only from cold or idle ones, never from an established connection:
// with both of a pair of slots held by established connections a new one
// goes without state (counted fo_full) and the two keep theirs.
func TestFlowOptNoEviction(t *testing.T) {
	h := newHarness(t, foConfig)
	greLanNeighbours(t, h)
	ports := pairPorts(t, h, 43000)
	for _, p := range ports[:2] {
		for range 5 { // established: more than a few packets
			h.run(foUDP(t, p, 5000, 2), "lan0")
		}
	}
	before := snap(t, h).Reasons
	h.run(foUDP(t, ports[2], 5000, 2), "lan0")
	after := snap(t, h).Reasons
	if d := after[bpf.ReasonFOFull].Packets - before[bpf.ReasonFOFull].Packets; d != 1 {
		t.Errorf("a new connection beside two established ones: fo_full counted %d, want 1", d)
	}
	if d := after[bpf.ReasonFOEvict].Packets - before[bpf.ReasonFOEvict].Packets; d != 0 {
		t.Errorf("evicted %d established connections' state", d)
	}
	for _, p := range ports[:2] {
		if _, _, ok, err := h.dp.FOLookup(foKey(17, p, 5000)); err != nil || !ok {
			t.Errorf("established flow from port %d lost its state (%v)", p, err)
		}
	}
	if _, _, ok, _ := h.dp.FOLookup(foKey(17, ports[2], 5000)); ok {
		t.Errorf("the new flow got state")
	}
}

// TestFlowOptRelief: the cpumap decision. With relief on and the CPU the
// packets arrive on hot, a new flow is placed on the cooler of two CPUs
// drawn at random (here the other CPU unless both draws are this one)
// and handed to it (redirect, counted cpu_moved); each flow's later
// packets follow its placement, never split. A flow arriving while the
// CPU is not hot stays where it arrived.
func TestFlowOptRelief(t *testing.T) {
	if bpf.ReliefCPUs() < 2 {
		t.Fatalf("relief needs two CPUs; this machine has %d", bpf.ReliefCPUs())
	}
	h := newHarness(t, foConfig)
	greLanNeighbours(t, h)
	cfg := mustParse(t, foConfig)
	cfg.FlowOpt = append(cfg.FlowOpt, cfgModule(t, "relief"))
	h.apply(cfg)
	if err := h.dp.SetRelief(true); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h.pin = 1 // every run on CPU 0
	loads := func(hot uint32) {
		t.Helper()
		if err := h.dp.SetCPULoads([]bpf.CPULoad{{Pps: 900000, Hot: hot}, {Pps: 1000}}); err != nil {
			t.Fatal(err)
		}
	}
	loads(1)
	for p := uint16(44000); p < 44040; p++ {
		h.run(foUDP(t, p, 5000, 0), "lan0")
	}
	moved := int(snap(t, h).Reasons[bpf.ReasonCPUMoved].Packets)
	t.Logf("CPU 0 hot: %d of 40 new flows handed to CPU 1", moved)
	// Expect 3/4 of 40 (30); 15 is over five standard deviations below.
	if moved < 15 || moved == 40 {
		t.Errorf("%d of 40 new flows handed to the cooler CPU, want about 30 (power of two choices)", moved)
	}
	// Sticky: each flow's next packets go where its first did.
	for p := uint16(44000); p < 44040; p++ {
		e, dir, ok, err := h.dp.FOLookup(foKey(17, p, 5000))
		if err != nil || !ok {
			t.Fatalf("flow %d has no state", p)
		}
		cpu := e.D[dir].Cpu
		for range 3 {
			before := snap(t, h).Reasons[bpf.ReasonCPUMoved].Packets
			h.run(foUDP(t, p, 5000, 0), "lan0")
			d := snap(t, h).Reasons[bpf.ReasonCPUMoved].Packets - before
			if (cpu == 2) != (d == 1) {
				t.Fatalf("flow %d placed on CPU %d: a later packet handed on %d times", p, int(cpu)-1, d)
			}
		}
	}
	// Not hot: new flows stay, and are not placed: once established
	// they stay when the CPU turns hot.
	loads(0)
	before := snap(t, h).Reasons[bpf.ReasonCPUMoved].Packets
	for p := uint16(45000); p < 45020; p++ {
		for range 6 {
			h.run(foUDP(t, p, 6000, 0), "lan0")
		}
	}
	if d := snap(t, h).Reasons[bpf.ReasonCPUMoved].Packets - before; d != 0 {
		t.Errorf("CPU 0 not hot: %d packets of new flows handed on, want none", d)
	}
	loads(1)
	for p := uint16(45000); p < 45020; p++ {
		h.run(foUDP(t, p, 6000, 0), "lan0")
	}
	// URLLC (DSCP 46): never placed, hot or not.
	for p := uint16(46000); p < 46020; p++ {
		h.run(foUDP(t, p, 6000, 46<<2), "lan0")
	}
	if d := snap(t, h).Reasons[bpf.ReasonCPUMoved].Packets - before; d != 0 {
		t.Errorf("CPU 0 hot: %d packets of established or URLLC flows handed on, want none", d)
	}
}

// mustParse parses a config.
func mustParse(t *testing.T, y string) *config.Config {
	t.Helper()
	cfg, err := yamlcfg.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// cfgModule is FlowOpt module name, on.
func cfgModule(_ *testing.T, name string) config.FlowOptModule {
	return config.FlowOptModule{Module: name}
}

// TestFlowOptRecordTakenUnderCopy: a flow's exact-match copy remembers
// where its connection's FlowOpt record was, so its next packet neither
// hashes nor reads the pair. When another connection has taken that
// slot meanwhile (the flow was cold and two new connections of its
// pair came), the flow's packets pass it by (its whole key differs) and
// get a record of their own: the connection now in the slot counts
// only its own packets and keeps its own tokens.
func TestFlowOptRecordTakenUnderCopy(t *testing.T) {
	h := newHarness(t, foConfig)
	greLanNeighbours(t, h)
	h.pin = 1 // one CPU: one exact-match copy per flow
	ports := pairPorts(t, h, 44000)
	a, b, c := ports[0], ports[1], ports[2]
	send := func(p uint16, n int) {
		t.Helper()
		for range n {
			if v, _ := h.run(foUDP(t, p, 5000, 2), "lan0"); v != bpf.XDPRedirect {
				t.Fatalf("flow from port %d: verdict %s", p, verdictName(v))
			}
		}
	}
	// a takes the pair's first slot and its copy notes it; b the second;
	// c evicts the older cold one, a, and sits where a's copy points.
	send(a, 2)
	send(b, 2)
	send(c, 2)
	if _, _, ok, _ := h.dp.FOLookup(foKey(17, a, 5000)); ok {
		t.Fatalf("the first flow kept its record beside two newer ones")
	}
	send(a, 3)
	ec, _, okC, errC := h.dp.FOLookup(foKey(17, c, 5000))
	ea, _, okA, errA := h.dp.FOLookup(foKey(17, a, 5000))
	if errA != nil || errC != nil || !okA || !okC {
		t.Fatalf("records: first %v, third %v (%v, %v)", okA, okC, errA, errC)
	}
	if ec.Packets != 2 || ea.Packets != 3 {
		t.Errorf("the record in the first flow's old slot counted %d packets, want its own 2; the first flow's new one %d, want 3",
			ec.Packets, ea.Packets)
	}
}
