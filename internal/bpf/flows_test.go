// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// TestFlowCounters sends known numbers of packets on IPv4 and IPv6 flows,
// from both CPUs and across a rules commit, and expects Flows to report
// each flow's exact packets and bytes (shared totals plus what the per-CPU
// exact-match copies counted), its PDR, and the flows ordered by bytes.
func TestFlowCounters(t *testing.T) {
	const cfgFmt = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
pdrs:
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.3.0.0/16}, far: 1}
  - {id: 21, precedence: 100, match: {in: lan0, dst: "fd03::/64"}, far: %d}
limits: {flows: 1024, rules: 64}
`
	h := newHarness(t, fmt.Sprintf(cfgFmt, 1))
	type flow struct {
		name  string
		frame []byte
		n     int
		pdr   uint32
		src   string
		sport uint16
	}
	flows := []flow{
		{"udp4 a", serialize(t, v4(dst4, udpU(40001, 53))()), 7, 20, "10.1.0.2", 40001},
		{"udp4 b", serialize(t, v4(dst4, udpU(40002, 53))()), 30, 20, "10.1.0.2", 40002},
		{"tcp6", serialize(t, v6(dst6, tcpU(40003, 443))()), 12, 21, "fd01::2", 40003},
	}
	// send runs f's frame n times on cpu (-1: wherever), one run each.
	send := func(f flow, n, cpu int) {
		err := h.ns.Do(func() error {
			if cpu >= 0 {
				var set unix.CPUSet
				set.Set(cpu)
				if err := unix.SchedSetaffinity(0, &set); err != nil {
					return err
				}
			}
			for range n {
				opts := &ebpf.RunOptions{Data: f.frame, DataOut: make([]byte, len(f.frame)+256),
					Context: xdpMD{DataEnd: uint32(len(f.frame)), IngressIfindex: h.idx["lan0"]}}
				if _, err := h.dp.Prog.Run(opts); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Half of each flow's packets on every CPU: the per-CPU exact-match
	// copies each hold a share not yet in the shared total.
	for cpu := range runtime.NumCPU() {
		for _, f := range flows {
			send(f, f.n/2, cpu)
		}
	}
	// A commit (pdr 21 now drops) makes every flow reclassify: counts
	// carry over.
	cfg, err := yamlcfg.Parse([]byte(fmt.Sprintf(cfgFmt, 2)))
	if err != nil {
		t.Fatal(err)
	}
	h.apply(cfg)
	want := map[uint16]uint64{}
	for _, f := range flows {
		rest := f.n - (f.n/2)*runtime.NumCPU()
		if rest < 1 {
			rest = 1
		}
		send(f, rest, -1)
		want[f.sport] = uint64((f.n/2)*runtime.NumCPU() + rest)
	}
	got, err := h.dp.Flows(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(flows) {
		t.Fatalf("%d flows, want %d: %+v", len(got), len(flows), got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Bytes > got[i-1].Bytes {
			t.Errorf("flows not ordered by bytes: %d before %d", got[i-1].Bytes, got[i].Bytes)
		}
	}
	for _, f := range flows {
		var fs *dataplane.FlowStat
		for i := range got {
			if got[i].Sport == f.sport {
				fs = &got[i]
			}
		}
		if fs == nil {
			t.Errorf("%s: not listed", f.name)
			continue
		}
		if fs.Packets != want[f.sport] || fs.Bytes != want[f.sport]*uint64(len(f.frame)) {
			t.Errorf("%s: %d packets %d bytes, want %d and %d", f.name, fs.Packets, fs.Bytes, want[f.sport], want[f.sport]*uint64(len(f.frame)))
		}
		if fs.PDR != f.pdr || !fs.Live || fs.Src != netip.MustParseAddr(f.src) {
			t.Errorf("%s: %+v, want pdr %d, live, src %s", f.name, *fs, f.pdr, f.src)
		}
	}
	if top, _ := h.dp.Flows(1); len(top) != 1 || top[0].Sport != 40002 {
		t.Errorf("top 1: %+v, want the 30-packet flow", top)
	}
	// Every top n is the head of the whole list: the selection counts
	// the exact-match copies before it ranks.
	for n := 1; n <= len(got); n++ {
		top, err := h.dp.Flows(n)
		if err != nil || !slices.Equal(top, got[:n]) {
			t.Errorf("top %d: %+v (%v), want %+v", n, top, err, got[:n])
		}
	}
}
