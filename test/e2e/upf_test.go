// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/omec-project/pfcpsim/pkg/pfcpsim"
	"github.com/omec-project/pfcpsim/pkg/pfcpsim/session"
	ieLib "github.com/wmnsk/go-pfcp/ie"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// The UE of the user plane's tests, its pool and QoS flow.
const (
	ueIP   = "10.45.0.2"
	uePool = "10.45.0.0/16"
	ueQFI  = 9
)

// gnb is a gNB with one UE, for the user plane's tests. The UE is a
// namespace whose default route is a TUN device; the gNB, a socket on
// host B's GTP-U port, carries what the UE sends to the UPF's N3 address
// in GTP-U (built with gopacket's GTPv1U layer: the uplink TEID, a PDU
// Session Container with the QFI) and gives the UE what comes back,
// decapsulated, after checking it: the downlink TEID and QFI.
type gnb struct {
	t        *testing.T
	ue       *topo.NS
	tun      *os.File
	conn     *net.UDPConn
	n3       *net.UDPAddr  // the UPF's N3 address the uplink goes to
	ul       atomic.Uint32 // the uplink TEID
	dlTEID   uint32        // the downlink TEID the gNB expects
	sent     atomic.Uint64
	got      atomic.Uint64
	bad      atomic.Uint64 // downlink with another TEID or QFI, or not GTP-U
	errInd   atomic.Uint64 // Error Indications from the UPF
	wg       sync.WaitGroup
	stopping atomic.Bool
}

func startGNB(t *testing.T, g *gateway, dlTEID uint32) *gnb {
	t.Helper()
	return startGNBOn(t, g, dlTEID, lab.AddrB, lab.GWWan)
}

// startGNBOn is startGNB with the gNB's address on host B and the UPF's
// N3 address of one family (IPv4 or IPv6: N3 over IPv6).
func startGNBOn(t *testing.T, g *gateway, dlTEID uint32, addr, n3 string) *gnb {
	t.Helper()
	b := &gnb{t: t, dlTEID: dlTEID, n3: &net.UDPAddr{IP: net.ParseIP(n3), Port: 2152}}
	b.ue, b.tun = newUE(t, g.Prefix+"ue", b.stop)
	if err := topo.Do(g.B, func() error {
		var err error
		b.conn, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(addr), Port: 2152})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b.wg.Add(2)
	go b.uplink()
	go b.downlink()
	return b
}

// newUE makes the UE of the user plane's tests: a namespace (name) whose
// address is ueIP on a TUN device, its default route, and the TUN to
// read its packets from and write its downlink into. The test's end
// calls stop, then removes the namespace.
func newUE(t *testing.T, name string, stop func()) (*topo.NS, *os.File) {
	t.Helper()
	ue, err := topo.NewNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); _ = ue.Delete(); ue.Close() })
	var tun *os.File
	if err := ue.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq("ue0")
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return err
		}
		// Non-blocking, so the runtime's poller reads it and Close
		// ends a read in progress.
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return err
		}
		tun = os.NewFile(uintptr(fd), "ue0")
		return nil
	}); err != nil {
		t.Fatalf("the UE's TUN: %v", err)
	}
	// A PDU session's MTU leaves room for GTP-U on N3 (1500 here): a
	// G-PDU the gNB's kernel fragmented would reach the UPF cut short.
	if err := ue.SetMTU("ue0", 1400); err != nil {
		t.Fatal(err)
	}
	if err := ue.Sysctl("net.ipv6.conf.all.disable_ipv6=1"); err != nil {
		t.Fatal(err)
	}
	if err := ue.AddAddr("ue0", ueIP+"/32"); err != nil {
		t.Fatal(err)
	}
	if err := ue.Up("lo", "ue0"); err != nil {
		t.Fatal(err)
	}
	if out, err := nsRun(ue.Name, "ip", "route", "add", "default", "dev", "ue0"); err != nil {
		t.Fatalf("the UE's route: %v %s", err, out)
	}
	return ue, tun
}

// uplink carries the UE's packets to N3.
func (b *gnb) uplink() {
	defer b.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := b.tun.Read(buf)
		if err != nil {
			return
		}
		// The header alone (gopacket's GTPv1U appends its optional
		// octets after what is already in the buffer), then the packet.
		g := &layers.GTPv1U{Version: 1, ProtocolType: 1, MessageType: 255, TEID: b.ul.Load(),
			MessageLength:       uint16(8 + n),
			GTPExtensionHeaders: []layers.GTPExtensionHeader{{Type: 0x85, Content: []byte{0x10, ueQFI}}}}
		sb := gopacket.NewSerializeBuffer()
		if err := g.SerializeTo(sb, gopacket.SerializeOptions{}); err != nil {
			b.t.Errorf("gNB: %v", err)
			return
		}
		out := append(sb.Bytes(), buf[:n]...)
		if _, err := b.conn.WriteToUDP(out, b.n3); err == nil {
			b.sent.Add(1)
		}
	}
}

// downlink gives the UE what N3 brings it.
func (b *gnb) downlink() {
	defer b.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, _, err := b.conn.ReadFromUDP(buf)
		if err != nil {
			if b.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p := gopacket.NewPacket(buf[:n], layers.LayerTypeGTPv1U, gopacket.Default)
		g, ok := p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
		if ok && g.MessageType == 26 {
			b.errInd.Add(1)
			continue
		}
		if !ok || g.MessageType != 255 || g.TEID != b.dlTEID || len(g.GTPExtensionHeaders) != 1 ||
			g.GTPExtensionHeaders[0].Type != 0x85 || len(g.GTPExtensionHeaders[0].Content) < 2 ||
			g.GTPExtensionHeaders[0].Content[1]&0x3f != ueQFI {
			if b.bad.Add(1) == 1 {
				b.t.Logf("gNB: the first bad downlink datagram: % x", buf[:min(n, 64)])
			}
			continue
		}
		if _, err := b.tun.Write(g.Payload); err == nil {
			b.got.Add(1)
		}
	}
}

func (b *gnb) stop() {
	if b.stopping.Swap(true) {
		return
	}
	if b.conn != nil {
		b.conn.Close()
	}
	if b.tun != nil {
		b.tun.Close()
	}
	b.wg.Wait()
}

// sessionRules are the rules pfcpsim's own server gives a UE's session:
// uplink by a TEID the SMF chose, downlink to the UE's address dropped
// (a zero outer header) until the gNB's TEID is known, one QER with the
// QFI.
func sessionRules(ulTEID uint32, ue string) (pdrs, fars, qers []*ieLib.IE) {
	pdrs = []*ieLib.IE{
		session.NewPDRBuilder().WithID(1).WithMethod(session.Create).WithTEID(ulTEID).WithFARID(1).AddQERID(1).
			WithN3Address(lab.GWWan).WithPrecedence(100).MarkAsUplink().BuildPDR(),
		session.NewPDRBuilder().WithID(2).WithMethod(session.Create).WithPrecedence(100).WithUEAddress(ue).
			WithFARID(2).AddQERID(1).MarkAsDownlink().BuildPDR(),
	}
	fars = []*ieLib.IE{
		session.NewFARBuilder().WithID(1).WithAction(session.ActionForward).WithDstInterface(ieLib.DstInterfaceCore).
			WithMethod(session.Create).BuildFAR(),
		session.NewFARBuilder().WithID(2).WithAction(session.ActionDrop).WithMethod(session.Create).
			WithDstInterface(ieLib.DstInterfaceAccess).WithZeroBasedOuterHeaderCreation().BuildFAR(),
	}
	qers = []*ieLib.IE{session.NewQERBuilder().WithID(1).WithMethod(session.Create).WithQFI(ueQFI).
		WithUplinkMBR(labMBR).WithDownlinkMBR(labMBR).WithGateStatus(ieLib.GateStatusOpen).Build()}
	return pdrs, fars, qers
}

// labMBR is the lab session's maximum bit rate each way, kbit/s: below
// what the lab carries unpoliced (560-840 Mbit/s of TCP), so the
// policer shows.
const labMBR = 200000

// forwardDown is the modification that forwards a session's downlink
// to the gNB on host B, to its TEID dlTEID.
func forwardDown(dlTEID uint32) []*ieLib.IE {
	return []*ieLib.IE{session.NewFARBuilder().WithID(2).WithMethod(session.Update).WithAction(session.ActionForward).
		WithDstInterface(ieLib.DstInterfaceAccess).WithTEID(dlTEID).WithDownlinkIP(lab.AddrB).BuildFAR()}
}

// upfSession establishes the UE's session from pfcpsim (sessionRules),
// then forwards the downlink to the gNB with a modification.
func upfSession(t *testing.T, c *pfcpsim.PFCPClient, ulTEID, dlTEID uint32) *pfcpsim.PFCPSession {
	t.Helper()
	pdrs, fars, qers := sessionRules(ulTEID, ueIP)
	s, err := c.EstablishSession(pdrs, fars, qers, nil)
	if err != nil {
		t.Fatalf("pfcpsim's session: %v", err)
	}
	if err := c.ModifySession(s, nil, forwardDown(dlTEID), nil, nil); err != nil {
		t.Fatalf("pfcpsim's modification: %v", err)
	}
	return s
}

// checkSessionsListed reads the sessions with `edgeplane get sessions
// -o json`: the one session, its uplink PDR by its TEID and its
// downlink PDR toward the gNB, each having counted packets; the table
// names the session too.
func checkSessionsListed(t *testing.T, g *gateway, ulTEID, dlTEID uint32) {
	t.Helper()
	out, err := exec.Command(edgeplaneBin, "get", "sessions", "-o", "json", "--server", g.APISocket()).CombinedOutput()
	if err != nil {
		t.Fatalf("get sessions: %v\n%s", err, out)
	}
	var r pb.ListSessionsResponse
	if err := protojson.Unmarshal(out, &r); err != nil {
		t.Fatalf("get sessions -o json: %v\n%s", err, out)
	}
	if len(r.GetSessions()) != 1 || len(r.GetSessions()[0].GetPdrs()) != 2 {
		t.Fatalf("get sessions: %s", out)
	}
	for _, p := range r.GetSessions()[0].GetPdrs() {
		switch p.GetDirection() {
		case "uplink":
			if p.GetTeid() != ulTEID || p.GetPackets() == 0 || p.GetAction() != "forward" {
				t.Errorf("uplink PDR listed as %v", p)
			}
		case "downlink":
			if p.GetUeIp() != ueIP || p.GetOuterTeid() != dlTEID || p.GetOuterAddr() != lab.AddrB || p.GetPackets() == 0 {
				t.Errorf("downlink PDR listed as %v", p)
			}
		default:
			t.Errorf("PDR of direction %q", p.GetDirection())
		}
	}
	table, err := exec.Command(edgeplaneBin, "get", "sessions", "--server", g.APISocket()).CombinedOutput()
	if err != nil || !strings.Contains(string(table), ueIP) || !strings.Contains(string(table), fmt.Sprintf("%x", r.GetSessions()[0].GetUpSeid())) {
		t.Errorf("get sessions (table): %v\n%s", err, table)
	}
	t.Logf("edgeplane get sessions:\n%s", table)
}

// checkBuffered idles the UE: pfcpsim turns the session's downlink FAR
// to buffer and notify (as its own server does for a UE gone idle);
// host A sends 20 numbered datagrams to the UE, which get nowhere while
// the agent holds them and tells the SMF (a Session Report Request,
// which pfcpsim answers); the FAR forwarding again, they reach the UE,
// all of them, in order.
func checkBuffered(t *testing.T, g *gateway, c *pfcpsim.PFCPClient, s *pfcpsim.PFCPSession, b *gnb, dlTEID uint32) {
	t.Helper()
	buff := session.NewFARBuilder().WithID(2).WithMethod(session.Update).WithAction(session.ActionBuffer | session.ActionNotify).
		WithDstInterface(ieLib.DstInterfaceAccess).WithTEID(0).WithDownlinkIP(lab.AddrB).BuildFAR()
	if err := c.ModifySession(s, nil, []*ieLib.IE{buff}, nil, nil); err != nil {
		t.Fatalf("pfcpsim's modification to buffer: %v", err)
	}
	var ue *net.UDPConn
	if err := b.ue.Do(func() (err error) {
		ue, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ueIP), Port: 6000})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ue.Close()
	var a *net.UDPConn
	if err := topo.Do(g.A, func() (err error) {
		a, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(ueIP), Port: 6000})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const n = 20
	for i := range n {
		if _, err := a.Write([]byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	_ = ue.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if l, err := ue.Read(buf); err == nil {
		t.Fatalf("the UE got %q while its downlink was to be buffered", buf[:l])
	}
	reported := func() bool {
		v, _ := metricValue(g.scrape(), "edgeplane_n4_messages_total", map[string]string{"fate": "report_answered"})
		return v >= 1
	}
	if !waitFor(3*time.Second, reported) {
		t.Errorf("no downlink data report answered by the SMF")
	}
	if err := c.ModifySession(s, nil, forwardDown(dlTEID), nil, nil); err != nil {
		t.Fatalf("pfcpsim's modification to forward: %v", err)
	}
	var got []string
	_ = ue.SetReadDeadline(time.Now().Add(3 * time.Second))
	for len(got) < n {
		l, err := ue.Read(buf)
		if err != nil {
			break
		}
		got = append(got, string(buf[:l]))
	}
	want := make([]string, n)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	if !slices.Equal(got, want) {
		t.Errorf("released to the UE: %v, want %v in order", got, want)
	}
	if r := g.stats().Reasons; r["gtpu_buffer"].Packets < n {
		t.Errorf("%d packets counted gtpu_buffer, want %d", r["gtpu_buffer"].Packets, n)
	}
}

// iperfUE runs iperf3 TCP from the UE to host A and back (ports port
// and port + 1, secs seconds each), logs the rates (what: the setup)
// and fails the test if either moved nothing.
func iperfUE(t *testing.T, g *gateway, b *gnb, port int, secs, what string) (up, down iperfResult) {
	t.Helper()
	up = iperf(t, g.A, b.ue.Name, lab.AddrA, port, "-t", secs)
	down = iperf(t, g.A, b.ue.Name, lab.AddrA, port+1, "-t", secs, "-R")
	t.Logf("iperf3 TCP through the session%s: uplink %.0f Mbit/s, downlink %.0f Mbit/s",
		what, up.End.SumReceived.BitsPerSecond/1e6, down.End.SumReceived.BitsPerSecond/1e6)
	if up.End.SumReceived.Bytes == 0 || down.End.SumReceived.Bytes == 0 {
		t.Errorf("iperf3 moved nothing: uplink %v bytes, downlink %v", up.End.SumReceived.Bytes, down.End.SumReceived.Bytes)
	}
	return up, down
}

// associateSMF connects pfcpsim from host A to the agent's N4 address
// n4 and sets its association up; the test's end disconnects it.
func associateSMF(t *testing.T, g *gateway, n4 string) *pfcpsim.PFCPClient {
	t.Helper()
	c := pfcpsim.NewPFCPClient(lab.AddrA)
	c.SetPFCPResponseTimeout(3 * time.Second)
	if err := topo.Do(g.A, func() error { return c.ConnectN4(n4) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.DisconnectN4)
	if err := c.SetupAssociation(); err != nil {
		t.Fatalf("pfcpsim's association: %v", err)
	}
	return c
}

// routeUEs routes the UE pool from host A (N6) through the gateway.
func routeUEs(t *testing.T, g *gateway) {
	t.Helper()
	if out, err := nsRun(g.A, "ip", "route", "add", uePool, "via", lab.GWLan); err != nil {
		t.Fatalf("route to the UEs: %v %s", err, out)
	}
}

// startUPF starts an agent serving N4 on the LAN side and N3 on the
// WAN side; it returns the gateway, the N4 address and the agent's
// flags, for a restart.
func startUPF(t *testing.T) (*gateway, string, []string) {
	t.Helper()
	g := newGateway(t, forwardConfig)
	n4 := lab.GWLan + ":8805"
	args := []string{"--n4-addr", n4, "--n3-addr", lab.GWWan}
	g.start(args...)
	return g, n4, args
}

// TestUPFLab: the agent as a UPF in the lab, driven by pfcpsim from host
// A over N4: a UE behind a gNB on host B (TUN and a GTP-U encapsulator
// on gopacket's layer) pings the N6 host A and is pinged back, and
// iperf3 runs both ways, through the session's uplink decapsulation and
// downlink encapsulation in XDP, the gNB checking each downlink
// packet's TEID and QFI. An agent killed with SIGKILL mid-stream and
// started again keeps the session: the UE's pings go on. While its
// downlink FAR buffers, the UE's datagrams are held and reported to the
// SMF, and released in order when it forwards again. Deleted, the
// session carries nothing, and the gNB's G-PDUs to its TEID are answered
// with Error Indications.
func TestUPFLab(t *testing.T) {
	g, n4, args := startUPF(t)
	g.warmUp()
	// N6: host A reaches the UEs through the gateway.
	routeUEs(t, g)
	const ulTEID, dlTEID = 0x100, 0x9000
	b := startGNB(t, g, dlTEID)
	b.ul.Store(ulTEID)

	c := associateSMF(t, g, n4)
	s := upfSession(t, c, ulTEID, dlTEID)
	before := g.stats().Reasons

	if n := ping(b.ue.Name, lab.AddrA, 5, "0.2"); n != 5 {
		t.Fatalf("UE -> N6: %d of 5 pings answered (gNB sent %d, got %d, %d bad)\nstats: %+v", n, b.sent.Load(), b.got.Load(), b.bad.Load(), g.stats().Reasons)
	}
	if n := ping(g.A, ueIP, 5, "0.2"); n != 5 {
		t.Fatalf("N6 -> UE: %d of 5 pings answered", n)
	}
	if b.bad.Load() != 0 {
		t.Errorf("%d downlink datagrams with another TEID or QFI, or not GTP-U", b.bad.Load())
	}
	up, down := iperfUE(t, g, b, 5201, "2", "")
	// The QER's MBR polices both ways: TCP's goodput stays under it (a
	// 20 ms bucket adds 2 % over the 2 s), and keeps most of it.
	for _, x := range []struct {
		dir string
		bps float64
	}{{"uplink", up.End.SumReceived.BitsPerSecond}, {"downlink", down.End.SumReceived.BitsPerSecond}} {
		if x.bps > 1.03*labMBR*1e3 || x.bps < 0.3*labMBR*1e3 {
			t.Errorf("%s through a %d kbit/s MBR: %.0f Mbit/s", x.dir, labMBR, x.bps/1e6)
		}
	}
	checkSessionsListed(t, g, ulTEID, dlTEID)
	r := g.stats().Reasons
	if n := r["gtpu_mbr"].Packets - before["gtpu_mbr"].Packets; n == 0 {
		t.Errorf("nothing over the MBR dropped (gtpu_mbr)")
	}
	for _, bad := range []string{"gtpu_no_session", "gtpu_error_ind", "gtpu_no_pdr", "gtpu_inner", "bad_gtpu"} {
		if n := r[bad].Packets - before[bad].Packets; n != 0 {
			t.Errorf("%d packets counted %s", n, bad)
		}
	}

	// kill -9 mid-stream: pings every 50 ms across the restart.
	done := make(chan int)
	go func() { done <- ping(b.ue.Name, lab.AddrA, 60, "0.05") }()
	time.Sleep(500 * time.Millisecond)
	if err := g.StopAgent(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	g.start(args...)
	if n := <-done; n < 58 {
		t.Errorf("%d of 60 pings answered across an agent's kill -9 and restart", n)
	} else {
		t.Logf("%d of 60 pings (every 50 ms) answered across an agent's kill -9 and restart", n)
	}
	if n := ping(b.ue.Name, lab.AddrA, 3, "0.2"); n != 3 {
		t.Errorf("after the restart: %d of 3 pings answered", n)
	}

	checkBuffered(t, g, c, s, b, dlTEID)

	if err := c.DeleteSession(s); err != nil {
		t.Fatalf("pfcpsim's deletion: %v", err)
	}
	if n := ping(b.ue.Name, lab.AddrA, 3, "0.2"); n != 0 {
		t.Errorf("%d pings answered after the session was deleted", n)
	}
	// Its TEID is unknown now: the gNB is told so (Error Indication).
	if r := g.stats().Reasons; r["gtpu_error_ind"].Packets == 0 || b.errInd.Load() == 0 {
		t.Errorf("the deleted session's uplink was not answered with an Error Indication (%d at the gNB): %+v", b.errInd.Load(), r)
	}
}
