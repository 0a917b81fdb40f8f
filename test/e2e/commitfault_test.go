// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"google.golang.org/grpc/codes"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/lab"
)

// fillMap puts entries made by junk(i) into the pinned hash map name
// until the kernel refuses one (E2BIG: the map is full), and returns how
// many it put: a map made full behind the agent's back, so that the next
// commit's write into it fails.
func fillMap[K, V any](t *testing.T, pinDir, name string, junk func(i uint32) (K, V)) int {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := uint32(0); ; i++ {
		k, v := junk(i)
		if err := m.Update(k, v, ebpf.UpdateNoExist); err != nil {
			if !errors.Is(err, syscall.E2BIG) {
				t.Fatalf("fill %s: %v", name, err)
			}
			return int(i)
		}
	}
}

// TestFaultInsideCommit makes a commit fail halfway through writing the
// next generation (the map of services made full behind the agent's
// back: the rules, FARs, groups and Maglev tables of the batch are
// already written into the spare slot when the write of its service
// fails) and then at its first write (the rules map made full). Each
// time the Apply fails whole: the generation does not move, the API
// lists nothing of the batch, the drop rule keeps dropping and the
// batch's new PDR is not in force. The next commit of the same batch,
// the junk still in the map, works: it reads back what the spare slot
// holds after a failure and writes it whole, deleting what does not
// belong. After a SIGKILL the agent serves what was acknowledged only.
func TestFaultInsideCommit(t *testing.T) {
	a := newAPIGateway(t, forwardConfig)
	a.warmUp()
	svc := []*pb.Operation{
		createOp(pdrObj(&pb.Pdr{Id: 40, Precedence: 1, Far: 3, Match: &pb.Match{In: lab.LanName, Proto: "udp", Dport: "6666"}})),
		createOp(natFar(50, lab.AddrB)),
		createOp(&pb.Object{Kind: &pb.Object_Lbr{Lbr: &pb.Lbr{Id: 50, Algorithm: "maglev", Members: []*pb.Member{{Far: 50, Weight: u32(1)}}}}}),
		createOp(&pb.Object{Kind: &pb.Object_Service{Service: &pb.Service{Id: 50, Vip: "10.9.0.1", Port: 80, Proto: "udp", Lbr: 50}}}),
	}
	// wantServing checks what is in force: UDP 9999 dropped (PDR 10);
	// 6666 and 6667 dropped by PDRs 40 and 41 when listed in on, else
	// forwarded (PDR 20).
	wantServing := func(when string, gen uint32, on ...uint32) {
		t.Helper()
		s0 := a.stats()
		if s0.Generation != gen {
			t.Errorf("%s: generation %d, want %d", when, s0.Generation, gen)
		}
		for _, port := range []int{9999, 6666, 6667} {
			mustSendUDP(t, a.A, lab.AddrB, port, 4, 0, 16)
		}
		s1 := a.stats()
		ctx, cancel := withToken(apiToken)
		defer cancel()
		for port, pdr := range map[int]uint32{9999: 10, 6666: 40, 6667: 41} {
			want := pdr
			if pdr != 10 && !slices.Contains(on, pdr) {
				want = 20
			}
			if d := s1.pdr(int(want)).Packets - s0.pdr(int(want)).Packets; d < 4 {
				t.Errorf("%s: PDR %d counted %d of the 4 datagrams to %d", when, want, d, port)
			}
			if pdr == 10 {
				continue
			}
			_, err := a.gc.GetPdr(ctx, &pb.GetByIDRequest{Id: pdr})
			if listed := err == nil; listed != slices.Contains(on, pdr) {
				t.Errorf("%s: get PDR %d: %v, want it listed: %v", when, pdr, err, !listed)
			}
		}
	}
	gen := a.stats().Generation
	wantServing("before", gen)

	// Halfway: the services map full in the spare slot.
	spare := (gen + 1) & 1
	n := fillMap(t, a.PinDir, "edge_services", func(i uint32) (bpf.SvcKey, bpf.Svc) {
		return bpf.SvcKey{Vip: [16]byte{10, 99, byte(i >> 8), byte(i)}, Port: 1, Proto: 17, Family: 4, Slot: spare}, bpf.Svc{}
	})
	_, err := a.apply(t, svc...)
	t.Logf("apply with %d junk services in the spare slot: %v", n, err)
	if st := wantCode(t, "apply with the services map full", err, codes.Internal); !strings.Contains(st.Message(), "write service") ||
		!strings.Contains(st.Message(), "a BPF map is full: nothing of the change is in force") {
		t.Errorf("apply with the services map full: %q, want it to name the service write, the full map and what is in force", st.Message())
	}
	wantServing("after the failed commit", gen)
	a.mustApply(t, svc...)
	gen++
	wantServing("after the same batch again, the junk still there", gen, 40)

	// At the first write: the rules map full in the new spare slot.
	spare = (gen + 1) & 1
	n = fillMap(t, a.PinDir, "edge_rules", func(i uint32) (bpf.RuleKey, bpf.Rule) {
		k := bpf.RuleKey{Group: spare*bpf.MaxGroups + bpf.MaxGroups - 1}
		k.K.Sport, k.K.Dport, k.K.Proto, k.K.Family = uint16(i), uint16(i>>16), 17, 4
		return k, bpf.Rule{}
	})
	add := createOp(pdrObj(&pb.Pdr{Id: 41, Precedence: 2, Far: 3, Match: &pb.Match{In: lab.LanName, Proto: "udp", Dport: "6667"}}))
	_, err = a.apply(t, add)
	t.Logf("apply with %d junk rules in the spare slot: %v", n, err)
	if st := wantCode(t, "apply with the rules map full", err, codes.Internal); !strings.Contains(st.Message(), "rules") || !strings.Contains(st.Message(), "a BPF map is full") {
		t.Errorf("apply with the rules map full: %q, want it to name the rules write and the full map", st.Message())
	}
	wantServing("after the second failed commit", gen, 40)
	a.mustApply(t, add)
	gen++
	wantServing("after the same batch again, the junk still there", gen, 40, 41)

	// Nothing of the failed commits was journalled.
	if err := a.StopAgent(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.start(a.args...)
	wantServing("after SIGKILL and a restart", gen+1, 40, 41)
	ctx, cancel := withToken(apiToken)
	defer cancel()
	if _, err := a.gc.GetService(ctx, &pb.GetByIDRequest{Id: 50}); err != nil {
		t.Errorf("service 50 after the restart: %v", err)
	}
}
