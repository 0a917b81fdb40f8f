// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// Harness topology, inside a private namespace:
//
//	lan0 10.1.0.1/24 fd01::1/64  (peer lan0p)
//	wan0 10.2.0.1/24 fd02::1/64  (peer wan0p); neighbours 10.2.0.2 / fd02::2
//	routes 10.3.0.0/16 and fd03::/48 via the wan0 neighbour
//	wan1 10.4.0.1/24             (peer wan1p); neighbour 10.4.0.2
//	10.5.0.0/16 via 10.4.0.9, which has no neighbour entry
var (
	macWanNeigh  = net.HardwareAddr{0x02, 0, 0, 0, 0x02, 0x02}
	macWan1Neigh = net.HardwareAddr{0x02, 0, 0, 0, 0x04, 0x02}
	macWan0      = net.HardwareAddr{0x02, 0, 0, 0, 0x02, 0x01}
	macWan1      = net.HardwareAddr{0x02, 0, 0, 0, 0x04, 0x01}
	macLan0      = net.HardwareAddr{0x02, 0, 0, 0, 0x01, 0x01}
	macHostA     = net.HardwareAddr{0x02, 0, 0, 0, 0x01, 0x02}
)

// harness is a loaded dataplane in a namespace with real routes and
// neighbours, so bpf_fib_lookup answers as it would on a gateway.
type harness struct {
	t     testing.TB
	ns    *testutil.NetNS
	dp    *bpf.Dataplane
	idx   map[string]uint32
	alloc *rules.StatsAlloc
}

func newHarness(t testing.TB, cfgYAML string) *harness {
	t.Helper()
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t, "eppkt")
	for _, c := range [][]string{
		{"ip", "link", "add", "lan0", "address", macLan0.String(), "type", "veth", "peer", "name", "lan0p"},
		{"ip", "link", "add", "wan0", "address", macWan0.String(), "type", "veth", "peer", "name", "wan0p"},
		{"ip", "link", "add", "wan1", "address", macWan1.String(), "type", "veth", "peer", "name", "wan1p"},
		{"sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"},
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"ip", "link", "set", "lan0", "up"}, {"ip", "link", "set", "lan0p", "up"},
		{"ip", "link", "set", "wan0", "up"}, {"ip", "link", "set", "wan0p", "up"},
		{"ip", "link", "set", "wan1", "up"}, {"ip", "link", "set", "wan1p", "up"},
		{"ip", "addr", "add", "10.1.0.1/24", "dev", "lan0"},
		{"ip", "addr", "add", "fd01::1/64", "dev", "lan0", "nodad"},
		{"ip", "addr", "add", "10.2.0.1/24", "dev", "wan0"},
		{"ip", "addr", "add", "fd02::1/64", "dev", "wan0", "nodad"},
		{"ip", "addr", "add", "10.4.0.1/24", "dev", "wan1"},
		{"ip", "neigh", "replace", "10.2.0.2", "lladdr", macWanNeigh.String(), "dev", "wan0", "nud", "permanent"},
		{"ip", "neigh", "replace", "fd02::2", "lladdr", macWanNeigh.String(), "dev", "wan0", "nud", "permanent"},
		{"ip", "neigh", "replace", "10.4.0.2", "lladdr", macWan1Neigh.String(), "dev", "wan1", "nud", "permanent"},
		{"ip", "route", "add", "10.3.0.0/16", "via", "10.2.0.2", "dev", "wan0"},
		{"ip", "-6", "route", "add", "fd03::/48", "via", "fd02::2", "dev", "wan0"},
		{"ip", "route", "add", "10.5.0.0/16", "via", "10.4.0.9", "dev", "wan1"},
		{"ip", "route", "add", "10.6.0.0/16", "via", "10.4.0.2", "dev", "wan1"},
	} {
		ns.MustExec(t, c[0], c[1:]...)
	}
	h := &harness{t: t, ns: ns, idx: map[string]uint32{}}
	err := ns.Do(func() error {
		for _, n := range []string{"lan0", "wan0", "wan1"} {
			itf, err := net.InterfaceByName(n)
			if err != nil {
				return err
			}
			h.idx[n] = uint32(itf.Index)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	dp, err := bpf.Open(bpf.Limits{Flows: cfg.Limits.Flows, Rules: cfg.Limits.Rules}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	if _, err := dp.LoadProgram(); err != nil {
		t.Fatal(err)
	}
	h.dp = dp
	h.alloc = rules.NewStatsAlloc(cfg.Limits.Rules, nil)
	h.apply(cfg)
	return h
}

func (h *harness) resolve(name string) (uint32, error) {
	if i, ok := h.idx[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("no interface %q", name)
}

// apply compiles and commits cfg, as the agent does.
func (h *harness) apply(cfg *config.Config) {
	h.t.Helper()
	gen, alloc, err := rules.Compile(cfg, h.resolve, h.alloc, h.dp.Limits)
	if err != nil {
		h.t.Fatalf("compile: %v", err)
	}
	if _, err := h.dp.Commit(gen); err != nil {
		h.t.Fatalf("commit: %v", err)
	}
	h.alloc = alloc
	var tx []uint32
	for _, i := range h.idx {
		tx = append(tx, i)
	}
	// Devmap entries name interfaces of the writer's namespace.
	if err := h.ns.Do(func() error { return h.dp.SetTx(tx) }); err != nil {
		h.t.Fatal(err)
	}
}

// xdpMD mirrors struct xdp_md for BPF_PROG_TEST_RUN's ctx_in: only
// ingress_ifindex is set, which the kernel resolves to the rx device.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// run sends one frame through the program as if received on inIf and
// returns the verdict and the frame as the program left it.
func (h *harness) run(frame []byte, inIf string) (uint32, []byte) {
	h.t.Helper()
	ret, out, err := h.runErr(frame, inIf, 1)
	if err != nil {
		h.t.Fatal(err)
	}
	return ret, out
}

func (h *harness) runErr(frame []byte, inIf string, repeat int) (uint32, []byte, error) {
	out := make([]byte, len(frame)+256)
	var ret uint32
	err := h.ns.Do(func() error {
		opts := &ebpf.RunOptions{
			Data:    frame,
			DataOut: out,
			Repeat:  uint32(repeat),
			Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: h.idx[inIf]},
		}
		r, err := h.dp.Prog.Run(opts)
		ret = r
		out = out[:len(opts.DataOut)]
		return err
	})
	return ret, out, err
}

func (h *harness) snapshot() *bpf.Snapshot {
	h.t.Helper()
	s, err := h.dp.Snapshot()
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// writePcap saves frames for a failing case so it can be opened in
// Wireshark; returns the path.
func writePcap(t testing.TB, name string, frames ...[]byte) string {
	dir := os.Getenv("EDGE_PCAP_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	p := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(name)+".pcap")
	f, err := os.Create(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	_ = w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	for _, fr := range frames {
		_ = w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(fr), Length: len(fr)}, fr)
	}
	return p
}
