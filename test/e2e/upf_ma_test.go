// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	ieLib "github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// The multi-access lab: the SD-WAN lab's gateway A is the UPF (N4 on its
// LAN address, N3 on its wan1 address), host A is N6 and the SMF, and
// gateway B's namespace holds the UE's two accesses, each behind its own
// emulated link: the gNB at wan1's far end (3GPP) and the N3IWF at
// wan2's (non-3GPP).
const (
	maN4      = lab.GWLan + ":8805"
	maEcho    = 200 * time.Millisecond
	maUlTEID  = 0x100
	maGNBTEID = 0x9000
	maN3IWF   = 0xa000
)

var (
	maN3        = lab.WanAddr(1, 'a')
	maGNBAddr   = lab.WanAddr(1, 'b')
	maN3IWFAddr = lab.WanAddr(2, 'b')
)

// maUE is a UE with two accesses: a TUN in a namespace of its own (its
// address ueIP), whose packets go up through the gNB; what comes down
// through either access (a socket each, on GTP-U's port at its address,
// answering Echo Requests as any GTP-U peer does) is checked for the
// access's TEID and given to the UE, counted by access.
type maUE struct {
	t        *testing.T
	ue       *topo.NS
	tun      *os.File
	conns    [2]*net.UDPConn
	teids    [2]uint32
	got      [2]atomic.Uint64
	echoes   [2]atomic.Uint64
	bad      atomic.Uint64
	wg       sync.WaitGroup
	stopping atomic.Bool
}

func startMAUE(t *testing.T, l *sdwanLab) *maUE {
	t.Helper()
	u := &maUE{t: t, teids: [2]uint32{maGNBTEID, maN3IWF}}
	u.ue, u.tun = newUE(t, l.Name+"ue", u.stop)
	// The N3IWF's datagrams to N3 leave by wan2, its own access.
	for _, args := range [][]string{
		{"ip", "rule", "add", "from", maN3IWFAddr, "lookup", "202"},
		{"ip", "route", "add", maN3, "via", lab.WanAddr(2, 'a'), "dev", "wan2", "table", "202"},
	} {
		if out, err := nsRun(l.GWB, args...); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	for i, a := range []string{maGNBAddr, maN3IWFAddr} {
		if err := topo.Do(l.GWB, func() error {
			var err error
			if u.conns[i], err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(a), Port: 2152}); err != nil {
				return err
			}
			// Room for a burst of new flows (the load balancing's).
			return u.conns[i].SetReadBuffer(8 << 20)
		}); err != nil {
			t.Fatal(err)
		}
	}
	u.wg.Add(3)
	go u.uplink()
	go u.downlink(0)
	go u.downlink(1)
	return u
}

// uplink carries the UE's packets to N3 through the gNB.
func (u *maUE) uplink() {
	defer u.wg.Done()
	buf := make([]byte, 65536)
	n3 := &net.UDPAddr{IP: net.ParseIP(maN3), Port: 2152}
	for {
		n, err := u.tun.Read(buf)
		if err != nil {
			return
		}
		g := &layers.GTPv1U{Version: 1, ProtocolType: 1, MessageType: 255, TEID: maUlTEID, MessageLength: uint16(n)}
		sb := gopacket.NewSerializeBuffer()
		if err := g.SerializeTo(sb, gopacket.SerializeOptions{}); err != nil {
			u.t.Errorf("UE: %v", err)
			return
		}
		_, _ = u.conns[0].WriteToUDP(append(sb.Bytes(), buf[:n]...), n3)
	}
}

// downlink answers access i's Echo Requests and gives the UE the
// G-PDUs to the access's TEID.
func (u *maUE) downlink(i int) {
	defer u.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := u.conns[i].ReadFromUDP(buf)
		if err != nil {
			if u.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if n >= 12 && buf[1] == 1 {
			// Echo Request: the Response with its sequence number
			// and the Recovery IE (TS 29.281 7.2.2).
			resp := []byte{0x32, 2, 0, 6, 0, 0, 0, 0, buf[8], buf[9], 0, 0, 14, 0}
			if _, err := u.conns[i].WriteToUDP(resp, from); err == nil {
				u.echoes[i].Add(1)
			}
			continue
		}
		p := gopacket.NewPacket(buf[:n], layers.LayerTypeGTPv1U, gopacket.Default)
		g, ok := p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
		if !ok || g.MessageType != 255 || g.TEID != u.teids[i] {
			if u.bad.Add(1) == 1 {
				u.t.Logf("access %d: the first bad datagram: % x", i+1, buf[:min(n, 64)])
			}
			continue
		}
		if _, err := u.tun.Write(g.Payload); err == nil {
			u.got[i].Add(1)
		}
	}
}

func (u *maUE) counts() [2]uint64 { return [2]uint64{u.got[0].Load(), u.got[1].Load()} }

func (u *maUE) stop() {
	if u.stopping.Swap(true) {
		return
	}
	for _, c := range u.conns {
		if c != nil {
			c.Close()
		}
	}
	if u.tun != nil {
		u.tun.Close()
	}
	u.wg.Wait()
}

// maSMF is an SMF on host A driving the UPF over N4 with go-pfcp's
// messages.
type maSMF struct {
	t    *testing.T
	conn *net.UDPConn
	seq  uint32
	seid uint64 // the UPF's SEID of the session
}

func newMASMF(t *testing.T, l *sdwanLab) *maSMF {
	t.Helper()
	s := &maSMF{t: t}
	if err := topo.Do(l.A, func() error {
		var err error
		s.conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(maN4)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	return s
}

// ask sends m (its sequence number the next) and returns the answer.
func (s *maSMF) ask(build func(seq uint32) message.Message) message.Message {
	s.t.Helper()
	s.seq++
	m := build(s.seq)
	b := make([]byte, m.MarshalLen())
	if err := m.MarshalTo(b); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.conn.Write(b); err != nil {
		s.t.Fatal(err)
	}
	buf := make([]byte, 4096)
	_ = s.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		n, err := s.conn.Read(buf)
		if err != nil {
			s.t.Fatalf("N4: no answer: %v", err)
		}
		a, err := message.Parse(buf[:n])
		if err != nil {
			s.t.Fatalf("N4: answer % x: %v", buf[:n], err)
		}
		if hb, ok := a.(*message.HeartbeatRequest); ok {
			// The UPF's heartbeat: answered, as an SMF does.
			r := message.NewHeartbeatResponse(hb.Sequence(), ieLib.NewRecoveryTimeStamp(time.Now()))
			b := make([]byte, r.MarshalLen())
			if r.MarshalTo(b) == nil {
				_, _ = s.conn.Write(b)
			}
			continue
		}
		if a.Sequence() == s.seq {
			return a
		}
	}
}

// accepted fails the test unless cause c (an answer's Cause IE) is
// Request Accepted.
func accepted(t *testing.T, what string, c *ieLib.IE) {
	t.Helper()
	if c == nil {
		t.Fatalf("%s: no cause", what)
	}
	if v, err := c.Cause(); err != nil || v != ieLib.CauseRequestAccepted {
		t.Fatalf("%s: cause %d (%v)", what, v, err)
	}
}

// maRules are the MA session's rules: uplink by TEID from the gNB to N6;
// downlink to the UE steered by MAR 1 (mode, the 3GPP access's priority
// and both weights) between the gNB's FAR 2 and the N3IWF's FAR 3.
func maRules(mode, prio3gpp, prioNon, w3gpp, wNon uint8) []*ieLib.IE {
	return []*ieLib.IE{
		ieLib.NewCreatePDR(ieLib.NewPDRID(1), ieLib.NewPrecedence(100),
			ieLib.NewPDI(ieLib.NewSourceInterface(ieLib.SrcInterfaceAccess), ieLib.NewFTEID(0x01, maUlTEID, net.ParseIP(maN3), nil, 0),
				ieLib.NewUEIPAddress(0x02, ueIP, "", 0, 0)),
			ieLib.NewOuterHeaderRemoval(0, 0), ieLib.NewFARID(1)),
		ieLib.NewCreatePDR(ieLib.NewPDRID(2), ieLib.NewPrecedence(100),
			ieLib.NewPDI(ieLib.NewSourceInterface(ieLib.SrcInterfaceCore), ieLib.NewUEIPAddress(0x06, ueIP, "", 0, 0)),
			ieLib.NewMARID(1)),
		ieLib.NewCreateFAR(ieLib.NewFARID(1), ieLib.NewApplyAction(0x02),
			ieLib.NewForwardingParameters(ieLib.NewDestinationInterface(ieLib.DstInterfaceCore))),
		ieLib.NewCreateFAR(ieLib.NewFARID(2), ieLib.NewApplyAction(0x02),
			ieLib.NewForwardingParameters(ieLib.NewDestinationInterface(ieLib.DstInterfaceAccess),
				ieLib.NewOuterHeaderCreation(0x0100, maGNBTEID, maGNBAddr, "", 0, 0, 0))),
		ieLib.NewCreateFAR(ieLib.NewFARID(3), ieLib.NewApplyAction(0x02),
			ieLib.NewForwardingParameters(ieLib.NewDestinationInterface(ieLib.DstInterfaceAccess),
				ieLib.NewOuterHeaderCreation(0x0100, maN3IWF, maN3IWFAddr, "", 0, 0, 0))),
		ieLib.NewCreateMAR(ieLib.NewMARID(1), ieLib.NewSteeringFunctionality(ieLib.SteeringFunctionalityATSSSLL), ieLib.NewSteeringMode(mode),
			ieLib.NewTGPPAccessForwardingActionInformation(ieLib.NewFARID(2), ieLib.NewPriority(prio3gpp), ieLib.NewWeight(w3gpp)),
			ieLib.NewNonTGPPAccessForwardingActionInformation(ieLib.NewFARID(3), ieLib.NewPriority(prioNon), ieLib.NewWeight(wNon))),
	}
}

// setMode changes the session's MAR to mode with the weights given.
func (s *maSMF) setMode(mode, w3gpp, wNon uint8) {
	s.t.Helper()
	r := s.ask(func(seq uint32) message.Message {
		return message.NewSessionModificationRequest(0, 0, s.seid, seq, 0,
			ieLib.NewUpdateMAR(ieLib.NewMARID(1), ieLib.NewSteeringMode(mode),
				ieLib.NewUpdateTGPPAccessForwardingActionInformation(ieLib.NewWeight(w3gpp)),
				ieLib.NewUpdateNonTGPPAccessForwardingActionInformation(ieLib.NewWeight(wNon))))
	})
	m, ok := r.(*message.SessionModificationResponse)
	if !ok {
		s.t.Fatalf("modification: answered %T", r)
	}
	accepted(s.t, "modification to mode "+strconv.Itoa(int(mode)), m.Cause)
}

// TestUPFMultiAccess: an SMF on host A sets up a multi-access PDU
// session over N4 (go-pfcp: association with ATSSS-LL among the UP
// function features, a MAR steering the UE's downlink between a gNB
// behind wan1 and an N3IWF behind wan2). Active-standby: the downlink
// comes through the gNB, moves to the N3IWF within 3 echo intervals of
// `lab link` cutting wan1, and back once it is repaired; smallest delay:
// the gNB (2 ms) until wan1 is slowed to 15 ms, then the N3IWF (5 ms);
// priority-based as active-standby; load balancing 70/30: the 3GPP
// access carries 70 % of 2,000 flows, within 3 points. The UE pings N6
// at the start, and TCP (iperf3 down to the UE) runs in each mode;
// `edgeplane get sessions` and the metrics show the accesses' state.
func TestUPFMultiAccess(t *testing.T) {
	l := newLab(t)
	l.AgentArgs = map[string][]string{l.GWA: {"--n4-addr", maN4, "--n3-addr", maN3, "--n3-echo-interval", maEcho.String()}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := l.Up(ctx); err != nil {
		t.Fatalf("lab up: %v", err)
	}
	if out, err := nsRun(l.A, "ip", "route", "add", uePool, "via", lab.GWLan); err != nil {
		t.Fatalf("route to the UEs: %v %s", err, out)
	}
	u := startMAUE(t, l)
	smf := newMASMF(t, l)

	r := smf.ask(func(seq uint32) message.Message {
		return message.NewAssociationSetupRequest(seq, ieLib.NewNodeID(lab.AddrA, "", ""), ieLib.NewRecoveryTimeStamp(time.Now()))
	})
	as, ok := r.(*message.AssociationSetupResponse)
	if !ok {
		t.Fatalf("association: answered %T", r)
	}
	accepted(t, "association", as.Cause)
	if f := as.UPFunctionFeatures; f == nil || len(f.Payload) < 5 || f.Payload[4]&0x01 == 0 {
		t.Errorf("UP function features %v do not say ATSSS-LL", as.UPFunctionFeatures)
	}
	r = smf.ask(func(seq uint32) message.Message {
		return message.NewSessionEstablishmentRequest(0, 0, 0, seq, 0, append([]*ieLib.IE{ieLib.NewNodeID(lab.AddrA, "", ""),
			ieLib.NewFSEID(0x4d41, net.ParseIP(lab.AddrA), nil)},
			maRules(ieLib.SteeringModeActiveStandby, ieLib.PriorityActive, ieLib.PriorityStandby, 50, 50)...)...)
	})
	es, ok := r.(*message.SessionEstablishmentResponse)
	if !ok {
		t.Fatalf("establishment: answered %T", r)
	}
	accepted(t, "establishment", es.Cause)
	f, err := es.UPFSEID.FSEID()
	if err != nil {
		t.Fatal(err)
	}
	smf.seid = f.SEID

	if n := ping(u.ue.Name, lab.AddrA, 5, "0.2"); n != 5 {
		t.Fatalf("UE <-> N6: %d of 5 pings answered (downlink by access %v, %d bad)", n, u.counts(), u.bad.Load())
	}
	// downlink sends n datagrams from N6 to the UE at rate and returns
	// how many each access carried meanwhile.
	downlink := func(n int, rate string) [2]uint64 {
		t.Helper()
		before := u.counts()
		if out, err := nsRun(l.A, "python3", "-c", pySend, ueIP, "9", strconv.Itoa(n), rate, "64"); err != nil {
			t.Fatalf("send: %v %s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
		after := u.counts()
		return [2]uint64{after[0] - before[0], after[1] - before[1]}
	}
	link := func(args ...string) { l.mustCLI(append([]string{"link", "wan1"}, args...)...) }

	// Active-standby.
	if d := downlink(200, "1000"); d[0] < 190 || d[1] != 0 {
		t.Errorf("active-standby, both up: by access %v, want all through the gNB", d)
	}
	iperfMA(t, l, u, "active-standby")
	cut := func(what string, to int, change func()) {
		t.Helper()
		stream := exec.Command("ip", "netns", "exec", l.A, "python3", "-c", pySend, ueIP, "9", "6000", "1000", "64")
		if err := stream.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = stream.Process.Kill(); _ = stream.Wait() }()
		time.Sleep(500 * time.Millisecond)
		base := u.counts()
		change()
		t0 := time.Now()
		if !waitFor(5*time.Second, func() bool { return u.counts()[to]-base[to] > 20 }) {
			t.Fatalf("%s: the downlink did not move to access %d (by access since: %v)", what, to+1, [2]uint64{u.counts()[0] - base[0], u.counts()[1] - base[1]})
		}
		took := time.Since(t0)
		t.Logf("%s: the downlink moved to access %d after %v (%.1f echo intervals of %v)", what, to+1, took.Round(time.Millisecond),
			float64(took)/float64(maEcho), maEcho)
		if took > 3*maEcho+150*time.Millisecond {
			t.Errorf("%s: %v to move, want within 3 echo intervals (%v)", what, took, 3*maEcho)
		}
	}
	peerUp := func(peer string) (float64, bool) {
		return metricValue(scrapeIn(t, l.GWA, lab.MetricsAddr), "edgeplane_upf_gtpu_peer_up", map[string]string{"peer": peer})
	}
	if v, ok := peerUp(maGNBAddr); !ok || v != 1 {
		t.Errorf("edgeplane_upf_gtpu_peer_up for the gNB: %v (%v), want 1", v, ok)
	}
	cut("active-standby, wan1 cut", 1, func() { link("--loss", "100%") })
	fams := scrapeIn(t, l.GWA, lab.MetricsAddr)
	if v, ok := metricValue(fams, "edgeplane_upf_gtpu_peer_up", map[string]string{"peer": maGNBAddr}); !ok || v != 0 {
		t.Errorf("the gNB cut off: edgeplane_upf_gtpu_peer_up %v (%v), want 0", v, ok)
	}
	if v, ok := metricValue(fams, "edgeplane_upf_gtpu_peer_rtt_seconds", map[string]string{"peer": maN3IWFAddr}); !ok || v <= 0 || v > 0.1 {
		t.Errorf("the N3IWF's echo RTT %v s (%v), want a few ms", v, ok)
	} else {
		t.Logf("the N3IWF's echo RTT over wan2 (5 ms each way): %.1f ms", v*1e3)
	}
	// `edgeplane get sessions` shows the MAR, its mode, and each
	// access's peer with its state: the gNB down, the N3IWF up.
	table, err := exec.Command(edgeplaneBin, "get", "sessions", "--server", l.APISocket(l.GWA)).CombinedOutput()
	t.Logf("get sessions, wan1 cut:\n%s", table)
	if err != nil || !strings.Contains(string(table), "MAR 1 active-standby") ||
		!strings.Contains(string(table), "*"+maGNBAddr+" 0x9000 (down)") || !strings.Contains(string(table), maN3IWFAddr+" 0xa000 (up ") {
		t.Errorf("get sessions does not show the multi-access PDR's accesses (%v)", err)
	}
	if n := ping(u.ue.Name, lab.AddrA, 3, "0.2"); n != 0 {
		t.Logf("pings with the 3GPP access cut: %d of 3 (the uplink goes through the gNB)", n)
	}
	cut("active-standby, wan1 repaired", 0, func() { link("--loss", "0") })

	// Smallest delay.
	smf.setMode(ieLib.SteeringModeSmallestDelay, 50, 50)
	if !waitFor(3*time.Second, func() bool { d := downlink(50, "500"); return d[0] >= 45 }) {
		t.Errorf("smallest delay, wan1 2 ms and wan2 5 ms: not through the gNB")
	}
	cut("smallest delay, wan1 slowed to 15 ms", 1, func() { link("--delay", "15ms") })
	iperfMA(t, l, u, "smallest delay over the N3IWF")
	link("--delay", "2ms")

	// Priority-based: the gNB (neither access says High or Low: the
	// 3GPP one) until wan1 is cut, the N3IWF meanwhile.
	smf.setMode(ieLib.SteeringModePriorityBased, 50, 50)
	if !waitFor(3*time.Second, func() bool { d := downlink(50, "500"); return d[0] >= 45 }) {
		t.Errorf("priority-based, both up: not through the gNB")
	}
	iperfMA(t, l, u, "priority-based")
	cut("priority-based, wan1 cut", 1, func() { link("--loss", "100%") })
	cut("priority-based, wan1 repaired", 0, func() { link("--loss", "0") })

	// Load balancing 70/30 over 2,000 flows.
	smf.setMode(ieLib.SteeringModeLoadBalancing, 70, 30)
	time.Sleep(3 * maEcho)
	before := u.counts()
	if out, err := nsRun(l.A, "python3", "-c", pySpread, ueIP, "9", "2000", "20000"); err != nil {
		t.Fatalf("spread: %v %s", err, out)
	}
	time.Sleep(200 * time.Millisecond)
	after := u.counts()
	d := [2]uint64{after[0] - before[0], after[1] - before[1]}
	share := float64(d[0]) / float64(max(d[0]+d[1], 1))
	t.Logf("load balancing 70/30: the gNB carried %d of %d flows (%.1f %%), the N3IWF %d", d[0], d[0]+d[1], 100*share, d[1])
	if d[0]+d[1] < 1900 || share < 0.67 || share > 0.73 {
		t.Errorf("load balancing 70/30 over 2,000 flows: by access %v (%.1f %%), want 70 %% within 3 points", d, 100*share)
	}
	iperfMA(t, l, u, "load balancing")
	if u.echoes[0].Load() == 0 || u.echoes[1].Load() == 0 {
		t.Errorf("echo requests answered by access: %d, %d; want both probed", u.echoes[0].Load(), u.echoes[1].Load())
	}
	if u.bad.Load() != 0 {
		t.Errorf("%d downlink datagrams with another access's TEID, or not GTP-U", u.bad.Load())
	}
}

// iperfMA runs iperf3 TCP from N6 down to the UE for a second and
// fails the test if nothing arrived.
func iperfMA(t *testing.T, l *sdwanLab, u *maUE, what string) {
	t.Helper()
	// Held under what the WAN emulators carry (see TestLabSteeringUnderTCP).
	r := iperf(t, l.A, u.ue.Name, lab.AddrA, 5201, "-t", "1", "-R", "-b", "150M")
	t.Logf("%s: iperf3 TCP down to the UE %.0f Mbit/s (by access so far %v)", what, r.End.SumReceived.BitsPerSecond/1e6, u.counts())
	if r.End.SumReceived.Bytes == 0 {
		t.Errorf("%s: iperf3 moved nothing", what)
	}
}
