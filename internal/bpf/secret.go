// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/cilium/ebpf"
)

// The flows' hashes (the flow table's buckets, FlowOpt's slots) are
// SipHash-1-3 under a secret (bpf/lib/siphash.h): a sender who does not
// hold it cannot choose tuples that land where another flow sits. The
// agent draws the secret from crypto/rand when it creates the pinned
// maps and keeps it in one of them (edge_secret), so a restarted or
// upgraded agent loads its program with the same secret and finds every
// flow where the program before it placed it.

// HashSecret is edge_secret's value: the key and which hash it keys.
type HashSecret = edgeEdgeHashSecret

// HashSipHash13 mirrors EDGE_HASH_SIPHASH13: the hash this build places
// flows by.
const HashSipHash13 = 1

// newSecret draws a secret for this build's hash.
func newSecret() (HashSecret, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return HashSecret{}, fmt.Errorf("draw the flow hash secret: %w", err)
	}
	return HashSecret{K0: binary.LittleEndian.Uint64(b[:8]), K1: binary.LittleEndian.Uint64(b[8:]), Hash: HashSipHash13}, nil
}

// Usable tells whether s keys this build's hash (a zero key is a map
// never written).
func (s HashSecret) Usable() bool {
	return s.Hash == HashSipHash13 && (s.K0 != 0 || s.K1 != 0)
}

// ReadSecret reads the secret kept in m (edge_secret).
func ReadSecret(m *ebpf.Map) (HashSecret, error) {
	var s HashSecret
	if err := m.Lookup(uint32(0), &s); err != nil {
		return s, fmt.Errorf("read the flow hash secret: %w", err)
	}
	return s, nil
}

// ensureSecret returns the secret kept in m, first drawing and writing
// one when m holds none for this build's hash (fresh: true). Only a
// map just created holds none: the caller places no flow by it before.
func ensureSecret(m *ebpf.Map) (s HashSecret, fresh bool, err error) {
	if m == nil {
		return s, false, errors.New("no edge_secret map")
	}
	if s, err = ReadSecret(m); err != nil || s.Usable() {
		return s, false, err
	}
	if s, err = newSecret(); err != nil {
		return s, false, err
	}
	if err := m.Put(uint32(0), s); err != nil {
		return s, false, fmt.Errorf("keep the flow hash secret: %w", err)
	}
	return s, true, nil
}

// applySecret sets s as the hash key of spec's programs.
func applySecret(spec *ebpf.CollectionSpec, s HashSecret) error {
	if err := spec.Variables[edgeVarHashK0].Set(s.K0); err != nil {
		return fmt.Errorf("set hash_k0: %w", err)
	}
	if err := spec.Variables[edgeVarHashK1].Set(s.K1); err != nil {
		return fmt.Errorf("set hash_k1: %w", err)
	}
	return nil
}

// sipHash13 is SipHash-1-3 of the message whose 8-byte words (little
// endian) are words and whose last block is last (its length << 56 |
// its last length % 8 bytes): siphash.h's sip_word and sip_final.
func sipHash13(s HashSecret, last uint64, words ...uint64) uint64 {
	return sipHash(1, 3, s.K0, s.K1, last, words...)
}

// sipHash is SipHash-c-d (c compression, d finalisation rounds).
func sipHash(c, d int, k0, k1, last uint64, words ...uint64) uint64 {
	v0, v1 := k0^0x736f6d6570736575, k1^0x646f72616e646f6d
	v2, v3 := k0^0x6c7967656e657261, k1^0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	for _, m := range append(words, last) {
		v3 ^= m
		for range c {
			round()
		}
		v0 ^= m
	}
	v2 ^= 0xff
	for range d {
		round()
	}
	return v0 ^ v1 ^ v2 ^ v3
}

// sipTuple is siphash.h's sip_tuple: a 5-tuple's hash, addresses as the
// words of a flow key's, pg the ports and GRE key word.
func sipTuple(s HashSecret, s0, s1, d0, d1 uint64, pg uint32, proto, family uint8) uint64 {
	tail := uint64(pg) | uint64(proto)<<32
	if family == 4 {
		return sipHash13(s, 13<<56|tail, s0|d0<<32)
	}
	return sipHash13(s, 37<<56|tail, s0, s1, d0, d1)
}

// le64 reads a little-endian word.
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
