// SPDX-License-Identifier: Apache-2.0

package commit_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/maglev"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/testutil"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// svcGateway is a dataplane in a topo.PacketNS namespace serving a NAT
// service of ten backends (10.6.0.11-20, behind wan1's neighbour) with
// 65,537-entry tables, changed as the agent changes it: through the
// config store, the compiler and the writer, committing each change's
// generation with only what it dirtied. Its flow table is large for the
// tests' ten thousand connections: a bucket whose eight ways all hold
// established connections records no new one (flow_full), and that
// connection, unpinned, is not what these tests are about.
type svcGateway struct {
	t     *testing.T
	ns    *topo.PacketNS
	dp    *loader.Dataplane
	store *config.Store
	comp  *rules.Compiler
	undo  func()
}

const svcVIP = "203.0.113.10"

func newSvcGateway(t *testing.T) *svcGateway {
	t.Helper()
	testutil.RequireRoot(t)
	y := `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
  - {name: wan1, role: wan}
fars:
  - {id: 1, action: redirect, interface: wan0}
`
	var members []string
	for i := 1; i <= 10; i++ {
		y += fmt.Sprintf("  - {id: %d, action: nat, address: 10.6.0.%d, port: 8080}\n", 1000+i, 10+i)
		members = append(members, fmt.Sprintf("{far: %d}", 1000+i))
	}
	y += fmt.Sprintf(`lbrs:
  - {id: 1, algorithm: maglev, members: [%s]}
services:
  - {id: 1, vip: %s, port: 80, proto: tcp, lbr: 1}
pdrs:
  - {id: 1, precedence: 100, match: {in: lan0}, far: 1}
limits: {flows: 262144, rules: 64, maglev_table: 65537, connections: 262144}
`, joinMembers(members), svcVIP)
	cfg, err := yamlcfg.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := topo.NewPacketNS(testutil.UniqueName("epmg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	limits := bpf.Limits{Flows: cfg.Limits.Flows, Rules: cfg.Limits.Rules, MaglevSize: cfg.Limits.MaglevTable, Conns: cfg.Limits.Connections}
	dp, err := loader.Open(limits, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	if _, err := dp.LoadProgram(); err != nil {
		t.Fatal(err)
	}
	comp, err := rules.Build(cfg, ns.Resolve, rules.NewAllocs(limits.Rules, nil, nil), limits)
	if err != nil {
		t.Fatal(err)
	}
	g := &svcGateway{t: t, ns: ns, dp: dp, store: config.NewStore(cfg), comp: comp}
	if err := g.commit(); err != nil {
		t.Fatal(err)
	}
	var tx []uint32
	for _, i := range ns.Ifindex {
		tx = append(tx, i)
	}
	if err := ns.Do(func() error { return dp.SetTx(tx) }); err != nil {
		t.Fatal(err)
	}
	return g
}

func joinMembers(m []string) string {
	s := ""
	for i, x := range m {
		if i > 0 {
			s += ", "
		}
		s += x
	}
	return s
}

// commit commits what the compiler holds, in the namespace (as the agent
// does).
func (g *svcGateway) commit() error {
	return g.ns.Do(func() error { _, err := g.dp.Commit(g.comp.Generation()); return err })
}

// setBackends changes the LBR to backends (FAR ids, weight by id; 0 or
// absent: 1) and commits it; an error of the commit leaves the compile
// undoable (g.undo).
func (g *svcGateway) setBackends(ids []uint32, weight map[uint32]uint32) error {
	g.t.Helper()
	l := config.LBR{ID: 1, Algorithm: config.AlgorithmMaglev}
	for _, id := range ids {
		m := config.Member{FAR: id}
		if w, ok := weight[id]; ok {
			m.Weight = &w
		}
		l.Members = append(l.Members, m)
	}
	ch, undoStore, err := g.store.Apply([]config.Op{{At: "operations[0].update.lbr", Verb: config.Update, Kind: config.KindLBR, Object: l}})
	if err != nil {
		g.t.Fatal(err)
	}
	undoComp, err := g.comp.Apply(ch)
	if err != nil {
		g.t.Fatal(err)
	}
	g.undo = func() { undoComp(); undoStore() }
	return g.commit()
}

// send sends flow n's packet to the service (a SYN, or flags "A") as
// received on wan0 and returns where the gateway sent it: the NAT'd
// destination address and port.
func (g *svcGateway) send(n int, flags string) string {
	g.t.Helper()
	src := net.ParseIP(fmt.Sprintf("10.3.%d.%d", 1+n/250, 1+n%250)).To4()
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src, DstIP: net.ParseIP(svcVIP).To4()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(20000 + n%40000), DstPort: 80, Seq: 1, Window: 64240, SYN: flags == "S", ACK: flags != "S"}
	_ = tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: topo.MACWanNeigh, DstMAC: topo.MACWan0, EthernetType: layers.EthernetTypeIPv4}, ip, tcp, gopacket.Payload("pcc")); err != nil {
		g.t.Fatal(err)
	}
	frame := buf.Bytes()
	out := make([]byte, len(frame)+256)
	var verdict uint32
	if err := g.ns.Do(func() error {
		opts := &ebpf.RunOptions{Data: frame, DataOut: out, Repeat: 1,
			Context: xdpCtx{DataEnd: uint32(len(frame)), IngressIfindex: g.ns.Ifindex["wan0"]}}
		r, err := g.dp.Prog.Run(opts)
		verdict, out = r, out[:len(opts.DataOut)]
		return err
	}); err != nil {
		g.t.Fatal(err)
	}
	if verdict != bpf.XDPRedirect {
		g.t.Fatalf("flow %d (%s): verdict %d, want it forwarded", n, flags, verdict)
	}
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	l4, ok1 := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	t4, ok2 := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok1 || !ok2 {
		g.t.Fatalf("flow %d: output is not TCP over IPv4: %v", n, pk)
	}
	return net.JoinHostPort(l4.DstIP.String(), fmt.Sprint(uint16(t4.DstPort)))
}

// unpinned says how many flows the flow table could not record or gave
// up: a connection among them is decided anew by its next packet.
func (g *svcGateway) unpinned() string {
	g.t.Helper()
	s, err := g.dp.Snapshot()
	if err != nil {
		g.t.Fatal(err)
	}
	return fmt.Sprintf("flows not recorded: full %d, busy %d; evicted: cold %d, idle %d", s.Reasons[bpf.ReasonFlowFull].Packets,
		s.Reasons[bpf.ReasonFlowBusy].Packets, s.Reasons[bpf.ReasonFlowEvictCold].Packets, s.Reasons[bpf.ReasonFlowEvictIdle].Packets)
}

// xdpCtx mirrors struct xdp_md for BPF_PROG_TEST_RUN's ctx_in.
type xdpCtx struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// backendAddr is the address NAT FAR id rewrites to.
func backendAddr(id uint32) string {
	return fmt.Sprintf("10.6.0.%d:8080", id-990)
}

// liveTable reads the Maglev table of the service (tag 0) that the live
// slot holds, as the FAR id of each entry (0: none), as packets read it.
func (g *svcGateway) liveTable() []uint32 {
	g.t.Helper()
	st, err := g.dp.State()
	if err != nil {
		g.t.Fatal(err)
	}
	slot := st.Gen & 1
	var tag uint32
	for _, sv := range g.comp.Generation().Services {
		tag = sv.Tag
	}
	base := slot*bpf.MaxServices + tag
	out := make([]uint32, maglev.DefaultSize)
	var blk bpf.MaglevBlk
	for i := range out {
		if i%bpf.MaglevBlock == 0 {
			if err := g.dp.EdgeMaglev.Lookup(base*g.dp.Limits.MaglevBlocks()+uint32(i/bpf.MaglevBlock), &blk); err != nil {
				g.t.Fatal(err)
			}
		}
		m := uint32(blk.M[i%bpf.MaglevBlock])
		if m == bpf.ReplyMember {
			continue
		}
		var fi uint32
		var f bpf.Far
		if err := g.dp.EdgeLbFar.Lookup(base*bpf.MaxMembers+m, &fi); err != nil {
			g.t.Fatal(err)
		}
		if err := g.dp.EdgeFars.Lookup(slot*g.dp.Limits.FARStride()+fi, &f); err != nil {
			g.t.Fatal(err)
		}
		out[i] = f.Id
	}
	return out
}

// fullTable is the table a whole build of the service's backends gives
// (maglev.Build, keyed as the compiler keys NAT backends), as FAR ids.
func fullTable(t *testing.T, ids []uint32, weight map[uint32]uint32) []uint32 {
	t.Helper()
	var bs []maglev.Backend
	for _, id := range ids {
		w, ok := weight[id]
		if !ok {
			w = 1
		}
		bs = append(bs, maglev.Backend{Key: "nat " + netip.MustParseAddrPort(backendAddr(id)).String(), Weight: w})
	}
	owners, err := maglev.Build(bs, maglev.DefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint32, len(owners))
	for i, o := range owners {
		if o >= 0 {
			out[i] = ids[o]
		}
	}
	return out
}

func backendIDs(skip uint32) []uint32 {
	var ids []uint32
	for id := uint32(1001); id <= 1010; id++ {
		if id != skip {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestBackendChangesKeepConnections opens connections to a service of ten
// backends, then takes one out, puts it back and changes one's weight,
// committing each change as the agent does (only what changed written,
// one flip), both with the agent idle long enough for the tables ahead
// (the change then costs a copy) and back to back (a build). After each
// change: every established connection, on the backend taken out too,
// keeps its backend (its flow-table entry); new connections go only to
// backends the new table has, and that table, as the live slot holds it,
// is entry for entry what a whole build of the new backends gives.
func TestBackendChangesKeepConnections(t *testing.T) {
	g := newSvcGateway(t)
	const conns, fresh = 3000, 600
	owner := map[int]string{}
	open := func(from, n int) {
		for c := from; c < from+n; c++ {
			owner[c] = g.send(c, "S")
		}
	}
	open(0, conns)
	next := conns
	check := func(stage string, ids []uint32, weight map[uint32]uint32) {
		t.Helper()
		if got, want := g.liveTable(), fullTable(t, ids, weight); !slices.Equal(got, want) {
			n := 0
			for i := range got {
				if got[i] != want[i] {
					n++
				}
			}
			t.Fatalf("%s: the live table differs from a whole build's in %d entries", stage, n)
		}
		for c, was := range owner {
			if got := g.send(c, "A"); got != was {
				t.Fatalf("%s: established connection %d moved from %s to %s (%s)", stage, c, was, got, g.unpinned())
			}
		}
		live := map[string]bool{}
		for _, id := range ids {
			if w, ok := weight[id]; !ok || w > 0 {
				live[backendAddr(id)] = true
			}
		}
		seen := map[string]int{}
		for c := next; c < next+fresh; c++ {
			b := g.send(c, "S")
			if !live[b] {
				t.Fatalf("%s: new connection %d went to %s, not a backend of the new table", stage, c, b)
			}
			owner[c] = b
			seen[b]++
		}
		next += fresh
		if u := g.unpinned(); u != "flows not recorded: full 0, busy 0; evicted: cold 0, idle 0" {
			t.Fatalf("%s: %s: not every connection is pinned, the check means nothing", stage, u)
		}
		if len(seen) != len(live) {
			t.Errorf("%s: %d new connections reached %d backends of %d", stage, fresh, len(seen), len(live))
		}
	}
	all := backendIDs(0)
	for _, idle := range []time.Duration{50 * time.Millisecond, 0} {
		for _, step := range []struct {
			name   string
			ids    []uint32
			weight map[uint32]uint32
		}{
			{"take 1004 out", backendIDs(1004), nil},
			{"put 1004 back", all, nil},
			{"weight 2 for 1007", all, map[uint32]uint32{1007: 2}},
			{"drain 1002", all, map[uint32]uint32{1007: 2, 1002: 0}},
			{"all back", all, nil},
		} {
			time.Sleep(idle) // an agent idle (tables ahead built) or busy
			if err := g.setBackends(step.ids, step.weight); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			check(fmt.Sprintf("%s (idle %s)", step.name, idle), step.ids, step.weight)
		}
	}
}

// TestBackendChangeFailedBatch fails the write of a backend's removal
// half way through its batch of Maglev blocks (written for real into the
// idle slot up to there): the generation does not flip, and the dataplane goes
// on serving the old one, new connections to the backend taken out
// included. Once the compile is undone (as the agent undoes it), the
// removal committed again takes effect whole.
func TestBackendChangeFailedBatch(t *testing.T) {
	g := newSvcGateway(t)
	before := g.liveTable()
	st0, err := g.dp.State()
	if err != nil {
		t.Fatal(err)
	}
	owner := map[int]string{}
	for c := range 2000 {
		owner[c] = g.send(c, "S")
	}

	// The idle slot holds no table yet: the removal writes every block,
	// half of them before the batch fails.
	restore := commit.FailBlocksAfter(int(g.dp.Limits.MaglevBlocks() / 2))
	err = g.setBackends(backendIDs(1004), nil)
	restore()
	if !errors.Is(err, unix.EFAULT) {
		t.Fatalf("commit with the batch failing: %v, want the batch's error", err)
	}
	st, err := g.dp.State()
	if err != nil {
		t.Fatal(err)
	}
	if st.Gen != st0.Gen {
		t.Fatalf("generation %d after the failed commit, was %d", st.Gen, st0.Gen)
	}
	if !slices.Equal(g.liveTable(), before) {
		t.Fatal("the live table changed with a failed commit")
	}
	for c, was := range owner {
		if got := g.send(c, "A"); got != was {
			t.Fatalf("after the failed commit: connection %d moved from %s to %s", c, was, got)
		}
	}
	taken := 0
	for c := 2000; c < 3000; c++ {
		if g.send(c, "S") == backendAddr(1004) {
			taken++
		}
	}
	if taken == 0 {
		t.Fatal("after the failed commit no new connection went to 1004: not the old table serving")
	}

	g.undo()
	if err := g.setBackends(backendIDs(1004), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := g.liveTable(), fullTable(t, backendIDs(1004), nil); !slices.Equal(got, want) {
		t.Fatal("the removal committed again: the live table is not a whole build's")
	}
	for c := 3000; c < 4000; c++ {
		if b := g.send(c, "S"); b == backendAddr(1004) {
			t.Fatalf("after the removal: new connection %d went to the backend taken out", c)
		}
	}
	for c, was := range owner {
		if got := g.send(c, "A"); got != was {
			t.Fatalf("after the removal: connection %d moved from %s to %s", c, was, got)
		}
	}
}
