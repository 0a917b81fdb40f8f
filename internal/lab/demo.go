// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgeplane/edgeplane/internal/topo"
	"github.com/edgeplane/edgeplane/internal/wanem"
)

// DemoName is the lab name the demo uses, so it never touches a lab the
// user runs under the default name.
const DemoName = "epd"

// Demo brings the SD-WAN lab up with the default link settings, measures
// each path's RTT with ping, pushes iperf3 TCP (path 1) and UDP (path 2)
// through it both ways, prints per-path counters of both gateways, shows
// a steered stream surviving a cut of wan1 with the path states, and
// tears the lab down, also when a step fails.
func Demo(ctx context.Context, bin, devBin string, out io.Writer) (err error) {
	start := time.Now()
	cfg := DefaultConfig()
	cfg.Name = DemoName
	l := NewSDWAN(cfg, bin, devBin)
	l.Progress = out
	step := func(format string, a ...any) { fmt.Fprintf(out, "==> "+format+"\n", a...) }
	defer func() {
		step("tearing down")
		if derr := l.Down(); derr != nil {
			err = errors.Join(err, fmt.Errorf("lab down: %w", derr))
		}
		fmt.Fprintf(out, "demo took %.1fs\n", time.Since(start).Seconds())
	}()
	for _, link := range LinkNames {
		step("%s: %s", link, l.linkSummary(link))
	}
	if _, err := l.Up(ctx); err != nil {
		return err
	}
	step("lab up after %.1fs", time.Since(start).Seconds())

	var rtts []pingResult
	pings := []struct {
		label, dst string
		path       uint32
		args       []string
	}{
		{"path 1 (wan1), IPv4", AddrB, 1, nil},
		{"path 1 (wan1), IPv6", AddrB6, 1, nil},
		{"path 2 (wan2), IPv4 DSCP 46 (-Q 184)", AddrB, 2, []string{"-Q", "184"}},
	}
	for _, p := range pings {
		step("ping A -> B over %s", p.label)
		args := append([]string{"ping", "-n", "-q", "-c", "20", "-i", "0.1", "-W", "2"}, p.args...)
		s, _ := topo.Output(ctx, l.A, args[0], append(args[1:], p.dst)...)
		r := parsePing(s)
		r.label, r.path = p.label, p.path
		if !r.ok {
			return fmt.Errorf("ping %s: no summary in output:\n%s", p.dst, s)
		}
		fmt.Fprintf(out, "    %d/%d replies, rtt min/avg/max %.2f/%.2f/%.2f ms\n", r.received, r.sent, r.min, r.avg, r.max)
		rtts = append(rtts, r)
	}

	step("iperf3 server in %s", l.B)
	srv := exec.Command("ip", "netns", "exec", l.B, "iperf3", "-s", "-p", "5201")
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start iperf3 server: %w", err)
	}
	defer func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}()
	if err := waitListen(ctx, l.B, 5201); err != nil {
		return err
	}
	runs := []struct {
		label string
		args  []string
	}{
		{"TCP A -> B (path 1)", []string{"-t", "4"}},
		{"TCP B -> A (path 1)", []string{"-t", "4", "-R"}},
		{"UDP A -> B at 20 Mbit/s (path 2)", []string{"-t", "4", "-u", "-b", "20M", "-l", "1200"}},
		{"UDP B -> A at 20 Mbit/s (path 2)", []string{"-t", "4", "-u", "-b", "20M", "-l", "1200", "-R"}},
	}
	for _, r := range runs {
		step("iperf3 %s", r.label)
		s, err := iperf3(ctx, l.A, AddrB, 5201, r.args...)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, "    "+s)
	}

	st := l.Status()
	step("report per path: frames incl. Ethernet (tx: encapsulated onto the path, rx: decapsulated from it), RTT A -> B -> A")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "    PATH\tLINK\tGATEWAY\tTX PKTS\tTX BYTES\tRX PKTS\tRX BYTES\tRTT MIN/AVG/MAX (MS)\t")
	for _, id := range []uint32{1, 2} {
		for _, gw := range []string{"gwa", "gwb"} {
			p, _ := st.Path(gw, id)
			fmt.Fprintf(w, "    %d\twan%d\t%s\t%d\t%d\t%d\t%d\t%s\t\n", id, id, gw, p.TxPackets, p.TxBytes, p.RxPackets, p.RxBytes, pathRTT(rtts, id))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range rtts {
		fmt.Fprintf(out, "    ping %-42s %d/%d replies, rtt min/avg/max %.2f/%.2f/%.2f ms\n", r.label+":", r.received, r.sent, r.min, r.avg, r.max)
	}
	// The busiest flows gateway A saw, over its control API (the agents
	// serve it to root on a unix socket in the lab's run dir).
	step("top flows at gateway A (edgeplane flows --top 6, over the agent's API)")
	if fl, err := topo.Output(ctx, l.GWA, l.Bin, "flows", "--top", "6", "--server", "unix://"+l.APISocket(l.GWA)); err != nil {
		fmt.Fprintf(out, "    %v\n", err)
	} else {
		for _, line := range strings.Split(strings.TrimRight(fl, "\n"), "\n") {
			fmt.Fprintf(out, "    %s\n", line)
		}
	}
	step("WAN links (the emulators' settings and counters)")
	for _, ls := range st.Links {
		if ls.Error != "" {
			fmt.Fprintf(out, "    %s: %s\n", ls.Name, ls.Error)
			continue
		}
		for _, d := range []struct {
			dir string
			s   *wanem.DirStats
		}{{"a->b", ls.AB}, {"b->a", ls.BA}} {
			fmt.Fprintf(out, "    %s %s: %s; %d frames in, %d out, %d dropped by the loss setting, %d by the queue, %d in flight\n",
				ls.Name, d.dir, d.s.Impairment, d.s.FramesIn, d.s.FramesOut, d.s.DroppedLoss, d.s.DroppedQueue+d.s.DroppedLimit, d.s.Pending)
		}
	}
	step("failover: UDP to port %d (steered: path 1 while its monitor finds it up, else path 2), 1 datagram per ms, wan1 cut at 1 s and repaired at 2.5 s", SteerPortLo)
	return l.demoFailover(ctx, out)
}

// pathRTT formats the RTT of the first ping over path id.
func pathRTT(rtts []pingResult, id uint32) string {
	for _, r := range rtts {
		if r.path == id && r.received > 0 {
			return fmt.Sprintf("%.1f / %.1f / %.1f", r.min, r.avg, r.max)
		}
	}
	return "-"
}

var (
	pingCount = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)
	pingRTT   = regexp.MustCompile(`= ([\d.]+)/([\d.]+)/([\d.]+)/`)
)

// pingResult is a ping summary.
type pingResult struct {
	label          string
	path           uint32
	sent, received int
	min, avg, max  float64
	ok             bool
}

func parsePing(s string) (r pingResult) {
	m := pingCount.FindStringSubmatch(s)
	if m == nil {
		return r
	}
	r.sent, _ = strconv.Atoi(m[1])
	r.received, _ = strconv.Atoi(m[2])
	r.ok = true
	if m := pingRTT.FindStringSubmatch(s); m != nil {
		r.min, _ = strconv.ParseFloat(m[1], 64)
		r.avg, _ = strconv.ParseFloat(m[2], 64)
		r.max, _ = strconv.ParseFloat(m[3], 64)
	}
	return r
}

// waitListen waits until a TCP port listens in ns.
func waitListen(ctx context.Context, ns string, port int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := topo.Output(ctx, ns, "ss", "-Hltn", "sport = :"+strconv.Itoa(port))
		if strings.TrimSpace(out) != "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nothing listens on port %d in %s", port, ns)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// iperf3 runs an iperf3 client in ns toward dst and returns a one-line
// summary of its JSON report.
func iperf3(ctx context.Context, ns, dst string, port int, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	argv := append([]string{"netns", "exec", ns, "iperf3", "-c", dst, "-p", strconv.Itoa(port), "-J"}, args...)
	outb, err := exec.CommandContext(ctx, "ip", argv...).Output()
	var r struct {
		Error string `json:"error"`
		End   struct {
			SumSent struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Retransmits   int64   `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			Sum struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				JitterMs      float64 `json:"jitter_ms"`
				LostPackets   int64   `json:"lost_packets"`
				Packets       int64   `json:"packets"`
				LostPercent   float64 `json:"lost_percent"`
			} `json:"sum"`
		} `json:"end"`
	}
	if jerr := json.Unmarshal(outb, &r); jerr != nil {
		return "", fmt.Errorf("iperf3 %s: %w (output %q)", strings.Join(args, " "), errors.Join(err, jerr), outb)
	}
	if r.Error != "" {
		return "", fmt.Errorf("iperf3 %s: %s", strings.Join(args, " "), r.Error)
	}
	if err != nil {
		return "", fmt.Errorf("iperf3 %s: %w", strings.Join(args, " "), err)
	}
	for _, a := range args {
		if a == "-u" {
			s := r.End.Sum
			return fmt.Sprintf("%.1f Mbit/s received, %d/%d datagrams lost (%.2f%%), jitter %.2f ms",
				s.BitsPerSecond/1e6, s.LostPackets, s.Packets, s.LostPercent, s.JitterMs), nil
		}
	}
	return fmt.Sprintf("%.1f Mbit/s received, %d retransmits",
		r.End.SumReceived.BitsPerSecond/1e6, r.End.SumSent.Retransmits), nil
}

// lastLines returns the last n lines of s, indented for a report.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n    ")
}

// Gap is a pause of a stream: when it began (from the stream's start)
// and how long it lasted.
type Gap struct {
	At, Len time.Duration
}

// FailoverRun is what host B saw of a stream through a failover.
type FailoverRun struct {
	Sent, Received int
	// Gaps are the stream's pauses over 10 ms.
	Gaps []Gap
	// CutAt and RepairAt are when wan1's cut and repair were asked for.
	CutAt, RepairAt time.Duration
}

// Longest returns the longest gap that began in [from, to) (0: none).
func (r FailoverRun) Longest(from, to time.Duration) time.Duration {
	var d time.Duration
	for _, g := range r.Gaps {
		if g.At >= from && g.At < to {
			d = max(d, g.Len)
		}
	}
	return d
}

// Failover sends a UDP stream of one datagram a millisecond from A to B
// on a steered port (active-standby: path 1, else path 2) for 4 s, cuts
// wan1 (100 % loss) after 1 s and repairs it 1.5 s later, calling
// whileCut (if set) just before the repair; host B times the stream's
// pauses. The link changes run beside the sender, so neither holds the
// stream up.
func (l *SDWAN) Failover(ctx context.Context, whileCut func()) (FailoverRun, error) {
	var run FailoverRun
	var rx *net.UDPConn
	if err := topo.Do(l.B, func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(AddrB), Port: SteerPortLo})
		return err
	}); err != nil {
		return run, fmt.Errorf("receiver in %s: %w", l.B, err)
	}
	defer rx.Close()
	var tx *net.UDPConn
	if err := topo.Do(l.A, func() (err error) {
		tx, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(AddrB), Port: SteerPortLo})
		return err
	}); err != nil {
		return run, fmt.Errorf("sender in %s: %w", l.A, err)
	}
	defer tx.Close()

	got := make(chan []Gap, 1)
	start := time.Now()
	go func() {
		var gaps []Gap
		var last time.Time
		buf := make([]byte, 64)
		for {
			_ = rx.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := rx.Read(buf); err != nil {
				got <- gaps
				return
			}
			now := time.Now()
			if !last.IsZero() && now.Sub(last) > 10*time.Millisecond {
				gaps = append(gaps, Gap{last.Sub(start), now.Sub(last)})
			}
			last = now
			run.Received++
		}
	}()
	const total = 4 * time.Second
	changed := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		// The times are taken before the changes: the first direction's
		// change takes effect before the second's returns, and under load
		// the stream's last datagram over wan1 may land in between.
		run.CutAt = time.Since(start)
		loss := "100%"
		_, err := l.SetLink("wan1", wanem.Both, LinkChange{Loss: &loss})
		time.Sleep(1500 * time.Millisecond)
		if whileCut != nil {
			whileCut()
		}
		run.RepairAt = time.Since(start)
		loss = "0"
		if _, rerr := l.SetLink("wan1", wanem.Both, LinkChange{Loss: &loss}); err == nil {
			err = rerr
		}
		changed <- err
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < total {
		<-tick.C
		_, _ = tx.Write([]byte(strconv.Itoa(run.Sent)))
		run.Sent++
	}
	err := <-changed
	run.Gaps = <-got
	return run, err
}

// demoFailover shows steering at work: a stream keeps going while wan1
// is cut (Failover); the path states come from gateway A's agent.
func (l *SDWAN) demoFailover(ctx context.Context, out io.Writer) error {
	states := func(out io.Writer, when string) {
		s, err := topo.Output(ctx, l.GWA, l.Bin, "get", "paths", "--server", "unix://"+l.APISocket(l.GWA))
		if err != nil {
			fmt.Fprintf(out, "    %v\n", err)
			return
		}
		fmt.Fprintf(out, "    path states at gateway A %s:\n", when)
		lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
		for i, line := range lines {
			if strings.HasPrefix(line, "PATH") {
				for _, l := range lines[i:] {
					fmt.Fprintf(out, "      %s\n", l)
				}
				break
			}
		}
	}
	var cutOut bytes.Buffer
	run, err := l.Failover(ctx, func() { states(&cutOut, "with wan1 cut") })
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    %.1fs: wan1 cut (100%% loss)\n", run.CutAt.Seconds())
	out.Write(cutOut.Bytes())
	fmt.Fprintf(out, "    %.1fs: wan1 repaired\n", run.RepairAt.Seconds())
	fmt.Fprintf(out, "    %d datagrams sent at 1 per ms, %d received\n", run.Sent, run.Received)
	for _, g := range run.Gaps {
		fmt.Fprintf(out, "    the stream stopped at %.3fs for %d ms (failover to path 2)\n", g.At.Seconds(), g.Len.Milliseconds())
	}
	if len(run.Gaps) == 0 {
		fmt.Fprintln(out, "    no gap over 10 ms")
	}
	time.Sleep(500 * time.Millisecond)
	states(out, "after the repair")
	return nil
}
