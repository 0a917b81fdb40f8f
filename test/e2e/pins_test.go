// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// dpHealth is what the agent serves at /healthz (agent.DataplaneHealth,
// read as a client would).
type dpHealth struct {
	OK         bool       `json:"ok"`
	Problems   []string   `json:"problems"`
	Interfaces []ifHealth `json:"interfaces"`
	Repairs    []struct {
		Kind string `json:"kind"`
		What string `json:"what"`
	} `json:"repairs"`
}

// ifHealth is one interface of a dpHealth.
type ifHealth = struct {
	Name   string `json:"name"`
	XDP    string `json:"xdp"`
	LinkID uint32 `json:"link_id"`
}

// health fetches the agent's /healthz from inside the gateway namespace.
func (g *gateway) health() (int, dpHealth) {
	g.t.Helper()
	dial := nsDial(g.GW)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
	}}
	resp, err := hc.Get("http://" + g.MetricsAddr + "/healthz")
	if err != nil {
		g.t.Fatalf("get /healthz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h dpHealth
	if err := json.Unmarshal(b, &h); err != nil {
		g.t.Fatalf("/healthz %d: %v\n%s", resp.StatusCode, err, b)
	}
	return resp.StatusCode, h
}

// iface returns h's entry for interface name.
func iface(h dpHealth, name string) ifHealth {
	for _, ih := range h.Interfaces {
		if ih.Name == name {
			return ih
		}
	}
	return ifHealth{}
}

// repaired reports whether h lists a repair of kind whose text holds
// every one of words.
func repaired(h dpHealth, kind string, words ...string) bool {
next:
	for _, r := range h.Repairs {
		if r.Kind != kind {
			continue
		}
		for _, w := range words {
			if !strings.Contains(r.What, w) {
				continue next
			}
		}
		return true
	}
	return false
}

// udpThrough sends n datagrams from A to B's port and returns how many
// B received.
func udpThrough(t *testing.T, g *gateway, port, n int) uint64 {
	t.Helper()
	rcv := startReceiver(t, g.B, "0.0.0.0", port, n)
	mustSendUDP(t, g.A, lab.AddrB, port, n, 0, 16)
	time.Sleep(200 * time.Millisecond)
	var got recvReport
	rcv.finish(&got)
	return got.Packets
}

// wantFiltered checks that the gateway's rules are in force: datagrams to
// UDP 9999 are dropped (PDR 10), those to 7777 forwarded (PDR 12).
func wantFiltered(t *testing.T, g *gateway, when string) {
	t.Helper()
	if got := udpThrough(t, g, 9999, 20); got != 0 {
		t.Errorf("%s: %d of 20 datagrams to UDP 9999 crossed the gateway, which drops them (XDP detached?)", when, got)
	}
	if got := udpThrough(t, g, 7777, 20); got != 20 {
		t.Errorf("%s: %d of 20 datagrams to UDP 7777 crossed the gateway, want 20", when, got)
	}
}

// passProgram loads an XDP program that passes every packet: someone
// else's program, as far as the agent can tell.
func passProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "not_edgeplane", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPinsRemovedKeepDataplane removes a running agent's pin dir (rm -rf):
// its XDP links stay attached, since the agent holds them, so its drop
// rule keeps dropping; within the guard's second it pins everything again
// and /healthz says what it repaired, and a restart adopts what it
// pinned. An XDP link detached behind its back (BPF_LINK_DETACH; `ip
// link set xdp off` is refused while a link holds the hook) is attached
// again; another program attached in its place makes /healthz answer
// 503 naming it, and edgeplane_dataplane_ok 0, until it goes.
func TestPinsRemovedKeepDataplane(t *testing.T) {
	g := newGateway(t, forwardConfig)
	g.start()
	g.warmUp()
	code, h := g.health()
	if code != http.StatusOK || !h.OK || iface(h, lab.LanName).XDP != "edgeplane" || iface(h, lab.WanName).XDP != "edgeplane" {
		t.Fatalf("/healthz after start: %d %+v", code, h)
	}
	wantFiltered(t, g, "after start")

	if err := os.RemoveAll(g.PinDir); err != nil {
		t.Fatal(err)
	}
	wantXDP(t, g, map[string]bool{lab.LanName: true, lab.WanName: true})
	wantFiltered(t, g, "right after rm -rf of the pin dir")
	if !waitFor(5*time.Second, func() bool {
		_, h = g.health()
		return repaired(h, "pin_dir") && repaired(h, "pin", "edge_rules") && repaired(h, "pin", "link_"+lab.LanName)
	}) {
		t.Fatalf("/healthz does not report the pins made again within 5 s: %+v", h)
	}
	t.Logf("repairs: %+v", h.Repairs)
	if !h.OK {
		t.Errorf("/healthz after the pins were made again: not OK: %v", h.Problems)
	}
	for _, name := range []string{"link_" + lab.LanName, "link_" + lab.WanName, "edge_rules", "edge_fars", "edge_global"} {
		if _, err := os.Stat(filepath.Join(g.PinDir, name)); err != nil {
			t.Errorf("pin %s not made again: %v", name, err)
		}
	}
	if v, _ := metricValue(g.scrape(), "edgeplane_dataplane_repairs_total", map[string]string{"what": "pin"}); v < 1 {
		t.Errorf("edgeplane_dataplane_repairs_total{what=pin} = %v, want at least 1", v)
	}
	if s := g.stats(); s.Generation == 0 {
		t.Errorf("edgeplane stats on the pins made again: generation 0")
	}
	// The agent's own stop leaves the dataplane in place, and a new agent
	// adopts what the guard pinned instead of loading anew.
	if err := g.StopAgent(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantXDP(t, g, map[string]bool{lab.LanName: true, lab.WanName: true})
	loaded := strings.Count(g.log(), "loaded program")
	g.start()
	if strings.Count(g.log(), "loaded program") != loaded {
		t.Errorf("the restarted agent loaded its program anew instead of adopting the pinned one")
	}
	wantFiltered(t, g, "after a restart on the pins made again")

	// The kernel keeps a link's hook from netlink.
	if out, err := nsRun(g.GW, "ip", "link", "set", "dev", lab.LanName, "xdp", "off"); err == nil {
		t.Errorf("ip link set xdp off succeeded on a hook held by a link: %s", out)
	}
	wantXDP(t, g, map[string]bool{lab.LanName: true})

	// Detached behind its back: attached again, and said so.
	_, h = g.health()
	before := iface(h, lab.LanName).LinkID
	detachLink(t, before)
	if !waitFor(5*time.Second, func() bool {
		_, h = g.health()
		return repaired(h, "xdp", lab.LanName) && iface(h, lab.LanName).LinkID != before && h.OK
	}) {
		t.Fatalf("/healthz does not report %s's XDP attached again within 5 s: %+v", lab.LanName, h)
	}
	wantFiltered(t, g, "after the link was detached behind the agent's back")

	// Another program in its place: not OK, and why.
	pass := passProgram(t)
	var foreign link.Link
	for try := 0; foreign == nil; try++ {
		if try == 20 {
			t.Fatal("could not attach a program of another in the agent's place in 20 tries")
		}
		_, h = g.health()
		detachLink(t, iface(h, lab.LanName).LinkID)
		err := topo.Do(g.GW, func() error {
			itf, err := net.InterfaceByName(lab.LanName)
			if err != nil {
				return err
			}
			foreign, err = link.AttachXDP(link.XDPOptions{Program: pass, Interface: itf.Index})
			return err
		})
		if err != nil && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EEXIST) {
			t.Fatal(err)
		}
	}
	defer func() {
		if foreign != nil {
			foreign.Close()
		}
	}()
	if !waitFor(5*time.Second, func() bool {
		code, h = g.health()
		return code == http.StatusServiceUnavailable
	}) {
		t.Fatalf("/healthz with another program on %s: %d %+v, want 503", lab.LanName, code, h)
	}
	t.Logf("problems: %v", h.Problems)
	if ih := iface(h, lab.LanName); ih.XDP != "other" || len(h.Problems) != 1 || !strings.Contains(h.Problems[0], lab.LanName) || !strings.Contains(h.Problems[0], "not_edgeplane") {
		t.Errorf("/healthz: %+v, want lan0's XDP other, one problem naming it and the program", h)
	}
	fams := g.scrape()
	if v, ok := metricValue(fams, "edgeplane_xdp_attached", map[string]string{"interface": lab.LanName}); !ok || v != 0 {
		t.Errorf("edgeplane_xdp_attached{interface=%s} = %v (%v), want 0", lab.LanName, v, ok)
	}
	if v, ok := metricValue(fams, "edgeplane_dataplane_ok", nil); !ok || v != 0 {
		t.Errorf("edgeplane_dataplane_ok = %v (%v), want 0", v, ok)
	}
	if !strings.Contains(g.log(), "dataplane: not as the agent reports it") {
		t.Errorf("the agent did not log the program of another on %s", lab.LanName)
	}
	// Once it goes, the agent's program comes back.
	foreign.Close()
	foreign = nil
	if !waitFor(5*time.Second, func() bool {
		code, h = g.health()
		return code == http.StatusOK && iface(h, lab.LanName).XDP == "edgeplane"
	}) {
		t.Fatalf("/healthz after the other program left: %d %+v", code, h)
	}
	wantFiltered(t, g, "after the other program left")
}

// detachLink detaches the XDP link id (BPF_LINK_DETACH), as `bpftool
// link detach` does.
func detachLink(t *testing.T, id uint32) {
	t.Helper()
	l, err := link.NewFromID(link.ID(id))
	if err != nil {
		t.Fatalf("link %d: %v", id, err)
	}
	defer l.Close()
	if err := l.Detach(); err != nil {
		t.Fatalf("detach link %d: %v", id, err)
	}
}
