// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

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

// flowsFor is n flow-table entries of distinct UDP flows.
func flowsFor(n int) []FTWay {
	ws := make([]FTWay, n)
	for i := range ws {
		w := &ws[i]
		copy(w.K.Src[:], []byte{10, 1, byte(i >> 8), byte(i)})
		copy(w.K.Dst[:], []byte{10, 7, 1, 1})
		w.K.Sport, w.K.Dport, w.K.Proto, w.K.Family = uint16(1000+i), 0x8813, 17, 4
		w.F.Packets = 2
	}
	return ws
}

// TestHashSecretKept: the secret the flows' hashes are keyed with is
// drawn when the pinned maps are created, differs between dataplanes,
// and a restart over the pins keeps it, so the flows are where the new
// program looks. Pins of a build before the secret (no edge_secret: its
// flows sit where an unkeyed hash put them) are not adopted as they
// are: the upgrade draws a secret and places every flow again by it.
func TestHashSecretKept(t *testing.T) {
	testutil.RequireRoot(t)
	pin := filepath.Join("/sys/fs/bpf", testutil.UniqueName("epsecret"))
	t.Cleanup(func() { os.RemoveAll(pin) })
	l := Limits{Flows: 1024, Rules: 64}
	dp, err := Open(l, pin)
	if err != nil {
		t.Fatal(err)
	}
	first := dp.secret
	if !first.usable() {
		t.Fatalf("a new dataplane's secret %+v", first)
	}
	other, err := Open(l, "")
	if err != nil {
		t.Fatal(err)
	}
	if other.secret.K0 == first.K0 || other.secret.K1 == first.K1 {
		t.Errorf("two dataplanes drew the secrets %+v and %+v", first, other.secret)
	}
	other.Close()
	tb, err := dp.flowTable()
	if err != nil {
		t.Fatal(err)
	}
	ws := flowsFor(200)
	for i := range ws {
		if !tb.insert(&ws[i], true, 0) {
			t.Fatalf("flow %d found no room", i)
		}
	}
	tb.unmap()
	dp.Close()

	// A restart.
	if dp, err = Open(l, pin); err != nil {
		t.Fatal(err)
	}
	if dp.secret != first {
		t.Errorf("after a restart the secret is %+v, was %+v", dp.secret, first)
	}
	if n, err := dp.CheckFlowPlaces(); err != nil || n != len(ws) {
		t.Errorf("after a restart %d flows where the hash places them (%v), want %d", n, err, len(ws))
	}
	dp.Close()

	// A build before the secret.
	if err := os.Remove(filepath.Join(pin, edgeMapEdgeSecret)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(l, pin); !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), edgeMapEdgeSecret) {
		t.Fatalf("open over a table placed without the secret: %v, want ErrIncompatible naming %s", err, edgeMapEdgeSecret)
	}
	u, err := PrepareUpgrade(l, pin, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	up := u.Dataplane()
	if !up.secret.usable() || up.secret == first {
		t.Errorf("the upgrade's secret %+v (the pins' was %+v)", up.secret, first)
	}
	if n, err := up.CheckFlowPlaces(); err != nil || n != len(ws) {
		t.Errorf("after the upgrade %d flows where the new hash places them (%v), want %d", n, err, len(ws))
	}
	if err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	kept := up.secret
	up.Close()
	if dp, err = Open(l, pin); err != nil {
		t.Fatalf("open after the upgrade: %v", err)
	}
	defer dp.Close()
	if dp.secret != kept {
		t.Errorf("after the upgrade the pins keep %+v, the upgrade drew %+v", dp.secret, kept)
	}
}
