// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"encoding/binary"
	"fmt"

	"github.com/edgeplane/edgeplane/internal/bpf"
)

const methodFlowHash = "repeat on one buffer: the flow table's placement of a 5-tuple read from the frame (lib/siphash.h's sip_tuple, " +
	"SipHash-1-3 under the dataplane's secret), written back into it; checked against Go's FTHash first"

// measureFlowHash adds what the keyed hash that places flows costs a new
// flow alone (the flow table's bucket, FlowOpt's record), IPv4 and IPv6:
// the price of a placement no sender can aim, beside the new-flow
// figures it is part of.
func (b *bencher) measureFlowHash(r *Result) error {
	for _, c := range []struct {
		name   string
		family uint8
	}{{"flow_hash_sip13_ip4", 4}, {"flow_hash_sip13_ip6", 6}} {
		k := bpf.FlowKey{Sport: 0x8813, Dport: 0x3500, Proto: 17, Family: c.family}
		for i := range k.Src {
			k.Src[i], k.Dst[i] = byte(i+1), byte(0x80+i)
		}
		if c.family == 4 {
			clear(k.Src[4:])
			clear(k.Dst[4:])
		}
		frame := make([]byte, 48)
		copy(frame, k.Src[:])
		copy(frame[16:], k.Dst[:])
		binary.LittleEndian.PutUint32(frame[32:], uint32(k.Sport)|uint32(k.Dport)<<16)
		frame[36], frame[37] = k.Proto, k.Family
		if err := b.checkFlowHash(frame, bpf.FTHash(b.dp.Secret, &k)); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		raw, err := b.median(b.progs.BenchFlowHash, frame, bpf.XDPPass)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		r.add(Figure{Name: c.name, RawNs: raw, NsPerPacket: raw, Method: methodFlowHash, Verdict: "pass"})
	}
	return nil
}

// checkFlowHash runs bench_flow_hash once on frame and wants the hash
// Go places the same key by: the figure times what the dataplane runs.
func (b *bencher) checkFlowHash(frame []byte, want uint64) error {
	ret, out, err := b.progs.BenchFlowHash.Test(append([]byte(nil), frame...))
	if err != nil {
		return err
	}
	if ret != bpf.XDPPass || len(out) < 48 {
		return fmt.Errorf("verdict %d, %d bytes", ret, len(out))
	}
	if got := binary.LittleEndian.Uint64(out[40:]); got != want {
		return fmt.Errorf("BPF hash %#x, Go's FTHash %#x", got, want)
	}
	return nil
}
