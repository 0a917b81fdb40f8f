// SPDX-License-Identifier: Apache-2.0

package upf_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"

	"github.com/edgeplane/edgeplane/internal/n4"
	"github.com/edgeplane/edgeplane/internal/upf"
)

// TestEndMarkersOnHandover: a modification that moves the downlink to
// another gNB (outer header creation to another peer and TEID) with the
// SNDEM flag sends one GTP-U End Marker, over real UDP, to the old
// gNB's TEID; without the flag, or when the path stays, none.
func TestEndMarkersOnHandover(t *testing.T) {
	// The old gNB: a UDP socket on loopback.
	gnbConn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer gnbConn.Close()
	em, err := upf.NewEndMarkers(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"))
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	em.Port = uint16(gnbConn.LocalAddr().(*net.UDPAddr).Port)
	// A gNB over IPv6, on the same port.
	gnb6, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback, Port: int(em.Port)})
	if err != nil {
		t.Fatal(err)
	}
	defer gnb6.Close()

	dp := openDataplane(t)
	g := startGateway(t, dp, t.TempDir(), nil, func(o *n4.Options) { o.EndMarker = em.Send })
	s := dialSMF(t, g)
	seid, _ := s.establish()
	moveTo := func(peer string, teid uint32, flags ...*ie.IE) {
		t.Helper()
		ohc := ie.NewOuterHeaderCreation(0x0100, teid, peer, "", 0, 0, 0)
		if netip.MustParseAddr(peer).Is6() {
			ohc = ie.NewOuterHeaderCreation(0x0200, teid, "", peer, 0, 0, 0)
		}
		m := s.ask(message.NewSessionModificationRequest(0, 0, seid, s.next(), 0, append(flags,
			ie.NewUpdateFAR(ie.NewFARID(2), ie.NewApplyAction(n4.ActForw),
				ie.NewUpdateForwardingParameters(ie.NewDestinationInterface(ie.DstInterfaceAccess), ohc)))...))
		if c := cause(t, m.(*message.SessionModificationResponse).Cause); c != ie.CauseRequestAccepted {
			t.Fatalf("modification: cause %d", c)
		}
	}
	read := func() []byte {
		_ = gnbConn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		b := make([]byte, 64)
		n, err := gnbConn.Read(b)
		if err != nil {
			return nil
		}
		return b[:n]
	}
	sndem := ie.NewPFCPSMReqFlags(0x02)
	// The downlink goes to the old gNB (it was buffering: no path to
	// leave yet, none sent).
	moveTo("127.0.0.1", 0x9000, sndem)
	if b := read(); b != nil {
		t.Errorf("an end marker (% x) when no path was left", b)
	}
	// The same path again: none.
	moveTo("127.0.0.1", 0x9000, sndem)
	if b := read(); b != nil {
		t.Errorf("an end marker (% x) when the path stayed", b)
	}
	// Handover without the flag: none.
	moveTo("192.0.2.60", 0x9100)
	if b := read(); b != nil {
		t.Errorf("an end marker (% x) without SNDEM", b)
	}
	moveTo("127.0.0.1", 0x9200)
	// Handover with it: one, to the old TEID.
	moveTo("192.0.2.61", 0x9300, sndem)
	b := read()
	if len(b) != 8 || b[0] != 0x30 || b[1] != 254 || binary.BigEndian.Uint16(b[2:]) != 0 || binary.BigEndian.Uint32(b[4:]) != 0x9200 {
		t.Fatalf("end marker % x, want GTPv1 type 254 to TEID 0x9200, no payload", b)
	}
	if b := read(); b != nil {
		t.Errorf("a second datagram % x", b)
	}
	// Over IPv6: a handover away from an IPv6 gNB sends its end marker
	// there, from the IPv6 N3 address; one between IPv6 gNBs too.
	moveTo("::1", 0x9400)
	moveTo("fd02::60", 0x9500, sndem)
	_ = gnb6.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	b6 := make([]byte, 64)
	n6, err := gnb6.Read(b6)
	if err != nil || n6 != 8 || b6[1] != 254 || binary.BigEndian.Uint32(b6[4:]) != 0x9400 {
		t.Fatalf("end marker over IPv6 % x (%v), want type 254 to TEID 0x9400", b6[:n6], err)
	}
	if em.Sent() != 2 || g.node.Stats()["end_marker_sent"] != 2 {
		t.Errorf("counted %d sent, the node %d", em.Sent(), g.node.Stats()["end_marker_sent"])
	}
}
