// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// probeSecret is testbed.GREConfig's path 1 probe secret (its hex there).
var probeSecret = bpf.NewProbeSecret([16]byte{0x5e, 0xc7, 0xe7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})

const (
	methodSip24 = "repeat on one buffer: SipHash-2-4 of 24 bytes under a 16-byte key read from the frame, written back into it " +
		"(lib/probe.h's, one probe MAC: a probe's round trip makes four, one at the sender, two at the peer, one at the receiver)"
	methodProbe = "wrapper saves the frame's first 80 bytes (Ethernet, IPv4, GRE with key, the probe), runs the pipeline and writes them back, " +
		"so every run answers the same request; the wrapper alone, timed round by round beside it, subtracted, floor added"
)

// measureProbes adds the path probe figures: one probe MAC alone, and a
// peer's request answered at the driver hook (decap's path check, the
// MAC checked and made, XDP_TX) over a path with a secret and over one
// without (insecure), after measureGRE committed testbed.GREConfig.
func (b *bencher) measureProbes(r *Result) error {
	msg := make([]byte, 48)
	for i := range msg {
		msg[i] = byte(i)
	}
	raw, err := b.median(b.progs.BenchSip24, msg, bpf.XDPPass)
	if err != nil {
		return fmt.Errorf("probe MAC: %w", err)
	}
	r.add(Figure{Name: "probe_mac_sip24", RawNs: raw, NsPerPacket: raw, Method: methodSip24, Verdict: "pass"})

	for _, c := range []struct {
		name   string
		remote netip.Addr
		key    uint32
		secret bpf.ProbeSecret
	}{
		{"probe_reflect_signed", testbed.GRERemote, testbed.GREKey, probeSecret},
		{"probe_reflect_insecure", testbed.GRERemote2, testbed.GREKey2, bpf.ProbeSecret{}},
	} {
		req := probeFrame(c.remote, c.key, bpf.ProbeBody(bpf.ProbeRequest, 7, 42, be32(c.remote), 123456789, c.secret))
		want := probeFrame(c.remote, c.key, bpf.ProbeBody(bpf.ProbeReply, 7, 42, be32(c.remote), 123456789, c.secret))
		// What the dataplane answers: the reply, addresses swapped.
		if err := b.ns.Do(func() error {
			ret, out, err := b.dp.Prog.Test(append([]byte(nil), req...))
			if err != nil {
				return err
			}
			if ret != bpf.XDPTx || !bytes.Equal(out, swapped(want)) {
				return fmt.Errorf("verdict %d, output\n%x\nwant\n%x", ret, out, swapped(want))
			}
			return nil
		}); err != nil {
			return fmt.Errorf("%s, the dataplane program: %w", c.name, err)
		}
		raw, alone, diff, err := b.paired(b.progs.BenchProbe, req, bpf.XDPTx, b.progs.BenchWrapProbe, req)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		b.o.Log("%s: %.1f ns raw, wrapper %.1f", c.name, raw, alone)
		r.add(Figure{Name: c.name, RawNs: raw, NsPerPacket: r.FloorNs + diff, UndoNs: alone, Method: methodProbe, Verdict: "tx"})
	}
	return nil
}

// be32 is a's 4 bytes as they lie in memory, as the dataplane's Path
// holds addresses.
func be32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// probeFrame is a probe body in GRE with key from remote to testbed.GRELocal, as
// the peer sends it over wan0, with 6 bytes of padding.
func probeFrame(remote netip.Addr, key uint32, body []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: topo.MACWanNeigh, DstMAC: topo.MACWan0, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolGRE,
		SrcIP: remote.AsSlice(), DstIP: testbed.GRELocal.AsSlice()}
	gre := &layers.GRE{KeyPresent: true, Key: key, Protocol: bpf.ProbeProto}
	buf := gopacket.NewSerializeBuffer()
	_ = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, gre, gopacket.Payload(body))
	// Padded to the 80 bytes the wrapper saves, as Ethernet may pad.
	return append(buf.Bytes(), make([]byte, 6)...)
}

// swapped is frame with its Ethernet and IPv4 addresses swapped, as an
// answer goes back (the header checksum does not change).
func swapped(frame []byte) []byte {
	out := bytes.Clone(frame)
	copy(out[0:6], frame[6:12])
	copy(out[6:12], frame[0:6])
	copy(out[26:30], frame[30:34])
	copy(out[30:34], frame[26:30])
	return out
}
