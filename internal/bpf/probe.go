// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// PathProbe is what a path's probes and their answers showed (struct
// edge_probe_rec, in edge_path_probe): written by XDP as each probe
// leaves and each answer comes in.
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
func (o *Object) ReadPathProbe(stats uint32) (PathProbe, error) {
	var r PathProbe
	if err := o.EdgePathProbe.LookupWithFlags(stats, &r, ebpf.LookupLock); err != nil {
		return r, fmt.Errorf("read probe record of path %d: %w", stats, err)
	}
	return r, nil
}

// ClearPathProbe empties path stats's probe record: a path that is new
// to the monitor starts from no answers.
func (o *Object) ClearPathProbe(stats uint32) error {
	if err := o.EdgePathProbe.Update(stats, PathProbe{}, ebpf.UpdateLock); err != nil {
		return fmt.Errorf("clear probe record of path %d: %w", stats, err)
	}
	return nil
}

// Path probe wire format (struct edge_probe), mirrored from
// bpf/edge_consts.h and bpf/edge_types.h.
const (
	ProbeProto   = 0x88b5
	ProbeMagic   = 0x45505232 // "EPR2": the format with a MAC
	ProbeMagicV1 = 0x45505242 // "EPRB": the first, without one (refused)
	ProbeRequest = 1
	ProbeReply   = 2
	ProbeLen     = 32
	// ProbeRing is EDGE_PROBE_RING: the probes in flight a path's
	// record keeps the send times of; an answer to an older one is
	// refused.
	ProbeRing = 64
	// ProbeSecretMAC is EDGE_PA_MAC: the path's probes carry a MAC.
	ProbeSecretMAC = 1
)

// ProbeSecret is a path's probe secret as the dataplane holds it (struct
// edge_probe_secret, in edge_path_auth).
type ProbeSecret = edgeEdgeProbeSecret

// NewProbeSecret returns the dataplane's form of the 16-byte secret key:
// SipHash's key, as its reference reads the key's bytes.
func NewProbeSecret(key [16]byte) ProbeSecret {
	return ProbeSecret{K0: binary.LittleEndian.Uint64(key[:8]), K1: binary.LittleEndian.Uint64(key[8:]), Flags: ProbeSecretMAC}
}

// SipHash24 is SipHash-2-4 (Aumasson and Bernstein, 2012) of msg under
// the key (k0, k1): lib/probe.h's sip24_words, for any length.
func SipHash24(k0, k1 uint64, msg []byte) uint64 {
	n := len(msg) / 8
	words := make([]uint64, n)
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(msg[8*i:])
	}
	last := uint64(len(msg)) << 56
	for i, c := range msg[8*n:] {
		last |= uint64(c) << (8 * i)
	}
	return sipHash(2, 4, k0, k1, last, words...)
}

// ProbeMAC is the MAC of probe body b (struct edge_probe) under s:
// SipHash-2-4 of its first 24 bytes, as lib/probe.h's probe_mac.
func ProbeMAC(s ProbeSecret, b []byte) uint64 {
	return SipHash24(s.K0, s.K1, b[:24])
}

// Offsets in a probe body (struct edge_probe).
const (
	probeOffKind   = 4
	probeOffPath   = 6
	probeOffSeq    = 8
	probeOffOrigin = 12
	probeOffSent   = 16
	probeOffMAC    = 24
)

// ProbeBody returns the body (struct edge_probe) of a probe of kind for
// path index stats with sequence number seq, from origin (the asking
// end's outer address, as the path holds it: network order in memory),
// sent at sentNS, signed with s when it has a secret (ProbeSecretMAC).
func ProbeBody(kind uint8, stats uint16, seq, origin uint32, sentNS uint64, s ProbeSecret) []byte {
	b := make([]byte, ProbeLen)
	binary.BigEndian.PutUint32(b[0:], ProbeMagic)
	b[probeOffKind] = kind
	binary.BigEndian.PutUint16(b[probeOffPath:], stats)
	binary.BigEndian.PutUint32(b[probeOffSeq:], seq)
	binary.NativeEndian.PutUint32(b[probeOffOrigin:], origin)
	binary.NativeEndian.PutUint64(b[probeOffSent:], sentNS)
	if s.Flags&ProbeSecretMAC != 0 {
		binary.NativeEndian.PutUint64(b[probeOffMAC:], ProbeMAC(s, b))
	}
	return b
}

// ProbeFrame returns the frame SendProbe sends for probe seq of path p:
// Ethernet (addresses left to the dataplane), IPv4 from the path's local
// to its remote address with the path's TTL, GRE with the path's key,
// and a request body whose origin, send time and MAC the dataplane
// fills in.
func ProbeFrame(p Path, seq uint32) []byte {
	gre := 4
	if p.Flags&PathFlagKey != 0 {
		gre += 4
	}
	l3 := 20 + gre + ProbeLen
	b := make([]byte, 14+l3)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(l3))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF, as encap's
	ip[8] = p.Ttl
	if ip[8] == 0 {
		ip[8] = 64
	}
	ip[9] = 47 // GRE
	binary.NativeEndian.PutUint32(ip[12:], p.Local)
	binary.NativeEndian.PutUint32(ip[16:], p.Remote)
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	g := b[34:]
	binary.BigEndian.PutUint16(g[2:], ProbeProto)
	if p.Flags&PathFlagKey != 0 {
		g[0] = 0x20 // K
		binary.NativeEndian.PutUint32(g[4:], p.Key)
	}
	copy(b[34+gre:], ProbeBody(ProbeRequest, uint16(p.Stats), seq, 0, 0, ProbeSecret{}))
	return b
}

// ipChecksum is the IPv4 header checksum of h (its checksum field 0).
func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// SentAt returns when probe seq left, as the record kept it: 0 once
// answered, or when it did not leave (or is older than the ring).
func (r *PathProbe) SentAt(seq uint32) uint64 {
	if d := int32(r.SentSeq - seq); r.Sent == 0 || d < 0 || d >= ProbeRing {
		return 0
	}
	return r.SentNs[seq%ProbeRing]
}

// PathTx returns what path stats (its stable index) has sent:
// encapsulated packets and their bytes, summed over CPUs.
func (o *Object) PathTx(stats uint32) (dataplane.Counter, error) {
	return SumCtr(o.EdgePathStats, 2*(stats%MaxPaths))
}

// PathTCPRTT is a path's passive RTT record (struct edge_tcp_rtt): what
// the TCP timestamps of the flows it carries showed.
type PathTCPRTT = edgeEdgeTcpRtt

// ReadPathTCPRTT reads path stats's passive RTT record (its stable
// index), under the record's lock.
func (o *Object) ReadPathTCPRTT(stats uint32) (PathTCPRTT, error) {
	var r PathTCPRTT
	if err := o.EdgePathTcpRtt.LookupWithFlags(stats, &r, ebpf.LookupLock); err != nil {
		return r, fmt.Errorf("read passive RTT record of path %d: %w", stats, err)
	}
	return r, nil
}

// ClearPathTCPRTT empties path stats's passive RTT record: a path new to
// the monitor starts from no samples.
func (o *Object) ClearPathTCPRTT(stats uint32) error {
	if err := o.EdgePathTcpRtt.Update(stats, PathTCPRTT{}, ebpf.UpdateLock); err != nil {
		return fmt.Errorf("clear passive RTT record of path %d: %w", stats, err)
	}
	return nil
}
