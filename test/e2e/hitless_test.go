// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// hitlessConfig forwards ICMP both ways (for warmUp) and, as PDR 9, drops
// every other packet from the LAN to site B: the trap. The test's flows
// are forwarded only by the rule sets it applies; a packet that finds
// neither set whole falls to PDR 9 and is dropped and counted.
const hitlessConfig = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: redirect, interface: lan0}
  - {id: 3, action: drop}
pdrs:
  - {id: 8, precedence: 10, match: {in: lan0, proto: icmp, dst: 10.2.0.0/24}, far: 1}
  - {id: 7, precedence: 10, match: {in: lan0, proto: icmpv6, dst: "fd02::/64"}, far: 1}
  - {id: 9, precedence: 1000, match: {in: lan0, dst: 10.2.0.0/24}, far: 3}
  - {id: 30, precedence: 100, match: {in: wan0, dst: 10.1.0.0/24}, far: 2}
  - {id: 31, precedence: 100, match: {in: wan0, dst: "fd01::/64"}, far: 2}
limits: {flows: 65536, rules: 4096}
`

const (
	hitlessFlows    = 128   // UDP flows, source ports hitlessSport+i
	hitlessSport    = 20000 // first source port
	hitlessPort     = 7777  // destination port
	hitlessApplies  = 1000
	hitlessRatePPS  = 60000 // offered load, paced
	hitlessPayload  = 18    // 64-byte frames
	hitlessSetA     = 1000  // PDR ids of rule set A: hitlessSetA+i
	hitlessSetB     = 2000  // and of set B
	hitlessTrapPDR  = "9"
	hitlessDrainFor = 500 * time.Millisecond
)

// hitlessSet returns the operations that replace one rule set by the
// other: set A matches flow i by source port and destination prefix at
// precedence 100, set B by source and destination port at precedence 50
// (other mask groups, other precedences, other ids). Both forward.
func hitlessSet(toB bool) []*pb.Operation {
	var ops []*pb.Operation
	for i := range hitlessFlows {
		sport := strconv.Itoa(hitlessSport + i)
		a := &pb.Pdr{Id: uint32(hitlessSetA + i), Precedence: 100, Far: 1, Match: &pb.Match{In: "lan0", Proto: "udp", Sport: sport, Dst: "10.2.0.0/24"}}
		b := &pb.Pdr{Id: uint32(hitlessSetB + i), Precedence: 50, Far: 1, Match: &pb.Match{In: "lan0", Proto: "udp", Sport: sport, Dport: strconv.Itoa(hitlessPort)}}
		add, del := a, b
		if toB {
			add, del = b, a
		}
		ops = append(ops, deleteOp(pb.Kind_KIND_PDR, del.Id, ""), createOp(pdrObj(add)))
	}
	return ops
}

// flowSender sends paced datagrams round robin over hitlessFlows sockets,
// each carrying (flow, sequence number).
type flowSender struct {
	conns []*net.UDPConn
	sent  []uint64 // per flow
	total atomic.Uint64
}

func newFlowSender(ns, dst string) (*flowSender, error) {
	s := &flowSender{sent: make([]uint64, hitlessFlows)}
	raddr := &net.UDPAddr{IP: net.ParseIP(dst), Port: hitlessPort}
	err := topo.Do(ns, func() error {
		for i := range hitlessFlows {
			c, err := net.DialUDP("udp4", &net.UDPAddr{Port: hitlessSport + i}, raddr)
			if err != nil {
				return err
			}
			// IP_RECVERR: a full veth ring comes back as ENOBUFS
			// instead of a silent local drop, and is sent again.
			if rc, err := c.SyscallConn(); err == nil {
				_ = rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_RECVERR, 1) })
			}
			s.conns = append(s.conns, c)
		}
		return nil
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("sender sockets: %w", err)
	}
	return s, nil
}

func (s *flowSender) close() {
	for _, c := range s.conns {
		c.Close()
	}
}

// run sends at rate until ctx ends.
func (s *flowSender) run(ctx context.Context, rate int) error {
	buf := make([]byte, hitlessPayload)
	start := time.Now()
	var n uint64
	for ctx.Err() == nil {
		// Pace in bursts of 64: sleep while ahead of the schedule.
		if ahead := time.Duration(float64(n)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > time.Millisecond {
			time.Sleep(ahead)
		}
		for range 64 {
			f := int(n % hitlessFlows)
			binary.BigEndian.PutUint16(buf[0:2], uint16(f))
			binary.BigEndian.PutUint64(buf[2:10], s.sent[f])
			for {
				_, err := s.conns[f].Write(buf)
				if err == nil {
					break
				}
				if !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.ECONNREFUSED) {
					return err
				}
				time.Sleep(100 * time.Microsecond)
			}
			s.sent[f]++
			n++
		}
		s.total.Store(n)
	}
	return nil
}

// flowReceiver counts distinct (flow, sequence) datagrams.
type flowReceiver struct {
	conn *net.UDPConn
	mu   sync.Mutex
	seen []map[uint64]bool
	dups uint64
}

func newFlowReceiver(ns, addr string) (*flowReceiver, error) {
	r := &flowReceiver{seen: make([]map[uint64]bool, hitlessFlows)}
	for i := range r.seen {
		r.seen[i] = map[uint64]bool{}
	}
	err := topo.Do(ns, func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(addr), Port: hitlessPort})
		if err != nil {
			return err
		}
		if rc, err := c.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 64<<20)
			})
		}
		r.conn = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("receiver socket: %w", err)
	}
	go r.loop()
	return r, nil
}

func (r *flowReceiver) loop() {
	buf := make([]byte, 2048)
	for {
		n, err := r.conn.Read(buf)
		if err != nil {
			return
		}
		if n < 10 {
			continue
		}
		f := int(binary.BigEndian.Uint16(buf[0:2]))
		q := binary.BigEndian.Uint64(buf[2:10])
		if f >= hitlessFlows {
			continue
		}
		r.mu.Lock()
		if r.seen[f][q] {
			r.dups++
		}
		r.seen[f][q] = true
		r.mu.Unlock()
	}
}

// missing returns how many of sent[f] sequence numbers never arrived,
// and the first few as flow/seq.
func (r *flowReceiver) missing(sent []uint64) (uint64, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n uint64
	var first []string
	for f, want := range sent {
		for q := range want {
			if !r.seen[f][q] {
				n++
				if len(first) < 10 {
					first = append(first, fmt.Sprintf("%d/%d", f, q))
				}
			}
		}
	}
	return n, first
}

// udpRcvbufErrors reads UDP RcvbufErrors of ns (/proc/net/snmp), to tell
// a receiver that fell behind from a gateway that lost packets.
func udpRcvbufErrors(t *testing.T, ns string) uint64 {
	out, err := nsRun(ns, "cat", "/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var names, vals []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "Udp:" {
			if names == nil {
				names = f
			} else {
				vals = f
			}
		}
	}
	for i, n := range names {
		if n == "RcvbufErrors" && i < len(vals) {
			v, _ := strconv.ParseUint(vals[i], 10, 64)
			return v
		}
	}
	return 0
}

// TestHitlessApplies sends 64-byte UDP over 128 flows through the gateway
// while 1,000 Applies replace one rule set of 128 PDRs by another and back
// (256 operations each: other ids, precedences and mask groups). A packet
// that saw neither whole set, as a half-written update would show it,
// falls to the trap PDR 9 and is dropped. Every packet must reach host B,
// the trap must count nothing, and the dataplane must drop or punt
// nothing. A control run makes the same change as two Applies (delete,
// then create), which leaves a real gap: the trap must catch packets then,
// or the test could not see a torn update.
func TestHitlessApplies(t *testing.T) {
	a := newAPIGateway(t, hitlessConfig)
	a.warmUp()
	// Start from set A.
	var ops []*pb.Operation
	for _, op := range hitlessSet(false) {
		if op.GetCreate() != nil {
			ops = append(ops, op)
		}
	}
	a.mustApply(t, ops...)

	recv, err := newFlowReceiver(a.B, lab.AddrB)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.conn.Close()
	send, err := newFlowSender(a.A, lab.AddrB)
	if err != nil {
		t.Fatal(err)
	}
	defer send.close()
	rcvbuf0 := udpRcvbufErrors(t, a.B)
	before := a.stats()

	ctx, stop := context.WithCancel(context.Background())
	sendErr := make(chan error, 1)
	go func() { sendErr <- send.run(ctx, hitlessRatePPS) }()

	toB, gens := true, uint32(0)
	start := time.Now()
	var lat []time.Duration
	for i := range hitlessApplies {
		t0 := time.Now()
		r, err := a.apply(t, hitlessSet(toB)...)
		if err != nil {
			stop()
			t.Fatalf("apply %d: %v", i, err)
		}
		lat = append(lat, time.Since(t0))
		gens = r.GetGeneration()
		toB = !toB
	}
	elapsed := time.Since(start)
	time.Sleep(20 * time.Millisecond)
	stop()
	if err := <-sendErr; err != nil {
		t.Fatalf("sender: %v", err)
	}
	time.Sleep(hitlessDrainFor)
	after := a.stats()
	total := send.total.Load()
	missing, first := recv.missing(send.sent)
	rcvbuf := udpRcvbufErrors(t, a.B) - rcvbuf0
	t.Logf("%d applies of %d operations in %s (generation now %d); %d datagrams sent at %.0f/s over %d flows; %d missing at B (first %v), %d duplicates, B socket overflows %d",
		hitlessApplies, 2*hitlessFlows, elapsed.Round(time.Millisecond), gens, total, float64(total)/elapsed.Seconds(), hitlessFlows, missing, first, recv.dups, rcvbuf)
	t.Logf("apply latency (%d ops each) %s", 2*hitlessFlows, latencySummary(lat))
	if total < uint64(hitlessApplies) {
		t.Fatalf("only %d datagrams sent during %d applies", total, hitlessApplies)
	}
	if trap := after.PDRs[hitlessTrapPDR].Packets - before.PDRs[hitlessTrapPDR].Packets; trap != 0 {
		t.Errorf("trap PDR 9 caught %d packets: they saw neither rule set whole", trap)
	}
	// Nothing dropped. (Passes are the hosts' ARP and IPv6 multicast,
	// which no PDR matches.)
	for _, v := range []string{"drop", "aborted"} {
		if d := after.Verdicts[v].Packets - before.Verdicts[v].Packets; d != 0 {
			t.Errorf("verdict %s grew by %d during the applies, want 0", v, d)
		}
	}
	if missing != 0 {
		t.Errorf("%d of %d datagrams never reached B (B socket overflows: %d)", missing, total, rcvbuf)
	}
	if recv.dups != 0 {
		t.Errorf("%d duplicates at B", recv.dups)
	}

	// Control: the same change as two Applies has a gap between them,
	// and the trap must see it.
	t.Run("control-two-step", func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		sendErr := make(chan error, 1)
		go func() { sendErr <- send.run(ctx, hitlessRatePPS) }()
		time.Sleep(50 * time.Millisecond)
		b0 := a.stats()
		var dels, adds []*pb.Operation
		for _, op := range hitlessSet(toB) {
			if op.GetDelete() != nil {
				dels = append(dels, op)
			} else {
				adds = append(adds, op)
			}
		}
		a.mustApply(t, dels...)
		time.Sleep(20 * time.Millisecond)
		a.mustApply(t, adds...)
		time.Sleep(20 * time.Millisecond)
		stop()
		if err := <-sendErr; err != nil {
			t.Fatalf("sender: %v", err)
		}
		b1 := a.stats()
		trap := b1.PDRs[hitlessTrapPDR].Packets - b0.PDRs[hitlessTrapPDR].Packets
		t.Logf("trap PDR 9 caught %d packets in the gap between two applies", trap)
		if trap == 0 {
			t.Errorf("trap caught nothing between a delete and a create 20 ms apart: the test cannot see a torn update")
		}
	})
}

func latencySummary(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("p50 %s p90 %s p99 %s max %s", s[len(s)/2].Round(time.Microsecond), s[len(s)*9/10].Round(time.Microsecond),
		s[len(s)*99/100].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
}
