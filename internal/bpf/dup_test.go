// SPDX-License-Identifier: Apache-2.0

package bpf_test

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// dupConfig has a redundant group (LBR 7) over path 1 (wan0, key 1) and
// path 5 (wan1, key 5), taken by traffic to 10.13.0.0/16; path 2 (wan0,
// no key) is no member. GRE from the paths' remotes is decapsulated: the
// receiving side of the group.
const dupConfig = `
interfaces:
  - {name: lan0, role: lan}
  - {name: wan0, role: wan}
  - {name: wan1, role: wan}
paths:
  - {id: 1, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.3.9.9, key: 1, ttl: 50, monitor: {insecure: true}}
  - {id: 2, type: gre, interface: wan0, local: 10.2.0.1, remote: 10.3.9.8, monitor: {insecure: true}}
  - {id: 5, type: gre, interface: wan1, local: 10.4.0.1, remote: 10.6.9.9, key: 5, ttl: 40, dscp: 10, monitor: {insecure: true}}
fars:
  - {id: 1, action: encap, path: 1}
  - {id: 5, action: encap, path: 5}
  - {id: 9, action: decap}
  - {id: 20, action: steer, lbr: 7}
lbrs:
  - {id: 7, algorithm: redundant, members: [{far: 1}, {far: 5}]}
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0, dst: 10.13.0.0/16}, far: 20}
  - {id: 90, precedence: 10, match: {in: wan0, proto: gre, dst: 10.2.0.1}, far: 9}
  - {id: 91, precedence: 10, match: {in: wan1, proto: gre, dst: 10.4.0.1}, far: 9}
limits: {flows: 4096, rules: 1024}
`

// dupOuter decodes a GRE frame: its outer IPv4 header, GRE header and
// payload (the inner packet), failing the test if it is not GRE over
// IPv4 with a correct header checksum.
func dupOuter(t *testing.T, frame []byte) (*layers.Ethernet, *layers.IPv4, *layers.GRE) {
	t.Helper()
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	gre, _ := pkt.Layer(layers.LayerTypeGRE).(*layers.GRE)
	if eth == nil || ip == nil || gre == nil {
		t.Fatalf("not GRE over IPv4: %v", pkt)
	}
	hdr := frame[14 : 14+20]
	sum := uint32(0)
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("outer header checksum %#04x is wrong", ip.Checksum)
	}
	return eth, ip, gre
}

// TestRedundantEncap: a packet of a redundant group leaves XDP once,
// redirected, encapsulated for the first usable member with the group's
// sequence number (one more per packet, whatever path a packet would
// take) and the group's index + 1 in the outer IPv4 id, which the copies'
// program reads and clears. With the first member out of the usable set,
// the packet is encapsulated for the second; with none, dropped, counted.
func TestRedundantEncap(t *testing.T) {
	h := newHarness(t, dupConfig)
	frame := serialize(t, v4("10.13.0.5", udpU(4000, 5000))())
	var seqs []uint32
	for i := range 3 {
		ret, out := h.run(frame, "lan0")
		if ret != bpf.XDPRedirect {
			t.Fatalf("packet %d: verdict %s, want redirect", i, verdictName(ret))
		}
		_, ip, gre := dupOuter(t, out)
		if !ip.DstIP.Equal(net.IPv4(10, 3, 9, 9)) || !gre.KeyPresent || gre.Key != 1 {
			t.Fatalf("packet %d: to %s key %d, want path 1's (10.3.9.9, key 1)", i, ip.DstIP, gre.Key)
		}
		if !gre.SeqPresent {
			t.Fatalf("packet %d: no GRE sequence number", i)
		}
		if ip.Id != 1 {
			t.Errorf("packet %d: outer id %d, want 1 (group index 0 + 1)", i, ip.Id)
		}
		seqs = append(seqs, gre.Seq)
	}
	if seqs[1] != seqs[0]+1 || seqs[2] != seqs[1]+1 {
		t.Errorf("sequence numbers %v, want consecutive", seqs)
	}

	steerSet(t, h, 0, 0b10, 1)
	_, out := h.run(frame, "lan0")
	_, ip, gre := dupOuter(t, out)
	if !ip.DstIP.Equal(net.IPv4(10, 6, 9, 9)) || gre.Key != 5 || gre.Seq != seqs[2]+1 {
		t.Errorf("first member not usable: to %s key %d seq %d, want path 5's, seq %d", ip.DstIP, gre.Key, gre.Seq, seqs[2]+1)
	}

	steerSet(t, h, 0, 0, 0)
	before := snap(t, h)
	if ret, _ := h.run(frame, "lan0"); ret != bpf.XDPDrop {
		t.Errorf("no usable member: verdict %s, want drop", verdictName(ret))
	}
	if d := snap(t, h).Reasons[bpf.ReasonSteerNone].Packets - before.Reasons[bpf.ReasonSteerNone].Packets; d != 1 {
		t.Errorf("no usable member: steer_none counted %d, want 1", d)
	}
}

// capture reads frames arriving on interface dev of ns (an AF_PACKET
// socket opened in it).
type capture struct {
	fd int
}

func openCapture(t *testing.T, ns *topo.PacketNS, dev string) *capture {
	t.Helper()
	c := &capture{fd: -1}
	err := ns.Do(func() error {
		idx, err := ns.NS.Ifindex(dev)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		c.fd = fd
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: int(idx)})
	})
	if c.fd >= 0 {
		t.Cleanup(func() { unix.Close(c.fd) })
	}
	if err != nil {
		t.Fatalf("capture on %s: %v", dev, err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return c
}

// gre returns the GRE frames that arrived (until 200 ms pass without one).
func (c *capture) gre(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return out
		}
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		if n > 34 && binary.BigEndian.Uint16(buf[12:]) == 0x0800 && buf[23] == 47 {
			out = append(out, append([]byte(nil), buf[:n]...))
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestRedundantCopies: sent for real (BPF_PROG_TEST_RUN with live frames),
// one packet of a redundant group leaves by both members' interfaces,
// each copy rewritten for its own path by the copies' program: outer
// addresses, key, TTL and DSCP of the path, Ethernet to the path's next
// hop, id 0 and a correct checksum, one sequence number on both, the
// inner packet the same. Each copy counts as its path's. A member taken
// out of the usable set gets no copy (counted dup_no_copy).
func TestRedundantCopies(t *testing.T) {
	h := newHarness(t, dupConfig)
	// A veth passes on frames redirected into it only when its peer runs
	// NAPI, which GRO turns on.
	for _, dev := range []string{"wan0p", "wan1p"} {
		if err := h.ns.SetGRO(dev, true); err != nil {
			t.Fatal(err)
		}
	}
	cap0, cap1 := openCapture(t, h.ns, "wan0p"), openCapture(t, h.ns, "wan1p")
	frame := serialize(t, v4("10.13.0.5", udpU(4000, 5000))())
	send := func() {
		t.Helper()
		err := h.ns.Do(func() error {
			_, err := h.dp.Prog.Run(&ebpf.RunOptions{Data: frame, Repeat: 1, Flags: 1 << 1, // BPF_F_TEST_XDP_LIVE_FRAMES
				Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: h.idx["lan0"]}})
			return err
		})
		if err != nil {
			t.Fatalf("live run: %v", err)
		}
	}
	before := snap(t, h)
	send()
	got0, got1 := cap0.gre(t), cap1.gre(t)
	if len(got0) != 1 || len(got1) != 1 {
		a := snap(t, h)
		for r := range a.Reasons {
			if d := a.Reasons[r].Packets - before.Reasons[r].Packets; d != 0 {
				t.Logf("reason %s: %d", dataplane.ReasonNames[r], d)
			}
		}
		for v := range a.Verdicts {
			if d := a.Verdicts[v].Packets - before.Verdicts[v].Packets; d != 0 {
				t.Logf("verdict %d: %d", v, d)
			}
		}
		t.Fatalf("copies: %d on wan0, %d on wan1; want one each", len(got0), len(got1))
	}
	defer func() {
		if t.Failed() {
			t.Logf("sent and captured frames: %s", writePcap(t, t.Name(), frame, got0[0], got1[0]))
		}
	}()
	e0, ip0, g0 := dupOuter(t, got0[0])
	e1, ip1, g1 := dupOuter(t, got1[0])
	for _, c := range []struct {
		name          string
		eth           *layers.Ethernet
		ip            *layers.IPv4
		gre           *layers.GRE
		src, dst      net.IP
		smac, dmac    net.HardwareAddr
		key           uint32
		ttl, dscp     uint8
		wantDSCPFixed bool
	}{
		{"path 1 on wan0", e0, ip0, g0, net.IPv4(10, 2, 0, 1), net.IPv4(10, 3, 9, 9), topo.MACWan0, topo.MACWanNeigh, 1, 50, 0, false},
		{"path 5 on wan1", e1, ip1, g1, net.IPv4(10, 4, 0, 1), net.IPv4(10, 6, 9, 9), topo.MACWan1, topo.MACWan1Neigh, 5, 40, 10, true},
	} {
		if !c.ip.SrcIP.Equal(c.src) || !c.ip.DstIP.Equal(c.dst) {
			t.Errorf("%s: %s -> %s, want %s -> %s", c.name, c.ip.SrcIP, c.ip.DstIP, c.src, c.dst)
		}
		if c.eth.SrcMAC.String() != c.smac.String() || c.eth.DstMAC.String() != c.dmac.String() {
			t.Errorf("%s: MACs %s -> %s, want %s -> %s", c.name, c.eth.SrcMAC, c.eth.DstMAC, c.smac, c.dmac)
		}
		if !c.gre.KeyPresent || c.gre.Key != c.key || !c.gre.SeqPresent {
			t.Errorf("%s: key %d (present %v), seq present %v; want key %d and a sequence number", c.name, c.gre.Key, c.gre.KeyPresent, c.gre.SeqPresent, c.key)
		}
		if c.ip.TTL != c.ttl || c.ip.Id != 0 || c.ip.Flags&layers.IPv4DontFragment == 0 {
			t.Errorf("%s: TTL %d id %d flags %v, want TTL %d, id 0, DF", c.name, c.ip.TTL, c.ip.Id, c.ip.Flags, c.ttl)
		}
		if c.wantDSCPFixed && c.ip.TOS>>2 != c.dscp {
			t.Errorf("%s: DSCP %d, want the path's %d", c.name, c.ip.TOS>>2, c.dscp)
		}
	}
	if g0.Seq != g1.Seq {
		t.Errorf("copies carry sequence numbers %d and %d, want one", g0.Seq, g1.Seq)
	}
	if string(g0.Payload) != string(g1.Payload) {
		t.Error("the copies' inner packets differ")
	}
	inner := gopacket.NewPacket(g0.Payload, layers.LayerTypeIPv4, gopacket.Default)
	if ip, _ := inner.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip == nil || !ip.DstIP.Equal(net.IPv4(10, 13, 0, 5)) || ip.TTL != 63 {
		t.Errorf("inner packet %v: want the sent one to 10.13.0.5, TTL 63", inner)
	}
	after := snap(t, h)
	for _, id := range []uint32{1, 5} {
		if d := after.Paths[id].Tx.Packets - before.Paths[id].Tx.Packets; d != 1 {
			t.Errorf("path %d counted %d packets sent, want 1", id, d)
		}
	}

	// Member 1 (path 5) out of the usable set: no copy on wan1.
	steerSet(t, h, 0, 0b01, 0)
	before = snap(t, h)
	send()
	got0, got1 = cap0.gre(t), cap1.gre(t)
	if len(got0) != 1 || len(got1) != 0 {
		t.Errorf("path 5 not usable: %d copies on wan0, %d on wan1; want 1 and 0", len(got0), len(got1))
	}
	if d := snap(t, h).Reasons[bpf.ReasonDupNoCopy].Packets - before.Reasons[bpf.ReasonDupNoCopy].Packets; d != 1 {
		t.Errorf("dup_no_copy counted %d, want 1", d)
	}
}

// TestDedupWindow: GRE packets with sequence numbers over the paths of a
// redundant group are let through once per number, whichever path brings
// it first: a copy is dropped (dup_seen) within the window, reordered and
// late numbers not seen yet pass, numbers across the 32-bit wrap are
// placed right, a number older than the window is dropped (dup_late), one
// further ahead than one packet may move the window is dropped
// (dup_jump), and a run of either, each following the last, is taken for
// a sender whose numbers moved. Forged numbers, random or one ahead of
// the other, among the sender's own move nothing. Packets without a
// sequence number, and those of a path in no redundant group, are not
// de-duplicated; neither is a packet whose inner packet is malformed.
func TestDedupWindow(t *testing.T) {
	h := newHarness(t, dupConfig)
	greLanNeighbours(t, h)
	inner := greIP{src: "10.7.1.1", dst: "10.1.0.2", u: greUDP(40001, 7000)}.bytes(t, 64)
	over := func(path int, seq uint32, withSeq bool) []byte {
		switch path {
		case 1:
			return greFromRemote("10.3.9.9", layers.GRE{KeyPresent: true, Key: 1, SeqPresent: withSeq, Seq: seq}).frame(t, inner)
		case 2:
			return greFromRemote("10.3.9.8", layers.GRE{SeqPresent: withSeq, Seq: seq}).frame(t, inner)
		}
		o := greOuter{srcMAC: topo.MACWan1Neigh, dstMAC: topo.MACWan1, src: "10.6.9.9", dst: "10.4.0.1", ttl: 61,
			gre: layers.GRE{KeyPresent: true, Key: 5, SeqPresent: withSeq, Seq: seq}}
		return o.frame(t, inner)
	}
	in := map[int]string{1: "wan0", 2: "wan0", 5: "wan1"}
	dupReasons := []int{bpf.ReasonDupSeen, bpf.ReasonDupLate, bpf.ReasonDupJump}
	send := func(name string, frame []byte, path int, seq uint32, want int) {
		t.Helper()
		before := snap(t, h)
		ret, _ := h.run(frame, in[path])
		after := snap(t, h)
		if want == bpf.ReasonNone {
			if ret != bpf.XDPRedirect {
				t.Errorf("%s (path %d, seq %d): verdict %s, want redirect to the LAN", name, path, seq, verdictName(ret))
			}
			for _, r := range dupReasons {
				if after.Reasons[r].Packets != before.Reasons[r].Packets {
					t.Errorf("%s (path %d, seq %d): counted %s", name, path, seq, dataplane.ReasonNames[r])
				}
			}
			return
		}
		if ret != bpf.XDPDrop || after.Reasons[want].Packets-before.Reasons[want].Packets != 1 {
			t.Errorf("%s (path %d, seq %d): verdict %s, %s counted %d; want drop, counted once", name, path, seq,
				verdictName(ret), dataplane.ReasonNames[want], after.Reasons[want].Packets-before.Reasons[want].Packets)
		}
	}
	step := func(name string, path int, seq uint32, want int) {
		t.Helper()
		send(name, over(path, seq, true), path, seq, want)
	}
	seen, late, jump, fresh := bpf.ReasonDupSeen, bpf.ReasonDupLate, bpf.ReasonDupJump, bpf.ReasonNone
	// moveTo takes the window to seq the way a redundant group's sender
	// gets there: DedupConfirm arrivals out of reach, near each other
	// (copies over both paths, one reordered; those before the last
	// dropped as why), ending at seq.
	moveTo := func(name string, seq uint32, why int) {
		t.Helper()
		arrivals := []int32{-3, -3, -2, -4, -2, -1, -1}
		if len(arrivals) != bpf.DedupConfirm-1 {
			t.Fatalf("moveTo has %d arrivals before the last, want DedupConfirm - 1", len(arrivals))
		}
		for i, o := range arrivals {
			step(name+", held", 1+4*(i&1), seq+uint32(o), why)
		}
		step(name+", confirmed", 1, seq, fresh)
		step(name+", copy", 5, seq, seen)
	}
	const b = 20000
	step("first", 1, b, fresh)
	step("its copy, same path", 1, b, seen)
	step("its copy, other path", 5, b, seen)
	step("next, other path first", 5, b+1, fresh)
	step("its copy", 1, b+1, seen)
	step("ahead", 1, b+4, fresh)
	step("reordered", 5, b+3, fresh)
	step("reordered, copy", 1, b+3, seen)
	step("late, in the window", 1, b+2, fresh)
	step("late, copy", 5, b+2, seen)
	step("far back in the window", 1, b+4-16000, fresh)
	step("far back, copy", 5, b+4-16000, seen)
	step("as far ahead as one packet may move it", 1, b+4+bpf.DedupJump, fresh)
	step("back behind it, in the window", 5, b+5, fresh)
	top := uint32(b + 4 + bpf.DedupJump)

	// A forged number further ahead moves nothing: the sender's next
	// ones still pass, and so do its copies' twins' drops.
	step("one further ahead", 1, top+bpf.DedupJump+1, jump)
	step("the sender's next", 5, top+1, fresh)
	step("its copy", 1, top+1, seen)
	step("far ahead", 1, top+0x40000000, jump)
	step("older than the window", 5, top-16384-64, late)
	step("the sender's next", 1, top+2, fresh)
	// Random numbers every other packet, and a run that follows itself
	// but is broken by the sender's own: none moves the window.
	for i := range uint32(3 * bpf.DedupConfirm) {
		step("forged, random", 1, top+0x10000000+i*0x01234567, jump)
		step("the sender's, between forged", 5, top+3+i, fresh)
	}
	top += 3 + 3*bpf.DedupConfirm - 1
	for i := range uint32(bpf.DedupConfirm - 1) {
		step("forged run", 1, top+bpf.DedupJump+100+i, jump)
	}
	step("the sender's, breaking the forged run", 5, top+1, fresh)
	step("forged run, one more", 1, top+bpf.DedupJump+100+bpf.DedupConfirm, jump)
	step("the sender's next", 5, top+2, fresh)
	step("a copy is still a copy", 1, top+2, seen)
	top += 2

	// A malformed inner packet is dropped as such before the window
	// sees its number.
	bad := greFromRemote("10.3.9.9", layers.GRE{KeyPresent: true, Key: 1, SeqPresent: true, Seq: top + 1}).frame(t, inner[:len(inner)-3])
	send("malformed inner", bad, 1, top+1, bpf.ReasonGREInner)
	step("the number it carried, well formed", 1, top+1, fresh)
	top++

	// A sender whose numbers jumped past the window (a long outage):
	// held until a run confirms it.
	moveTo("jump past the window", 10*b, jump)
	step("older than the window now", 5, top, late)
	step("older than the window, again", 1, 10*b-16384-64, late)
	step("newest again: copy", 5, 10*b, seen)

	// A sender that starts again from 0: its numbers are late until a
	// run of DedupConfirm (8) says so; then they count afresh.
	moveTo("restarted sender", bpf.DedupConfirm-1, late)
	step("restarted sender, next", 5, bpf.DedupConfirm, fresh)

	// Across the wrap of 32-bit sequence numbers (forward in steps a
	// sender takes, confirmed).
	moveTo("on toward the wrap", 0x60000000, jump)
	moveTo("on toward the wrap", 0xc0000000, jump)
	moveTo("before the wrap", 0xfffffff8, jump)
	step("last before the wrap", 5, 0xffffffff, fresh)
	step("0 after the wrap", 1, 0, fresh)
	step("1 after the wrap", 5, 1, fresh)
	step("late across the wrap", 1, 0xfffffffe, fresh)
	step("late across the wrap, copy", 5, 0xfffffffe, seen)
	step("0, copy", 5, 0, seen)
	step("before the wrap, copy", 5, 0xfffffff8, seen)

	// Not de-duplicated: no sequence number, or a path in no group.
	for range 2 {
		if ret, _ := h.run(over(1, 0, false), "wan0"); ret != bpf.XDPRedirect {
			t.Errorf("no sequence number: verdict %s, want redirect", verdictName(ret))
		}
		step("path in no group", 2, 1, fresh)
	}
}

// TestXDPFeatures: the netdev netlink family's answer, which the agent
// reads to tell whether a redundant group's copies can leave by an
// interface: a veth takes redirected frames (ndo_xdp_xmit) only while
// its peer runs NAPI, here turned on and off by GRO on the peer.
func TestXDPFeatures(t *testing.T) {
	h := newHarness(t, dupConfig)
	xmit := func() bool {
		t.Helper()
		var f uint64
		if err := h.ns.Do(func() (err error) { f, err = loader.XDPFeatures(h.idx["wan1"]); return err }); err != nil {
			t.Fatal(err)
		}
		return f&loader.XDPActNDOXmit != 0
	}
	if xmit() {
		t.Fatal("wan1 takes redirected frames while its peer has neither XDP nor GRO")
	}
	if err := h.ns.SetGRO("wan1p", true); err != nil {
		t.Fatal(err)
	}
	if !xmit() {
		t.Error("wan1 takes no redirected frames with GRO on its peer")
	}
	if err := h.ns.SetGRO("wan1p", false); err != nil {
		t.Fatal(err)
	}
	if xmit() {
		t.Error("wan1 still takes redirected frames with GRO off its peer again")
	}
}
