// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"testing"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// Ports with rules of their own in forwardConfig.
const (
	dropUDPPort  = 9999 // PDR 10: UDP from the LAN, dropped
	dropTCPPort  = 5999 // PDR 11: TCP from the LAN, dropped
	countUDPPort = 7777 // PDR 12 (IPv4) and 13 (IPv6): UDP redirected to the WAN
)

// forwardConfig redirects lan0 <-> wan0 for IPv4 and IPv6, drops UDP 9999
// and TCP 5999 from the LAN and counts UDP 7777 A -> B on PDRs of their own.
const forwardConfig = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: redirect, interface: lan0}
  - {id: 3, action: drop}
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0, proto: udp, dport: 9999}, far: 3}
  - {id: 11, precedence: 10, match: {in: lan0, proto: tcp, dport: 5999}, far: 3}
  - {id: 12, precedence: 20, match: {in: lan0, dst: 10.2.0.0/24, proto: udp, dport: 7777}, far: 1}
  - {id: 13, precedence: 20, match: {in: lan0, dst: "fd02::/64", proto: udp, dport: 7777}, far: 1}
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.2.0.0/24}, far: 1}
  - {id: 21, precedence: 100, match: {in: lan0, dst: "fd02::/64"}, far: 1}
  - {id: 30, precedence: 100, match: {in: wan0, dst: 10.1.0.0/24}, far: 2}
  - {id: 31, precedence: 100, match: {in: wan0, dst: "fd01::/64"}, far: 2}
limits: {flows: 65536, rules: 1024}
`

func TestForwardPingTCPUDP(t *testing.T) {
	g := newGateway(t, forwardConfig)
	g.start()
	for _, itf := range []string{lab.LanName, lab.WanName} {
		if out, on := xdpOn(t, g.GW, itf); !on {
			t.Fatalf("no XDP program on %s after the agent started:\n%s", itf, out)
		}
	}
	g.warmUp()

	t.Run("ping", func(t *testing.T) {
		before := g.stats()
		for _, dst := range []string{lab.AddrB, lab.AddrB6} {
			if got := ping(g.A, dst, 5, "0.1"); got != 5 {
				t.Errorf("ping A -> %s: %d of 5 replies", dst, got)
			}
		}
		after := g.stats()
		// Echo requests hit the LAN -> WAN PDRs, replies the WAN -> LAN
		// ones: the gateway forwarded them, not only the kernel.
		for _, id := range []int{20, 21, 30, 31} {
			if d := after.pdr(id).Packets - before.pdr(id).Packets; d != 5 {
				t.Errorf("PDR %d counted %d packets for 5 pings, want 5", id, d)
			}
		}
	})

	t.Run("tcp", func(t *testing.T) {
		before := g.stats()
		ab := iperf(t, g.B, g.A, lab.AddrB, 5201, "-t", "2")
		ba := iperf(t, g.A, g.B, lab.AddrA, 5202, "-t", "2")
		t.Logf("iperf3 TCP A->B %.0f Mbit/s, B->A %.0f Mbit/s",
			ab.End.SumReceived.BitsPerSecond/1e6, ba.End.SumReceived.BitsPerSecond/1e6)
		if ab.End.SumReceived.Bytes == 0 || ab.End.SumReceived.BitsPerSecond == 0 {
			t.Errorf("iperf3 TCP A -> B moved nothing: %+v", ab.End.SumReceived)
		}
		if ba.End.SumReceived.Bytes == 0 || ba.End.SumReceived.BitsPerSecond == 0 {
			t.Errorf("iperf3 TCP B -> A moved nothing: %+v", ba.End.SumReceived)
		}
		after := g.stats()
		// The payload crossed the gateway in XDP: the redirect verdict
		// and both directions' PDRs carried at least the received bytes.
		moved := uint64(ab.End.SumReceived.Bytes + ba.End.SumReceived.Bytes)
		if d := after.Verdicts["redirect"].Bytes - before.Verdicts["redirect"].Bytes; d < moved {
			t.Errorf("redirect verdict counted %d bytes, iperf3 moved %d", d, moved)
		}
		for _, id := range []int{20, 30} {
			if d := after.pdr(id).Packets - before.pdr(id).Packets; d == 0 {
				t.Errorf("PDR %d counted no TCP packets", id)
			}
		}
	})

	t.Run("udp-iperf", func(t *testing.T) {
		r := iperf(t, g.B, g.A, lab.AddrB, 5203, "-u", "-b", "50M", "-l", "1200", "-t", "2")
		s := r.End.Sum
		t.Logf("iperf3 UDP A->B %.1f Mbit/s, lost %d/%d (%.2f%%)", s.BitsPerSecond/1e6, s.LostPackets, s.Packets, s.LostPercent)
		if s.Packets == 0 || s.BitsPerSecond == 0 {
			t.Fatalf("iperf3 UDP moved nothing: %+v", s)
		}
		if s.LostPercent > 1 {
			t.Errorf("iperf3 UDP lost %.2f%% (%d of %d), want <= 1%%", s.LostPercent, s.LostPackets, s.Packets)
		}
	})

	t.Run("udp-drop-9999", func(t *testing.T) {
		const n, payload = 500, 100
		rcv := startReceiver(t, g.B, "0.0.0.0", dropUDPPort, n)
		before := g.stats()
		mustSendUDP(t, g.A, lab.AddrB, dropUDPPort, n, 20000, payload)
		after := g.stats()
		var got recvReport
		rcv.finish(&got)
		if got.Packets != 0 {
			t.Errorf("B received %d datagrams on UDP %d, want 0 (PDR 10 drops them)", got.Packets, dropUDPPort)
		}
		d := after.pdr(10)
		d.Packets -= before.pdr(10).Packets
		d.Bytes -= before.pdr(10).Bytes
		if d.Packets != n || d.Bytes != n*udp4Frame(payload) {
			t.Errorf("PDR 10 delta %d packets / %d bytes, want %d / %d", d.Packets, d.Bytes, n, n*udp4Frame(payload))
		}
		if dd := after.Verdicts["drop"].Packets - before.Verdicts["drop"].Packets; dd < n {
			t.Errorf("drop verdict counted %d packets, want >= %d", dd, n)
		}
	})

	t.Run("tcp-drop-5999", func(t *testing.T) {
		lst := startProc(t, g.B, pyListen, "0.0.0.0", fmt.Sprint(dropTCPPort))
		// The listener is real: the gateway itself (whose SYN leaves
		// through wan0's egress, where XDP does not run) gets through.
		if got := tcpConnect(t, g.GW, lab.AddrB, dropTCPPort, "2"); got != "connected" {
			t.Fatalf("gateway -> B:%d: %s, want connected (listener broken?)", dropTCPPort, got)
		}
		before := g.stats()
		if got := tcpConnect(t, g.A, lab.AddrB, dropTCPPort, "2"); got != "timeout" {
			t.Errorf("A -> B:%d: %s, want timeout (PDR 11 drops the SYN)", dropTCPPort, got)
		}
		after := g.stats()
		var rep struct {
			Accepted int `json:"accepted"`
		}
		lst.finish(&rep)
		if rep.Accepted != 1 {
			t.Errorf("listener accepted %d connections, want 1 (the gateway's)", rep.Accepted)
		}
		// The SYN and its retransmissions within 2 s.
		if d := after.pdr(11).Packets - before.pdr(11).Packets; d < 1 {
			t.Errorf("PDR 11 counted %d packets, want the SYN and its retransmissions", d)
		}
		// Other TCP ports still pass.
		if got := tcpConnect(t, g.A, lab.AddrB, dropTCPPort+1, "2"); got != "error 111" {
			t.Errorf("A -> B:%d (no listener): %s, want error 111 (RST from B)", dropTCPPort+1, got)
		}
	})

	t.Run("exact-counters", func(t *testing.T) {
		for _, c := range []struct {
			name    string
			pdr     int
			dst     string
			bind    string
			n       int
			payload int
			frame   uint64
		}{
			{"ipv4", 12, lab.AddrB, "0.0.0.0", 1000, 100, udp4Frame(100)},
			{"ipv6", 13, lab.AddrB6, "::", 1000, 200, udp6Frame(200)},
		} {
			t.Run(c.name, func(t *testing.T) {
				rcv := startReceiver(t, g.B, c.bind, countUDPPort, c.n)
				before := g.stats()
				mustSendUDP(t, g.A, c.dst, countUDPPort, c.n, 20000, c.payload)
				after := g.stats()
				var got recvReport
				rcv.finish(&got)
				if got.Distinct != uint64(c.n) || got.Packets != uint64(c.n) {
					t.Errorf("B received %d datagrams (%d distinct), want %d; first missing %v", got.Packets, got.Distinct, c.n, got.FirstMissing)
				}
				dp := after.pdr(c.pdr).Packets - before.pdr(c.pdr).Packets
				db := after.pdr(c.pdr).Bytes - before.pdr(c.pdr).Bytes
				if dp != uint64(c.n) || db != uint64(c.n)*c.frame {
					t.Errorf("PDR %d delta %d packets / %d bytes, want %d / %d (%d-byte frames)", c.pdr, dp, db, c.n, uint64(c.n)*c.frame, c.frame)
				}
				if dr := after.Verdicts["redirect"].Packets - before.Verdicts["redirect"].Packets; dr < uint64(c.n) {
					t.Errorf("redirect verdict counted %d packets, want >= %d", dr, c.n)
				}
			})
		}
	})
}
