// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/n4"
	"github.com/edgeplane/edgeplane/internal/upf"
)

// n4State is what the N4 endpoint keeps across restarts, beside the
// config file (n4StatePath): the user plane's recovery time stamp, so
// an SMF does not take a restart for one that lost state, and the
// associations SMFs set up.
type n4State struct {
	Recovery time.Time `json:"recovery"`
	Peers    []n4.Peer `json:"peers"`
}

// n4StatePath is where the agent of configPath keeps its N4 state.
func n4StatePath(configPath string) string { return configPath + ".n4" }

// readN4State reads the N4 state at path; a missing file is a first
// start (now the recovery time stamp, no associations).
func readN4State(path string, now time.Time) (n4State, error) {
	var st n4State
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return n4State{Recovery: now.Truncate(time.Second)}, nil
	}
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	if err == nil && st.Recovery.IsZero() {
		err = errors.New("no recovery time stamp")
	}
	if err != nil {
		return st, fmt.Errorf("N4 state %s is not the agent's (remove it to start afresh, as a restart that lost state): %w", path, err)
	}
	return st, nil
}

func writeN4State(path string, st n4State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Replace(path, append(b, '\n'), 0o600, true)
}

// n4NodeID is the node ID the endpoint gives SMFs: id, or the IP of
// the address it listens on.
func n4NodeID(addr, id string) (string, error) {
	if id != "" {
		return id, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--n4-addr %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.IsUnspecified() {
		return "", fmt.Errorf("--n4-addr %q names no address SMFs can reach: give --n4-node-id", addr)
	}
	return ip.String(), nil
}

// startN4 opens the N4 endpoint on Options.N4Addr with the recovery
// time stamp and the associations kept from the last run; each change
// of the associations is written back before the answer that made it
// leaves.
func (a *Agent) startN4(context.Context) error {
	id, err := n4NodeID(a.opts.N4Addr, a.opts.N4NodeID)
	if err != nil {
		return err
	}
	path := n4StatePath(a.opts.ConfigPath)
	st, err := readN4State(path, time.Now())
	if err != nil {
		return err
	}
	if err := writeN4State(path, st); err != nil {
		return fmt.Errorf("keep the N4 state: %w", err)
	}
	o := n4.Options{Addr: a.opts.N4Addr, NodeID: id, Recovery: st.Recovery, Log: a.log, Peers: st.Peers,
		Changed: func(peers []n4.Peer) {
			if err := writeN4State(path, n4State{Recovery: st.Recovery, Peers: peers}); err != nil {
				a.log.Error("n4: the associations are not kept for a restart", "err", err)
			}
		}}
	// Sessions are carried where N3 is served: the dataplane holds them,
	// the journal beside the config keeps them across restarts.
	if a.n3.IsValid() || a.n3v6.IsValid() {
		ds, err := a.dp.Sessions()
		if err != nil {
			return err
		}
		// End Markers along a path a handover leaves, and Echo
		// Requests to the accesses of multi-access sessions, from N3.
		if a.em, err = upf.NewEndMarkers(a.n3, a.n3v6); err != nil {
			return fmt.Errorf("n4: %w", err)
		}
		if a.peers, err = upf.NewPeers(a.dp, a.em.Write, a.opts.N3EchoInterval, a.log); err != nil {
			return fmt.Errorf("n4: the GTP-U peers: %w", err)
		}
		if a.upf, err = upf.Open(sessionsPath(a.opts.ConfigPath), ds, a.peers); err != nil {
			return fmt.Errorf("n4: the sessions kept: %w", err)
		}
		o.UserPlane, o.N3, o.N3v6, o.Sessions = a.upf, a.n3, a.n3v6, a.upf.Sessions()
		o.EndMarker = a.em.Send
	}
	a.n4, err = n4.Listen(o)
	if err != nil {
		return err
	}
	if a.upf != nil {
		// Downlink for idle UEs: held here, reported to the SMF,
		// released through the program when the FAR forwards.
		if a.idle, err = upf.NewBuffer(a.dp.EdgeBuff); err != nil {
			return fmt.Errorf("n4: the downlink buffer: %w", err)
		}
		a.idle.Inject = func(frame []byte, ifindex uint32) error {
			err := a.dp.Inject(frame, ifindex)
			if err != nil {
				a.log.Warn("n4: a held downlink packet not released", "err", err)
			}
			return err
		}
		a.upf.Hold(a.idle, func(seid uint64, pdr uint16) {
			if err := a.n4.ReportDownlink(seid, pdr); err != nil {
				a.log.Warn("n4: downlink data not reported", "seid", seid, "err", err)
			}
		})
		// Anyone reaching N3 can send end markers (XDP holds them to
		// its answers' budget, ~2,000 a second): logged at most once a
		// second, with how many went unlogged; the metric counts all.
		var lastLog time.Time
		var unlogged int
		a.idle.OnEndMarker = func(teid uint32, from netip.Addr) {
			if time.Since(lastLog) < time.Second {
				unlogged++
				return
			}
			a.log.Info("n4: end marker received", "teid", fmt.Sprintf("%#x", teid), "from", from,
				"seid", fmt.Sprintf("%#x", a.n4.SessionOfTEID(teid)), "unlogged_since", unlogged)
			lastLog, unlogged = time.Now(), 0
		}
		go a.idle.Run()
	}
	a.log.Info("n4: serving PFCP", "addr", a.n4.Addr(), "node_id", id, "recovery", st.Recovery, "associations", len(st.Peers),
		"sessions", len(o.Sessions))
	return nil
}

// SessionStatus implements dataplane.Sessions: the sessions the user
// plane carries (ok false: it runs no user plane).
func (a *Agent) SessionStatus(q dataplane.SessionQuery) ([]dataplane.SessionStatus, uint64, bool, error) {
	if a.upf == nil {
		return nil, 0, false, nil
	}
	s, next, err := a.upf.Status(q)
	return s, next, true, err
}

// sessionsPath is where the agent of configPath journals its PFCP
// sessions.
func sessionsPath(configPath string) string { return configPath + ".sessions" }

// setN3 gives XDP the user plane's GTP-U addresses (Options.N3Addr:
// an IPv4 address, an IPv6 one, or one of each, comma-separated), or
// takes the last run's away.
func (a *Agent) setN3(context.Context) error {
	var v4, v6 netip.Addr
	if a.opts.N3Addr != "" {
		if a.opts.N4Addr == "" {
			return errors.New("--n3-addr needs --n4-addr: N3 carries the sessions N4 sets up")
		}
		for _, f := range strings.Split(a.opts.N3Addr, ",") {
			addr, err := netip.ParseAddr(strings.TrimSpace(f))
			switch {
			case err != nil || addr.IsUnspecified() || addr.Is4In6() || addr.Zone() != "":
				return fmt.Errorf("--n3-addr %q: %q is not an IPv4 or IPv6 address", a.opts.N3Addr, f)
			case addr.Is4() && !v4.IsValid():
				v4 = addr
			case addr.Is6() && !v6.IsValid():
				v6 = addr
			default:
				return fmt.Errorf("--n3-addr %q: want one IPv4 address, one IPv6 address or one of each", a.opts.N3Addr)
			}
		}
	}
	a.n3, a.n3v6 = v4, v6
	return a.dp.SetGTPU(v4, v6)
}

// runN4 answers N4 until ctx ends.
func (a *Agent) runN4(ctx context.Context) {
	if a.peers != nil {
		go a.peers.Run(ctx)
	}
	if err := a.n4.Serve(ctx); err != nil {
		a.log.Error("n4 stopped", "err", err)
	}
}

// n4Metrics are the N4 endpoint's: its messages by fate and its
// associations.
type n4Metrics struct {
	node *n4.Node
	a    *Agent // its user plane's sessions and buffer, when it runs one
}

var (
	n4MessagesDesc = prometheus.NewDesc("edgeplane_n4_messages_total",
		"PFCP messages the N4 endpoint received, by fate: answered; refused with a cause (cause_N, TS 29.244 8.2.1); "+
			"old_version (answered Version Not Supported); dropped: short, bad_length, unknown_type, unexpected_response; "+
			"of the endpoint's own heartbeats to its peers: heartbeat_answered, peer_down (a peer left 3 in a row unanswered).",
		[]string{"fate"}, nil)
	n4AssociationsDesc = prometheus.NewDesc("edgeplane_n4_associations",
		"PFCP associations control plane functions (SMFs) hold with the N4 endpoint.", nil, nil)
	n4PeerUpDesc = prometheus.NewDesc("edgeplane_n4_peer_up",
		"1 while an associated SMF answers the N4 endpoint's heartbeats (every 5 s), 0 once it left 3 in a row unanswered.",
		[]string{"node_id"}, nil)
	upfSessionsDesc = prometheus.NewDesc("edgeplane_upf_sessions",
		"PFCP sessions the user plane carries.", nil, nil)
	upfBufferedDesc = prometheus.NewDesc("edgeplane_upf_buffered_packets",
		"Downlink packets of idle UEs the agent holds now (a FAR that buffers).", nil, nil)
	upfBufferDesc = prometheus.NewDesc("edgeplane_upf_buffer_packets_total",
		"Downlink packets of idle UEs by fate: held, released (the FAR forwarding again), dropped (over a bound, or the session deleted).",
		[]string{"fate"}, nil)
	upfEndMarkersDesc = prometheus.NewDesc("edgeplane_upf_end_markers_total",
		"GTP-U End Markers: received on N3 (handed to the agent by XDP, within the answers' budget), sent along a path a handover left.",
		[]string{"dir"}, nil)
	upfPeerUpDesc = prometheus.NewDesc("edgeplane_upf_gtpu_peer_up",
		"1 while a gNB or N3IWF a multi-access session steers over answers the user plane's GTP-U Echo Requests, "+
			"0 once it left 2 in a row unanswered (its access then gives way to the other).",
		[]string{"peer"}, nil)
	upfPeerRTTDesc = prometheus.NewDesc("edgeplane_upf_gtpu_peer_rtt_seconds",
		"Smoothed GTP-U echo round trip to a multi-access session's access peer (absent until it answered once).",
		[]string{"peer"}, nil)
	upfPeersRefusedDesc = prometheus.NewDesc("edgeplane_upf_gtpu_peers_refused_total",
		"Access peers of multi-access sessions the user plane's table (1,024) had no place for: their accesses are taken as up, with no RTT.",
		nil, nil)
	upfPeerEchoesDesc = prometheus.NewDesc("edgeplane_upf_gtpu_peer_echoes_total",
		"GTP-U Echo Requests to a multi-access session's access peer, by fate: sent, answered (in time, timed in XDP).",
		[]string{"peer", "fate"}, nil)
)

func (m n4Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- upfPeerUpDesc
	ch <- upfPeerRTTDesc
	ch <- upfPeerEchoesDesc
	ch <- upfPeersRefusedDesc
	ch <- n4MessagesDesc
	ch <- n4AssociationsDesc
	ch <- n4PeerUpDesc
	ch <- upfSessionsDesc
	ch <- upfBufferedDesc
	ch <- upfBufferDesc
	ch <- upfEndMarkersDesc
}

func (m n4Metrics) Collect(ch chan<- prometheus.Metric) {
	for fate, v := range m.node.Stats() {
		ch <- prometheus.MustNewConstMetric(n4MessagesDesc, prometheus.CounterValue, float64(v), fate)
	}
	ch <- prometheus.MustNewConstMetric(n4AssociationsDesc, prometheus.GaugeValue, float64(len(m.node.Peers())))
	for id, up := range m.node.PeerUp() {
		v := 0.0
		if up {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(n4PeerUpDesc, prometheus.GaugeValue, v, id)
	}
	if m.a == nil || m.a.idle == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(upfSessionsDesc, prometheus.GaugeValue, float64(len(m.a.upf.Sessions())))
	st := m.a.idle.Stats()
	ch <- prometheus.MustNewConstMetric(upfBufferedDesc, prometheus.GaugeValue, float64(st.Now))
	for fate, v := range map[string]uint64{"held": st.Held, "released": st.Released, "dropped": st.Dropped} {
		ch <- prometheus.MustNewConstMetric(upfBufferDesc, prometheus.CounterValue, float64(v), fate)
	}
	ch <- prometheus.MustNewConstMetric(upfEndMarkersDesc, prometheus.CounterValue, float64(st.EndMarkers), "received")
	if m.a.em != nil {
		ch <- prometheus.MustNewConstMetric(upfEndMarkersDesc, prometheus.CounterValue, float64(m.a.em.Sent()), "sent")
	}
	if m.a.peers == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(upfPeersRefusedDesc, prometheus.CounterValue, float64(m.a.peers.Refused()))
	for _, p := range m.a.peers.Status() {
		a, up := p.Addr.String(), 0.0
		if p.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(upfPeerUpDesc, prometheus.GaugeValue, up, a)
		if p.RTT > 0 {
			ch <- prometheus.MustNewConstMetric(upfPeerRTTDesc, prometheus.GaugeValue, p.RTT.Seconds(), a)
		}
		ch <- prometheus.MustNewConstMetric(upfPeerEchoesDesc, prometheus.CounterValue, float64(p.Sent), a, "sent")
		ch <- prometheus.MustNewConstMetric(upfPeerEchoesDesc, prometheus.CounterValue, float64(p.Answers), a, "answered")
	}
}
