// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// foCPUConfig passes lan's UDP to 10.7.0.0/16 in class 2, whose phantom
// queue drains at 400 Mbit/s (50 MB/s; its burst 24,224 bytes), and
// TCP in class 3, at a rate no test reaches. The PDRs do not name the
// ingress interface: BPF_PROG_TEST_RUN without a context takes them.
const foCPUConfig = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: pass}
qos_classes:
  - {id: 2, type: embb, rate: 400mbit}
  - {id: 3, type: embb, rate: 100gbit}
pdrs:
  - {id: 10, precedence: 10, match: {dst: 10.7.0.0/16, proto: udp}, far: 1, qos: 2}
  - {id: 11, precedence: 10, match: {dst: 10.7.0.0/16, proto: tcp}, far: 1, qos: 3}
flowopt:
  - {module: fairness}
limits: {flows: 4096, rules: 1024}
`

// foBig is a frame of 1,000 bytes of payload from 10.1.0.2:sport to
// 10.7.1.1:5000 over proto (UDP or TCP, an ACK), not ECN-capable.
func foBig(t *testing.T, proto layers.IPProtocol, sport uint16) []byte {
	up := func() (layers.IPProtocol, []gopacket.SerializableLayer) {
		var l4 gopacket.SerializableLayer = &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 5000}
		if proto == layers.IPProtocolTCP {
			l4 = &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 5000, Seq: 1, Ack: 1, ACK: true, Window: 500}
		}
		return proto, []gopacket.SerializableLayer{l4, gopacket.Payload(make([]byte, 1000))}
	}
	return serialize(t, v4("10.7.1.1", up)())
}

// cpuRun is one BPF_PROG_TEST_RUN with repeats on a CPU: when it
// started and ended, and the kernel's time per run.
type cpuRun struct {
	start, end time.Time
	perRun     time.Duration
}

// runOnCPU runs the dataplane's program repeat times on frame, on cpu,
// in the harness's namespace.
func runOnCPU(h *harness, cpu int, frame []byte, repeat int) (cpuRun, error) {
	var r cpuRun
	err := h.ns.Do(func() error { // a thread of its own, ended after
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pin to CPU %d: %w", cpu, err)
		}
		r.start = time.Now()
		ret, d, err := h.dp.Prog.Benchmark(append([]byte(nil), frame...), repeat, nil)
		r.end = time.Now()
		if err == nil && ret != bpf.XDPPass && ret != bpf.XDPDrop {
			err = fmt.Errorf("verdict %s", verdictName(ret))
		}
		r.perRun = d
		return err
	})
	return r, err
}

// runTogether runs frames[i] on CPU i, all at once.
func runTogether(t *testing.T, h *harness, frames [][]byte, repeat int) []cpuRun {
	t.Helper()
	runs := make([]cpuRun, len(frames))
	errs := make([]error, len(frames))
	var ready, wg sync.WaitGroup
	ready.Add(1)
	for i := range frames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Wait()
			runs[i], errs[i] = runOnCPU(h, i, frames[i], repeat)
		}()
	}
	ready.Done()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("CPU %d: %v", i, err)
		}
	}
	return runs
}

// TestFlowOptFairnessTwoCPUs: a class's phantom queue takes no lock that
// CPUs sending at once would queue on (its map's value holds none), and
// holds the class to its rate when two CPUs send its flows at once as
// fast as they can. Each CPU runs the program a million times on a
// flow of its own (BPF_PROG_TEST_RUN with repeats, at once): the class
// passes its rate over the time they ran (its phantom queue's bound: the
// rate, and four bursts), within 10 %. The time a packet
// takes, alone and with the other CPU sending, is logged: over the rate
// (most packets dropped, the queue's tail read), and under it (every
// packet counted into the queue: the CPUs' batches meet on its cache
// line).
func TestFlowOptFairnessTwoCPUs(t *testing.T) {
	if bpf.ReliefCPUs() < 2 {
		t.Fatalf("needs two CPUs; this machine has %d", bpf.ReliefCPUs())
	}
	spec, err := bpf.LoadSpec()
	if err != nil {
		t.Fatal(err)
	}
	vq, ok := spec.Maps["edge_qos_vqs"].Value.(*btf.Struct)
	if !ok {
		t.Fatalf("edge_qos_vqs's value is %v, want a struct", spec.Maps["edge_qos_vqs"].Value)
	}
	for _, m := range vq.Members {
		if m.Type.TypeName() == "bpf_spin_lock" {
			t.Errorf("edge_qos_vqs's value holds a spin lock (%s): every CPU sending the class queues on it", m.Name)
		}
	}

	h := newHarness(t, foCPUConfig)
	const repeat = 1000000
	const rate, burst = 400e6 / 8, 16 * 1514 // bytes a second, bytes
	frames := [][]byte{foBig(t, layers.IPProtocolUDP, 50001), foBig(t, layers.IPProtocolUDP, 50002)}
	under := [][]byte{foBig(t, layers.IPProtocolTCP, 50001), foBig(t, layers.IPProtocolTCP, 50002)}
	alone := func(frames [][]byte) []time.Duration {
		var out []time.Duration
		for i, f := range frames {
			r, err := runOnCPU(h, i, f, repeat/4)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.perRun)
		}
		return out
	}
	over1 := alone(frames)
	before := qosCtr(t, h, 1)
	runs := runTogether(t, h, frames, repeat)
	after := qosCtr(t, h, 1)
	start, end := runs[0].start, runs[0].end
	for _, r := range runs[1:] {
		if r.start.Before(start) {
			start = r.start
		}
		if r.end.After(end) {
			end = r.end
		}
		if r.start.After(runs[0].end) || runs[0].start.After(r.end) {
			t.Fatalf("the two CPUs' runs did not overlap: %v", runs)
		}
	}
	// The class may pass its rate over the time from the first start to
	// the last end, and passes at least its rate over the longer of the
	// CPUs' own times in the program (the kernel's: a CPU taken away by
	// the scheduler sends nothing meanwhile, on this shared machine).
	secs := end.Sub(start).Seconds()
	busy := max(runs[0].perRun, runs[1].perRun).Seconds() * repeat
	passed := float64(after.Bytes - before.Bytes)
	pkts := after.Packets + after.Dropped - before.Packets - before.Dropped
	t.Logf("over the rate: %d packets in %.3f s (%.3f s in the program), %.0f bytes passed: %.3f of the rate over the first, %.3f over the second; "+
		"ns a packet alone %v, together %v, %v", pkts, secs, busy, passed, passed/(rate*secs), passed/(rate*busy), over1, runs[0].perRun, runs[1].perRun)
	if pkts < 2*repeat {
		t.Errorf("the class counted %d packets, want the %d sent", pkts, 2*repeat)
	}
	if passed > rate*secs*1.1+4*burst || passed < rate*busy*0.9 {
		t.Errorf("two CPUs at once passed %.0f bytes, want the class's rate over %.3f s to %.3f s (%.0f to %.0f bytes, within 10 %%, and four bursts)",
			passed, busy, secs, rate*busy, rate*secs)
	}

	under1 := alone(under)
	runs = runTogether(t, h, under, repeat)
	t.Logf("under the rate: ns a packet alone %v, together %v, %v", under1, runs[0].perRun, runs[1].perRun)
}

// TestFlowOptClockAfterBurst: while a CPU's packets come densely, FlowOpt
// reads the fine clock once every few of them and the others take the
// time read before them; a packet judged on such a time must never be
// held back where its own time would let it through. A flow sends a
// dense burst far over its class's rate (BPF_PROG_TEST_RUN with
// repeats, on CPU 0: its tokens spent, most of the burst dropped),
// rests 10 ms (its tokens refilled past the class's burst, the class's
// phantom queue drained), then sends single packets on the same CPU:
// every one passes, as after any pause. The burst's length moves from
// round to round, so the rest begins at every point of the clock's
// schedule (a time read just before the burst ended, or several packets
// before: the packets after the rest then take it).
func TestFlowOptClockAfterBurst(t *testing.T) {
	h := newHarness(t, foCPUConfig)
	frame := foBig(t, layers.IPProtocolUDP, 50003)
	single := func() uint32 {
		var ret uint32
		err := h.ns.Do(func() error {
			var set unix.CPUSet
			set.Set(0)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				return fmt.Errorf("pin to CPU 0: %w", err)
			}
			var err error
			ret, _, err = h.dp.Prog.Benchmark(append([]byte(nil), frame...), 1, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
	for round := range 16 {
		before := qosCtr(t, h, 1)
		if _, err := runOnCPU(h, 0, frame, 1000+round); err != nil {
			t.Fatal(err)
		}
		if c := qosCtr(t, h, 1); c.Dropped == before.Dropped {
			t.Fatalf("round %d: the burst lost no packet (%+v): want it far over the class's rate", round, c)
		}
		time.Sleep(10 * time.Millisecond)
		for i := range 8 {
			if ret := single(); ret != bpf.XDPPass {
				t.Errorf("round %d: packet %d after a rest of 10 ms: %s, want pass (the flow's tokens refilled, the class's queue drained)", round, i, verdictName(ret))
			}
		}
	}
}
