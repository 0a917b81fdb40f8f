// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// MACs of the topo.PacketNS topology the harness runs in.
var (
	macWanNeigh  = topo.MACWanNeigh
	macWan1Neigh = topo.MACWan1Neigh
	macWan0      = topo.MACWan0
	macWan1      = topo.MACWan1
	macLan0      = topo.MACLan0
	macHostA     = topo.MACHostA
)

// harness is a loaded dataplane in a topo.PacketNS namespace, whose real
// routes and neighbours make bpf_fib_lookup answer as on a gateway.
type harness struct {
	t     testing.TB
	ns    *topo.PacketNS
	dp    *loader.Dataplane
	idx   map[string]uint32
	alloc rules.Allocs
	// pin, when not 0, is 1 + the CPU every run is made on: per-CPU
	// state (exact-match copies, shared next hops) then carries from one
	// run to the next.
	pin int
}

func newHarness(t testing.TB, cfgYAML string) *harness {
	t.Helper()
	return newHarnessOf(t, cfgYAML, nil)
}

// newHarnessOf is newHarness with spec's program: a build of the
// dataplane other than the embedded one (nil: the embedded one).
func newHarnessOf(t testing.TB, cfgYAML string, spec *ebpf.CollectionSpec) *harness {
	t.Helper()
	testutil.RequireRoot(t)
	ns, err := topo.NewPacketNS(testutil.UniqueName("eppkt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	h := &harness{t: t, ns: ns, idx: ns.Ifindex}
	cfg, err := yamlcfg.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	l := bpf.Limits{Flows: cfg.Limits.Flows, Rules: cfg.Limits.Rules, MaglevSize: cfg.Limits.MaglevTable, Conns: cfg.Limits.Connections}
	var dp *loader.Dataplane
	if spec == nil {
		dp, err = loader.Open(l, "")
	} else {
		dp, err = loader.OpenSpec(spec, l)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	if _, err := dp.LoadProgram(); err != nil {
		t.Fatal(err)
	}
	h.dp = dp
	h.alloc = rules.NewAllocs(cfg.Limits.Rules, nil, nil)
	h.apply(cfg)
	// Flows share next hops by destination, as under an agent in a
	// namespace routed by destination alone.
	if err := ns.Do(func() error {
		ok, why, err := dp.ScanRouting()
		if err == nil && !ok {
			t.Fatalf("the harness's namespace routes by more than the destination: %s", why)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return h
}

// apply compiles and commits cfg, as the agent does.
func (h *harness) apply(cfg *config.Config) {
	h.t.Helper()
	gen, alloc, err := rules.Compile(cfg, h.ns.Resolve, h.alloc, h.dp.Limits)
	if err != nil {
		h.t.Fatalf("compile: %v", err)
	}
	// In the namespace, as an agent commits: devmaps (a redundant
	// group's) name its interfaces.
	if err := h.ns.Do(func() error { _, err := h.dp.Commit(gen); return err }); err != nil {
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
	return h.runOn(h.pin, frame, inIf, repeat)
}

// runOn is runErr on CPU pin - 1 (0: wherever the thread is).
func (h *harness) runOn(pin int, frame []byte, inIf string, repeat int) (uint32, []byte, error) {
	out := make([]byte, len(frame)+256)
	var ret uint32
	err := h.ns.Do(func() error {
		if pin != 0 {
			var set unix.CPUSet
			set.Set(pin - 1)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				return fmt.Errorf("pin to CPU %d: %w", pin-1, err)
			}
		}
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

func (h *harness) snapshot() *dataplane.Snapshot {
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
