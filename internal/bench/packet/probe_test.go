// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestSipHash24BPF: the BPF SipHash-2-4 that signs path probes
// (lib/probe.h's sip24_words over a probe's 24 bytes, run here as
// bench_sip24) gives the reference implementation's vector for a
// 24-byte message (internal/bpf/testdata/siphash24.txt, which the Go one
// is held to in full), and the same as the Go one for random keys and
// messages.
func TestSipHash24BPF(t *testing.T) {
	testutil.RequireRoot(t)
	spec, err := loadBenchobj()
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Prog *ebpf.Program `ebpf:"bench_sip24"`
	}
	if err := spec.LoadAndAssign(&p, nil); err != nil {
		t.Fatal(err)
	}
	defer p.Prog.Close()
	hash := func(frame []byte) uint64 {
		t.Helper()
		ret, out, err := p.Prog.Test(frame)
		if err != nil || ret != bpf.XDPPass {
			t.Fatalf("bench_sip24: verdict %d, %v", ret, err)
		}
		return binary.LittleEndian.Uint64(out[40:])
	}

	b, err := os.ReadFile("../../bpf/testdata/siphash24.txt")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []uint64
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			v, err := strconv.ParseUint(l, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			vectors = append(vectors, v)
		}
	}
	frame := make([]byte, 64)
	for i := range 16 {
		frame[i] = byte(i) // the key 00..0f
	}
	for i := range 24 {
		frame[16+i] = byte(i) // the message 00..17
	}
	if got := hash(frame); len(vectors) != 64 || got != vectors[24] {
		t.Errorf("BPF SipHash-2-4 of the reference's 24-byte message: %016x, want vector 24 of %d", got, len(vectors))
	}
	for range 100 {
		_, _ = rand.Read(frame[:40])
		k0, k1 := binary.LittleEndian.Uint64(frame[0:]), binary.LittleEndian.Uint64(frame[8:])
		if got, want := hash(frame), bpf.SipHash24(k0, k1, frame[16:40]); got != want {
			t.Fatalf("BPF %016x, Go %016x for %x", got, want, frame[:40])
		}
	}
}
