// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/edgeplane/edgeplane/internal/bpf/stats"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/topo"
	"github.com/edgeplane/edgeplane/internal/wanem"
)

// Lab states.
const (
	StateUp       = "up"       // every namespace and process is there
	StateDown     = "down"     // nothing of the lab is there
	StateDegraded = "degraded" // some of it is
)

// Status is what `edgeplane-dev lab status` shows.
type Status struct {
	Name       string          `json:"name"`
	State      string          `json:"state"`
	RunDir     string          `json:"run_dir"`
	Namespaces []NSStatus      `json:"namespaces"`
	Processes  []ProcStatus    `json:"processes"`
	Gateways   []GatewayStatus `json:"gateways"`
	Links      []LinkStatus    `json:"links"`
}

// NSStatus is one namespace of the lab.
type NSStatus struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Present bool   `json:"present"`
}

// ProcStatus is one background process of the lab.
type ProcStatus struct {
	Name    string `json:"name"` // gwa, gwb, wan1, wan2
	Kind    string `json:"kind"` // agent, wanem
	Pids    []int  `json:"pids,omitempty"`
	Running bool   `json:"running"`
	Log     string `json:"log"`
}

// GatewayStatus is a gateway's dataplane as its pinned maps show it.
type GatewayStatus struct {
	Name       string       `json:"name"`
	PinDir     string       `json:"pin_dir"`
	Generation uint32       `json:"generation"`
	Paths      []PathStatus `json:"paths,omitempty"`
	Error      string       `json:"error,omitempty"`
}

// PathStatus are the counters of one GRE path of a gateway: tx what it
// encapsulated, rx what it decapsulated (whole frames).
type PathStatus struct {
	ID        uint32 `json:"id"`
	Link      string `json:"link"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
}

// LinkStatus is a WAN link's emulator: settings and counters of each
// direction (ab: gateway A to gateway B).
type LinkStatus struct {
	Name   string          `json:"name"`
	Socket string          `json:"socket"`
	AB     *wanem.DirStats `json:"ab,omitempty"`
	BA     *wanem.DirStats `json:"ba,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Status reads the lab's state; parts that cannot be read are reported in
// the Status, not as an error.
func (l *SDWAN) Status() *Status {
	st := &Status{Name: l.Name, RunDir: l.RunDir}
	roles := []string{"host A", "gateway A", "WAN link wan1", "WAN link wan2", "gateway B", "host B"}
	present := 0
	for i, ns := range l.Namespaces() {
		ok := topo.NSExists(ns)
		if ok {
			present++
		}
		st.Namespaces = append(st.Namespaces, NSStatus{Name: ns, Role: roles[i], Present: ok})
	}
	found := l.findProcs()
	running := 0
	for _, p := range l.procs() {
		ps := ProcStatus{Name: p.Name, Kind: p.sub, Pids: found[p.Name], Log: filepath.Join(l.RunDir, p.Name+".log")}
		sort.Ints(ps.Pids)
		ps.Running = len(ps.Pids) > 0
		if ps.Running {
			running++
		}
		st.Processes = append(st.Processes, ps)
	}
	for _, gw := range []string{l.GWA, l.GWB} {
		g := GatewayStatus{Name: gw, PinDir: l.PinDir(gw)}
		if _, err := os.Stat(g.PinDir); err != nil {
			g.Error = "no pin dir"
		} else if s, err := stats.PinnedSnapshot(g.PinDir); err != nil {
			g.Error = err.Error()
		} else {
			g.Generation = s.Gen
			g.Paths = pathStatus(s)
		}
		st.Gateways = append(st.Gateways, g)
	}
	for _, link := range LinkNames {
		ls := LinkStatus{Name: link, Socket: l.Socket(link)}
		if r, err := wanem.Control(ls.Socket, wanem.Request{Op: wanem.OpGet}); err != nil {
			ls.Error = err.Error()
		} else {
			ls.AB, ls.BA = &r.AB, &r.BA
		}
		st.Links = append(st.Links, ls)
	}
	_, runDir := os.Stat(l.RunDir)
	switch {
	case present == len(st.Namespaces) && running == len(st.Processes):
		st.State = StateUp
	case present == 0 && running == 0 && runDir != nil:
		st.State = StateDown
	default:
		st.State = StateDegraded
	}
	return st
}

// pathStatus lists a snapshot's paths in id order; path n runs over wann.
func pathStatus(s *dataplane.Snapshot) []PathStatus {
	var out []PathStatus
	for id, c := range s.Paths {
		out = append(out, PathStatus{
			ID: id, Link: fmt.Sprintf("wan%d", id),
			TxPackets: c.Tx.Packets, TxBytes: c.Tx.Bytes, RxPackets: c.Rx.Packets, RxBytes: c.Rx.Bytes,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Path returns the counters of path id of gateway gw ("gwa" or "gwb").
func (s *Status) Path(gw string, id uint32) (PathStatus, bool) {
	for _, g := range s.Gateways {
		if strings.HasSuffix(g.Name, gw) {
			for _, p := range g.Paths {
				if p.ID == id {
					return p, true
				}
			}
		}
	}
	return PathStatus{}, false
}

// LinkChange is a change to a WAN link: nil fields keep their value.
type LinkChange struct {
	Delay, Jitter *string
	Loss          *string
	Rate          *string
}

// SetLink changes the impairment of a running link's directions (dir) in
// its emulator, keeping the settings the change does not name, and
// returns the link's state afterwards.
func (l *SDWAN) SetLink(link string, dir wanem.Direction, ch LinkChange) (wanem.Response, error) {
	if !isLink(link) {
		return wanem.Response{}, fmt.Errorf("unknown link %q (want %s)", link, strings.Join(LinkNames, " or "))
	}
	sock := l.Socket(link)
	cur, err := wanem.Control(sock, wanem.Request{Op: wanem.OpGet})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return cur, fmt.Errorf("lab %s is not up (no emulator socket %s): %w", l.Name, sock, err)
		}
		return cur, fmt.Errorf("link %s of lab %s: %w", link, l.Name, err)
	}
	dirs := []wanem.Direction{wanem.AB, wanem.BA}
	switch dir {
	case wanem.AB:
		dirs = dirs[:1]
	case wanem.BA:
		dirs = dirs[1:]
	}
	resp := cur
	for _, d := range dirs {
		imp := cur.AB.Impairment
		if d == wanem.BA {
			imp = cur.BA.Impairment
		}
		if ch.Delay != nil {
			if imp.Delay, err = parseDuration(*ch.Delay); err != nil {
				return cur, fmt.Errorf("delay: %w", err)
			}
		}
		if ch.Jitter != nil {
			if imp.Jitter, err = parseDuration(*ch.Jitter); err != nil {
				return cur, fmt.Errorf("jitter: %w", err)
			}
		}
		if ch.Loss != nil {
			if imp.LossPercent, err = wanem.ParseLoss(*ch.Loss); err != nil {
				return cur, err
			}
		}
		if ch.Rate != nil {
			if imp.RateBps, err = wanem.ParseRate(*ch.Rate); err != nil {
				return cur, err
			}
		}
		resp, err = wanem.Control(sock, wanem.Request{Op: wanem.OpSet, Dir: d, Impairment: &imp})
		if err != nil {
			return resp, fmt.Errorf("link %s of lab %s: %w", link, l.Name, err)
		}
	}
	return resp, nil
}
