// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// flowsFor is n flow-table entries of distinct UDP flows.
func flowsFor(n int) []bpf.FTWay {
	ws := make([]bpf.FTWay, n)
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
// secretMap is the map the flows' hash secret is kept in.
const secretMap = "edge_secret"

func TestHashSecretKept(t *testing.T) {
	testutil.RequireRoot(t)
	pin := filepath.Join("/sys/fs/bpf", testutil.UniqueName("epsecret"))
	t.Cleanup(func() { os.RemoveAll(pin) })
	l := bpf.Limits{Flows: 1024, Rules: 64}
	dp, err := loader.Open(l, pin)
	if err != nil {
		t.Fatal(err)
	}
	first := dp.Secret
	if !first.Usable() {
		t.Fatalf("a new dataplane's secret %+v", first)
	}
	other, err := loader.Open(l, "")
	if err != nil {
		t.Fatal(err)
	}
	if other.Secret.K0 == first.K0 || other.Secret.K1 == first.K1 {
		t.Errorf("two dataplanes drew the secrets %+v and %+v", first, other.Secret)
	}
	other.Close()
	tb, err := dp.FlowTable()
	if err != nil {
		t.Fatal(err)
	}
	ws := flowsFor(200)
	for i := range ws {
		if !tb.Insert(&ws[i], true, 0) {
			t.Fatalf("flow %d found no room", i)
		}
	}
	tb.Unmap()
	dp.Close()

	// A restart.
	if dp, err = loader.Open(l, pin); err != nil {
		t.Fatal(err)
	}
	if dp.Secret != first {
		t.Errorf("after a restart the secret is %+v, was %+v", dp.Secret, first)
	}
	if n, err := dp.CheckFlowPlaces(); err != nil || n != len(ws) {
		t.Errorf("after a restart %d flows where the hash places them (%v), want %d", n, err, len(ws))
	}
	dp.Close()

	// A build before the secret.
	if err := os.Remove(filepath.Join(pin, secretMap)); err != nil {
		t.Fatal(err)
	}
	if _, err := loader.Open(l, pin); !errors.Is(err, bpf.ErrIncompatible) || !strings.Contains(err.Error(), secretMap) {
		t.Fatalf("open over a table placed without the secret: %v, want ErrIncompatible naming %s", err, secretMap)
	}
	u, err := loader.PrepareUpgrade(l, pin, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	up := u.Dataplane()
	if !up.Secret.Usable() || up.Secret == first {
		t.Errorf("the upgrade's secret %+v (the pins' was %+v)", up.Secret, first)
	}
	if n, err := up.CheckFlowPlaces(); err != nil || n != len(ws) {
		t.Errorf("after the upgrade %d flows where the new hash places them (%v), want %d", n, err, len(ws))
	}
	if err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	kept := up.Secret
	up.Close()
	if dp, err = loader.Open(l, pin); err != nil {
		t.Fatalf("open after the upgrade: %v", err)
	}
	defer dp.Close()
	if dp.Secret != kept {
		t.Errorf("after the upgrade the pins keep %+v, the upgrade drew %+v", dp.Secret, kept)
	}
}
