// SPDX-License-Identifier: Apache-2.0

// Package lab builds gateway topologies in network namespaces on one
// machine, so users and tests can run real traffic through real XDP
// gateways without hardware.
package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/agent"
)

// OneGateway is host A -- gateway -- host B:
//
//	A eth0 10.1.0.2/24 fd01::2/64 == lan0 10.1.0.1/24 fd01::1/64 [gw] wan0 10.2.0.1/24 fd02::1/64 == eth0 10.2.0.2/24 fd02::2/64 B
type OneGateway struct {
	Prefix      string // namespace names: Prefix+"a", Prefix+"gw", Prefix+"b"
	A, GW, B    string
	PinDir      string
	MetricsAddr string // inside the gateway namespace
	agent       *exec.Cmd
}

// Host addresses of the one-gateway topology.
const (
	AddrA   = "10.1.0.2"
	AddrB   = "10.2.0.2"
	AddrA6  = "fd01::2"
	AddrB6  = "fd02::2"
	GWLan   = "10.1.0.1"
	GWWan   = "10.2.0.1"
	GWLan6  = "fd01::1"
	GWWan6  = "fd02::1"
	LanName = "lan0"
	WanName = "wan0"
)

// NewOneGateway names a topology; Up creates it.
func NewOneGateway(prefix string) *OneGateway {
	return &OneGateway{
		Prefix: prefix, A: prefix + "a", GW: prefix + "gw", B: prefix + "b",
		PinDir:      "/sys/fs/bpf/" + prefix + "gw",
		MetricsAddr: "127.0.0.1:9090",
	}
}

// sh runs a command and wraps its output into the error.
func sh(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NS runs a command in namespace ns.
func NS(ns string, name string, args ...string) error {
	return sh("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// NSOutput runs a command in namespace ns and returns its output.
func NSOutput(ns string, name string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Up creates the namespaces, links and addresses (removing leftovers of an
// earlier run first).
func (o *OneGateway) Up() error {
	o.Down()
	for _, ns := range []string{o.A, o.GW, o.B} {
		if err := sh("ip", "netns", "add", ns); err != nil {
			return err
		}
		if err := NS(ns, "ip", "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"ip", "link", "add", "eth0", "netns", o.A, "type", "veth", "peer", "name", LanName, "netns", o.GW},
		{"ip", "link", "add", "eth0", "netns", o.B, "type", "veth", "peer", "name", WanName, "netns", o.GW},
	}
	for _, s := range steps {
		if err := sh(s[0], s[1:]...); err != nil {
			return err
		}
	}
	nsSteps := []struct {
		ns   string
		args []string
	}{
		{o.A, []string{"ip", "addr", "add", AddrA + "/24", "dev", "eth0"}},
		{o.A, []string{"ip", "addr", "add", AddrA6 + "/64", "dev", "eth0", "nodad"}},
		{o.A, []string{"ip", "link", "set", "eth0", "up"}},
		{o.A, []string{"ip", "route", "add", "default", "via", GWLan}},
		{o.A, []string{"ip", "-6", "route", "add", "default", "via", GWLan6}},
		{o.B, []string{"ip", "addr", "add", AddrB + "/24", "dev", "eth0"}},
		{o.B, []string{"ip", "addr", "add", AddrB6 + "/64", "dev", "eth0", "nodad"}},
		{o.B, []string{"ip", "link", "set", "eth0", "up"}},
		{o.B, []string{"ip", "route", "add", "default", "via", GWWan}},
		{o.B, []string{"ip", "-6", "route", "add", "default", "via", GWWan6}},
		{o.GW, []string{"ip", "addr", "add", GWLan + "/24", "dev", LanName}},
		{o.GW, []string{"ip", "addr", "add", GWLan6 + "/64", "dev", LanName, "nodad"}},
		{o.GW, []string{"ip", "addr", "add", GWWan + "/24", "dev", WanName}},
		{o.GW, []string{"ip", "addr", "add", GWWan6 + "/64", "dev", WanName, "nodad"}},
		{o.GW, []string{"ip", "link", "set", LanName, "up"}},
		{o.GW, []string{"ip", "link", "set", WanName, "up"}},
		{o.GW, []string{"sysctl", "-qw", "net.ipv4.ip_forward=1"}},
		{o.GW, []string{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"}},
	}
	for _, s := range nsSteps {
		if err := NS(s.ns, s.args[0], s.args[1:]...); err != nil {
			return err
		}
	}
	// Hosts send through an XDP forwarder: no TX checksum offload, or TCP
	// arrives with partial checksums. Frames that XDP redirects into a
	// veth are only accepted when the peer has NAPI: GRO on turns it on.
	for _, ns := range []string{o.A, o.B} {
		if err := NS(ns, "ethtool", "-K", "eth0", "tx", "off", "gro", "on"); err != nil {
			return err
		}
	}
	for _, itf := range []string{LanName, WanName} {
		if err := NS(o.GW, "ethtool", "-K", itf, "tx", "off"); err != nil {
			return err
		}
	}
	return nil
}

// StartAgent starts `edgeplane agent` inside the gateway's network
// namespace only (nsenter --net), so it keeps the host's bpffs and pins.
func (o *OneGateway) StartAgent(bin, configPath string, logf *os.File, extra ...string) error {
	args := append([]string{"--net=/run/netns/" + o.GW, bin, "agent", "--config", configPath,
		"--pin-dir", o.PinDir, "--metrics-addr", o.MetricsAddr}, extra...)
	cmd := exec.Command("nsenter", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	o.agent = cmd
	return nil
}

// Agent returns the running agent process, if any.
func (o *OneGateway) Agent() *exec.Cmd { return o.agent }

// WaitReady waits until the agent has committed its first generation
// (edgeplane stats answers with a generation > 0).
func (o *OneGateway) WaitReady(ctx context.Context, bin string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		out, err := exec.CommandContext(ctx, bin, "stats", "--json", "--pin-dir", o.PinDir).Output()
		if err == nil && !strings.Contains(string(out), `"generation": 0`) {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("agent did not become ready within 20s")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StopAgent signals the agent and waits for it.
func (o *OneGateway) StopAgent(sig os.Signal) error {
	if o.agent == nil || o.agent.Process == nil {
		return nil
	}
	_ = o.agent.Process.Signal(sig)
	err := o.agent.Wait()
	o.agent = nil
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil // killed or exited non-zero on a signal: expected here
	}
	return err
}

// Down stops the agent, detaches and removes everything Up created.
func (o *OneGateway) Down() {
	if o.agent != nil && o.agent.Process != nil {
		_ = o.agent.Process.Kill()
		_ = o.agent.Wait()
		o.agent = nil
	}
	if _, err := os.Stat(o.PinDir); err == nil {
		// Links hold the program on the gateway's interfaces: unpin them
		// before deleting the namespaces.
		_ = agent.Down(filepath.Clean(o.PinDir))
	}
	for _, ns := range []string{o.A, o.GW, o.B} {
		_ = sh("ip", "netns", "del", ns)
	}
}
