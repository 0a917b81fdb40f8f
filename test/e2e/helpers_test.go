// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/metrics"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// Frame lengths as the dataplane counts them: the whole Ethernet frame
// (no VLAN tag, no FCS).
const (
	ethLen  = 14
	ip4Len  = 20
	ip6Len  = 40
	udpLen  = 8
	readyTO = 20 * time.Second
)

func udp4Frame(payload int) uint64 { return uint64(ethLen + ip4Len + udpLen + payload) }
func udp6Frame(payload int) uint64 { return uint64(ethLen + ip6Len + udpLen + payload) }

// gateway is one lab topology with an agent config, a log and helpers.
type gateway struct {
	*lab.OneGateway
	t       *testing.T
	dir     string
	cfgPath string
	logf    *os.File
	readies int // "agent ready" lines expected in the log so far
	// scraped is when the last scrape ended: the agent answers scrapes
	// from a snapshot of the dataplane at most a second old.
	scraped time.Time
}

// newGateway builds A -- gw -- B under a fresh prefix, writes cfg as the
// agent's config and removes everything when t ends. It does not start an
// agent.
func newGateway(t *testing.T, cfg string) *gateway {
	t.Helper()
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "nsenter", "ping", "python3", "ss"} {
		testutil.RequireTool(t, tool)
	}
	// Prefix + "gw" must stay a short netns name and a bpffs dir name.
	o := lab.NewOneGateway(testutil.UniqueName(nsPrefix))
	dir := t.TempDir()
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{OneGateway: o, t: t, dir: dir, cfgPath: filepath.Join(dir, "gateway.yaml"), logf: logf}
	// Cleanups run last-in first-out: dump the log, tear down, close.
	t.Cleanup(func() { logf.Close() })
	t.Cleanup(o.Down)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("agent log (%s):\n%s", o.GW, b)
		}
	})
	if err := o.Up(); err != nil {
		t.Fatalf("lab up: %v", err)
	}
	g.writeConfig(cfg)
	return g
}

func (g *gateway) writeConfig(cfg string) {
	g.t.Helper()
	if err := os.WriteFile(g.cfgPath, []byte(cfg), 0o600); err != nil {
		g.t.Fatal(err)
	}
}

// start runs the agent on the gateway and waits for its "agent ready" log
// line: by then it has committed its rules, serves metrics and handles
// SIGHUP.
func (g *gateway) start(extra ...string) {
	g.t.Helper()
	g.startBin(edgeplaneBin, extra...)
}

// startBin is start with another edgeplane binary.
func (g *gateway) startBin(bin string, extra ...string) {
	g.t.Helper()
	if err := g.StartAgent(bin, g.cfgPath, g.logf, extra...); err != nil {
		g.t.Fatal(err)
	}
	g.readies++
	deadline := time.Now().Add(readyTO)
	for strings.Count(g.log(), "agent ready") < g.readies {
		if time.Now().After(deadline) {
			g.t.Fatalf("agent did not log \"agent ready\" within %s", readyTO)
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", g.Agent().Process.Pid)); err != nil || strings.Contains(string(st), ") Z ") {
			g.t.Fatalf("agent exited before it was ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *gateway) log() string {
	b, _ := os.ReadFile(g.logf.Name())
	return string(b)
}

// signal sends sig to the running agent.
func (g *gateway) signal(sig os.Signal) {
	g.t.Helper()
	if g.Agent() == nil {
		g.t.Fatal("no agent running")
	}
	if err := g.Agent().Process.Signal(sig); err != nil {
		g.t.Fatalf("signal agent: %v", err)
	}
}

// counter is a packets/bytes pair of `edgeplane stats --json`.
type counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// stats is the output of `edgeplane stats --json`.
type stats struct {
	Generation uint32              `json:"generation"`
	PDRs       map[string]counter  `json:"pdrs"`
	Verdicts   map[string]counter  `json:"verdicts"`
	Reasons    map[string]counter  `json:"reasons"`
	FlowCache  map[string]uint64   `json:"flow_cache"`
	XDPCPU     map[string][]uint64 `json:"xdp_cpu"`
	Backends   []struct {
		Service  uint32 `json:"service"`
		FAR      uint32 `json:"far"`
		Packets  uint64 `json:"packets"`
		NewConns uint64 `json:"new_connections"`
		Active   uint64 `json:"active_connections"`
	} `json:"backends"`
}

func (s stats) pdr(id int) counter { return s.PDRs[strconv.Itoa(id)] }

// readStats runs `edgeplane stats --json` against the gateway's pins.
func readStats(pinDir string) (stats, error) {
	var s stats
	out, err := exec.Command(edgeplaneBin, "stats", "--json", "--pin-dir", pinDir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return s, fmt.Errorf("edgeplane stats: %w: %s", err, ee.Stderr)
		}
		return s, fmt.Errorf("edgeplane stats: %w", err)
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return s, fmt.Errorf("parse stats %q: %w", out, err)
	}
	return s, nil
}

func (g *gateway) stats() stats {
	g.t.Helper()
	s, err := readStats(g.PinDir)
	if err != nil {
		g.t.Fatal(err)
	}
	return s
}

// scrape fetches /metrics from inside the gateway's namespace (the agent
// listens there) and parses it with the Prometheus text parser. It waits
// until the snapshot the last scrape got is out of date, so what it
// returns was read after it was called.
func (g *gateway) scrape() map[string]*dto.MetricFamily {
	g.t.Helper()
	time.Sleep(time.Until(g.scraped.Add(metrics.SnapshotEvery + 50*time.Millisecond)))
	defer func() { g.scraped = time.Now() }()
	return scrapeIn(g.t, g.GW, g.MetricsAddr)
}

// scrapeIn fetches /metrics at addr inside namespace ns and parses it
// with the Prometheus text parser.
func scrapeIn(t *testing.T, ns, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "python3", "-c", pyScrape, addr).Output()
	if err != nil {
		t.Fatalf("scrape %s's metrics: %v", ns, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, out)
	}
	return fams
}

// metricValue returns the value of the sample of family name whose labels
// include all of want.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// reloads returns edgeplane_config_reloads_total{result}, 0 when the
// series does not exist yet.
func (g *gateway) reloads(result string) float64 {
	g.t.Helper()
	v, _ := metricValue(g.scrape(), "edgeplane_config_reloads_total", map[string]string{"result": result})
	return v
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nsRun runs a command in a namespace and returns its combined output.
func nsRun(ns string, args ...string) (string, error) {
	return topo.Output(context.Background(), ns, args[0], args[1:]...)
}

// openNS opens namespace name (one of the topology's) for t to change;
// the handle is released in t.Cleanup, the namespace stays.
func openNS(t *testing.T, name string) *topo.NS {
	t.Helper()
	n, err := topo.OpenNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// ping sends count echo requests from ns to dst and returns how many
// replies came back.
func ping(ns, dst string, count int, interval string) int {
	out, _ := nsRun(ns, "ping", "-n", "-q", "-c", strconv.Itoa(count), "-i", interval, "-W", "1", dst)
	m := regexp.MustCompile(`(\d+) received`).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// warmUp waits until A reaches B over IPv4 and IPv6: neighbours get
// resolved and the IPv6 addresses leave tentative state.
func (g *gateway) warmUp() {
	g.t.Helper()
	for _, dst := range []string{lab.AddrB, lab.AddrB6} {
		if !waitFor(10*time.Second, func() bool { return ping(g.A, dst, 1, "0.2") == 1 }) {
			g.t.Fatalf("A cannot reach %s within 10s", dst)
		}
	}
	// And the other way, so B's neighbour entries for the gateway exist.
	for _, dst := range []string{lab.AddrA, lab.AddrA6} {
		if !waitFor(10*time.Second, func() bool { return ping(g.B, dst, 1, "0.2") == 1 }) {
			g.t.Fatalf("B cannot reach %s within 10s", dst)
		}
	}
}

// xdpOn returns `ip -d link show dev` of itf in ns and whether an XDP
// program is attached.
func xdpOn(t *testing.T, ns, itf string) (string, bool) {
	t.Helper()
	out, err := nsRun(ns, "ip", "-d", "link", "show", "dev", itf)
	if err != nil {
		t.Fatal(err)
	}
	return out, strings.Contains(out, "prog/xdp") || regexp.MustCompile(`\bxdp(generic|drv|offload)?\b`).MatchString(out)
}

// xdpProgID returns the id of the XDP program attached to itf, or "".
func xdpProgID(t *testing.T, ns, itf string) string {
	t.Helper()
	out, _ := xdpOn(t, ns, itf)
	if m := regexp.MustCompile(`prog/xdp id (\d+)`).FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// proc is a python helper running in a namespace: it prints "ready" once
// its socket is bound, runs until its stdin closes, then prints one JSON
// line with what it saw.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	done  bool
}

func startProc(t *testing.T, ns, script string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, "python3", "-c", script}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		if !p.done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := p.out.ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "ready" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			p.done = true
			t.Fatalf("python helper in %s did not start: %q %s", ns, s, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("python helper in %s not ready within 10s", ns)
	}
	return p
}

// finish closes the helper's stdin and decodes its JSON report into v.
func (p *proc) finish(v any) {
	p.t.Helper()
	_ = p.stdin.Close()
	rest, _ := io.ReadAll(p.out)
	err := p.cmd.Wait()
	p.done = true
	if err != nil {
		p.t.Fatalf("python helper: %v (output %q)", err, rest)
	}
	if err := json.Unmarshal(bytes.TrimSpace(rest), v); err != nil {
		p.t.Fatalf("python helper report %q: %v", rest, err)
	}
}

// recvReport is what pyRecv saw.
type recvReport struct {
	Packets      uint64   `json:"packets"`
	Bytes        uint64   `json:"bytes"`
	Distinct     uint64   `json:"distinct"`
	Missing      uint64   `json:"missing"`
	FirstMissing []uint64 `json:"first_missing"`
}

// startReceiver listens for UDP on addr:port in ns; expect is how many
// sequence numbers (0..expect-1) the sender will send.
func startReceiver(t *testing.T, ns, addr string, port, expect int) *proc {
	return startProc(t, ns, pyRecv, addr, strconv.Itoa(port), strconv.Itoa(expect))
}

// sendReport is what pySend did.
type sendReport struct {
	Sent    uint64  `json:"sent"`
	Seconds float64 `json:"seconds"`
	Retries uint64  `json:"retries"`
}

// sendUDP sends exactly n datagrams of payload bytes (carrying sequence
// numbers 0..n-1) from ns to dst:port at rate per second (0: as fast as
// the socket goes).
func sendUDP(ctx context.Context, ns, dst string, port, n, rate, payload int) (sendReport, error) {
	var r sendReport
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "python3", "-c", pySend,
		dst, strconv.Itoa(port), strconv.Itoa(n), strconv.Itoa(rate), strconv.Itoa(payload)).Output()
	if err != nil {
		return r, fmt.Errorf("udp sender: %w (%s)", err, out)
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return r, fmt.Errorf("udp sender report %q: %w", out, err)
	}
	return r, nil
}

func mustSendUDP(t *testing.T, ns, dst string, port, n, rate, payload int) sendReport {
	t.Helper()
	r, err := sendUDP(context.Background(), ns, dst, port, n, rate, payload)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != uint64(n) {
		t.Fatalf("sender sent %d datagrams, want %d", r.Sent, n)
	}
	return r
}

// iperfResult is the part of `iperf3 -J` the tests read.
type iperfResult struct {
	Error string `json:"error"`
	End   struct {
		SumSent struct {
			Bytes         float64 `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes         float64 `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		Sum struct {
			BitsPerSecond float64 `json:"bits_per_second"`
			LostPackets   int64   `json:"lost_packets"`
			Packets       int64   `json:"packets"`
			LostPercent   float64 `json:"lost_percent"`
		} `json:"sum"`
	} `json:"end"`
}

// iperf runs a one-shot iperf3 server in srvNS and a client in cliNS
// toward dst, and returns the client's JSON report.
func iperf(t *testing.T, srvNS, cliNS, dst string, port int, args ...string) iperfResult {
	t.Helper()
	testutil.RequireTool(t, "iperf3")
	p := strconv.Itoa(port)
	srv := exec.Command("ip", "netns", "exec", srvNS, "iperf3", "-s", "-1", "-p", p)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		done := make(chan struct{})
		go func() { _ = srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
	}()
	if !waitFor(5*time.Second, func() bool {
		out, _ := nsRun(srvNS, "ss", "-Hltn", "sport = :"+p)
		return strings.TrimSpace(out) != ""
	}) {
		_ = srv.Process.Kill()
		t.Fatalf("iperf3 server in %s not listening on %s", srvNS, p)
	}
	cargs := append([]string{"netns", "exec", cliNS, "iperf3", "-c", dst, "-p", p, "-J"}, args...)
	out, err := exec.Command("ip", cargs...).Output()
	var r iperfResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		_ = srv.Process.Kill()
		t.Fatalf("iperf3 %v: %v; output %s", args, err, out)
	}
	if err != nil || r.Error != "" {
		_ = srv.Process.Kill()
		t.Fatalf("iperf3 %v: %v %s", args, err, r.Error)
	}
	return r
}

// pyScrape prints the agent's /metrics page.
const pyScrape = `import sys, urllib.request
sys.stdout.write(urllib.request.urlopen("http://" + sys.argv[1] + "/metrics", timeout=5).read().decode())
`

// pyUDPSocket opens the socket a sender sends to argv[1]:argv[2] through
// and defines send(msg). IP_RECVERR makes a local drop (a full veth ring)
// come back as ENOBUFS instead of being swallowed, so send tries again
// (counted in retries) and every datagram it sent left the host.
const pyUDPSocket = `import errno, json, select, socket, struct, sys, time
dst, port = sys.argv[1], int(sys.argv[2])
v6 = ":" in dst
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, 25, 1)  # IPV6_RECVERR
else:
    s.setsockopt(socket.IPPROTO_IP, 11, 1)  # IP_RECVERR
retries = 0
def send(msg):
    global retries
    while True:
        try:
            s.sendto(msg, (dst, port))
            return
        except OSError as e:
            if e.errno not in (errno.ENOBUFS, errno.EAGAIN, errno.ECONNREFUSED):
                raise
            retries += 1
            time.sleep(0.0002)
`

// pySend sends argv[3] datagrams to argv[1]:argv[2] at argv[4] per second
// (0: unpaced), argv[5] bytes each, the first 8 bytes the sequence number;
// "sent" counts only datagrams that left the host (pyUDPSocket).
const pySend = pyUDPSocket + `n, rate, size = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
pad = b"\0" * (size - 8)
t0 = time.perf_counter()
for i in range(n):
    if rate > 0:
        ahead = t0 + i / rate - time.perf_counter()
        if ahead > 0.001:
            time.sleep(ahead)
    send(struct.pack("!Q", i) + pad)
print(json.dumps({"sent": n, "seconds": time.perf_counter() - t0, "retries": retries}))
`

// pyServeUDP binds a UDP socket on argv[1]:argv[2] and defines
// serve(handle), which calls handle(datagram) for each datagram until
// stdin closes (it prints "ready" first).
const pyServeUDP = `import json, select, socket, struct, sys, time
addr, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE: never the bottleneck
s.bind((addr, port))
s.setblocking(False)
def serve(handle):
    print("ready", flush=True)
    def drain():
        while True:
            try:
                d = s.recv(65535)
            except BlockingIOError:
                return
            handle(d)
    while True:
        r, _, _ = select.select([s, sys.stdin], [], [])
        if s in r:
            drain()
        if sys.stdin in r:
            drain()
            return
`

// pyRecv counts UDP datagrams on argv[1]:argv[2] and the distinct sequence
// numbers among 0..argv[3]-1, until stdin closes.
const pyRecv = pyServeUDP + `n = int(sys.argv[3])
seen = bytearray(n)
packets = nbytes = distinct = 0
def count(d):
    global packets, nbytes, distinct
    packets += 1
    nbytes += len(d)
    if len(d) >= 8:
        q = struct.unpack_from("!Q", d)[0]
        if q < n and not seen[q]:
            seen[q] = 1
            distinct += 1
serve(count)
missing = [i for i in range(n) if not seen[i]]
print(json.dumps({"packets": packets, "bytes": nbytes, "distinct": distinct,
                  "missing": len(missing), "first_missing": missing[:20]}))
`

// pyListen accepts TCP connections on argv[1]:argv[2] until stdin closes
// and reports how many it accepted.
const pyListen = `import json, select, socket, sys
addr, port = sys.argv[1], int(sys.argv[2])
l = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((addr, port))
l.listen(16)
print("ready", flush=True)
accepted = 0
while True:
    r, _, _ = select.select([l, sys.stdin], [], [])
    if l in r:
        c, _ = l.accept()
        accepted += 1
        c.close()
    if sys.stdin in r:
        break
print(json.dumps({"accepted": accepted}))
`

// pyConnect tries one TCP connect to argv[1]:argv[2] with a timeout of
// argv[3] seconds and prints connected, timeout or error <errno>.
const pyConnect = `import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("error", e.errno)
`

// tcpConnect runs pyConnect in ns.
func tcpConnect(t *testing.T, ns, addr string, port int, timeout string) string {
	t.Helper()
	out, err := nsRun(ns, "python3", "-c", pyConnect, addr, strconv.Itoa(port), timeout)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}
