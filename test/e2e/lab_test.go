// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// labConfig is the lab the tests build: short delays so the test is
// quick, no loss so counts are exact.
const labConfig = `name: %s
links:
  wan1: {delay: 2ms, jitter: 0, loss: 0, rate: 0}
  wan2: {delay: 5ms, loss: 0}
`

// sdwanLab is one lab brought up by the edgeplane binary.
type sdwanLab struct {
	*lab.SDWAN
	t       *testing.T
	cfgPath string
}

// labName returns a fresh lab name: nsPrefix and three hex digits, so
// TestMain's leak check covers the lab's namespaces and pins, and the
// name stays within lab.MaxNameLen.
func labName() string {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return nsPrefix + hex.EncodeToString(b)[:lab.MaxNameLen-len(nsPrefix)]
}

// newLab writes a lab config under a fresh name; it does not bring the
// lab up. Whatever the test leaves is torn down in t.Cleanup, with the
// process logs dumped if the test failed.
func newLab(t *testing.T) *sdwanLab {
	t.Helper()
	return newLabWith(t, "")
}

// newLabWith is newLab with extra top-level YAML appended to the config.
func newLabWith(t *testing.T, extra string) *sdwanLab {
	t.Helper()
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "nsenter", "ping", "python3", "ss", "iperf3", "tshark"} {
		testutil.RequireTool(t, tool)
	}
	name := labName()
	cfgPath := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(cfgPath, append(fmt.Appendf(nil, labConfig, name), extra...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := lab.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	l := &sdwanLab{SDWAN: lab.NewSDWAN(cfg, edgeplaneBin, devBin), t: t, cfgPath: cfgPath}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range []string{"gwa", "gwb", "wan1", "wan2"} {
				if b, err := os.ReadFile(filepath.Join(l.RunDir, p+".log")); err == nil {
					t.Logf("%s log:\n%s", p, b)
				}
			}
		}
		if out, err := l.cli("down"); err != nil {
			t.Errorf("lab down in cleanup: %v\n%s", err, out)
		}
	})
	return l
}

// cli runs `edgeplane-dev lab ARGS --config FILE`.
func (l *sdwanLab) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args = append([]string{"lab"}, append(args, "--config", l.cfgPath)...)
	out, err := exec.CommandContext(ctx, devBin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("edgeplane-dev %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func (l *sdwanLab) mustCLI(args ...string) string {
	l.t.Helper()
	out, err := l.cli(args...)
	if err != nil {
		l.t.Fatalf("%v\n%s", err, out)
	}
	return out
}

func (l *sdwanLab) status() lab.Status {
	l.t.Helper()
	var st lab.Status
	out := l.mustCLI("status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		l.t.Fatalf("lab status --json: %v\n%s", err, out)
	}
	return st
}

// leftovers lists what of the lab exists: namespaces, pin dirs, the run
// dir, its processes and interfaces in the root namespace.
func (l *sdwanLab) leftovers(pids []int) []string {
	var left []string
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, l.Name) {
			left = append(left, "namespace "+f)
		}
	}
	entries, _ := os.ReadDir("/sys/fs/bpf")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), l.Name) {
			left = append(left, "pin dir /sys/fs/bpf/"+e.Name())
		}
	}
	if _, err := os.Stat(l.RunDir); err == nil {
		left = append(left, "run dir "+l.RunDir)
	}
	for _, pid := range pids {
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
			left = append(left, "process "+strconv.Itoa(pid))
		}
	}
	// The lab's processes by command line, whatever their pid.
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && (bytes.Contains(b, []byte(l.RunDir+"/")) || bytes.Contains(b, []byte("/sys/fs/bpf/"+l.Name))) {
			left = append(left, "process "+p.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, l.Name) {
			left = append(left, "link "+name)
		}
	}
	return left
}

// capture is tshark writing what interface a of a WAN link namespace
// sees (the emulator's side toward gateway A). XDP-redirected frames are
// only visible to taps on the receiving end of a veth, so the capture
// runs there, not on the gateway's wan interface.
type capture struct {
	cmd    *exec.Cmd
	file   string
	stderr *bytes.Buffer
}

func startCapture(t *testing.T, ns, file string) *capture {
	t.Helper()
	return startCaptureOn(t, ns, lab.LinkA, "ip proto 47", file)
}

// startCaptureOn is tshark writing into file what interface itf of
// namespace ns sees that capture filter filter takes.
func startCaptureOn(t *testing.T, ns, itf, filter, file string) *capture {
	t.Helper()
	c := &capture{file: file, stderr: &bytes.Buffer{}}
	c.cmd = exec.Command("ip", "netns", "exec", ns, "tshark", "-n", "-q", "-i", itf, "-f", filter, "-w", file)
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	if !waitFor(15*time.Second, func() bool { return strings.Contains(c.stderr.String(), "Capturing on") }) {
		t.Fatalf("tshark in %s did not start capturing: %s", ns, c.stderr.String())
	}
	return c
}

// end ends the capture: tshark flushes its file on SIGINT, given a
// moment for the last frames first.
func (c *capture) end() {
	time.Sleep(300 * time.Millisecond)
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// stop ends the capture and decodes it: one row per GRE frame, with
// fields as tshark -T fields prints them (occurrences comma-separated:
// "outer,inner"), checksums validated.
func (c *capture) stop(t *testing.T) []map[string]string {
	t.Helper()
	c.end()
	fields := []string{"ip.src", "ip.dst", "ip.ttl", "ip.checksum.status", "gre.key", "gre.proto",
		"ipv6.src", "ipv6.dst", "ipv6.hlim", "ip.proto", "ipv6.nxt", "udp.dstport", "udp.payload", "udp.checksum.status",
		"icmp.type", "icmp.checksum.status", "data.data"}
	args := []string{"-n", "-r", c.file, "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
		"-Y", "gre", "-T", "fields", "-E", "separator=/t"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", c.file, err)
	}
	var rows []map[string]string
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		vals := strings.Split(line, "\t")
		row := map[string]string{}
		for i, f := range fields {
			if i < len(vals) {
				row[f] = vals[i]
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// pyLabSend sends argv[4] UDP datagrams with payload argv[5] (hex) to
// argv[1]:argv[2] with TTL / hop limit argv[3].
const pyLabSend = `import socket, sys, time
dst, port, ttl, n, payload = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), bytes.fromhex(sys.argv[5])
if ":" in dst:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, ttl)
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
for i in range(n):
    s.sendto(payload, (dst, port))
    time.sleep(0.01)
`

// Checksum status values of tshark's *.checksum.status fields.
const tsharkChecksumGood = "1"

func TestLabSDWAN(t *testing.T) {
	l := newLab(t)
	rootLinksBefore, _ := exec.Command("ip", "-o", "link", "show").Output()

	start := time.Now()
	out := l.mustCLI("up")
	t.Logf("lab up took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	if out := l.mustCLI("up"); !strings.Contains(out, "left running") {
		t.Errorf("second lab up did not leave the running lab alone:\n%s", out)
	}
	st := l.status()
	if st.State != lab.StateUp {
		t.Fatalf("lab status: state %q, want up: %+v", st.State, st)
	}
	for _, g := range st.Gateways {
		if g.Generation == 0 || len(g.Paths) != 2 {
			t.Errorf("gateway %s: generation %d, %d paths; want > 0 and 2 (%s)", g.Name, g.Generation, len(g.Paths), g.Error)
		}
	}
	for _, dst := range []string{lab.AddrB, lab.AddrB6} {
		if got := ping(l.A, dst, 3, "0.1"); got != 3 {
			t.Errorf("ping A -> %s: %d of 3 replies", dst, got)
		}
	}
	// No leak around the overlay: gateway A has no route to site B, so
	// the only way there is GRE (and its own pings fail).
	if got := ping(l.GWA, lab.AddrB, 1, "0.1"); got != 0 {
		t.Errorf("gateway A reaches %s outside the overlay", lab.AddrB)
	}

	t.Run("gre-wire-format", func(t *testing.T) {
		dir := t.TempDir()
		c1 := startCapture(t, l.LinkNS("wan1"), filepath.Join(dir, "wan1.pcap"))
		c2 := startCapture(t, l.LinkNS("wan2"), filepath.Join(dir, "wan2.pcap"))

		// ICMP (path 1) with a payload pattern and TTL 50.
		const pattern = "e9a1b2c3d4f50617"
		if out, err := nsRun(l.A, "ping", "-n", "-q", "-c", "3", "-i", "0.1", "-t", "50", "-s", "56", "-p", pattern, lab.AddrB); err != nil {
			t.Fatalf("ping with pattern: %v\n%s", err, out)
		}
		// UDP over IPv4 (path 2) and over IPv6 (path 1), exact payloads.
		payload := make([]byte, 300)
		copy(payload, "edgeplane lab ")
		for i := 14; i < len(payload); i++ {
			payload[i] = byte(i * 7)
		}
		hexPayload := hex.EncodeToString(payload)
		for _, s := range []struct {
			dst string
			ttl int
		}{{lab.AddrB, 42}, {lab.AddrB6, 33}} {
			if out, err := nsRun(l.A, "python3", "-c", pyLabSend, s.dst, "40001", strconv.Itoa(s.ttl), "5", hexPayload); err != nil {
				t.Fatalf("udp to %s: %v\n%s", s.dst, err, out)
			}
		}
		rows1, rows2 := c1.stop(t), c2.stop(t)

		// A -> B frames on each link, by inner packet kind.
		count := map[string]int{}
		check := func(link string, r map[string]string, key int, proto, innerTTL string) {
			t.Helper()
			outer := strings.Split(r["ip.src"], ",")[0] + " -> " + strings.Split(r["ip.dst"], ",")[0]
			n := link[len(link)-1:]
			if want := "172.16." + n + ".1 -> 172.16." + n + ".2"; outer != want {
				t.Errorf("%s: outer %s, want %s", link, outer, want)
			}
			if r["gre.key"] != fmt.Sprintf("0x%08x", key) || r["gre.proto"] != proto {
				t.Errorf("%s: GRE key %s proto %s, want key %d proto %s", link, r["gre.key"], r["gre.proto"], key, proto)
			}
			ttls := strings.Split(r["ip.ttl"], ",")
			if ttls[0] != "64" {
				t.Errorf("%s: outer TTL %s, want 64 (the path's default)", link, ttls[0])
			}
			got := r["ipv6.hlim"]
			if proto == "0x0800" {
				if len(ttls) == 2 {
					got = ttls[1]
				} else {
					got = ""
				}
			}
			if got != innerTTL {
				t.Errorf("%s: inner TTL/hop limit %s, want %s (the sender's less one hop)", link, got, innerTTL)
			}
			for _, cs := range strings.Split(r["ip.checksum.status"], ",") {
				if cs != tsharkChecksumGood {
					t.Errorf("%s: IPv4 header checksum status %q, want good: %v", link, r["ip.checksum.status"], r)
				}
			}
		}
		// Only what gateway A sent: B's answers (ICMP errors quoting
		// our UDP) come back through the same links.
		fromA := func(rows []map[string]string, n string) []map[string]string {
			var out []map[string]string
			for _, r := range rows {
				if strings.Split(r["ip.src"], ",")[0] == "172.16."+n+".1" {
					out = append(out, r)
				}
			}
			return out
		}
		rows1, rows2 = fromA(rows1, "1"), fromA(rows2, "2")
		for _, r := range rows1 {
			switch {
			case r["ip.dst"] == "172.16.1.2,10.2.0.2" && r["icmp.type"] == "8":
				check("wan1", r, 1, "0x0800", "49")
				if r["ip.src"] != "172.16.1.1,10.1.0.2" {
					t.Errorf("wan1 ICMP: ip.src %s, want outer 172.16.1.1 inner 10.1.0.2", r["ip.src"])
				}
				if r["icmp.checksum.status"] != tsharkChecksumGood {
					t.Errorf("wan1 ICMP checksum status %q, want good", r["icmp.checksum.status"])
				}
				// iputils puts a 16-byte struct timeval first and fills
				// the rest of the 56 bytes with the pattern; tshark takes
				// the first 8 bytes as the timestamp and shows the other
				// 48 as data.
				want := strings.Repeat(pattern, 5)
				if d := r["data.data"]; len(d) != 2*48 || d[16:] != want {
					t.Errorf("wan1 ICMP data %q, want 8 bytes of timestamp and %s", d, want)
				}
				count["icmp4"]++
			case r["ipv6.dst"] == lab.AddrB6 && r["udp.dstport"] == "40001":
				check("wan1", r, 1, "0x86dd", "32")
				if r["ipv6.src"] != lab.AddrA6 {
					t.Errorf("wan1 UDP/IPv6: inner src %s, want %s", r["ipv6.src"], lab.AddrA6)
				}
				if r["udp.payload"] != hexPayload {
					t.Errorf("wan1 UDP/IPv6 payload %s, want %s", r["udp.payload"], hexPayload)
				}
				if r["udp.checksum.status"] != tsharkChecksumGood {
					t.Errorf("wan1 UDP/IPv6 checksum status %q, want good", r["udp.checksum.status"])
				}
				count["udp6"]++
			case r["udp.dstport"] == "40001":
				t.Errorf("UDP to port 40001 on wan1 (%v): IPv4 UDP belongs on path 2", r)
			}
		}
		for _, r := range rows2 {
			switch {
			case r["ip.dst"] == "172.16.2.2,10.2.0.2" && r["udp.dstport"] == "40001":
				check("wan2", r, 2, "0x0800", "41")
				if r["ip.src"] != "172.16.2.1,10.1.0.2" {
					t.Errorf("wan2 UDP: ip.src %s, want outer 172.16.2.1 inner 10.1.0.2", r["ip.src"])
				}
				if r["udp.payload"] != hexPayload {
					t.Errorf("wan2 UDP payload %s, want %s", r["udp.payload"], hexPayload)
				}
				if r["udp.checksum.status"] != tsharkChecksumGood {
					t.Errorf("wan2 UDP checksum status %q, want good", r["udp.checksum.status"])
				}
				count["udp4"]++
			case r["icmp.type"] == "8":
				t.Errorf("echo request on wan2 (%v): it belongs on path 1", r)
			}
		}
		for kind, want := range map[string]int{"icmp4": 3, "udp6": 5, "udp4": 5} {
			if count[kind] != want {
				t.Errorf("captured %d %s frames A -> B, want %d (wan1 %d frames, wan2 %d frames)", count[kind], kind, want, len(rows1), len(rows2))
			}
		}
	})

	t.Run("iperf3", func(t *testing.T) {
		before := l.status()
		tcpAB := iperf(t, l.B, l.A, lab.AddrB, 5201, "-t", "2")
		tcpBA := iperf(t, l.B, l.A, lab.AddrB, 5202, "-t", "2", "-R")
		udpAB := iperf(t, l.B, l.A, lab.AddrB, 5203, "-t", "2", "-u", "-b", "20M", "-l", "1200")
		udpBA := iperf(t, l.B, l.A, lab.AddrB, 5204, "-t", "2", "-u", "-b", "20M", "-l", "1200", "-R")
		t.Logf("iperf3 TCP A->B %.0f Mbit/s, B->A %.0f Mbit/s; UDP A->B %.1f Mbit/s lost %.2f%%, B->A %.1f Mbit/s lost %.2f%%",
			tcpAB.End.SumReceived.BitsPerSecond/1e6, tcpBA.End.SumReceived.BitsPerSecond/1e6,
			udpAB.End.Sum.BitsPerSecond/1e6, udpAB.End.Sum.LostPercent, udpBA.End.Sum.BitsPerSecond/1e6, udpBA.End.Sum.LostPercent)
		for name, r := range map[string]iperfResult{"TCP A->B": tcpAB, "TCP B->A": tcpBA} {
			if r.End.SumReceived.Bytes == 0 || r.End.SumReceived.BitsPerSecond < 1e6 {
				t.Errorf("iperf3 %s: %+v, want > 1 Mbit/s", name, r.End.SumReceived)
			}
		}
		for name, r := range map[string]iperfResult{"UDP A->B": udpAB, "UDP B->A": udpBA} {
			if r.End.Sum.Packets == 0 || r.End.Sum.LostPercent > 2 {
				t.Errorf("iperf3 %s: %+v, want datagrams through with < 2%% loss", name, r.End.Sum)
			}
		}
		after := l.status()
		// Bulk data went A -> B and B -> A on both paths: each gateway
		// encapsulated onto (tx) and decapsulated from (rx) each path.
		for _, gw := range []string{"gwa", "gwb"} {
			for _, id := range []uint32{1, 2} {
				b, _ := before.Path(gw, id)
				a, _ := after.Path(gw, id)
				if a.TxBytes-b.TxBytes < 1e6 || a.RxBytes-b.RxBytes < 1e6 {
					t.Errorf("%s path %d moved tx %d / rx %d bytes during iperf3, want > 1 MB each way", gw, id, a.TxBytes-b.TxBytes, a.RxBytes-b.RxBytes)
				}
			}
		}
	})

	t.Run("link", func(t *testing.T) {
		rtt := func(args ...string) float64 {
			out, _ := nsRun(l.A, append([]string{"ping", "-n", "-q", "-c", "5", "-i", "0.1"}, append(args, lab.AddrB)...)...)
			m := strings.Split(out, " = ")
			if len(m) < 2 {
				t.Fatalf("no rtt in ping output:\n%s", out)
			}
			v, _ := strconv.ParseFloat(strings.Split(m[1], "/")[1], 64)
			return v
		}
		out := l.mustCLI("link", "wan2", "--delay", "40ms", "--jitter", "1ms")
		t.Logf("lab link: %s", out)
		if got := rtt("-Q", "184"); got < 78 || got > 200 {
			t.Errorf("path 2 RTT %.1f ms after wan2 delay 40ms, want about 80", got)
		}
		if got := rtt(); got > 40 {
			t.Errorf("path 1 RTT %.1f ms, want about 4 (wan1 unchanged)", got)
		}
		st := l.status()
		for _, ls := range st.Links {
			if ls.Name == "wan2" && (ls.AB == nil || ls.AB.Impairment.Delay != 40*time.Millisecond || ls.BA.Impairment.Jitter != time.Millisecond) {
				t.Errorf("status of wan2 after lab link: %+v", ls)
			}
		}
		// --dir ab changes only one direction, keeping the rest.
		l.mustCLI("link", "wan2", "--dir", "ab", "--loss", "0.5%")
		for _, ls := range l.status().Links {
			if ls.Name == "wan2" && (ls.AB.Impairment.LossPercent != 0.5 || ls.BA.Impairment.LossPercent != 0 || ls.AB.Impairment.Delay != 40*time.Millisecond) {
				t.Errorf("wan2 after --dir ab --loss 0.5%%: ab %v, ba %v", ls.AB.Impairment, ls.BA.Impairment)
			}
		}
	})

	// Down after some of the processes died: nothing may remain.
	st = l.status()
	var pids []int
	for _, p := range st.Processes {
		pids = append(pids, p.Pids...)
		if p.Name == "gwb" || p.Name == "wan2" {
			for _, pid := range p.Pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if len(pids) != 4 {
		t.Errorf("lab status listed pids %v, want 4 processes", pids)
	}
	out = l.mustCLI("down")
	t.Logf("lab down:\n%s", out)
	if left := l.leftovers(pids); len(left) > 0 {
		t.Errorf("left after lab down:\n  %s", strings.Join(left, "\n  "))
	}
	rootLinksAfter, _ := exec.Command("ip", "-o", "link", "show").Output()
	if n, m := strings.Count(string(rootLinksBefore), "\n"), strings.Count(string(rootLinksAfter), "\n"); m > n {
		t.Logf("root namespace has %d links, had %d before the lab (another test's?)", m, n)
	}
	if st := l.status(); st.State != lab.StateDown {
		t.Errorf("status after down: %q, want down", st.State)
	}
	// Down is idempotent.
	l.mustCLI("down")
}

// TestLabDownAfterInterruptedUp kills `lab up` half-way (once it started
// the first emulator) and checks that `lab down` removes
// everything it had built.
func TestLabDownAfterInterruptedUp(t *testing.T) {
	l := newLab(t)
	cmd := exec.Command(devBin, "lab", "up", "--config", l.cfgPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(l.RunDir, "wan1.pid"))
		return err == nil
	}) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("lab up did not start the wan1 emulator:\n%s", out.String())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	st := l.status()
	t.Logf("lab up killed after:\n%sstatus: %s", out.String(), st.State)
	// Up is quick: it may have started more than the first emulator.
	if st.State == lab.StateDown {
		t.Errorf("status after an interrupted up: down, want degraded or up")
	}
	var pids []int
	for _, p := range st.Processes {
		pids = append(pids, p.Pids...)
	}
	if len(pids) < 1 {
		t.Errorf("after an interrupted up: no process running (%+v), want at least the wan1 emulator", st.Processes)
	}
	out2 := l.mustCLI("down")
	t.Logf("lab down:\n%s", out2)
	if left := l.leftovers(pids); len(left) > 0 {
		t.Errorf("left after lab down:\n  %s", strings.Join(left, "\n  "))
	}
}

// TestLabPathMTU runs the lab with 1500-byte WAN links, as most WANs have:
// a LAN host's full-size packets no longer fit once encapsulated (GRE with
// key adds 28 bytes), and gateway A must answer them with ICMP
// fragmentation needed / ICMPv6 packet too big from XDP, so hosts learn the
// path MTU (RFC 1191, RFC 8201) instead of losing the packets silently.
func TestLabPathMTU(t *testing.T) {
	l := newLabWith(t, "mtu: 1500\n")
	l.mustCLI("up")
	const innerMTU = 1500 - 20 - 8
	pinA := l.PinDir(l.GWA)
	before, err := readStats(pinA)
	if err != nil {
		t.Fatal(err)
	}
	tooBig := regexp.MustCompile(`mtu ?[=:] ?(\d+)`)
	for _, c := range []struct {
		dst, from string
		hdr       int // IP + ICMP header bytes ping adds to -s
	}{{lab.AddrB, lab.GWLan, 28}, {lab.AddrB6, lab.GWLan6, 48}} {
		fit := strconv.Itoa(innerMTU - c.hdr)
		if out, err := nsRun(l.A, "ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", "-M", "do", "-s", fit, c.dst); err != nil {
			t.Errorf("ping -M do -s %s %s (fits the path exactly): %v\n%s", fit, c.dst, err, out)
		}
		over := strconv.Itoa(innerMTU - c.hdr + 1)
		out, _ := nsRun(l.A, "ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", "-M", "do", "-s", over, c.dst)
		m := tooBig.FindStringSubmatch(out)
		if m == nil || m[1] != strconv.Itoa(innerMTU) {
			t.Errorf("ping -M do -s %s %s: want an ICMP too big advertising mtu %d, got:\n%s", over, c.dst, innerMTU, out)
		}
		if !strings.Contains(out, "From "+c.from) {
			t.Errorf("ping %s: the too-big error should come from gateway A's LAN address %s:\n%s", c.dst, c.from, out)
		}
	}
	// Full-size TCP both ways over both families: the hosts start with
	// 1500-byte segments and must shrink them after the gateway's ICMP.
	for i, dst := range []string{lab.AddrB, lab.AddrB6} {
		for j, dir := range [][]string{nil, {"-R"}} {
			r := iperf(t, l.B, l.A, dst, 5210+2*i+j, append([]string{"-t", "2"}, dir...)...)
			if r.End.SumReceived.BitsPerSecond < 1e6 {
				t.Errorf("iperf3 TCP to %s %v over 1500-byte WAN links: %+v, want > 1 Mbit/s", dst, dir, r.End.SumReceived)
			}
		}
	}
	after, err := readStats(pinA)
	if err != nil {
		t.Fatal(err)
	}
	sent := after.Reasons["mtu_icmp"].Packets - before.Reasons["mtu_icmp"].Packets
	dropped := after.Reasons["mtu_drop"].Packets - before.Reasons["mtu_drop"].Packets
	t.Logf("gateway A answered %d packets with ICMP too big, dropped %d without", sent, dropped)
	// The first too-big ping of each family is answered; the host then
	// knows the path MTU and refuses the second itself.
	if sent < 2 {
		t.Errorf("gateway A counted %d mtu_icmp, want at least one per family", sent)
	}
	if dropped != 0 {
		t.Errorf("gateway A dropped %d too-big packets without answering", dropped)
	}
}
