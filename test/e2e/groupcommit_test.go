// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/lab"
)

// pySendPorts sends one 16-byte datagram to argv[1] at each port of
// argv[3:] (argv[2] is unused), in one process (pyUDPSocket).
const pySendPorts = pyUDPSocket + `for p in sys.argv[3:]:
    port = int(p)
    send(b"\0" * 16)
print(json.dumps({"sent": len(sys.argv) - 3, "seconds": 0, "retries": retries}))
`

// sendToPorts sends one datagram from ns to dst at each of ports.
func sendToPorts(t *testing.T, ns, dst string, ports []int) {
	t.Helper()
	args := []string{"netns", "exec", ns, "python3", "-c", pySendPorts, dst, "0"}
	for _, p := range ports {
		args = append(args, strconv.Itoa(p))
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		t.Fatalf("udp sender: %v (%s)", err, out)
	}
	var r sendReport
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil || r.Sent != uint64(len(ports)) {
		t.Fatalf("udp sender report %q: %v, want %d sent", out, err, len(ports))
	}
}

// clientConns dials n connections to the agent's gRPC API, one per
// concurrent client.
func clientConns(t *testing.T, g *gateway, n int) ([]pb.GatewayClient, []*grpc.ClientConn) {
	t.Helper()
	gcs := make([]pb.GatewayClient, n)
	conns := make([]*grpc.ClientConn, n)
	for i := range gcs {
		conn, err := grpc.NewClient("passthrough:///"+apiGRPC,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(nsDial(g.GW)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		gcs[i], conns[i] = pb.NewGatewayClient(conn), conn
	}
	return gcs, conns
}

// TestFaultInjectionConcurrentApplies is TestFaultInjectionApplies with
// concurrent clients, whose Applies the agent commits in groups that
// share a journal sync and a generation flip: 16 clients, a connection
// each, apply batches of two or three operations on PDRs of their own
// back to back, and the agent is killed with SIGKILL at a random moment
// while they do, 12 times. After each restart every client's PDRs must
// be exactly what its acknowledged Applies built, plus at most the batch
// whose answer the kill cut off, whole (a batch half in force would be
// neither). At the end every PDR the Applies left must count packets in
// the dataplane, and answers that share a generation show the batches
// were committed in groups.
func TestFaultInjectionConcurrentApplies(t *testing.T) {
	const (
		clients   = 16
		perClient = 8
		kills     = 12
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 27))

	g := newGateway(t, forwardConfig)
	a := startAPIGateway(t, g)
	a.warmUp()
	gcs, conns := clientConns(t, g, clients)
	list := func() pdrSet { return listPDRs(t, gcs[0]) }
	owner := func(id uint32) int { return (int(id) - 1000) / perClient }
	acked := make([]pdrSet, clients)
	for c := range acked {
		acked[c] = pdrSet{}
	}
	var ackedN, cutOff, cutOffInForce int // answers a kill cut off
	gens := map[uint32]int{}              // acknowledged answers per generation
	for kill := 1; kill <= kills; kill++ {
		// Each client's batch in flight when its Apply failed, and
		// the error.
		inFlight := make([]pdrSet, clients)
		failed := make([]error, clients)
		var mu sync.Mutex
		var wg sync.WaitGroup
		seeds := make([]uint64, clients)
		for c := range seeds {
			seeds[c] = rng.Uint64()
		}
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				crng := rand.New(rand.NewPCG(seeds[c], uint64(c)))
				for {
					// Two or three operations on PDRs of its own, so that
					// each client's acknowledged state is its own.
					ops, next := pdrBatch(crng, acked[c], 1000+c*perClient, perClient, 2)
					ctx, cancel := withToken(apiToken)
					r, err := gcs[c].Apply(ctx, &pb.ApplyRequest{Operations: ops})
					cancel()
					if err != nil {
						inFlight[c], failed[c] = next, err
						return
					}
					acked[c] = next
					mu.Lock()
					ackedN++
					gens[r.GetGeneration()]++
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		if err := a.StopAgent(syscall.SIGKILL); err != nil {
			t.Fatalf("kill agent: %v", err)
		}
		wg.Wait()
		a.start(a.args...)
		for _, conn := range conns {
			conn.ResetConnectBackoff()
		}
		live := list()
		byClient := make([]pdrSet, clients)
		for c := range byClient {
			byClient[c] = pdrSet{}
		}
		for id, p := range live {
			if id >= 1000 {
				byClient[owner(id)][id] = p
			}
		}
		for c := range clients {
			if failed[c] != nil {
				cutOff++
			}
			switch got := byClient[c]; {
			case got.equal(acked[c]):
			case got.equal(inFlight[c]):
				// Journalled, its answer lost with the agent: in
				// force, and from now on what the client builds on.
				cutOffInForce++
				acked[c] = inFlight[c]
			default:
				t.Fatalf("after kill %d, client %d (its last Apply: %v): the agent serves its PDRs\n%v\nits acknowledged Applies built\n%v\nand the batch in flight\n%v",
					kill, c, failed[c], got, acked[c], inFlight[c])
			}
		}
	}
	shared := 0
	for _, n := range gens {
		if n > 1 {
			shared += n
		}
	}
	t.Logf("%d kills: %d Applies acknowledged (%d of them sharing a generation with another, in %d generations), %d Applies ended by a kill (%d of those batches in force after the restart)",
		kills, ackedN, shared, len(gens), cutOff, cutOffInForce)
	if shared == 0 {
		t.Errorf("no two acknowledged Applies shared a generation: the clients' batches were never committed together")
	}

	// In force in the dataplane, not only in the config: one datagram
	// to each PDR's port is counted by that PDR.
	want := pdrSet{}
	for c := range acked {
		for id, p := range acked[c] {
			want[id] = p
		}
	}
	if live := list(); !live.equal(mergeBase(live, want)) {
		t.Fatalf("at the end the agent serves PDRs\n%v\nthe acknowledged Applies built\n%v", live, want)
	}
	s0 := a.stats()
	var ports []int
	for id := range want {
		ports = append(ports, 20000+int(id))
	}
	sendToPorts(t, g.A, lab.AddrB, ports)
	s1 := a.stats()
	for id := range want {
		if d := s1.pdr(int(id)).Packets - s0.pdr(int(id)).Packets; d != 1 {
			t.Errorf("PDR %d counted %d of 1 datagram to port %d", id, d, 20000+id)
		}
	}
}

// mergeBase is want plus the PDRs of live below 1000 (the config's own,
// which no client touches).
func mergeBase(live, want pdrSet) pdrSet {
	out := pdrSet{}
	for id, p := range live {
		if id < 1000 {
			out[id] = p
		}
	}
	for id, p := range want {
		out[id] = p
	}
	return out
}

// TestConcurrentAppliesOneInvalid: 16 clients, a connection each, apply
// a batch of two PDR creates at the same instant, ten rounds; in each
// round one client's second PDR has an invalid destination. Its Apply
// fails with InvalidArgument naming that field, nothing of its batch is
// in force (not even its valid first PDR), and every other batch lands
// whole, listed and counting packets in the dataplane: a batch refused
// in a group is refused alone.
func TestConcurrentAppliesOneInvalid(t *testing.T) {
	const (
		clients = 16
		rounds  = 10
	)
	a := newAPIGateway(t, forwardConfig)
	a.warmUp()
	gcs, _ := clientConns(t, a.gateway, clients)
	pdr := func(id uint32) *pb.Pdr {
		return &pb.Pdr{Id: id, Precedence: 5, Far: 3, Match: &pb.Match{In: lab.LanName, Proto: "udp", Dport: strconv.Itoa(20000 + int(id))}}
	}
	var landed []uint32
	refused := map[uint32]bool{}
	gens := map[uint32]int{}
	for round := range rounds {
		bad := (round * 7) % clients
		gate := make(chan struct{})
		errs := make([]error, clients)
		resps := make([]*pb.ApplyResponse, clients)
		ids := make([][2]uint32, clients)
		var wg sync.WaitGroup
		for c := range clients {
			first := uint32(2000 + round*clients + c)
			ids[c] = [2]uint32{first, first + 500}
			second := pdr(ids[c][1])
			if c == bad {
				second.Match.Dst = "10.50.300.0/24"
			}
			ops := []*pb.Operation{createOp(pdrObj(pdr(ids[c][0]))), createOp(pdrObj(second))}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := withToken(apiToken)
				defer cancel()
				<-gate
				resps[c], errs[c] = gcs[c].Apply(ctx, &pb.ApplyRequest{Operations: ops})
			}()
		}
		close(gate)
		wg.Wait()
		for c := range clients {
			if c == bad {
				st := wantCode(t, fmt.Sprintf("round %d: the invalid batch", round), errs[c], codes.InvalidArgument)
				if v := violations(st); len(v) != 1 || !strings.HasPrefix(v[0], "operations[1].create.pdr.match.dst") {
					t.Errorf("round %d: violations %v, want just operations[1].create.pdr.match.dst (message %q)", round, v, st.Message())
				}
				refused[ids[c][0]], refused[ids[c][1]] = true, true
				continue
			}
			if errs[c] != nil {
				t.Fatalf("round %d: client %d's valid batch: %v", round, c, errs[c])
			}
			gens[resps[c].GetGeneration()]++
			landed = append(landed, ids[c][0], ids[c][1])
		}
	}
	ctx, cancel := withToken(apiToken)
	defer cancel()
	lp, err := a.gc.ListPdrs(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[uint32]bool{}
	for _, p := range lp.GetPdrs() {
		listed[p.GetId()] = true
	}
	for _, id := range landed {
		if !listed[id] {
			t.Errorf("PDR %d of an acknowledged batch is not listed", id)
		}
	}
	for id := range refused {
		if listed[id] {
			t.Errorf("PDR %d of the refused batch is listed", id)
		}
	}
	shared := 0
	for _, n := range gens {
		if n > 1 {
			shared += n
		}
	}
	t.Logf("%d valid batches landed in %d generations (%d sharing one), %d refused", len(landed)/2, len(gens), shared, rounds)
	if shared == 0 {
		t.Errorf("no two valid batches shared a generation: they were never committed together")
	}
	// In force: each landed PDR counts a datagram to its port; the
	// refused batch's valid first PDR is nowhere (its datagram is
	// forwarded, counted by PDR 20).
	s0 := a.stats()
	var ports []int
	for _, id := range landed {
		ports = append(ports, 20000+int(id))
	}
	for id := range refused {
		ports = append(ports, 20000+int(id))
	}
	sendToPorts(t, a.A, lab.AddrB, ports)
	s1 := a.stats()
	for _, id := range landed {
		if d := s1.pdr(int(id)).Packets - s0.pdr(int(id)).Packets; d != 1 {
			t.Errorf("PDR %d counted %d of 1 datagram to port %d", id, d, 20000+id)
		}
	}
	if d := s1.pdr(20).Packets - s0.pdr(20).Packets; d != uint64(len(refused)) {
		t.Errorf("PDR 20 counted %d of the %d datagrams to the refused batch's ports", d, len(refused))
	}
}
