// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
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
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gc := pb.NewGatewayClient(conn)
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
	t.Logf("path 1 down %s after wan1 was cut (goal: < 300 ms, 3 probe intervals)", down.Round(time.Millisecond))
	if down > 300*time.Millisecond {
		t.Errorf("path 1 went down %s after the cut, want < 300 ms", down)
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
