// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// decapRule is applied to gateway B of the lab over its API: UDP to port
// 9999 that arrives over path 2 (where the lab steers A's UDP) is
// dropped after decapsulation.
const decapRule = `fars:
  - {id: 30, action: drop}
pdrs:
  - {id: 30, precedence: 5, match: {in_path: 2, proto: udp, dport: 9999}, far: 30}
`

// TestLabDecapRules sends two UDP flows from host A to host B over the
// SD-WAN lab's path 2 while gateway B has a drop PDR for one of them on
// the decapsulated packets (in_path: 2, dport 9999): the GRE packets of
// both cross the WAN link (tshark decodes them there), host B receives
// the other flow and none of the dropped one, and gateway B counts the
// drops on the PDR. Pings over path 1 still pass.
func TestLabDecapRules(t *testing.T) {
	l := newLab(t)
	l.mustCLI("up")
	rule := filepath.Join(t.TempDir(), "rule.yaml")
	if err := os.WriteFile(rule, []byte(decapRule), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := topo.Output(ctx, l.GWB, edgeplaneBin, "apply", "-f", rule, "--server", "unix://"+l.APISocket(l.GWB)); err != nil {
		t.Fatalf("apply to gateway B: %v\n%s", err, out)
	}

	const n = 100
	c := startCapture(t, l.LinkNS("wan2"), filepath.Join(t.TempDir(), "wan2.pcap"))
	dropped := startReceiver(t, l.B, lab.AddrB, 9999, n)
	passed := startReceiver(t, l.B, lab.AddrB, 9998, n)
	mustSendUDP(t, l.A, lab.AddrB, 9999, n, 200, 64)
	mustSendUDP(t, l.A, lab.AddrB, 9998, n, 200, 64)
	time.Sleep(500 * time.Millisecond) // wan2 delays 30 ms
	var got9999, got9998 recvReport
	dropped.finish(&got9999)
	passed.finish(&got9998)
	rows := c.stop(t)

	// Both flows crossed the WAN inside GRE: the drop is gateway B's,
	// after decapsulation.
	inGRE := map[string]int{}
	for _, r := range rows {
		if r["gre.key"] == "0x00000002" && r["ip.dst"] == lab.WanAddr(2, 'b')+","+lab.AddrB {
			inGRE[r["udp.dstport"]]++
		}
	}
	t.Logf("GRE key 2 on wan2 by inner UDP port: %v; host B received %d on 9998, %d on 9999", inGRE, got9998.Packets, got9999.Packets)
	for _, port := range []string{"9998", "9999"} {
		if inGRE[port] < n*9/10 {
			t.Errorf("%d GRE packets on wan2 carried UDP to port %s, want at least %d of %d", inGRE[port], port, n*9/10, n)
		}
	}
	if got9999.Packets != 0 {
		t.Errorf("host B received %d datagrams on port 9999, want none (dropped after decap)", got9999.Packets)
	}
	// wan2 loses 1 %.
	if got9998.Packets < n*9/10 {
		t.Errorf("host B received %d of %d datagrams on port 9998", got9998.Packets, n)
	}
	st, err := readStats(l.PinDir(l.GWB))
	if err != nil {
		t.Fatal(err)
	}
	if p := st.pdr(30).Packets; p != uint64(inGRE["9999"]) {
		t.Errorf("gateway B's PDR 30 counted %d packets, want the %d that crossed wan2", p, inGRE["9999"])
	}
	if pdr := st.pdr(lab.PDRDecap2).Packets; pdr < uint64(inGRE["9999"]+inGRE["9998"]) {
		t.Errorf("gateway B decapsulated %d packets of path 2, want at least %d", pdr, inGRE["9999"]+inGRE["9998"])
	}
	if got := ping(l.A, lab.AddrB, 3, "0.1"); got != 3 {
		t.Errorf("ping A -> B over path 1: %d of 3 replies", got)
	}
}
