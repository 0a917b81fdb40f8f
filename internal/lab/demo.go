// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DemoConfig is the gateway config of the one-gateway demo.
//
//go:embed demo.yaml
var DemoConfig []byte

// Demo brings the one-gateway lab up, pushes ping, TCP and UDP through the
// XDP gateway in both directions, prints the counters and tears it down.
func Demo(ctx context.Context, bin string, out io.Writer) error {
	o := NewOneGateway("epdemo")
	step := func(format string, a ...any) { fmt.Fprintf(out, "==> "+format+"\n", a...) }
	step("building namespaces %s, %s, %s", o.A, o.GW, o.B)
	if err := o.Up(); err != nil {
		return err
	}
	defer func() {
		step("tearing down")
		o.Down()
	}()
	dir, err := os.MkdirTemp("", "edgeplane-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfgPath, DemoConfig, 0o600); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	step("starting the agent in %s (pins under %s)", o.GW, o.PinDir)
	if err := o.StartAgent(bin, cfgPath, logf); err != nil {
		return err
	}
	if err := o.WaitReady(ctx, bin); err != nil {
		b, _ := os.ReadFile(logf.Name())
		return fmt.Errorf("%w; agent log:\n%s", err, b)
	}

	run := func(ns string, args ...string) (string, error) {
		s, err := NSOutput(ns, args[0], args[1:]...)
		return s, err
	}
	step("ping A -> B (IPv4 and IPv6)")
	for _, dst := range []string{AddrB, AddrB6} {
		s, err := run(o.A, "ping", "-c", "5", "-i", "0.2", "-W", "2", dst)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, "    "+lastLines(s, 2))
	}
	step("iperf3 TCP A -> B and B -> A (3 s each)")
	srv := exec.Command("ip", "netns", "exec", o.B, "iperf3", "-s", "-1", "-p", "5201")
	if err := srv.Start(); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	s, err := run(o.A, "iperf3", "-c", AddrB, "-p", "5201", "-t", "3", "-f", "m")
	_ = srv.Wait()
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "    A->B "+summaryLine(s, "receiver"))
	srv = exec.Command("ip", "netns", "exec", o.A, "iperf3", "-s", "-1", "-p", "5201")
	if err := srv.Start(); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	s, err = run(o.B, "iperf3", "-c", AddrA, "-p", "5201", "-t", "3", "-f", "m")
	_ = srv.Wait()
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "    B->A "+summaryLine(s, "receiver"))
	step("iperf3 UDP A -> B at 50 Mbit/s (3 s)")
	srv = exec.Command("ip", "netns", "exec", o.B, "iperf3", "-s", "-1", "-p", "5202")
	if err := srv.Start(); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	s, err = run(o.A, "iperf3", "-c", AddrB, "-p", "5202", "-u", "-b", "50M", "-t", "3", "-f", "m")
	_ = srv.Wait()
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "    "+summaryLine(s, "receiver"))
	step("UDP A -> B port 9999: PDR 10 drops it")
	if _, err := run(o.A, "python3", "-c", udpBurst(AddrB, 9999, 100)); err != nil {
		return err
	}
	step("counters (edgeplane stats --pin-dir %s)", o.PinDir)
	st, err := exec.Command(bin, "stats", "--pin-dir", o.PinDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("stats: %w: %s", err, st)
	}
	fmt.Fprint(out, string(st))
	return nil
}

// udpBurst is a python3 one-liner sending n UDP datagrams to addr:port.
func udpBurst(addr string, port, n int) string {
	return fmt.Sprintf("import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range(%d): s.sendto(b'x'*64,(%q,%d))", n, addr, port)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n    ")
}

func summaryLine(s, want string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, want) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return lastLines(s, 1)
}
