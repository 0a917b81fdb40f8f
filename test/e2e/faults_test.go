// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/lab"
)

// pySendUntil sends datagrams of argv[4] bytes (the first 8 the sequence
// number) to argv[1]:argv[2] at argv[3] per second until its stdin
// closes, then reports how many it sent (pyUDPSocket).
const pySendUntil = pyUDPSocket + `rate, size = float(sys.argv[3]), int(sys.argv[4])
pad = b"\0" * (size - 8)
print("ready", flush=True)
i = 0
t0 = time.perf_counter()
while True:
    ahead = t0 + i / rate - time.perf_counter()
    if select.select([sys.stdin], [], [], max(ahead, 0))[0]:
        break
    send(struct.pack("!Q", i) + pad)
    i += 1
print(json.dumps({"sent": i, "seconds": time.perf_counter() - t0, "retries": retries}))
`

// pdrSet is a set of PDRs by id.
type pdrSet map[uint32]*pb.Pdr

func (s pdrSet) equal(o pdrSet) bool {
	if len(s) != len(o) {
		return false
	}
	for id, p := range s {
		if !proto.Equal(p, o[id]) {
			return false
		}
	}
	return true
}

func (s pdrSet) String() string {
	ids := make([]int, 0, len(s))
	for id := range s {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	out := ""
	for _, id := range ids {
		out += fmt.Sprintf(" %d@%d", id, s[uint32(id)].GetPrecedence())
	}
	return "{" + out + " }"
}

// listPDRs lists the agent's PDRs, retrying for up to 10 s while the
// agent (re)starts.
func listPDRs(t *testing.T, gc pb.GatewayClient) pdrSet {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := withToken(apiToken)
		r, err := gc.ListPdrs(ctx, &pb.ListRequest{})
		cancel()
		if err == nil {
			out := pdrSet{}
			for _, p := range r.GetPdrs() {
				out[p.GetId()] = p
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("list pdrs: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// faultBatch makes a batch of one to three operations on PDRs 1000-1063
// (each dropping UDP to port 20000+id from the LAN, ahead of the base
// rules, nothing the stream uses) and returns it with the PDRs the config
// holds once it applies.
func faultBatch(rng *rand.Rand, have pdrSet) ([]*pb.Operation, pdrSet) {
	return pdrBatch(rng, have, 1000, 64, 1)
}

// pdrBatch makes a batch of minOps to three operations on PDRs first to
// first+span-1 (as faultBatch's) and returns it with the PDRs the config
// holds once it applies, from have.
func pdrBatch(rng *rand.Rand, have pdrSet, first, span, minOps int) ([]*pb.Operation, pdrSet) {
	next := pdrSet{}
	for id, p := range have {
		next[id] = p
	}
	var ops []*pb.Operation
	used := map[uint32]bool{}
	for n := minOps + rng.IntN(4-minOps); len(ops) < n; {
		id := uint32(first + rng.IntN(span))
		if used[id] {
			continue
		}
		used[id] = true
		p := &pb.Pdr{Id: id, Precedence: uint32(1 + rng.IntN(9)), Far: 3,
			Match: &pb.Match{In: lab.LanName, Proto: "udp", Dport: strconv.Itoa(20000 + int(id))}}
		switch _, ok := next[id]; {
		case !ok:
			ops = append(ops, createOp(pdrObj(p)))
			next[id] = p
		case rng.IntN(2) == 0:
			ops = append(ops, updateOp(pdrObj(p)))
			next[id] = p
		default:
			ops = append(ops, deleteOp(pb.Kind_KIND_PDR, id, ""))
			delete(next, id)
		}
	}
	return ops, next
}

// TestFaultInjectionApplies runs 500 Applies against the agent while a UDP
// stream crosses the gateway, and kills the agent with SIGKILL at random
// moments: during an Apply (before, while or after it commits and
// journals), or up to 1.2 s after one, while the journal is folded into
// the config file. After each kill the agent is restarted and its config
// must be exactly what the acknowledged Applies built, plus at most the
// batch whose answer the kill cut off. At the end every PDR the Applies
// left must be in force in the dataplane, and no datagram of the stream
// may be lost.
func TestFaultInjectionApplies(t *testing.T) {
	const (
		applies = 500
		rate    = 1000 // datagrams per second A -> B
		payload = 64
		maxSent = 300 * rate
		pdr     = 12 // UDP 7777 A -> B
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 13))

	g := newGateway(t, forwardConfig)
	a := startAPIGateway(t, g)
	a.warmUp()
	// A connection of its own, to reset its reconnect backoff after a
	// restart (the agent is back, there is nothing to wait for).
	conn, err := grpc.NewClient("passthrough:///"+apiGRPC,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(nsDial(g.GW)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gc := pb.NewGatewayClient(conn)
	list := func() pdrSet { return listPDRs(t, gc) }
	acked := list()

	before := a.stats()
	rcv := startReceiver(t, g.B, "0.0.0.0", countUDPPort, maxSent)
	snd := startProc(t, g.A, pySendUntil, lab.AddrB, strconv.Itoa(countUDPPort), strconv.Itoa(rate), strconv.Itoa(payload))
	start := time.Now()

	var kills, cutOff, cutOffInForce, ackedN int
	for i := 0; i < applies; i++ {
		ops, next := faultBatch(rng, acked)
		var killed chan struct{}
		if rng.IntN(10) == 0 {
			// Mostly within the Apply (a few ms with the fsync); now
			// and then later, into the fold that follows within 1 s.
			delay := time.Duration(rng.IntN(3000)) * time.Microsecond
			if rng.IntN(3) == 0 {
				delay = time.Duration(rng.IntN(1200)) * time.Millisecond
			}
			killed = make(chan struct{})
			go func() {
				defer close(killed)
				time.Sleep(delay)
				if err := a.StopAgent(syscall.SIGKILL); err != nil {
					t.Errorf("kill agent: %v", err)
				}
			}()
		}
		ctx, cancel := withToken(apiToken)
		_, err := gc.Apply(ctx, &pb.ApplyRequest{Operations: ops})
		cancel()
		if err == nil {
			acked = next
			ackedN++
		}
		if killed == nil {
			if err != nil {
				t.Fatalf("apply %d (no kill): %v", i, err)
			}
			continue
		}
		<-killed
		kills++
		a.start(a.args...)
		conn.ResetConnectBackoff()
		live := list()
		switch {
		case live.equal(acked):
			if err != nil {
				cutOff++
			}
		case err != nil && live.equal(next):
			// Journalled, its answer lost with the agent: in force, and
			// from now on part of what later batches build on.
			cutOff++
			cutOffInForce++
			acked = next
		default:
			t.Fatalf("after kill %d (apply %d, answer %v): the agent serves PDRs\n%v\nthe acknowledged Applies built\n%v", kills, i, err, live, acked)
		}
	}
	elapsed := time.Since(start)
	if live := list(); !live.equal(acked) {
		t.Fatalf("after the run the agent serves PDRs\n%v\nthe acknowledged Applies built\n%v", live, acked)
	}

	var sent sendReport
	snd.finish(&sent)
	time.Sleep(300 * time.Millisecond) // the last datagrams in flight
	var got recvReport
	rcv.finish(&got)
	after := a.stats()
	lost := int64(sent.Sent) - int64(got.Distinct)
	t.Logf("%d applies in %v: %d acknowledged, %d kills (%d cut an Apply's answer off, %d of those in force after the restart); %d datagrams sent, %d received, %d lost",
		applies, elapsed.Round(time.Millisecond), ackedN, kills, cutOff, cutOffInForce, sent.Sent, got.Packets, lost)
	if sent.Sent > maxSent {
		t.Fatalf("sent %d datagrams, the receiver counts %d", sent.Sent, maxSent)
	}
	if kills < 20 {
		t.Errorf("only %d kills in %d applies", kills, applies)
	}
	if lost != 0 || got.Packets != sent.Sent {
		t.Errorf("%d of %d datagrams lost, %d received (first missing: %v)", lost, sent.Sent, got.Packets, got.FirstMissing)
	}
	if d := after.pdr(pdr).Packets - before.pdr(pdr).Packets; d != sent.Sent {
		t.Errorf("PDR %d counted %d of the stream's %d datagrams", pdr, d, sent.Sent)
	}

	// In force in the dataplane, not only in the config: one datagram to
	// each PDR's port is counted by that PDR.
	var ids []int
	for id := range acked {
		if id >= 1000 {
			ids = append(ids, int(id))
		}
	}
	s0 := a.stats()
	for _, id := range ids {
		mustSendUDP(t, g.A, lab.AddrB, 20000+id, 1, 0, 16)
	}
	s1 := a.stats()
	for _, id := range ids {
		if d := s1.pdr(id).Packets - s0.pdr(id).Packets; d != 1 {
			t.Errorf("PDR %d counted %d of 1 datagram to port %d", id, d, 20000+id)
		}
	}
}
