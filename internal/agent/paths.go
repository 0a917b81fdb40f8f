// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/pathmon"
)

// ifAddrs reads the first IPv4 and the first global IPv6 address of each
// configured interface: XDP answers ICMP errors (packet too big) from the
// address of the interface the packet came in on.
func ifAddrs(ifaces []config.Interface) map[uint32]bpf.IfAddr {
	out := map[uint32]bpf.IfAddr{}
	for _, itf := range ifaces {
		nif, err := net.InterfaceByName(itf.Name)
		if err != nil {
			continue
		}
		addrs, _ := nif.Addrs()
		var a bpf.IfAddr
		for _, ad := range addrs {
			ipn, ok := ad.(*net.IPNet)
			if !ok {
				continue
			}
			ip, _ := netip.AddrFromSlice(ipn.IP)
			ip = ip.Unmap()
			switch {
			case ip.Is4() && a.V4 == 0:
				b := ip.As4()
				a.V4 = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
			case ip.Is6() && ip.IsGlobalUnicast() && a.HasV6 == 0:
				a.V6 = ip.As16()
				a.HasV6 = 1
			}
		}
		out[uint32(nif.Index)] = a
	}
	return out
}

// tickFlows advances the flow table's clock (edge_state.tick) once a second:
// packets mark each flow's last use in its ticks, and a new flow may take
// the place of one that went unused for bpf.FTIdle of them. Stopped (the
// agent restarting), the clock stands still and no flow ages: new flows
// then take only the places of flows that had a single packet.
func tickFlows(ctx context.Context, dp *loader.Dataplane, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := dp.Tick()
		if err != nil && !failing {
			log.Error("flow table clock", "error", err)
		}
		failing = err != nil
	}
}

// paths returns the configured paths.
func (a *Agent) paths() []config.Path {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.store.Paths()
}

// steerGroups lists the steering groups the committed config has.
func (a *Agent) steerGroups() []pathmon.Group {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []pathmon.Group
	for id, idx := range a.comp.SteerGroups() {
		l, ok := a.store.LBR(id)
		if !ok {
			continue
		}
		g := pathmon.Group{Index: idx, LBR: l}
		for _, mb := range l.Members {
			f, _ := a.store.FAR(mb.FAR)
			g.Paths = append(g.Paths, f.Path)
		}
		out = append(out, g)
	}
	return out
}

// PathStatus implements dataplane.Paths: the monitor's view of each
// path, by path id.
func (a *Agent) PathStatus() []dataplane.PathStatus {
	if a.mon == nil {
		return nil
	}
	st := a.mon.Statuses()
	out := make([]dataplane.PathStatus, 0, len(st))
	for _, id := range slices.Sorted(maps.Keys(st)) {
		s := st[id]
		out = append(out, dataplane.PathStatus{
			Path: id, State: s.State.String(), Since: s.Since, Why: s.Why,
			SRTT: s.SRTT, Jitter: s.Jitter, MinRTT: s.MinRTT, LastRTT: s.LastRTT,
			Loss: s.Loss, Sent: s.Sent, Answered: s.Answered, Monitored: s.Monitored,
			TCPRTT: s.TCPRTT, TCPMinRTT: s.TCPMinRTT, TCPSamples: s.TCPSamples,
		})
	}
	return out
}
