// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// What the agent writes outside a generation, under the writer's lock
// where commits write it too: the global state's fields (the next hops'
// epoch and sharing, the flow table's clock) and the interfaces.

// updateState changes the live global state with change, under the
// writer's lock (commits write it too): one field's change leaves the
// others as they are.
func (w *Writer) updateState(what string, change func(*bpf.State)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.o.State()
	if err != nil {
		return err
	}
	change(&st)
	if err := w.o.EdgeGlobal.Put(uint32(0), st); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// BumpFIBEpoch makes every flow look its next hop up again: the agent
// calls it when routes, neighbours, addresses or links change.
func (w *Writer) BumpFIBEpoch() error {
	return w.updateState("bump fib epoch", func(st *bpf.State) {
		st.FibEpoch++
		if st.FibEpoch == 0 {
			st.FibEpoch = 1
		}
	})
}

// SetFIBByDst tells XDP whether the kernel routes by destination alone
// (RoutingByDestination), so flows to one destination may share its next
// hop, and marks every cached next hop stale with it. The flag is set
// only while still() holds, checked under the writer's lock (nil: always):
// a watcher that saw routing change since its scan began passes a check
// that fails, so a scan older than the change never turns sharing back
// on. It returns whether the flag was written.
func (w *Writer) SetFIBByDst(on bool, still func() bool) (bool, error) {
	wrote := false
	err := w.updateState("set fib by destination", func(st *bpf.State) {
		if on && still != nil && !still() {
			return
		}
		wrote = true
		if on {
			st.FibFlags |= bpf.FIBByDst
		} else {
			st.FibFlags &^= bpf.FIBByDst
		}
		st.FibEpoch++
		if st.FibEpoch == 0 {
			st.FibEpoch = 1
		}
	})
	return wrote, err
}

// SetGTPU makes addrs the user plane's GTP-U addresses on N3 (at most
// one IPv4 and one IPv6 address; a family not given, or the zero Addr:
// none): XDP answers GTP-U there before any rule (bpf/lib/gtpu.h).
func (w *Writer) SetGTPU(addrs ...netip.Addr) error {
	var v4 uint32
	var v6 [16]byte
	var seen4, seen6 bool
	for _, a := range addrs {
		switch {
		case !a.IsValid():
		case a.Is4() && !seen4:
			b := a.As4()
			v4, seen4 = binary.NativeEndian.Uint32(b[:]), true // network order in memory, as XDP reads it
		case a.Is6() && !a.Is4In6() && !a.IsUnspecified() && !seen6:
			v6, seen6 = a.As16(), true
		default:
			return fmt.Errorf("GTP-U address %s: want one IPv4 and at most one IPv6 address", a)
		}
	}
	return w.updateState("set the GTP-U address", func(st *bpf.State) { st.Gtpu4, st.Gtpu6 = v4, v6 })
}

// Tick advances the clock the flow table marks its entries' last use
// by (edge_state.tick, which packets read with the generation); the
// agent calls it once a second.
func (w *Writer) Tick() error {
	return w.updateState("advance the flow table's clock", func(st *bpf.State) { st.Tick++ })
}

// SetIfAddrs makes addrs (by ifindex) the interface addresses XDP answers
// ICMP errors from.
func (w *Writer) SetIfAddrs(addrs map[uint32]bpf.IfAddr) error {
	for i, a := range addrs {
		if err := w.o.EdgeIfaddrs.Put(i, a); err != nil {
			return fmt.Errorf("set addresses of interface %d: %w", i, err)
		}
	}
	var k uint32
	var v bpf.IfAddr
	var stale []uint32
	it := w.o.EdgeIfaddrs.Iterate()
	for it.Next(&k, &v) {
		if _, ok := addrs[k]; !ok {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		_ = w.o.EdgeIfaddrs.Delete(k)
	}
	return it.Err()
}

// SetTx makes ifindexes the set of redirect targets.
func (w *Writer) SetTx(ifindexes []uint32) error {
	want := map[uint32]bool{}
	for _, i := range ifindexes {
		want[i] = true
		if err := w.o.EdgeTx.Put(i, i); err != nil {
			return fmt.Errorf("add tx interface %d: %w", i, err)
		}
	}
	var k, v uint32
	var stale []uint32
	it := w.o.EdgeTx.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		if err := w.o.EdgeTx.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove tx interface %d: %w", k, err)
		}
	}
	return it.Err()
}
