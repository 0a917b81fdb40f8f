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
	"github.com/edgeplane/edgeplane/internal/topo"
)

// OneGateway is host A -- gateway -- host B:
//
//	A eth0 10.1.0.2/24 fd01::2/64 == lan0 10.1.0.1/24 fd01::1/64 [gw] wan0 10.2.0.1/24 fd02::1/64 == eth0 10.2.0.2/24 fd02::2/64 B
type OneGateway struct {
	Prefix      string // namespace names: Prefix+"a", Prefix+"gw", Prefix+"b"
	A, GW, B    string
	PinDir      string
	MetricsAddr string // inside the gateway namespace; empty: the agent's default
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

// Up creates the namespaces, links and addresses (removing leftovers of an
// earlier run first).
func (o *OneGateway) Up() error {
	o.Down()
	var ns []*topo.NS
	defer func() {
		for _, n := range ns {
			n.Close() // the namespaces stay until Down
		}
	}()
	for _, name := range []string{o.A, o.GW, o.B} {
		n, err := topo.NewNS(name)
		if err != nil {
			return err
		}
		ns = append(ns, n)
	}
	a, gw, b := ns[0], ns[1], ns[2]
	if err := topo.AddVeth(
		topo.End{NS: a, Name: "eth0", Addrs: []string{AddrA + "/24", AddrA6 + "/64"}},
		topo.End{NS: gw, Name: LanName, Addrs: []string{GWLan + "/24", GWLan6 + "/64"}},
	); err != nil {
		return err
	}
	if err := topo.AddVeth(
		topo.End{NS: b, Name: "eth0", Addrs: []string{AddrB + "/24", AddrB6 + "/64"}},
		topo.End{NS: gw, Name: WanName, Addrs: []string{GWWan + "/24", GWWan6 + "/64"}},
	); err != nil {
		return err
	}
	if err := gw.Sysctl("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
		return err
	}
	// Hosts send through an XDP forwarder: no TX checksum offload, or TCP
	// arrives with partial checksums. Frames that XDP redirects into a
	// veth are only accepted when the peer has NAPI: GRO on turns it on.
	for _, h := range []struct {
		n       *topo.NS
		gw, gw6 string
	}{{a, GWLan, GWLan6}, {b, GWWan, GWWan6}} {
		if err := h.n.AddRoute("default", h.gw, ""); err != nil {
			return err
		}
		if err := h.n.AddRoute("default", h.gw6, ""); err != nil {
			return err
		}
		if err := h.n.SetTxChecksum("eth0", false); err != nil {
			return err
		}
		if err := h.n.SetGRO("eth0", true); err != nil {
			return err
		}
	}
	for _, itf := range []string{LanName, WanName} {
		if err := gw.SetTxChecksum(itf, false); err != nil {
			return err
		}
	}
	return nil
}

// StartAgent starts `edgeplane agent` inside the gateway's network
// namespace only (nsenter --net), so it keeps the host's bpffs and pins.
func (o *OneGateway) StartAgent(bin, configPath string, logf *os.File, extra ...string) error {
	args := []string{"--net=/run/netns/" + o.GW, bin, "agent", "--config", configPath, "--pin-dir", o.PinDir}
	if o.MetricsAddr != "" {
		args = append(args, "--metrics-addr", o.MetricsAddr)
	}
	args = append(args, extra...)
	cmd := exec.Command("nsenter", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	o.agent = cmd
	return nil
}

// APISocket is the unix socket the gateway's agent serves its gRPC API
// on (to root, without tokens), as a --server value.
func (o *OneGateway) APISocket() string { return "unix://" + agent.DefaultAPISocket(o.PinDir) }

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
		_ = topo.DeleteNS(ns)
	}
	// A killed agent leaves its sockets.
	_ = os.RemoveAll(agent.RunDir(o.PinDir))
}
