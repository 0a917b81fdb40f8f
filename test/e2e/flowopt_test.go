// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/lab"
)

// TestLabFlowOptSwitch: FlowOpt's modules switched on and off through the
// API, every 150 ms for three seconds, while a stream of a datagram a
// millisecond in an eMBB class (whose rate it stays well under) crosses
// gateway A: every datagram arrives, once; the metrics say which
// modules are on.
func TestLabFlowOptSwitch(t *testing.T) {
	l := newLab(t)
	l.mustCLI("up")
	gc, ctx := labGateway(t, l)
	const port = 7300
	if _, err := gc.Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{
		createOp(&pb.Object{Kind: &pb.Object_QosClass{QosClass: &pb.QosClass{Id: 2, Type: config.QoSEMBB, Rate: "40mbit"}}}),
		createOp(pdrObj(&pb.Pdr{Id: 70, Precedence: 20, Far: 1, Qos: 2,
			Match: &pb.Match{In: "lan0", Dst: lab.LanB, Proto: "udp", Dport: strconv.Itoa(port)}})),
	}}); err != nil {
		t.Fatal(err)
	}
	recv := startProc(t, l.B, pyGaps, lab.AddrB, strconv.Itoa(port))
	const n = 3000
	sent := make(chan error, 1)
	go func() {
		r, err := sendUDP(context.Background(), l.A, lab.AddrB, port, n, 1000, 64)
		if err == nil && r.Sent != n {
			t.Errorf("sent %d of %d", r.Sent, n)
		}
		sent <- err
	}()
	sets := [][]string{
		{config.ModuleProbe}, {config.ModuleProbe, config.ModuleFairness},
		{config.ModuleFairness, config.ModuleRelief}, {config.ModuleProbe, config.ModuleFairness, config.ModuleRelief}, nil,
	}
	switches := 0
	deadline := time.Now().Add(2800 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		switchModules(t, ctx, gc, sets[i%len(sets)])
		switches++
		time.Sleep(150 * time.Millisecond)
	}
	switchModules(t, ctx, gc, sets[3])
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	var r gapReport
	recv.finish(&r)
	t.Logf("%d switches; %d of %d datagrams arrived, %d twice, gaps over 10 ms: %v", switches, r.Distinct, n, r.Packets-r.Distinct, r.Gaps)
	if switches < 10 {
		t.Errorf("only %d switches", switches)
	}
	if r.Distinct != n || r.Packets != n {
		t.Errorf("%d of %d datagrams arrived (%d packets) while the modules were switched, want every one once", r.Distinct, n, r.Packets)
	}
	raw, err := exec.Command("ip", "netns", "exec", l.GWA, "python3", "-c", pyScrape, lab.MetricsAddr).Output()
	if err != nil {
		t.Fatalf("scrape gateway A: %v", err)
	}
	for _, m := range []string{config.ModuleProbe, config.ModuleFairness, config.ModuleRelief} {
		if want := `edgeplane_flowopt_module_on{module="` + m + `"} 1`; !waitFor(2*time.Second, func() bool {
			raw, _ = exec.Command("ip", "netns", "exec", l.GWA, "python3", "-c", pyScrape, lab.MetricsAddr).Output()
			return strings.Contains(string(raw), want)
		}) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(string(raw), `edgeplane_qos_class_packets_total{class="2"}`) {
		t.Errorf("metrics lack class 2's packets")
	}

	// The probe's RTT of a TCP flow, in the flows listing: its handshake
	// and timestamps over the test lab's wan1 (2 ms each way).
	srv := exec.Command("ip", "netns", "exec", l.B, "iperf3", "-s", "-1", "-p", "5301")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	time.Sleep(300 * time.Millisecond)
	if out, err := exec.Command("ip", "netns", "exec", l.A, "iperf3", "-c", lab.AddrB, "-p", "5301", "-t", "1", "-b", "2M").CombinedOutput(); err != nil {
		t.Fatalf("iperf3: %v\n%s", err, out)
	}
	fl, err := gc.ListFlows(ctx, &pb.ListFlowsRequest{Top: 100})
	if err != nil {
		t.Fatal(err)
	}
	// The data connection (iperf3's control one answers when it pleases).
	var data *pb.Flow
	for _, f := range fl.GetFlows() {
		if f.GetProto() == "tcp" && f.GetDst() == lab.AddrB && f.GetDport() == 5301 && (data == nil || f.GetBytes() > data.GetBytes()) {
			data = f
		}
	}
	if data == nil || data.GetRttSamples() == 0 {
		t.Fatalf("the TCP data flow to B:5301 not timed by the probe: %v", data)
	}
	rtt := time.Duration(data.GetRttUs()) * time.Microsecond
	t.Logf("TCP %s:%d -> 5301: RTT %s (min %d us, %d samples), %d bit/s", data.GetSrc(), data.GetSport(), rtt, data.GetMinRttUs(), data.GetRttSamples(), data.GetRateBps())
	if rtt < 3500*time.Microsecond || rtt > 200*time.Millisecond || data.GetMinRttUs() < 3500 || data.GetRateBps() == 0 {
		t.Errorf("TCP data flow: RTT %s, min %d us, rate %d; want wan1's round trip (4 ms) or more, and a rate", rtt, data.GetMinRttUs(), data.GetRateBps())
	}
}

// switchModules makes gateway gc's FlowOpt modules exactly mods, in one
// batch.
func switchModules(t *testing.T, ctx context.Context, gc pb.GatewayClient, mods []string) {
	t.Helper()
	have, err := gc.ListFlowOpt(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, m := range mods {
		want[m] = true
	}
	var ops []*pb.Operation
	for _, m := range have.GetFlowopt() {
		if !want[m.GetModule()] {
			ops = append(ops, deleteOp(pb.Kind_KIND_FLOWOPT, 0, m.GetModule()))
		}
		delete(want, m.GetModule())
	}
	for m := range want {
		ops = append(ops, createOp(&pb.Object{Kind: &pb.Object_Flowopt{Flowopt: &pb.FlowOptModule{Module: m}}}))
	}
	if len(ops) == 0 {
		return
	}
	if _, err := gc.Apply(ctx, &pb.ApplyRequest{Operations: ops}); err != nil {
		t.Fatalf("switch flowopt modules to %v: %v", mods, err)
	}
}
