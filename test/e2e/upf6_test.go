// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"net"
	"testing"

	ieLib "github.com/wmnsk/go-pfcp/ie"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// TestUPFLabN3OverIPv6: the lab's UPF with N3 over IPv6. The agent
// holds an IPv4 and an IPv6 N3 address; pfcpsim from host A sets a
// session up whose uplink F-TEID is the IPv6 one (outer header removal
// GTP-U/UDP/IPv6) and whose downlink FAR creates GTP-U/UDP/IPv6 toward
// the gNB's IPv6 address on host B. The gNB (a socket bound to that
// address, so the kernel checks every downlink datagram's UDP checksum,
// which IPv6 requires) carries the UE's pings and TCP both ways, and
// checks each downlink packet's TEID and QFI.
func TestUPFLabN3OverIPv6(t *testing.T) {
	g := newGateway(t, forwardConfig)
	n4 := lab.GWLan + ":8805"
	g.start("--n4-addr", n4, "--n3-addr", lab.GWWan+","+lab.GWWan6)
	g.warmUp()
	routeUEs(t, g)
	const ulTEID, dlTEID = 0x600, 0x9600
	b := startGNBOn(t, g, dlTEID, lab.AddrB6, lab.GWWan6)
	b.ul.Store(ulTEID)

	c := associateSMF(t, g, n4)
	pdrs := []*ieLib.IE{
		ieLib.NewCreatePDR(ieLib.NewPDRID(1), ieLib.NewPrecedence(100),
			ieLib.NewPDI(ieLib.NewSourceInterface(ieLib.SrcInterfaceAccess),
				ieLib.NewFTEID(0x02, ulTEID, nil, net.ParseIP(lab.GWWan6), 0),
				ieLib.NewUEIPAddress(0x02, ueIP, "", 0, 0)),
			ieLib.NewOuterHeaderRemoval(1, 0), ieLib.NewFARID(1), ieLib.NewQERID(1)),
		ieLib.NewCreatePDR(ieLib.NewPDRID(2), ieLib.NewPrecedence(100),
			ieLib.NewPDI(ieLib.NewSourceInterface(ieLib.SrcInterfaceCore), ieLib.NewUEIPAddress(0x06, ueIP, "", 0, 0)),
			ieLib.NewFARID(2), ieLib.NewQERID(1)),
	}
	// The QoS flow: the QFI the downlink's PDU Session Container names.
	qers := []*ieLib.IE{ieLib.NewCreateQER(ieLib.NewQERID(1), ieLib.NewGateStatus(ieLib.GateStatusOpen, ieLib.GateStatusOpen),
		ieLib.NewQFI(ueQFI))}
	fars := []*ieLib.IE{
		ieLib.NewCreateFAR(ieLib.NewFARID(1), ieLib.NewApplyAction(0x02),
			ieLib.NewForwardingParameters(ieLib.NewDestinationInterface(ieLib.DstInterfaceCore))),
		ieLib.NewCreateFAR(ieLib.NewFARID(2), ieLib.NewApplyAction(0x02),
			ieLib.NewForwardingParameters(ieLib.NewDestinationInterface(ieLib.DstInterfaceAccess),
				ieLib.NewOuterHeaderCreation(0x0200, dlTEID, "", lab.AddrB6, 0, 0, 0))),
	}
	s, err := c.EstablishSession(pdrs, fars, qers, nil)
	if err != nil {
		t.Fatalf("pfcpsim's session: %v", err)
	}
	before := g.stats().Reasons

	if n := ping(b.ue.Name, lab.AddrA, 5, "0.2"); n != 5 {
		t.Fatalf("UE -> N6 over an IPv6 N3: %d of 5 pings answered (gNB sent %d, got %d, %d bad)\nstats: %+v",
			n, b.sent.Load(), b.got.Load(), b.bad.Load(), g.stats().Reasons)
	}
	if n := ping(g.A, ueIP, 5, "0.2"); n != 5 {
		t.Fatalf("N6 -> UE over an IPv6 N3: %d of 5 pings answered (gNB got %d, %d bad)", n, b.got.Load(), b.bad.Load())
	}
	iperfUE(t, g, b, 5211, "1", ", N3 over IPv6")
	if b.bad.Load() != 0 {
		t.Errorf("%d downlink datagrams with another TEID or QFI, or not GTP-U", b.bad.Load())
	}
	r := g.stats().Reasons
	for _, bad := range []string{"gtpu_no_session", "gtpu_error_ind", "gtpu_no_pdr", "gtpu_inner", "bad_gtpu"} {
		if n := r[bad].Packets - before[bad].Packets; n != 0 {
			t.Errorf("%d packets counted %s", n, bad)
		}
	}

	// Deleted: the gNB's G-PDUs to its TEID are answered with Error
	// Indications, over IPv6 (the gNB's socket takes them: their UDP
	// checksum is right).
	if err := c.DeleteSession(s); err != nil {
		t.Fatalf("pfcpsim's deletion: %v", err)
	}
	if n := ping(b.ue.Name, lab.AddrA, 3, "0.2"); n != 0 {
		t.Errorf("%d pings answered after the session was deleted", n)
	}
	if r := g.stats().Reasons; r["gtpu_error_ind"].Packets == 0 || b.errInd.Load() == 0 {
		t.Errorf("the deleted session's uplink over IPv6 was not answered with an Error Indication (%d at the gNB): %+v",
			b.errInd.Load(), r)
	}
}
