// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bench/endtoend"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestBenchMultiQueue keeps the multiqueue scenario working: a short run
// must produce every path at every queue count, with its frames counted
// where the topology says they went (the queue of the sending CPU, the
// program on that CPU), and the scaling of every path. It asserts no
// speed: counts hold on a loaded machine, rates do not.
func TestBenchMultiQueue(t *testing.T) {
	testutil.RequireRoot(t)
	r, err := Run(context.Background(), Options{Scenario: "multiqueue", E2ESeconds: 0.2, E2ERounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := r.MultiQueue
	if m == nil {
		t.Fatal("no multi-queue figures")
	}
	t.Log("\n" + m.Text())
	var want []string
	for _, p := range []string{"ours_redirect", "ours_encap", "ours_decap", "ours_nat", "kernel", "ceiling"} {
		for _, sh := range []string{"1q_1cpu", "1q_2cpus", "2q_2cpus"} {
			want = append(want, p+"_"+sh)
		}
	}
	if len(m.Figures) != len(want) {
		t.Fatalf("figures: %d, want %d", len(m.Figures), len(want))
	}
	for i, f := range m.Figures {
		if f.Name != want[i] {
			t.Errorf("figure %d: %s, want %s", i, f.Name, want[i])
			continue
		}
		checkQueueFigure(t, f)
	}
	if len(m.Scaling) != 6 {
		t.Fatalf("scaling: %+v", m.Scaling)
	}
	for i, s := range m.Scaling {
		one, two := m.Figures[3*i], m.Figures[3*i+2]
		// One round: the median of the ratios is the ratio.
		if s.Path != one.Path || s.OneQueueMpps != one.Mpps || s.TwoQueuesMpps != two.Mpps || s.Ratio != two.Mpps/one.Mpps ||
			s.RatioSameSenders != two.Mpps/m.Figures[3*i+1].Mpps || len(s.Samples) != 1 {
			t.Errorf("scaling %d: %+v", i, s)
		}
	}
	if len(r.Goals) != 4 {
		t.Errorf("goals: %+v", r.Goals)
	}
	checkRelief(t, m.Relief)
}

// checkRelief checks the relief figures: with relief off, the hot CPU
// forwards every frame; on, it hands flows to the other CPU, which
// forwards them; URLLC frames arrive and are timed in both.
func checkRelief(t *testing.T, r *endtoend.Relief) {
	t.Helper()
	if r == nil {
		t.Fatal("no relief figures")
	}
	if r.Method == "" || r.Flows <= 0 || r.URLLCEvery <= 0 {
		t.Errorf("relief: %+v", r)
	}
	for _, m := range []struct {
		on bool
		m  endtoend.ReliefMode
	}{{false, r.Off}, {true, r.On}} {
		f := m.m
		if f.Mpps <= 0 || len(f.MppsSamples) != 1 || f.Loss < 0 || f.Loss >= 1 || len(f.SinkCPU) < 2 || len(f.GatewayCPU) < 2 || len(f.CPUTime) < 2 ||
			f.URLLCSent == 0 || f.URLLCReceived == 0 || f.URLLCReceived > f.URLLCSent || f.URLLCP50Us <= 0 || f.URLLCP99Us < f.URLLCP50Us {
			t.Errorf("relief on %v: %+v", m.on, f)
			continue
		}
		if want := float64(f.SinkCPU[0]) / float64(sum(f.SinkCPU)); f.HotShare != want {
			t.Errorf("relief on %v: hot CPU's share %.3f, sink CPUs %v", m.on, f.HotShare, f.SinkCPU)
		}
		if !m.on && (f.SinkCPU[1] != 0 || f.Moved != 0) {
			t.Errorf("relief off, yet CPU 1 forwarded %d, %d moved", f.SinkCPU[1], f.Moved)
		}
		if m.on && (f.SinkCPU[1] == 0 || f.Moved == 0 || f.GatewayCPU[1] == 0) {
			t.Errorf("relief on, yet CPU 1 forwarded %d, the gateway ran %v, %d moved", f.SinkCPU[1], f.GatewayCPU, f.Moved)
		}
	}
}

// checkQueueFigure checks one figure's counts: rates measured, frames
// on the queues and CPUs the senders used.
func checkQueueFigure(t *testing.T, f endtoend.QFigure) {
	t.Helper()
	if f.Mpps <= 0 || f.OfferedMpps <= 0 || f.Received == 0 || f.Received > f.Generated || f.Loss < 0 || f.Loss >= 1 ||
		len(f.MppsSamples) != 1 || f.Method == "" || len(f.CPUTime) < 2 || f.MppsPerKernelCPU <= 0 {
		t.Errorf("%s: %+v", f.Name, f)
		return
	}
	if sum(f.SinkCPU) != f.Received {
		t.Errorf("%s: the sink's CPUs counted %v, %d received", f.Name, f.SinkCPU, f.Received)
	}
	if len(f.LanQueueXDP) != 2 || len(f.SinkQueueXDP) != 2 {
		t.Errorf("%s: queues %v %v", f.Name, f.LanQueueXDP, f.SinkQueueXDP)
		return
	}
	ours := strings.HasPrefix(f.Name, "ours_")
	if ours != (len(f.GatewayCPU) > 0) {
		t.Errorf("%s: gateway CPUs %v", f.Name, f.GatewayCPU)
	}
	switch {
	case f.Queues == 1:
		// One queue: every frame on queue 0, whichever CPU sent it.
		if f.LanQueueXDP[1] != 0 || f.LanQueueXDP[0] == 0 {
			t.Errorf("%s: lan0's queues took %v", f.Name, f.LanQueueXDP)
		}
		// One sender on CPU 0: the whole path runs there.
		if f.Senders == 1 && (f.SinkCPU[1] != 0 || ours && f.GatewayCPU[1] != 0) {
			t.Errorf("%s: one sender on CPU 0, yet CPU 1 worked: sink %v, gateway %v", f.Name, f.SinkCPU, f.GatewayCPU)
		}
	case f.Queues == 2:
		// The sender on CPU c fills queue c, whose NAPI runs on CPU c.
		if f.LanQueueXDP[0] == 0 || f.LanQueueXDP[1] == 0 || ours && (f.GatewayCPU[0] == 0 || f.GatewayCPU[1] == 0) {
			t.Errorf("%s: two senders, yet lan0's queues took %v, the gateway's CPUs %v", f.Name, f.LanQueueXDP, f.GatewayCPU)
		}
		if ours && (f.SinkQueueXDP[0] == 0 || f.SinkQueueXDP[1] == 0) {
			t.Errorf("%s: the sink's queues took %v", f.Name, f.SinkQueueXDP)
		}
	}
}

func sum(v []uint64) uint64 {
	var s uint64
	for _, x := range v {
		s += x
	}
	return s
}
