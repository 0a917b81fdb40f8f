// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/bpf/upgrade"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// TestUpgradeKeepsConnections takes a pinned dataplane over into one whose
// map sizes differ (more rules, which moves every service's reply
// rewrite, and a larger connection table), as a new build does, and
// sends packets through both programs: connections the old program
// opened before the first copy, between it and the switch and after the
// switch keep their backend under the new program, though the new
// generation's weights would send them elsewhere, and their replies
// leave from the VIP; the connection counters continue.
func TestUpgradeKeepsConnections(t *testing.T) {
	testutil.RequireRoot(t)
	pin := filepath.Join("/sys/fs/bpf", testutil.UniqueName("epup"))
	t.Cleanup(func() { os.RemoveAll(pin) })
	ns, err := topo.NewPacketNS(testutil.UniqueName("eppkt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	log := slog.New(slog.NewTextHandler(t.Output(), nil))

	limA := bpf.Limits{Flows: 8192, Rules: 64, MaglevSize: 4099, Conns: 8192}
	dpA, err := loader.Open(limA, pin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dpA.Close() })
	if _, err := dpA.LoadProgram(); err != nil {
		t.Fatal(err)
	}
	hA := &harness{t: t, ns: ns, dp: dpA, idx: ns.Ifindex, alloc: rules.NewAllocs(64, nil, nil)}
	hA.apply(lbCfg(t, far11, "{far: 11}, {far: 12}"))

	const before, window, late = 100, 20, 10
	owner := map[int]string{}
	open := func(h *harness, from, to int) {
		t.Helper()
		for n := from; n < to; n++ {
			v, out := h.send(client(n, "203.0.113.10", 80, "S"), "wan0")
			if v != bpf.XDPRedirect {
				t.Fatalf("connection %d SYN: verdict %s", n, verdictName(v))
			}
			owner[n] = backendOf(t, out)
		}
	}
	open(hA, 0, before)
	// PDR 1 counts what comes in on lan0; its counters are copied (their
	// map grew) and what the old program counts after is added.
	pdrPackets := 0
	count := func(h *harness, n int) {
		t.Helper()
		for range n {
			q := lbPkt{src: topo.AddrHostA, dst: topo.AddrWanNeigh, sport: 7000, dport: uint16(7000 + pdrPackets), udp: true, smac: macHostA, dmac: macLan0}
			if v, _ := h.send(q, "lan0"); v != bpf.XDPRedirect {
				t.Fatalf("lan0 packet: verdict %s", verdictName(v))
			}
			pdrPackets++
		}
	}
	count(hA, 5)

	// A pin an earlier build left (its reverse-NAT table, which the flow
	// table replaced): the upgrade removes it once it is done.
	legacy, err := ebpf.NewMap(&ebpf.MapSpec{Name: "edge_rnat", Type: ebpf.LRUHash, KeySize: 40, ValueSize: 24, MaxEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := legacy.Pin(filepath.Join(pin, "edge_rnat")); err != nil {
		t.Fatal(err)
	}
	legacy.Close()

	limB := bpf.Limits{Flows: 16384, Rules: 96, MaglevSize: 4099, Conns: 16384}
	if _, err := loader.Open(limB, pin); !errors.Is(err, bpf.ErrIncompatible) {
		t.Fatalf("open with other sizes: %v, want ErrIncompatible", err)
	}
	u, err := loader.PrepareUpgrade(limB, pin, log)
	if err != nil {
		t.Fatal(err)
	}
	dpB := u.Dataplane()
	t.Cleanup(func() { dpB.Close() })
	if _, err := dpB.LoadProgram(); err != nil {
		t.Fatal(err)
	}
	// What restarts keep came over: every FAR at its place (the replies'
	// moved with the rules limit), every service with its tag.
	farsA, svcA, err := dpA.ActiveFARs()
	if err != nil {
		t.Fatal(err)
	}
	farsB, svcB, err := dpB.ActiveFARs()
	if err != nil {
		t.Fatal(err)
	}
	for idx, f := range farsA {
		at := idx
		if idx >= limA.Rules {
			at = idx - limA.Rules + limB.Rules
		}
		if farsB[at] != f {
			t.Errorf("FAR %d (index %d) at index %d after the copy: %+v", f.Id, idx, at, farsB[at])
		}
	}
	for k, s := range svcA {
		if svcB[k].Tag != s.Tag || svcB[k].Id != s.Id {
			t.Errorf("service %d: tag %d after the copy, was %d", s.Id, svcB[k].Tag, s.Tag)
		}
	}

	// The old program keeps forwarding and opening connections.
	open(hA, before, before+window)
	count(hA, 3)
	// The new generation drains backend 12: a connection picked again
	// would go to 11.
	// Each backend keeps its counters, from what the pins remember (as
	// the agent seeds a restart).
	alloc := hA.alloc
	alloc.Members = map[uint32]map[uint32]uint32{}
	for idx, ref := range dpB.ActiveMembers() {
		if ref.FAR != 0 {
			if alloc.Members[ref.Service] == nil {
				alloc.Members[ref.Service] = map[uint32]uint32{}
			}
			alloc.Members[ref.Service][ref.FAR] = idx % bpf.MaxMembers
		}
	}
	hB := &harness{t: t, ns: ns, dp: dpB, idx: ns.Ifindex, alloc: alloc}
	hB.apply(lbCfg(t, far11, "{far: 11}, {far: 12, weight: 0}"))
	if err := u.CopyAgain(); err != nil {
		t.Fatal(err)
	}
	// The links switch here; packets the old program handled in the
	// last instant open connections only its maps know.
	open(hA, before+window, before+window+late)
	count(hA, 2)
	if err := u.Finish(); err != nil {
		t.Fatal(err)
	}

	total := before + window + late
	moved := 0
	for n := range total {
		ack := client(n, "203.0.113.10", 80, "A")
		v, out := hB.send(ack, "wan0")
		if v != bpf.XDPRedirect {
			t.Fatalf("connection %d ACK after the upgrade: verdict %s", n, verdictName(v))
		}
		if got := backendOf(t, out); got != owner[n] {
			t.Errorf("connection %d went to %s after the upgrade, was on %s", n, got, owner[n])
		}
		if owner[n] == "10.6.0.12:8080" {
			moved++
		}
		host, _, _ := net.SplitHostPort(owner[n])
		reply := lbPkt{src: host, dst: ack.src, sport: 8080, dport: ack.sport, smac: macWan1Neigh, dmac: macWan1, flags: "A"}
		v, got := hB.send(reply, "wan1")
		want := reply.out("wan0", "203.0.113.10", ack.src, 80, ack.sport).frame(t)
		if v != bpf.XDPRedirect || string(got) != string(want) {
			t.Fatalf("connection %d reply after the upgrade: verdict %s\n got %x\nwant %x", n, verdictName(v), got, want)
		}
	}
	if moved == 0 {
		t.Fatal("no connection on the drained backend: the test proves nothing")
	}
	t.Logf("%d connections (%d on the drained backend) kept their backend and their replies", total, moved)
	newFlows, _ := lbCounters(t, dpB)
	var opened uint64
	for _, n := range newFlows {
		opened += n
	}
	if opened != uint64(total) {
		t.Errorf("%d new connections counted after the upgrade, want %d", opened, total)
	}
	count(hB, 1)
	if got := hB.snapshot().PDRs[1].Packets; got != uint64(pdrPackets) {
		t.Errorf("PDR 1 counted %d packets across the upgrade, want %d", got, pdrPackets)
	}

	// The new maps replaced the old pins; the next start adopts them.
	if ents, _ := os.ReadDir(filepath.Join(pin, upgrade.Dir)); len(ents) != 0 {
		t.Errorf("%d pins left in %s", len(ents), upgrade.Dir)
	}
	if _, err := os.Stat(filepath.Join(pin, "edge_rnat")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the earlier build's edge_rnat pin is still there: %v", err)
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(pin, "edge_ft"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.MaxEntries() != limB.FTEntries() {
		t.Errorf("pinned edge_ft holds %d entries, want the new build's %d", m.MaxEntries(), limB.FTEntries())
	}
	m.Close()
	again, err := loader.Open(limB, pin)
	if err != nil {
		t.Fatalf("open after the upgrade: %v", err)
	}
	again.Close()
}
