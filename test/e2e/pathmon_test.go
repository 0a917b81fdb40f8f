// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/lab"
)

// TestLabPathMonitor: in the two-path lab (wan1 2 ms, wan2 5 ms one way)
// gateway A's agent probes both paths and gateway B's XDP answers: each
// path comes up with its link's round trip. Cutting wan1 (100 % loss)
// marks path 1 down within the goal of three probe intervals (300 ms at
// the default 100 ms) while path 2 stays up; repairing it brings path 1
// back. Each change is logged once, `edgeplane get paths` shows the
// states and the metrics carry them.
func TestLabPathMonitor(t *testing.T) {
	l := newLab(t)
	l.mustCLI("up")
	sock := l.APISocket(l.GWA)
	gc, _ := labGateway(t, l)
	states := func() map[uint32]*pb.PathStatus {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := gc.ListPathStatus(ctx, &pb.ListRequest{})
		if err != nil {
			t.Fatalf("ListPathStatus: %v", err)
		}
		out := map[uint32]*pb.PathStatus{}
		for _, p := range r.GetPaths() {
			out[p.GetPath()] = p
		}
		return out
	}
	// waitState polls every 2 ms until path id is in state want and
	// returns how long that took.
	waitState := func(id uint32, want string, limit time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for time.Since(start) < limit {
			if p := states()[id]; p != nil && p.GetState() == want {
				return time.Since(start)
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatalf("path %d not %s within %s: %v", id, want, limit, states()[id])
		return 0
	}
	waitState(1, "up", 10*time.Second)
	waitState(2, "up", 10*time.Second)
	st := states()
	for _, c := range []struct {
		id       uint32
		min, max time.Duration
	}{{1, 4 * time.Millisecond, 20 * time.Millisecond}, {2, 10 * time.Millisecond, 30 * time.Millisecond}} {
		rtt := time.Duration(st[c.id].GetRttUs()) * time.Microsecond
		if rtt < c.min || rtt > c.max {
			t.Errorf("path %d: RTT %s, want %s-%s (its link's delay both ways)", c.id, rtt, c.min, c.max)
		}
	}

	l.mustCLI("link", "wan1", "--loss", "100%")
	down := waitState(1, "down", 2*time.Second)
	// The figure is reported against its goal (3 probe intervals);
	// the test fails only past what no healthy run comes near, so a
	// loaded machine's scheduling does not fail it.
	t.Logf("path 1 down %s after wan1 was cut (goal: < 300 ms, 3 probe intervals)", down.Round(time.Millisecond))
	if down > time.Second {
		t.Errorf("path 1 went down %s after the cut, want well under 1 s (goal 300 ms)", down)
	}
	if p := states()[2]; p.GetState() != "up" {
		t.Errorf("path 2 is %s while only wan1 was cut", p.GetState())
	}
	out, err := exec.Command(edgeplaneBin, "get", "paths", "--server", "unix://"+sock).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "probes in a row unanswered") {
		t.Errorf("get paths does not show path 1 down and why: %v\n%s", err, out)
	}

	raw, err := exec.Command("ip", "netns", "exec", l.GWA, "python3", "-c", pyScrape, "127.0.0.1:9090").Output()
	if err != nil {
		t.Fatalf("scrape gateway A: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
	}{
		{"edgeplane_path_state", map[string]string{"path": "1", "state": "down"}, func(v float64) bool { return v == 1 }},
		{"edgeplane_path_state", map[string]string{"path": "2", "state": "up"}, func(v float64) bool { return v == 1 }},
		{"edgeplane_path_rtt_seconds", map[string]string{"path": "2"}, func(v float64) bool { return v > 0.01 && v < 0.03 }},
		{"edgeplane_path_state_changes_total", map[string]string{"path": "1", "state": "down"}, func(v float64) bool { return v == 1 }},
		{"edgeplane_reason_packets_total", map[string]string{"reason": "probe_reply"}, func(v float64) bool { return v > 0 }},
	} {
		if v, ok := metricValue(fams, c.name, c.labels); !ok || !c.ok(v) {
			t.Errorf("metric %s%v = %v (present %v)", c.name, c.labels, v, ok)
		}
	}

	l.mustCLI("link", "wan1", "--loss", "0")
	back := waitState(1, "up", 2*time.Second)
	t.Logf("path 1 up %s after wan1 was repaired", back.Round(time.Millisecond))

	b, err := os.ReadFile(filepath.Join(l.RunDir, "gwa.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	for _, want := range []string{`msg="path down" path=1 was=up`, `msg="path up" path=1 was=down`} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("gateway A's log has %q %d times, want once", want, n)
		}
	}
}

// pyGaps receives UDP on argv[1]:argv[2] until stdin closes and reports
// the gaps between consecutive arrivals longer than 10 ms: when (ms
// since the first datagram), how long, and the sequence numbers around
// them; and how many datagrams came, and how many distinct.
const pyGaps = pyServeUDP + `first = last = None
lastq = -1
gaps, seen, packets = [], set(), 0
def note(d):
    global first, last, lastq, packets
    now = time.monotonic()
    q = struct.unpack_from("!Q", d)[0]
    packets += 1
    seen.add(q)
    if first is None:
        first = now
    elif now - last > 0.010:
        gaps.append({"at_ms": (last - first) * 1000, "ms": (now - last) * 1000, "after": lastq, "next": q})
    last, lastq = now, q
serve(note)
print(json.dumps({"packets": packets, "distinct": len(seen), "gaps": gaps}))
`

type gapReport struct {
	Packets  int `json:"packets"`
	Distinct int `json:"distinct"`
	Gaps     []struct {
		AtMS  float64 `json:"at_ms"`
		MS    float64 `json:"ms"`
		After int     `json:"after"`
		Next  int     `json:"next"`
	} `json:"gaps"`
}

// TestLabSteeringFailover: the lab steers UDP to ports 7000-7099 with an
// active-standby group (path 1, else path 2). A stream of one datagram a
// millisecond from A to B keeps arriving when wan1 is cut: the gap until
// its datagrams come over path 2 is under three probe intervals (300 ms
// at the default 100 ms probes; 50 ms at 10 ms, the shortest); once
// wan1 is repaired the stream goes back to path 1 without a gap.
func TestLabSteeringFailover(t *testing.T) {
	st := newSteeredLab(t)
	l, gc, ctx := st.sdwanLab, st.gc, st.ctx
	pathTx := func() map[uint32]uint64 { return pathTxOf(t, gc, ctx) }

	for _, c := range []struct {
		interval   string // "": the default, 100 ms
		goal, fail float64
	}{{"", 300, 1000}, {"10ms", 50, 150}} {
		if c.interval != "" {
			probeEvery(t, gc, ctx, c.interval, 5*time.Second)
		}
		recv := startProc(t, l.B, pyGaps, lab.AddrB, "7000")
		const n, rate = 5000, 1000
		sent := make(chan sendReport, 1)
		go func() {
			r, err := sendUDP(ctx, l.A, lab.AddrB, 7000, n, rate, 64)
			if err != nil {
				t.Error(err)
			}
			sent <- r
		}()
		time.Sleep(time.Second)
		tx0 := pathTx()
		l.mustCLI("link", "wan1", "--loss", "100%")
		time.Sleep(1500 * time.Millisecond)
		tx1 := pathTx()
		l.mustCLI("link", "wan1", "--loss", "0")
		time.Sleep(1500 * time.Millisecond)
		tx2 := pathTx()
		<-sent
		time.Sleep(200 * time.Millisecond)
		var rep gapReport
		recv.finish(&rep)

		probes := c.interval
		if probes == "" {
			probes = "100ms"
		}
		t.Logf("%s probes: %d datagrams of %d arrived, gaps over 10 ms: %+v", probes, rep.Distinct, n, rep.Gaps)
		// The failover's gap is the longest: a loaded machine may pause
		// the sender for tens of ms, never for that long twice here.
		worst, long := 0.0, 0
		for _, g := range rep.Gaps {
			worst = max(worst, g.MS)
			if g.MS > c.goal/2 {
				long++
			}
		}
		if len(rep.Gaps) == 0 {
			t.Fatalf("%s probes: no gap: was the stream steered over path 1 (tx %v -> %v)?", probes, tx0, tx1)
		}
		t.Logf("%s probes: failover gap %.0f ms (goal < %.0f ms)", probes, worst, c.goal)
		if worst > c.fail {
			t.Errorf("%s probes: longest gap %.0f ms, want well under %.0f ms (goal %.0f ms)", probes, worst, c.fail, c.goal)
		}
		if long > 1 {
			t.Errorf("%s probes: %d gaps past %.0f ms, want one (the failover; none going back)", probes, long, c.goal/2)
		}
		if d := tx1[2] - tx0[2]; d < 1000 {
			t.Errorf("%s probes: path 2 sent %d packets while wan1 was cut, want the stream's (>= 1000)", probes, d)
		}
		if d := tx2[1] - tx1[1]; d < 1000 {
			t.Errorf("%s probes: path 1 sent %d packets after wan1 was repaired, want the stream back (>= 1000)", probes, d)
		}
	}
}

// probeEvery sets the probe interval of every path of the gateway gc
// talks to and waits until both its paths are up again, at most within.
func probeEvery(t *testing.T, gc pb.GatewayClient, ctx context.Context, interval string, within time.Duration) {
	t.Helper()
	editMonitors(t, gc, ctx, func(m *pb.PathMonitor) { m.Interval = interval }, within)
}

// editMonitors changes the monitor of every path of the gateway gc
// talks to by edit and waits until both its paths are up again, at most
// within.
func editMonitors(t *testing.T, gc pb.GatewayClient, ctx context.Context, edit func(*pb.PathMonitor), within time.Duration) {
	t.Helper()
	ps, err := gc.ListPaths(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ops []*pb.Operation
	for _, p := range ps.GetPaths() {
		// As listed (its secret redacted, which an update gives back
		// to keep it), but for what edit changes.
		if p.Monitor == nil {
			p.Monitor = &pb.PathMonitor{}
		}
		edit(p.Monitor)
		ops = append(ops, updateOp(pathObj(p)))
	}
	if _, err := gc.Apply(ctx, &pb.ApplyRequest{Operations: ops}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(within, func() bool {
		r, err := gc.ListPathStatus(ctx, &pb.ListRequest{})
		return err == nil && len(r.GetPaths()) == 2 && r.GetPaths()[0].GetState() == "up" && r.GetPaths()[1].GetState() == "up"
	}) {
		t.Fatalf("paths not up within %s after their monitors changed", within)
	}
}

// labGateway is gateway A's control API in a lab.
func labGateway(t *testing.T, l *sdwanLab) (pb.GatewayClient, context.Context) {
	t.Helper()
	return labGatewayIn(t, l, l.GWA)
}

// labGatewayIn is the control API of the lab's gateway in namespace gw.
func labGatewayIn(t *testing.T, l *sdwanLab, gw string) (pb.GatewayClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+l.APISocket(gw), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return pb.NewGatewayClient(conn), ctx
}

// steerLBR makes the lab's steering group (LBR 1 over FARs 1 and 2, paths
// 1 and 2) algorithm alg with weights w1 and w2.
func steerLBR(t *testing.T, gc pb.GatewayClient, ctx context.Context, alg string, w1, w2 uint32) {
	t.Helper()
	l := &pb.Lbr{Id: 1, Algorithm: alg, Members: []*pb.Member{{Far: 1, Weight: u32(w1)}, {Far: 2, Weight: u32(w2)}}}
	if _, err := gc.Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{updateOp(&pb.Object{Kind: &pb.Object_Lbr{Lbr: l}})}}); err != nil {
		t.Fatalf("update lbr 1 to %s: %v", alg, err)
	}
}

// pathTxOf reads how many packets gateway A encapsulated onto each path.
func pathTxOf(t *testing.T, gc pb.GatewayClient, ctx context.Context) map[uint32]uint64 {
	t.Helper()
	s, err := gc.GetStats(ctx, &pb.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]uint64{}
	for _, p := range s.GetPaths() {
		out[p.GetId()] = p.GetTx().GetPackets()
	}
	return out
}

// pySpread sends one datagram from each of argv[3] source ports (argv[4]
// up) to argv[1]:argv[2]: that many new flows.
const pySpread = `import socket, sys
dst, port, n, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("", base + i))
    s.sendto(b"x" * 32, (dst, port))
    s.close()
`

// steeredLab is the lab up, both paths up, with gateway A's API and a
// way to send new flows to the steered port.
type steeredLab struct {
	*sdwanLab
	gc   pb.GatewayClient
	ctx  context.Context
	base int // the next unused source port
}

func newSteeredLab(t *testing.T) *steeredLab {
	t.Helper()
	l := newLab(t)
	l.mustCLI("up")
	gc, ctx := labGateway(t, l)
	if !waitFor(10*time.Second, func() bool {
		r, err := gc.ListPathStatus(ctx, &pb.ListRequest{})
		return err == nil && len(r.GetPaths()) == 2 && r.GetPaths()[0].GetState() == "up" && r.GetPaths()[1].GetState() == "up"
	}) {
		t.Fatal("paths not up within 10 s")
	}
	return &steeredLab{sdwanLab: l, gc: gc, ctx: ctx, base: 10000}
}

// spread sends n new flows (new source ports every time, not sticky old
// ones) from A to B's steered port and returns how many packets gateway
// A encapsulated onto each path meanwhile.
func (s *steeredLab) spread(n int) map[uint32]uint64 {
	s.t.Helper()
	before := pathTxOf(s.t, s.gc, s.ctx)
	s.base += n
	if out, err := exec.Command("ip", "netns", "exec", s.A, "python3", "-c", pySpread, lab.AddrB, "7000", strconv.Itoa(n), strconv.Itoa(s.base)).CombinedOutput(); err != nil {
		s.t.Fatalf("spread: %v\n%s", err, out)
	}
	after := pathTxOf(s.t, s.gc, s.ctx)
	return map[uint32]uint64{1: after[1] - before[1], 2: after[2] - before[2]}
}

// TestLabSteeringModes: load-balancing 70/30 gives path 1 70 % of 2,000
// new flows (±5 %); smallest-delay takes the path with the smaller RTT
// and moves when the links' delays are swapped.
func TestLabSteeringModes(t *testing.T) {
	s := newSteeredLab(t)
	l, gc, ctx, spread := s.sdwanLab, s.gc, s.ctx, s.spread

	steerLBR(t, gc, ctx, "load-balancing", 70, 30)
	time.Sleep(100 * time.Millisecond) // the agent's next look at the group
	d := spread(2000)
	share := float64(d[1]) / float64(d[1]+d[2])
	t.Logf("load-balancing 70/30: path 1 %d, path 2 %d flows (%.1f %%)", d[1], d[2], 100*share)
	if d[1]+d[2] < 1900 || share < 0.65 || share > 0.75 {
		t.Errorf("load-balancing 70/30 gave path 1 %.1f %% of %d flows, want 65-75 %%", 100*share, d[1]+d[2])
	}

	steerLBR(t, gc, ctx, "smallest-delay", 1, 1)
	time.Sleep(100 * time.Millisecond)
	if d := spread(200); d[1] < 190 {
		t.Errorf("smallest-delay with wan1 faster (2 ms vs 5 ms): path 1 got %d of 200 flows (%v)", d[1], d)
	}
	l.mustCLI("link", "wan1", "--delay", "20ms")
	moved := waitFor(10*time.Second, func() bool { return spread(20)[2] == 20 })
	if !moved {
		t.Fatalf("smallest-delay did not move to path 2 within 10 s of wan1 going to 20 ms")
	}
	if d := spread(200); d[2] < 190 {
		t.Errorf("smallest-delay with wan2 faster: path 2 got %d of 200 flows (%v)", d[2], d)
	}
}

// TestLabSteeringAdaptive: rtt moves new flows off a path whose RTT rose
// past 1.5 × its minimum and back once it is down again; priority keeps
// everything on path 1 until a stream fills wan1 (rate-limited), then
// spills new flows to path 2 while path 1 stays up (congested, not
// failed), and takes them back once the stream stops.
func TestLabSteeringAdaptive(t *testing.T) {
	st := newSteeredLab(t)
	l, gc, ctx := st.sdwanLab, st.gc, st.ctx
	spread := func(n int) (float64, map[uint32]uint64) {
		d := st.spread(n)
		return float64(d[1]) / float64(max(d[1]+d[2], 1)), d
	}
	// until polls spread(100) until path 1's share satisfies ok.
	until := func(what string, ok func(float64) bool) {
		t.Helper()
		var last map[uint32]uint64
		if !waitFor(15*time.Second, func() bool {
			var share float64
			share, last = spread(100)
			return ok(share)
		}) {
			t.Fatalf("%s: path 1 / path 2 new flows %v", what, last)
		}
		t.Logf("%s: path 1 / path 2 new flows %v", what, last)
	}

	steerLBR(t, gc, ctx, "rtt", 1, 1)
	until("rtt, both paths at their minimum", func(s float64) bool { return s > 0.3 && s < 0.7 })
	l.mustCLI("link", "wan1", "--delay", "10ms") // RTT 4 -> 20 ms, past 1.5 × 4
	until("rtt, wan1 slowed down", func(s float64) bool { return s < 0.1 })
	l.mustCLI("link", "wan1", "--delay", "2ms")
	until("rtt, wan1 back", func(s float64) bool { return s > 0.3 && s < 0.7 })

	steerLBR(t, gc, ctx, "priority", 1, 1)
	until("priority, path 1 idle", func(s float64) bool { return s == 1 })
	// A stream of 4.4 Mbit/s into wan1 held to 4 Mbit/s with a 4 MB
	// queue: the queue grows by 100 ms a second, dropping nothing, and
	// with it path 1's RTT. Gateway A's kernel sends it to gateway B's
	// wan1 address, past XDP: the path counters count only new flows.
	if out, err := exec.Command(devBin, "wanem", "set", "--control", l.Socket("wan1"), "--rate", "4mbit", "--queue", "4000000").CombinedOutput(); err != nil {
		t.Fatalf("wanem set: %v\n%s", err, out)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = sendUDP(sctx, l.GWA, lab.WanAddr(1, 'b'), 9, 20000, 360, 1500)
	}()
	until("priority, wan1 full", func(s float64) bool { return s < 0.3 })
	if r, err := gc.ListPathStatus(ctx, &pb.ListRequest{}); err == nil {
		for _, p := range r.GetPaths() {
			t.Logf("path %d while wan1 is full: %s, RTT %d µs (min %d), loss %.1f %%, %s", p.GetPath(), p.GetState(),
				p.GetRttUs(), p.GetMinRttUs(), 100*p.GetLoss(), p.GetWhy())
			if p.GetPath() == 1 && p.GetState() != "up" {
				t.Errorf("path 1 is %s while wan1 is full: priority should spill by congestion, not fail over", p.GetState())
			}
		}
	}
	stop()
	<-done
	until("priority, the stream stopped", func(s float64) bool { return s == 1 })
}

// TestLabRedundant: with 10 % loss on each WAN link (for 8 s, so the path
// monitors know it), a stream of one datagram a millisecond to the lab's
// redundant ports (every packet over both paths) reaches B with about
// 1 % loss (both copies lost) and no
// datagram twice: gateway B's XDP drops every later copy (dup_seen). A
// stream beside it over one path (the steered ports, path 1) loses about
// 10 %.
func TestLabRedundant(t *testing.T) {
	st := newSteeredLab(t)
	l, gc, ctx := st.sdwanLab, st.gc, st.ctx
	gb, ctxb := labGatewayIn(t, l, l.GWB)
	dupSeen := func() uint64 {
		s, err := gb.GetStats(ctxb, &pb.GetStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return s.GetReasons()["dup_seen"].GetPackets()
	}
	// A path the monitor takes down gets no copies until 3 probes in a
	// row are answered again (about a second at 19 % loss: ~100 of the
	// other path's datagrams lost, 2 % of the stream). With its random
	// loss learnt, a path losing 19 % of its probes goes down after as
	// many in a row as make such a run rarer than once in 5,000 probes
	// (pathJudge.downAfter: 4-8 from its window's estimate), so a
	// chance run came in one of the stream's 2 × 50 probes in 2 % of
	// runs (1.96 % of 20,000 simulated with the judge), and a clean-clone
	// CI run failed so (path 2 down after 4 in a row mid-stream, 961
	// datagrams over path 1 alone: 2.82 % lost). Down after 8 in a row
	// at the least (0.19^8 = 1.7e-6; 0.03 % of simulated runs), no
	// chance run takes a path down while the copies are counted: the
	// judge's rate is TestPathJudgeLossyPath's to hold, the copies
	// this test's.
	editMonitors(t, gc, ctx, func(m *pb.PathMonitor) { m.DownAfter = 8 }, 5*time.Second)
	l.mustCLI("link", "wan1", "--loss", "10%")
	l.mustCLI("link", "wan2", "--loss", "10%")
	// The monitors learn the paths' random loss over their window (100
	// probes, 10 s).
	time.Sleep(11 * time.Second)
	port := strconv.Itoa(lab.RedundantPortLo)
	both := startProc(t, l.B, pyGaps, lab.AddrB, port)
	one := startProc(t, l.B, pyGaps, lab.AddrB, "7000")
	const n, rate = 5000, 1000
	tx0, seen0 := pathTxOf(t, gc, ctx), dupSeen()
	errs := make(chan error, 2)
	for _, p := range []int{lab.RedundantPortLo, lab.SteerPortLo} {
		go func() {
			r, err := sendUDP(ctx, l.A, lab.AddrB, p, n, rate, 64)
			if err == nil && r.Sent != n {
				err = fmt.Errorf("port %d: sent %d of %d", p, r.Sent, n)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the slower path's last copies
	var rb, r1 gapReport
	both.finish(&rb)
	one.finish(&r1)
	tx1, seen1 := pathTxOf(t, gc, ctx), dupSeen()

	lossBoth := 1 - float64(rb.Distinct)/n
	lossOne := 1 - float64(r1.Distinct)/n
	t.Logf("redundant: %d of %d datagrams arrived (loss %.2f %%), %d twice; B dropped %d later copies (dup_seen)",
		rb.Distinct, n, 100*lossBoth, rb.Packets-rb.Distinct, seen1-seen0)
	t.Logf("one path: %d of %d arrived (loss %.2f %%); A sent %d over path 1, %d over path 2",
		r1.Distinct, n, 100*lossOne, tx1[1]-tx0[1], tx1[2]-tx0[2])
	if rb.Packets != rb.Distinct {
		t.Errorf("host B received %d datagrams twice, want none", rb.Packets-rb.Distinct)
	}
	// Both copies lost: 1 % (10 % × 10 %; one standard deviation over
	// 5,000 is 0.14 %).
	if lossBoth > 0.02 {
		t.Errorf("redundant stream lost %.2f %%, want about 1 %% (< 2 %%)", 100*lossBoth)
	}
	if lossOne < 0.05 {
		t.Errorf("the one-path stream lost %.2f %%: is wan1 losing 10 %%?", 100*lossOne)
	}
	if d := seen1 - seen0; d < n/2 {
		t.Errorf("gateway B dropped %d later copies, want most of the %d datagrams' (about 81 %%)", d, n)
	}
	if d1, d2 := tx1[1]-tx0[1], tx1[2]-tx0[2]; d1 < n || d2 < n*8/10 {
		t.Errorf("A sent %d over path 1 and %d over path 2: want every datagram over both (and path 1's stream)", d1, d2)
	}
	// Both interfaces the copies leave by take redirected frames, as the
	// agent reports.
	raw, err := exec.Command("ip", "netns", "exec", l.GWA, "python3", "-c", pyScrape, "127.0.0.1:9090").Output()
	if err != nil {
		t.Fatalf("scrape gateway A: %v", err)
	}
	for _, itf := range []string{"wan1", "wan2"} {
		if want := `edgeplane_redundant_tx_ready{interface="` + itf + `"} 1`; !strings.Contains(string(raw), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestLabSteeringUnderTCP: the adaptive modes move load that is flowing —
// TCP streams (iperf3) to the lab's steered ports, split per packet — away
// from a path whose delay or loss is raised, and back once it recovers;
// the two flaws of the P4 ATSSS proxy's schedulers are shown fixed: dwrr
// lowers the weight of a path that starts losing (the proxy's DWRR only
// ever raises weights), and rtt leaves a path that fails outright (the
// proxy's RTTMon sees no RTT from it, so none too high, and keeps it).
func TestLabSteeringUnderTCP(t *testing.T) {
	st := newSteeredLab(t)
	l, gc, ctx := st.sdwanLab, st.gc, st.ctx
	// TCP to the steered ports takes the steering group too, and so do
	// its ACKs at gateway B (its group: active-standby), which would
	// otherwise take path 1 whatever its state.
	if _, err := gc.Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{createOp(pdrObj(&pb.Pdr{Id: 16, Precedence: 30, Far: 4,
		Match: &pb.Match{In: "lan0", Dst: lab.LanB, Proto: "tcp", Dport: "7000-7099"}}))}}); err != nil {
		t.Fatal(err)
	}
	gb, ctxb := labGatewayIn(t, l, l.GWB)
	if _, err := gb.Apply(ctxb, &pb.ApplyRequest{Operations: []*pb.Operation{createOp(pdrObj(&pb.Pdr{Id: 16, Precedence: 30, Far: 4,
		Match: &pb.Match{In: "lan0", Dst: lab.LanA, Proto: "tcp", Sport: "7000-7099"}}))}}); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command("ip", "netns", "exec", l.B, "iperf3", "-s", "-p", "7000")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	if !waitFor(5*time.Second, func() bool {
		out, _ := nsRun(l.B, "ss", "-Hltn", "sport = :7000")
		return strings.TrimSpace(out) != ""
	}) {
		t.Fatal("iperf3 server not listening")
	}
	// share is path 1's part of what gateway A sent over the two paths
	// in the next half second.
	share := func() (float64, map[uint32]uint64) {
		a := pathTxOf(t, gc, ctx)
		time.Sleep(500 * time.Millisecond)
		b := pathTxOf(t, gc, ctx)
		d := map[uint32]uint64{1: b[1] - a[1], 2: b[2] - a[2]}
		return float64(d[1]) / float64(max(d[1]+d[2], 1)), d
	}
	until := func(what string, ok func(float64) bool) float64 {
		t.Helper()
		var s float64
		var d map[uint32]uint64
		// 20 s: under random loss (dwrr's 10 %, wan2's 1 %) a weight
		// settles after a run of lost probes that can take a while to
		// come; in one CI run of 12 s the rtt mode had not brought path
		// 1 back yet either (that machine also ran a left-over lab).
		if !waitFor(20*time.Second, func() bool {
			s, d = share()
			return d[1]+d[2] > 100 && ok(s)
		}) {
			t.Fatalf("%s: path 1 carries %.0f %% (packets %v)", what, 100*s, d)
		}
		t.Logf("%s: path 1 carries %.0f %% (packets %v)", what, 100*s, d)
		return s
	}
	lbr := func(alg string, perPacket bool) {
		t.Helper()
		l := &pb.Lbr{Id: 1, Algorithm: alg, PerPacket: perPacket, Members: []*pb.Member{{Far: 1}, {Far: 2}}}
		if _, err := gc.Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{updateOp(&pb.Object{Kind: &pb.Object_Lbr{Lbr: l}})}}); err != nil {
			t.Fatalf("lbr 1 to %s: %v", alg, err)
		}
	}
	// load runs two TCP streams from A to B, each held to rate (iperf3's
	// -b; "0": as fast as they go), until the returned stop. tcpLoad is
	// the rtt and dwrr phases': below what the WAN emulators carry, as
	// unbounded streams once kept both emulators' real-time threads
	// busy on both CPUs, and their links and control sockets stalled
	// (probes lost on both paths, `lab link` timing out).
	load := func(rate string) (stop func()) {
		cctx, cancel := context.WithCancel(ctx)
		cmd := exec.CommandContext(cctx, "ip", "netns", "exec", l.A, "iperf3", "-c", lab.AddrB, "-p", "7000", "-t", "60", "-P", "2", "-b", rate)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return func() {
			cancel()
			_ = cmd.Wait()
			if t.Failed() { // its last lines: the failure stays in CI's tail
				lines := strings.Split(strings.TrimSpace(out.String()), "\n")
				t.Logf("iperf3 (last lines): %s", strings.Join(lines[max(len(lines)-12, 0):], "\n"))
			}
			time.Sleep(300 * time.Millisecond) // the server takes its next client
		}
	}
	link := func(args ...string) { l.mustCLI(append([]string{"link", "wan1"}, args...)...) }
	const tcpLoad = "150M"
	mid := func(s float64) bool { return s > 0.25 && s < 0.75 }

	// One mode after the other, in the one lab (its helpers fail the
	// test itself, so no subtests).
	func() { // rtt
		lbr("rtt", true)
		stop := load(tcpLoad)
		defer stop()
		until("rtt, both paths at their minimum", mid)
		link("--delay", "15ms") // RTT 4 -> 30 ms, past 1.5 × 4
		until("rtt, wan1 slowed down", func(s float64) bool { return s < 0.15 })
		link("--delay", "2ms")
		until("rtt, wan1 back", mid)
		link("--loss", "100%")
		until("rtt, wan1 cut: path 1 left at once (RTTMon would stay)", func(s float64) bool { return s < 0.02 })
		link("--loss", "0")
		until("rtt, wan1 repaired", mid)
	}()
	func() { // dwrr
		lbr("dwrr", true)
		stop := load(tcpLoad)
		defer stop()
		clean := until("dwrr, both paths clean", func(s float64) bool { return s > 0.15 && s < 0.85 })
		// Each probe lost halves path 1's weight; each step without one
		// grows it by 1 (to 64). At 10 % loss each way a probe is lost
		// every 5 steps or so and the weight settles near 8 of path 2's
		// 64; at 5 % it settled near 20, too close to the clean share
		// under this load (congestion halves both now and then).
		link("--loss", "10%")
		lossy := until("dwrr, wan1 losing 10 %: its weight shrinks (the proxy's never does)", func(s float64) bool { return s < clean/2 })
		link("--loss", "0")
		until("dwrr, wan1 clean again", func(s float64) bool { return s > 2*lossy && s > 0.15 })
	}()
	func() { // cmon
		// Streams path 1 carries without congestion (20 Mbit/s): its
		// window grows to take them all.
		lbr("cmon", false)
		stop := load("10M")
		defer stop()
		until("cmon, path 1's window takes it all", func(s float64) bool { return s > 0.8 })
		link("--delay", "15ms")
		until("cmon, wan1 slowed down: the window shrinks, the rest spills to path 2", func(s float64) bool { return s < 0.4 })
		link("--delay", "2ms")
		until("cmon, wan1 back: the window grows again", func(s float64) bool { return s > 0.8 })
	}()
}

// TestLabPassiveRTT: TCP flowing over path 1 (iperf3 from A to B, whose
// segments and ACKs both take path 1) gives the path a passive RTT from
// its timestamps: in `edgeplane get paths`, the API and the metrics, no
// smaller than the probes' (the echo crosses the path both ways and
// host B's stack) and not far above it; path 2, carrying no TCP, has
// none.
func TestLabPassiveRTT(t *testing.T) {
	st := newSteeredLab(t)
	l, gc, ctx := st.sdwanLab, st.gc, st.ctx
	r := iperf(t, l.B, l.A, lab.AddrB, 5201, "-t", "2")
	if r.End.SumReceived.Bytes == 0 {
		t.Fatal("iperf3 moved nothing")
	}
	time.Sleep(300 * time.Millisecond) // the monitor reads it every 100 ms
	ps, err := gc.ListPathStatus(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps.GetPaths() {
		t.Logf("path %d: probes RTT %d µs (min %d); TCP RTT %d µs (min %d) over %d samples", p.GetPath(), p.GetRttUs(), p.GetMinRttUs(),
			p.GetTcpRttUs(), p.GetTcpMinRttUs(), p.GetTcpRttSamples())
		switch p.GetPath() {
		case 1:
			if p.GetTcpRttSamples() < 5 {
				t.Errorf("path 1: %d passive RTT samples from 2 s of TCP, want several", p.GetTcpRttSamples())
			}
			// Linux's TSval counts milliseconds: a sample started by a
			// segment late in a tick can be ended by the echo of an earlier
			// segment of the same tick, up to 1 ms short.
			if min, probe := p.GetTcpMinRttUs(), p.GetMinRttUs(); min+1000 < probe*8/10 || min > probe+50_000 {
				t.Errorf("path 1: smallest TCP RTT %d µs against the probes' %d µs", min, probe)
			}
		case 2:
			if p.GetTcpRttSamples() != 0 {
				t.Errorf("path 2 carried no TCP but has %d passive RTT samples", p.GetTcpRttSamples())
			}
		}
	}
	out, err := exec.Command(edgeplaneBin, "get", "paths", "--server", "unix://"+l.APISocket(l.GWA)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "TCP RTT") {
		t.Errorf("get paths shows no TCP RTT column: %v\n%s", err, out)
	}
	t.Logf("get paths:\n%s", out)
	raw, err := exec.Command("ip", "netns", "exec", l.GWA, "python3", "-c", pyScrape, "127.0.0.1:9090").Output()
	if err != nil {
		t.Fatalf("scrape gateway A: %v", err)
	}
	if m := string(raw); !strings.Contains(m, `edgeplane_path_tcp_rtt_seconds{path="1"}`) || strings.Contains(m, `edgeplane_path_tcp_rtt_seconds{path="2"}`) {
		t.Errorf("metrics: want edgeplane_path_tcp_rtt_seconds for path 1 only")
	}
}
