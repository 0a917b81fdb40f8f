// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/omec-project/pfcpsim/pkg/pfcpsim"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// manyUE is the address of UE i of the scale test, its session's TEIDs
// manyUL(i) (uplink, chosen by pfcpsim) and manyDL(i) (the gNB's).
func manyUE(i int) string { return fmt.Sprintf("10.45.%d.%d", 1+i/200, 1+i%200) }
func manyUL(i int) uint32 { return 0x1000 + uint32(i) }
func manyDL(i int) uint32 { return 0x200000 + uint32(i) }

// gpdu is a G-PDU to TEID teid carrying a UDP datagram from UE ue to
// host A's port 7000, payload its index.
func gpdu(t *testing.T, teid uint32, ue string, i int) []byte {
	t.Helper()
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP(ue).To4(), DstIP: net.ParseIP(lab.AddrA).To4()}
	udp := &layers.UDP{SrcPort: 5000, DstPort: 7000}
	_ = udp.SetNetworkLayerForChecksum(ip)
	sb := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip, udp, gopacket.Payload(strconv.Itoa(i))); err != nil {
		t.Fatal(err)
	}
	inner := sb.Bytes()
	g := &layers.GTPv1U{Version: 1, ProtocolType: 1, MessageType: 255, TEID: teid, MessageLength: uint16(8 + len(inner)),
		GTPExtensionHeaders: []layers.GTPExtensionHeader{{Type: 0x85, Content: []byte{0x10, ueQFI}}}}
	hb := gopacket.NewSerializeBuffer()
	if err := g.SerializeTo(hb, gopacket.SerializeOptions{}); err != nil {
		t.Fatal(err)
	}
	return append(hb.Bytes(), inner...)
}

// TestUPFThousandSessions: pfcpsim, from host A over N4, associates and
// creates 1,000 sessions (one UE each), forwards each one's downlink to
// the gNB on host B with a modification, and later deletes them all.
// Through every session a datagram goes up (a G-PDU from the gNB to its
// TEID, the UE's datagram arriving at host A from the UE's address) and
// one comes down (host A to the UE, arriving at the gNB in GTP-U with
// that session's downlink TEID and the QFI). tshark decodes the PFCP on
// N4 and the GTP-U on N3 with no malformed packet. Logged: the
// establishments per second and the modifications' p50/p99 as pfcpsim,
// one request at a time, sees them.
func TestUPFThousandSessions(t *testing.T) {
	testutil.RequireTool(t, "tshark")
	const n = 1000
	g, n4, _ := startUPF(t)
	g.warmUp()
	routeUEs(t, g)
	dir := t.TempDir()
	capN4 := startCaptureOn(t, g.A, "eth0", "udp port 8805", filepath.Join(dir, "n4.pcap"))
	capN3 := startCaptureOn(t, g.B, "eth0", "udp port 2152", filepath.Join(dir, "n3.pcap"))

	c := associateSMF(t, g, n4)
	sessions := make([]*pfcpsim.PFCPSession, n)
	start := time.Now()
	for i := range n {
		pdrs, fars, qers := sessionRules(manyUL(i), manyUE(i))
		s, err := c.EstablishSession(pdrs, fars, qers, nil)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		sessions[i] = s
	}
	est := time.Since(start)
	mods := make([]time.Duration, n)
	for i, s := range sessions {
		t0 := time.Now()
		if err := c.ModifySession(s, nil, forwardDown(manyDL(i)), nil, nil); err != nil {
			t.Fatalf("modification %d: %v", i, err)
		}
		mods[i] = time.Since(t0)
	}
	slices.Sort(mods)
	t.Logf("pfcpsim, one request at a time: %d establishments in %v (%.0f/s); modifications p50 %v, p99 %v",
		n, est.Round(time.Millisecond), float64(n)/est.Seconds(), mods[n/2], mods[n*99/100])

	// Traffic through every session: up from the gNB, down from A.
	var gnbConn, aConn *net.UDPConn
	if err := topo.Do(g.B, func() (err error) {
		gnbConn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(lab.AddrB), Port: 2152})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer gnbConn.Close()
	if err := topo.Do(g.A, func() (err error) {
		aConn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(lab.AddrA), Port: 7000})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer aConn.Close()
	up := map[string]bool{}
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		buf := make([]byte, 2048)
		_ = aConn.SetReadDeadline(time.Now().Add(20 * time.Second))
		for len(up) < n {
			l, from, err := aConn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if i, err := strconv.Atoi(string(buf[:l])); err == nil && i >= 0 && i < n && from.IP.String() == manyUE(i) {
				up[manyUE(i)] = true
			}
		}
	}()
	n3 := &net.UDPAddr{IP: net.ParseIP(lab.GWWan), Port: 2152}
	for i := range n {
		if _, err := gnbConn.WriteToUDP(gpdu(t, manyUL(i), manyUE(i), i), n3); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	<-upDone
	if len(up) != n {
		t.Errorf("uplink: %d of %d sessions' datagrams reached host A from their UE", len(up), n)
	}
	down := map[uint32]bool{}
	downDone := make(chan struct{})
	go func() {
		defer close(downDone)
		buf := make([]byte, 2048)
		_ = gnbConn.SetReadDeadline(time.Now().Add(20 * time.Second))
		for len(down) < n {
			l, _, err := gnbConn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			p := gopacket.NewPacket(buf[:l], layers.LayerTypeGTPv1U, gopacket.Default)
			gh, _ := p.Layer(layers.LayerTypeGTPv1U).(*layers.GTPv1U)
			ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			if gh == nil || ip == nil || len(gh.GTPExtensionHeaders) != 1 || gh.GTPExtensionHeaders[0].Content[1]&0x3f != ueQFI {
				continue
			}
			for _, x := range []int{int(gh.TEID) - 0x200000} {
				if x >= 0 && x < n && ip.DstIP.String() == manyUE(x) {
					down[gh.TEID] = true
				}
			}
		}
	}()
	for i := range n {
		if _, err := aConn.WriteToUDP([]byte(strconv.Itoa(i)), &net.UDPAddr{IP: net.ParseIP(manyUE(i)), Port: 5000}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	<-downDone
	if len(down) != n {
		t.Errorf("downlink: %d of %d sessions' datagrams reached the gNB with their TEID and QFI", len(down), n)
	}

	for i, s := range sessions {
		if err := c.DeleteSession(s); err != nil {
			t.Fatalf("deletion %d: %v", i, err)
		}
	}
	if out, err := exec.Command(edgeplaneBin, "get", "sessions", "--server", g.APISocket()).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "no sessions") {
		t.Errorf("after deleting them all, get sessions: %v %s", err, out)
	}

	// tshark: every PFCP message and G-PDU decodes, nothing malformed.
	capN4.end()
	capN3.end()
	for _, x := range []struct {
		c      *capture
		filter string
		field  string
		min    int
	}{
		{capN4, "pfcp", "pfcp.msg_type", 4 * n},
		{capN3, "gtp", "gtp.teid", 2 * n},
	} {
		out, err := exec.Command("tshark", "-n", "-r", x.c.file, "-Y", x.filter, "-T", "fields", "-e", x.field, "-e", "_ws.malformed",
			"-e", "_ws.expert.severity").Output()
		if err != nil {
			t.Fatalf("tshark -r %s: %v", x.c.file, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		bad := 0
		for _, l := range lines {
			if f := strings.Split(l, "\t"); len(f) > 1 && strings.Join(f[1:], "") != "" {
				bad++
			}
		}
		if len(lines) < x.min || bad != 0 {
			t.Errorf("tshark read %d %s messages (want at least %d), %d malformed or with expert warnings", len(lines), x.filter, x.min, bad)
		}
	}
}
