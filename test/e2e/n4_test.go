// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/omec-project/pfcpsim/pkg/pfcpsim"
	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// askFrom sends PFCP request req to the gateway's N4 address from
// namespace ns (from local address laddr, "" any) and returns the
// answer, sending again twice if none comes within a second.
func askFrom(t *testing.T, ns, laddr, n4 string, req message.Message) message.Message {
	t.Helper()
	var c *net.UDPConn
	if err := topo.Do(ns, func() error {
		ra, err := net.ResolveUDPAddr("udp", n4)
		if err != nil {
			return err
		}
		var la *net.UDPAddr
		if laddr != "" {
			if la, err = net.ResolveUDPAddr("udp", laddr); err != nil {
				return err
			}
		}
		c, err = net.DialUDP("udp", la, ra)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, req.MarshalLen())
	if err := req.MarshalTo(b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for range 3 {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		// The gateway's own heartbeats to the SMF may come between.
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			_ = c.SetReadDeadline(end)
			l, err := c.Read(buf)
			if err != nil {
				break
			}
			m, err := message.Parse(buf[:l])
			if err != nil {
				t.Fatalf("%s: answer does not parse: %v", req.MessageTypeName(), err)
			}
			if m.MessageType() == req.MessageType()+1 && m.Sequence() == req.Sequence() {
				return m
			}
		}
	}
	t.Fatalf("%s: no answer from %s", req.MessageTypeName(), n4)
	return nil
}

// heartbeatFrom returns the recovery time stamp of the gateway's answer
// to a heartbeat from namespace ns.
func heartbeatFrom(t *testing.T, ns, n4 string, seq uint32) time.Time {
	t.Helper()
	m := askFrom(t, ns, "", n4, message.NewHeartbeatRequest(seq, ie.NewRecoveryTimeStamp(time.Now()), nil))
	hb, ok := m.(*message.HeartbeatResponse)
	if !ok || hb.RecoveryTimeStamp == nil {
		t.Fatalf("heartbeat answered with %s", m.MessageTypeName())
	}
	ts, err := hb.RecoveryTimeStamp.RecoveryTimeStamp()
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// gtpuEcho sends a GTP-U Echo Request (sequence seq) from namespace ns
// to addr:2152 and says whether the Echo Response to it came back.
func gtpuEcho(t *testing.T, ns, addr string, seq uint16) bool {
	t.Helper()
	var c *net.UDPConn
	if err := topo.Do(ns, func() (err error) {
		c, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(addr), Port: 2152})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := []byte{0x32, 1, 0, 4, 0, 0, 0, 0, byte(seq >> 8), byte(seq), 0, 0}
	buf := make([]byte, 512)
	for range 3 {
		if _, err := c.Write(req); err != nil {
			return false
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		l, err := c.Read(buf)
		if err != nil {
			continue
		}
		b := buf[:l]
		if l >= 14 && b[1] == 2 && b[8] == byte(seq>>8) && b[9] == byte(seq) && b[12] == 14 {
			return true
		}
		t.Fatalf("GTP-U echo answered % x", b)
	}
	return false
}

// TestN4Agent: an agent serving N4 in the lab. pfcpsim, an SMF's side
// written elsewhere, associates from host A over the LAN; the agent is
// killed (SIGKILL) and started again: its heartbeats carry the same
// recovery time stamp (the state was kept, so the SMF keeps its
// sessions) and the association stands, so the SMF's release is
// accepted. A GTP-U echo from the WAN side is answered by XDP while
// --n3-addr is given, and not after a start without it. Without the kept state the stamp moves on: a restart that
// lost state says so.
func TestN4Agent(t *testing.T) {
	g, n4, args := startUPF(t)
	// N3 on the WAN side: a gNB's echo is answered by XDP on the real
	// interface (XDP_TX), no socket listening.
	if !gtpuEcho(t, g.B, lab.GWWan, 0x4242) {
		t.Fatal("no answer to a GTP-U echo on N3")
	}
	associations := func() float64 {
		t.Helper()
		v, ok := metricValue(g.scrape(), "edgeplane_n4_associations", nil)
		if !ok {
			t.Fatal("no edgeplane_n4_associations")
		}
		return v
	}

	c := pfcpsim.NewPFCPClient(lab.AddrA)
	c.SetPFCPResponseTimeout(3 * time.Second)
	if err := topo.Do(g.A, func() error { return c.ConnectN4(n4) }); err != nil {
		t.Fatal(err)
	}
	if err := c.SetupAssociation(); err != nil {
		t.Fatalf("pfcpsim's association: %v", err)
	}
	// Its heartbeats (every 5 s) would find the agent down below.
	c.DisconnectN4()
	if n := associations(); n != 1 {
		t.Fatalf("%v associations after pfcpsim's setup, want 1", n)
	}
	first := heartbeatFrom(t, g.A, n4, 1)

	if err := g.StopAgent(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	g.start(args...)
	if again := heartbeatFrom(t, g.A, n4, 2); !again.Equal(first) {
		t.Errorf("recovery time stamp %v after a restart that kept the state, want %v", again, first)
	}
	if n := associations(); n != 1 {
		t.Errorf("%v associations after the restart, want pfcpsim's 1", n)
	}
	// The SMF (pfcpsim's address and port) releases the association.
	rel := askFrom(t, g.A, lab.AddrA+":8805", n4, message.NewAssociationReleaseRequest(4, ie.NewNodeID(lab.AddrA, "", "")))
	if r, ok := rel.(*message.AssociationReleaseResponse); !ok || r.Cause == nil {
		t.Fatalf("release answered with %s", rel.MessageTypeName())
	} else if cause, _ := r.Cause.Cause(); cause != ie.CauseRequestAccepted {
		t.Fatalf("release after the restart refused with cause %d", cause)
	}
	if n := associations(); n != 0 {
		t.Errorf("%v associations after the release, want 0", n)
	}
	if v, ok := metricValue(g.scrape(), "edgeplane_n4_messages_total", map[string]string{"fate": "answered"}); !ok || v < 2 {
		t.Errorf("answered messages counted %v (%v), want the heartbeat and the release at least", v, ok)
	}

	// The state gone (as on a machine whose state was wiped), the
	// stamp is the new start's.
	if err := g.StopAgent(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(g.cfgPath + ".n4"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the stamp counts seconds
	g.start("--n4-addr", n4)
	if fresh := heartbeatFrom(t, g.A, n4, 3); !fresh.After(first) {
		t.Errorf("recovery time stamp %v after a start without the state, want later than %v", fresh, first)
	}
	// Started without --n3-addr, the agent took the GTP-U address away:
	// nothing answers the echo.
	if gtpuEcho(t, g.B, lab.GWWan, 0x4343) {
		t.Error("GTP-U echo answered after a start without --n3-addr")
	}
}
