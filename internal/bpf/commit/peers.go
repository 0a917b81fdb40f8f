// SPDX-License-Identifier: Apache-2.0

package commit

import (
	"fmt"
	"net/netip"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

// The GTP-U peers of multi-access sessions' accesses (edge_gtpu_peers):
// each at a place the agent gives it, with the liveness and RTT the
// agent tells from its Echo Requests, which XDP times (gtpu.h's
// gtpu_echo_resp), and that multi-access rules steer by (ma_pick). A
// request's sequence number names the place (GTPUSeq). The agent writes
// a peer's whole entry; XDP writes only the answer's time, and only for
// the sequence number the agent last asked with, so the agent reads a
// round's answer before it asks again.

// GTPUSeqRound mirrors EDGE_GTPU_SEQ_ROUND: the low bits of an Echo
// Request's sequence number that count rounds.
const GTPUSeqRound = 6

// GTPUSeq is the sequence number of round's Echo Request to the peer
// at place i.
func GTPUSeq(i uint32, round uint16) uint16 {
	return uint16(i)<<GTPUSeqRound | round&(1<<GTPUSeqRound-1)
}

// SetGTPUPeer makes place i peer addr's (IPv4), its state cleared (up,
// no RTT yet), so XDP times the answers from addr.
func (w *Writer) SetGTPUPeer(i uint32, addr netip.Addr) error {
	if i >= bpf.GTPUPeers || !addr.Is4() {
		return fmt.Errorf("GTP-U peer %s at %d: want an IPv4 address at a place below %d", addr, i, bpf.GTPUPeers)
	}
	if err := w.o.EdgeGtpuPeers.Put(i, bpf.GTPUPeer{Addr: bpf.Addr4(addr), EchoSeq: noSeq}); err != nil {
		return fmt.Errorf("write GTP-U peer %s: %w", addr, err)
	}
	return nil
}

// noSeq is an echo_seq no request has: nothing answered yet.
const noSeq = ^uint32(0)

// ClearGTPUPeers forgets every peer (a previous run's): no answer is
// timed until SetGTPUPeer places one again.
func (w *Writer) ClearGTPUPeers() error {
	keys := make([]uint32, bpf.GTPUPeers)
	vals := make([]bpf.GTPUPeer, bpf.GTPUPeers)
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := w.o.EdgeGtpuPeers.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("clear GTP-U peers: %w", err)
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

// AskGTPUPeer writes the entry at place i whole (v: as read, the agent's
// state of the peer in it) with want as the sequence number of the Echo
// Request it sends next, and nothing answered yet.
func (w *Writer) AskGTPUPeer(i uint32, v bpf.GTPUPeer, want uint16) error {
	v.WantSeq, v.EchoSeq = uint32(want), noSeq
	return w.PutGTPUPeer(i, v)
}

// PutGTPUPeer writes the entry at place i whole: the agent's state of
// the peer.
func (w *Writer) PutGTPUPeer(i uint32, v bpf.GTPUPeer) error {
	if err := w.o.EdgeGtpuPeers.Put(i, v); err != nil {
		return fmt.Errorf("write GTP-U peer %d: %w", i, err)
	}
	return nil
}
