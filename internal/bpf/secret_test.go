// SPDX-License-Identifier: Apache-2.0

package bpf

import "testing"

// TestSipHash13 holds the agent's SipHash to the reference: SipHash-2-4
// of bytes 0..14 under key 0..15 (the paper's appendix and the
// reference implementation's vectors.h), by the same code that takes
// one compression and three finalisation rounds for the flows.
func TestSipHash13(t *testing.T) {
	k0, k1 := uint64(0x0706050403020100), uint64(0x0f0e0d0c0b0a0908)
	msg := uint64(0x0706050403020100)
	last := uint64(15)<<56 | 0x0e0d0c0b0a0908
	if got, want := sipHash(2, 4, k0, k1, last, msg), uint64(0xa129ca6149be45e5); got != want {
		t.Errorf("SipHash-2-4 of the paper's 15-byte message: %#x, want %#x", got, want)
	}
	s := HashSecret{K0: k0, K1: k1, Hash: HashSipHash13}
	if sipHash13(s, last, msg) == sipHash(2, 4, k0, k1, last, msg) {
		t.Error("SipHash-1-3 gave SipHash-2-4's value")
	}
}
