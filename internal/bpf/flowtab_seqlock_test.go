// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// TestFlowTableReadWhileWritten: packets of an established connection
// to a service on one CPU, while packets of new connections computed to
// land in its bucket (from the table's secret, which no sender has) are
// recorded there on the other CPU, each insert making the bucket's
// version odd, then even and higher. A read that finds the bucket being
// written must read it again, not take the connection for a miss: a miss
// balances the packet again (edge_lb_new counts it) and, after a drain or
// a removal, sends it to a backend that does not know the connection.
// Every packet must reach the connection's backend, and a packet decided
// again must be one the dataplane counted as finding the bucket held
// through every read (flow_locked: a writer interrupted while it holds
// the bucket). IPv6, so that no exact-match copy
// stands between the packets and the table.
func TestFlowTableReadWhileWritten(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Fatalf("needs two CPUs, this machine has %d", runtime.NumCPU())
	}
	h := newHarness(t, fmt.Sprintf(lbConfig, far11, "{far: 11}, {far: 12}"))
	syn := lbPkt{src: "fd03::7", dst: "fd0f::10", sport: 41000, dport: 443, smac: macWanNeigh, dmac: macWan0, flags: "S"}
	if v, _ := h.send(syn, "wan0"); v != bpf.XDPRedirect {
		t.Fatalf("SYN: verdict %s", verdictName(v))
	}
	ack := syn
	ack.flags = "A"
	want := ack.out("wan0", "fd03::7", "fd02::2", 41000, 8443).frame(t)
	if v, out := h.send(ack, "wan0"); v != bpf.XDPRedirect || !bytes.Equal(out, want) {
		t.Fatalf("ACK: verdict %s, frame %x", verdictName(v), out)
	}

	ft, err := h.dp.FlowTable()
	if err != nil {
		t.Fatal(err)
	}
	defer ft.Unmap()
	var key bpf.FlowKey
	var bucket uint32
	found := false
	ft.Each(func(w *bpf.FTWay, _ bool) bool {
		if w.K.Family == 6 && w.K.Sport == uint16(be16(41000)) {
			key = w.K
			bucket, _, found = ft.Find(&w.K)
		}
		return !found
	})
	if !found {
		t.Fatal("the connection is not in the flow table")
	}
	// Clients and source ports whose connections to another service
	// (UDP, fd0f::20 port 9053: its own counters) land in the
	// connection's bucket: each first packet is a connection recorded at
	// once, in a way of one-packet connections the next one takes.
	var writers [][]byte
	other := key
	copy(other.Dst[:], net.ParseIP("fd0f::20").To16())
	other.Dport, other.Proto = uint16(be16(9053)), 17
	for host := 0x100; host < 0x140 && len(writers) < 32; host++ {
		for p := 1024; p < 65536 && len(writers) < 32; p++ {
			k := other
			k.Src[14], k.Src[15] = byte(host>>8), byte(host)
			k.Sport = uint16(be16(uint16(p)))
			if uint32(bpf.FTHash(h.dp.Secret, &k))&(ft.Buckets-1) == bucket {
				w := lbPkt{src: fmt.Sprintf("fd03::%x", host), dst: "fd0f::20", sport: uint16(p), dport: 9053, udp: true, smac: macWanNeigh, dmac: macWan0}
				writers = append(writers, w.frame(t))
			}
		}
	}
	if len(writers) < 16 {
		t.Fatalf("found %d ports landing in the connection's bucket", len(writers))
	}

	var stop atomic.Bool
	var writes atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if err := runLive(h, 1, writers[i%len(writers)], "wan0", 1); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			writes.Add(1)
		}
	}()

	newBefore, _ := lbCounters(t, h.dp)
	before := snap(t, h).Reasons
	const packets, repeat = 200000, 1000
	frame := ack.frame(t)
	for range packets / repeat {
		if err := runLive(h, 2, frame, "wan0", repeat); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	newAfter, _ := lbCounters(t, h.dp)
	after := snap(t, h).Reasons
	// The connection's service's backends' new connections alone: the
	// writers' are another service's.
	members, err := bpf.ReadMembers(h.dp.EdgeLbMembers)
	if err != nil {
		t.Fatal(err)
	}
	var again uint64
	for i, n := range newAfter {
		if members[i].Service == 2 {
			again += n - newBefore[i]
		}
	}
	locked := after[bpf.ReasonFlowLocked].Packets - before[bpf.ReasonFlowLocked].Packets
	t.Logf("%d packets while %d new connections were recorded in their bucket: %d balanced again, %d found it held through every read",
		packets, writes.Load(), again, locked)
	if writes.Load() < 10000 {
		t.Fatalf("%d new connections written beside %d packets: not a race", writes.Load(), packets)
	}
	// A packet whose every read of its bucket found it held is counted
	// once per lookup that gave up (the flow's, then the connection's),
	// and balanced again only if both did.
	if again > locked {
		t.Errorf("%d packets of the established connection balanced again, %d lookups counted as finding the bucket held", again, locked)
	}
}

// runLive runs frame through the program on CPU pin - 1 as received on
// inIf, repeat times, as a driver would (BPF_F_TEST_XDP_LIVE_FRAMES: the
// frame as sent each time, its verdict carried out, the program not
// preempted while it runs).
func runLive(h *harness, pin int, frame []byte, inIf string, repeat int) error {
	return h.ns.Do(func() error {
		var set unix.CPUSet
		set.Set(pin - 1)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pin to CPU %d: %w", pin-1, err)
		}
		_, err := h.dp.Prog.Run(&ebpf.RunOptions{Data: frame, Repeat: uint32(repeat), Flags: 1 << 1, // BPF_F_TEST_XDP_LIVE_FRAMES
			Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: h.idx[inIf]}})
		return err
	})
}
