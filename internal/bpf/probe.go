// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
)

// PathProbe is what the answers to a path's probes showed (struct
// edge_probe_rec, in edge_path_probe): written by XDP as each answer comes in.
type PathProbe = edgeEdgeProbeRec

// Answered tells whether probe seq was answered, as far as the record's
// window of 64 sequence numbers below its highest answered one reaches
// (older ones: false).
func (r *PathProbe) Answered(seq uint32) bool {
	if r.Replies == 0 {
		return false
	}
	d := int32(r.HiSeq - seq)
	return d >= 0 && d < 64 && r.Seen>>uint(d)&1 == 1
}

// ReadPathProbe reads path stats's probe record (its stable index),
// consistently: under the record's lock.
func (dp *Dataplane) ReadPathProbe(stats uint32) (PathProbe, error) {
	var r PathProbe
	if err := dp.EdgePathProbe.LookupWithFlags(stats, &r, ebpf.LookupLock); err != nil {
		return r, fmt.Errorf("read probe record of path %d: %w", stats, err)
	}
	return r, nil
}

// ClearPathProbe empties path stats's probe record: a path that is new
// to the monitor starts from no answers.
func (dp *Dataplane) ClearPathProbe(stats uint32) error {
	if err := dp.EdgePathProbe.Update(stats, PathProbe{}, ebpf.UpdateLock); err != nil {
		return fmt.Errorf("clear probe record of path %d: %w", stats, err)
	}
	return nil
}

// Path probe wire format (struct edge_probe), mirrored from
// bpf/edge_consts.h.
const (
	ProbeProto   = 0x88b5
	ProbeMagic   = 0x45505242
	ProbeRequest = 1
	ProbeReply   = 2
	ProbeLen     = 24
)

// ProbeBody returns a probe request's body (struct edge_probe) for path
// stats with sequence number seq, sent at sentNS (CLOCK_MONOTONIC).
func ProbeBody(stats uint16, seq uint32, sentNS uint64) []byte {
	b := make([]byte, ProbeLen)
	binary.BigEndian.PutUint32(b[0:], ProbeMagic)
	b[4] = ProbeRequest
	binary.BigEndian.PutUint16(b[6:], stats)
	binary.BigEndian.PutUint32(b[8:], seq)
	binary.NativeEndian.PutUint64(b[16:], sentNS)
	return b
}

// PathTx returns what path stats (its stable index) has sent:
// encapsulated packets and their bytes, summed over CPUs.
func (dp *Dataplane) PathTx(stats uint32) (Counter, error) {
	return sumCtr(dp.EdgePathStats, 2*(stats%MaxPaths))
}

// PathTCPRTT is a path's passive RTT record (struct edge_tcp_rtt): what
// the TCP timestamps of the flows it carries showed.
type PathTCPRTT = edgeEdgeTcpRtt

// ReadPathTCPRTT reads path stats's passive RTT record (its stable
// index), under the record's lock.
func (dp *Dataplane) ReadPathTCPRTT(stats uint32) (PathTCPRTT, error) {
	var r PathTCPRTT
	if err := dp.EdgePathTcpRtt.LookupWithFlags(stats, &r, ebpf.LookupLock); err != nil {
		return r, fmt.Errorf("read passive RTT record of path %d: %w", stats, err)
	}
	return r, nil
}

// ClearPathTCPRTT empties path stats's passive RTT record: a path new to
// the monitor starts from no samples.
func (dp *Dataplane) ClearPathTCPRTT(stats uint32) error {
	if err := dp.EdgePathTcpRtt.Update(stats, PathTCPRTT{}, ebpf.UpdateLock); err != nil {
		return fmt.Errorf("clear passive RTT record of path %d: %w", stats, err)
	}
	return nil
}
