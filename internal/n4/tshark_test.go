// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// udpFrame wraps a PFCP message in Ethernet, IPv4 and UDP from src to
// dst, checksums set.
func udpFrame(t *testing.T, src, dst netip.AddrPort, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTsharkDecodes: tshark, an independent dissector, decodes every
// request of the exchanges the tests make and every answer the node
// gives, the causes and offending IEs among them, without a malformed
// packet or an expert warning.
func TestTsharkDecodes(t *testing.T) {
	testutil.RequireTool(t, "tshark")
	n, err := Listen(Options{Addr: "127.0.0.1:0", NodeID: "192.0.2.1", Recovery: started})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	smf, upf := netip.MustParseAddrPort("192.0.2.10:8805"), netip.MustParseAddrPort("192.0.2.1:8805")
	id, ts := ie.NewNodeID(smfID, "", ""), ie.NewRecoveryTimeStamp(started)
	cpSEID := ie.NewFSEID(0x1234, net.ParseIP(smfID), nil)
	requests := []message.Message{
		message.NewHeartbeatRequest(1, ts, nil),
		message.NewAssociationSetupRequest(2, ts),                         // Node ID missing
		message.NewSessionEstablishmentRequest(0, 0, 0, 3, 0, id, cpSEID), // unassociated
		message.NewAssociationSetupRequest(4, id, ts),
		message.NewAssociationUpdateRequest(5, id),
		establishment(6, wholeSession),                              // not supported
		establishment(10, []string{"pdr1", "far2", "qer1", "urr1"}), // PDR 1 names FAR 1, not created
		message.NewSessionDeletionRequest(0, 0, 0x99, 7, 0),
		message.NewAssociationReleaseRequest(8, id),
	}
	var frames [][]byte
	for _, m := range requests {
		b := marshal(m)
		frames = append(frames, udpFrame(t, smf, upf, b))
		out := n.Handle(b, smf)
		if out == nil {
			t.Fatalf("%s: no answer", m.MessageTypeName())
		}
		frames = append(frames, udpFrame(t, upf, smf, out))
	}
	v2 := marshal(message.NewHeartbeatRequest(9, ts, nil))
	v2[0] = 2<<5 | v2[0]&0x1f
	frames = append(frames, udpFrame(t, upf, smf, n.Handle(v2, smf)))

	pcap := filepath.Join(t.TempDir(), "n4.pcap")
	f, err := os.Create(pcap)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	b, err := exec.Command("tshark", "-r", pcap, "-V", "-o", "udp.check_checksum:TRUE").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, b)
	}
	text := string(b)
	if got := strings.Count(text, "Packet Forwarding Control Protocol"); got != len(frames) {
		t.Errorf("tshark decoded %d PFCP messages, want %d", got, len(frames))
	}
	for _, want := range []string{"Heartbeat Response", "Association Setup Response", "Mandatory IE missing",
		"No established PFCP Association", "Request accepted", "Service not supported", "Session context not found",
		"Offending IE", "Version Not Supported Response", "FTUP", "Create PDR", "Outer Header Creation", "Create QER",
		"Create URR", "SDF Filter", "Failed Rule ID", "Rule creation / modification Failure"} {
		if !strings.Contains(text, want) {
			t.Errorf("tshark's decode lacks %q", want)
		}
	}
	for _, bad := range []string{"Malformed", "Expert Info (Error", "Expert Info (Warning", "Bad]"} {
		if strings.Contains(text, bad) {
			t.Errorf("tshark found %q:\n%s", bad, text)
		}
	}
}
