// SPDX-License-Identifier: Apache-2.0

package fleetbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// fleetGateway is one real gateway of the scenario: its topology, its
// agent's log and its management link.
type fleetGateway struct {
	*lab.OneGateway
	name string
	mgmt string // the host's end of the management veth
	logf *os.File
}

// runFleetGateways brings up fleetGateways gateways whose agents join a
// fleet under a prefix of its own, runs the series and takes them down.
func runFleetGateways(ctx context.Context, o Options, bin, dir string, etcd *child, endpoints []string, applies int) (s Series, err error) {
	rig, err := newFleetRig(ctx, bin, dir, etcd, endpointsAt(endpoints, "127.0.0.1"), fleetPrefixGateways)
	if err != nil {
		return s, err
	}
	defer rig.close()
	nets, err := freeMgmtNets(fleetGateways)
	if err != nil {
		return s, err
	}
	tag, err := randomTag()
	if err != nil {
		return s, err
	}
	var gws []*fleetGateway
	defer func() {
		for _, g := range gws {
			g.down(o)
		}
	}()
	var names []string
	for i := range fleetGateways {
		// The prefix names the namespaces (+a, +gw, +b), the pin dir
		// (+gw) and the management link (+m), a link name of at most
		// 15 bytes: "bfl", 6 hex digits, the index and "m" are 11.
		g := &fleetGateway{OneGateway: lab.NewOneGateway(fmt.Sprintf("bfl%s%d", tag, i)), name: fmt.Sprintf("gw%d", i+1)}
		g.mgmt = g.Prefix + "m"
		gws = append(gws, g) // before Up: down removes what a failed Up left
		if g.logf, err = os.Create(filepath.Join(dir, g.name+".log")); err != nil {
			return s, fmt.Errorf("agent log: %w", err)
		}
		if err := g.Up(); err != nil {
			return s, fmt.Errorf("%s up: %w", g.name, err)
		}
		host, peer := fmt.Sprintf("%s.%d.1", fleetMgmtNet, nets[i]), fmt.Sprintf("%s.%d.2", fleetMgmtNet, nets[i])
		if err := lab.LinkManagement(g.GW, g.mgmt, host, peer); err != nil {
			return s, fmt.Errorf("%s: %w", g.name, err)
		}
		// A config file each: an agent locks its own.
		cfgPath := filepath.Join(dir, g.name+".yaml")
		if err := os.WriteFile(cfgPath, []byte(fleetConfig), 0o600); err != nil {
			return s, fmt.Errorf("write agent config: %w", err)
		}
		if err := g.StartAgent(bin, cfgPath, g.logf, "--etcd", strings.Join(endpointsAt(endpoints, host), ","), "--etcd-prefix", fleetPrefixGateways,
			"--gateway", g.name); err != nil {
			return s, fmt.Errorf("%s: %w", g.name, err)
		}
		names = append(names, g.name)
	}
	alive := func() error {
		for _, g := range gws {
			if !g.running() {
				return fmt.Errorf("%s's agent exited: %s", g.name, logTail(g.logf.Name()))
			}
		}
		return nil
	}
	if err := rig.ob.waitReady(ctx, names, rig.seeded, alive); err != nil {
		return s, fmt.Errorf("%w; %s's agent: %s", err, gws[0].name, logTail(gws[0].logf.Name()))
	}
	o.Log("fleet: %d gateways joined and committed the base objects", len(names))
	s, err = rig.series(ctx, o, names, applies)
	if err != nil {
		if aerr := alive(); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return s, err
	}
	s.Name, s.What = "gateways", whatGateways
	return s, nil
}

// running reports whether the gateway's agent still runs (nobody reaps
// it before down: an exited one is a zombie).
func (g *fleetGateway) running() bool {
	cmd := g.Agent()
	if cmd == nil || cmd.Process == nil {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

// down stops the agent (SIGTERM, so it revokes its lease and leaves its
// pins for Down to remove; SIGKILL after 10 s), then removes the
// namespaces, which takes the management veth with them, and the link
// itself should a namespace have failed to go.
func (g *fleetGateway) down(o Options) {
	if cmd := g.Agent(); cmd != nil && cmd.Process != nil {
		done := make(chan struct{})
		go func() { _ = g.StopAgent(syscall.SIGTERM); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			o.Log("fleet: %s's agent ignored SIGTERM for 10 s, killing it", g.name)
			_ = cmd.Process.Kill()
			<-done
		}
	}
	g.Down()
	if _, err := net.InterfaceByName(g.mgmt); err == nil {
		if out, err := exec.Command("ip", "link", "del", g.mgmt).CombinedOutput(); err != nil {
			o.Log("fleet: remove %s: %v: %s", g.mgmt, err, strings.TrimSpace(string(out)))
		}
	}
	if g.logf != nil {
		g.logf.Close()
	}
}

// freeMgmtNets returns n third octets of fleetMgmtNet.X.0/30 that no
// address of the host is in: another run's links keep theirs.
func freeMgmtNets(n int) ([]int, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("host addresses: %w", err)
	}
	used := map[int]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip := ipn.IP.To4(); ip != nil && fmt.Sprintf("%d.%d", ip[0], ip[1]) == fleetMgmtNet {
				used[int(ip[2])] = true
			}
		}
	}
	var out []int
	for x := 0; x < 256 && len(out) < n; x++ {
		if !used[x] {
			out = append(out, x)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("no %d free management subnets in %s.0.0/16", n, fleetMgmtNet)
	}
	return out, nil
}

// randomTag is 6 hex digits, as testutil.UniqueName gives tests, so
// concurrent runs never share a namespace or a link name.
func randomTag() (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// logTail is the end of a log file, for errors.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
