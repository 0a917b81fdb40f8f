// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// The GTP-U peers of multi-access sessions' accesses (edge_gtpu_peers,
// edge_gtpu_peer_ix): each at a place the agent gives it, with the
// liveness and RTT the agent tells from its Echo Requests, which XDP
// times (gtpu.h's gtpu_echo_resp), and that multi-access rules steer by
// (ma_pick). The agent writes a peer's whole entry; XDP writes only the
// answer's time, and only for the sequence number the agent last asked
// with, so the agent reads a round's answer before it asks again.

// SetGTPUPeer makes place i peer addr's (IPv4), its state cleared (up,
// no RTT yet), so XDP times the answers from addr.
func (w *Writer) SetGTPUPeer(i uint32, addr netip.Addr) error {
	if i >= bpf.GTPUPeers || !addr.Is4() {
		return fmt.Errorf("GTP-U peer %s at %d: want an IPv4 address at a place below %d", addr, i, bpf.GTPUPeers)
	}
	if err := w.o.EdgeGtpuPeers.Put(i, bpf.GTPUPeer{}); err != nil {
		return fmt.Errorf("write GTP-U peer %s: %w", addr, err)
	}
	if err := w.o.EdgeGtpuPeerIx.Put(bpf.Addr4(addr), i); err != nil {
		return fmt.Errorf("index GTP-U peer %s: %w", addr, err)
	}
	return nil
}

// ClearGTPUPeers forgets every peer (a previous run's): no answer is
// timed until SetGTPUPeer places one again.
func (w *Writer) ClearGTPUPeers() error {
	var k uint32
	var keys []uint32
	it := w.o.EdgeGtpuPeerIx.Iterate()
	var v uint32
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list GTP-U peers: %w", err)
	}
	for _, k := range keys {
		if err := w.o.EdgeGtpuPeerIx.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("unindex GTP-U peer: %w", err)
		}
	}
	for i := range uint32(bpf.GTPUPeers) {
		if err := w.o.EdgeGtpuPeers.Put(i, bpf.GTPUPeer{}); err != nil {
			return fmt.Errorf("clear GTP-U peer %d: %w", i, err)
		}
	}
	return nil
}

// GTPUPeer reads the entry at place i.
func (w *Writer) GTPUPeer(i uint32) (bpf.GTPUPeer, error) {
	var v bpf.GTPUPeer
	if err := w.o.EdgeGtpuPeers.Lookup(i, &v); err != nil {
		return v, fmt.Errorf("read GTP-U peer %d: %w", i, err)
	}
	return v, nil
}

// PutGTPUPeer writes the entry at place i whole: the agent's state of
// the peer and the sequence number of the Echo Request it sends next.
func (w *Writer) PutGTPUPeer(i uint32, v bpf.GTPUPeer) error {
	if err := w.o.EdgeGtpuPeers.Put(i, v); err != nil {
		return fmt.Errorf("write GTP-U peer %d: %w", i, err)
	}
	return nil
}
