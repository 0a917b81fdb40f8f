// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/lab"
)

// pyForge is a sender on a WAN link of the lab, outside both gateways:
// it writes Ethernet frames straight onto the link's veth argv[1] (an
// AF_PACKET socket in the link's namespace, beside the emulator) with
// the outer addresses of the gateway at the other end of the link, as
// anyone on the underlay can. argv[2] is a JSON list of what to forge,
// each {"kind", "src_mac", "dst_mac", "src", "dst", "key", ...}; it
// sends one of each in turn, argv[3] frames a second, until its stdin
// closes, then prints how many of each kind it sent.
//
// Kinds: "gre-seq", a GRE packet of the path (key, sequence number) with
// a random sequence number and a well-formed inner UDP datagram to
// inner_dst; "probe-reply", an answer to the gateway's own probes of
// path index "path" with a sequence number far ahead of any it sent
// and a send time of now (an RTT of nothing), in each probe format
// edgeplane has used; "probe-request", a probe the gateway would send
// back to its peer if it took it for the peer's.
const pyForge = `import json, os, random, select, socket, struct, sys, time
ifname, specs, rate = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xffff) + (t >> 16)
    return (~t) & 0xffff
def ip4(src, dst, proto, payload, ttl=64):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, ttl, proto, 0,
                    socket.inet_aton(src), socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload
def frame(sp, payload):
    return bytes.fromhex(sp["dst_mac"].replace(":", "")) + bytes.fromhex(sp["src_mac"].replace(":", "")) + b"\x08\x00" + payload
def gre(sp, proto, body, seq=None):
    flags, opt = 0, b""
    if "key" in sp:
        flags |= 0x2000
        opt += struct.pack("!I", sp["key"])
    if seq is not None:
        flags |= 0x1000
        opt += struct.pack("!I", seq)
    return ip4(sp["src"], sp["dst"], 47, struct.pack("!HH", flags, proto) + opt + body)
def probe(magic, kind, path, seq, sent, mac, origin):
    # Each format: the first (24 bytes, magic EPRB) and the one with a
    # MAC (32 bytes, magic EPR2, with the asking end's address).
    if magic == 0x45505242:
        return struct.pack("!IBBHII", magic, kind, 0, path, seq, 0) + struct.pack("<Q", sent)
    return struct.pack("!IBBHI", magic, kind, 0, path, seq) + socket.inet_aton(origin) + struct.pack("<QQ", sent, mac)
def forge(sp, i):
    k = sp["kind"]
    if k == "gre-seq":
        udp = struct.pack("!HHHH", 40000 + i % 1000, 9, 16, 0) + struct.pack("!Q", i)
        inner = ip4(sp["inner_src"], sp["inner_dst"], 17, udp)
        return [frame(sp, gre(sp, 0x0800, inner, random.getrandbits(32)))]
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    out = []
    for magic in (0x45505242, 0x45505232):
        # The asking end is gateway A: the answer's destination, the
        # request's source.
        if k == "probe-reply":
            body = probe(magic, 2, sp.get("path", 0), random.getrandbits(32), now, random.getrandbits(64), sp["dst"])
        else:
            body = probe(magic, 1, sp.get("path", 0), random.getrandbits(32), now - 1000000000, random.getrandbits(64), sp["src"])
        out.append(frame(sp, gre(sp, 0x88b5, body)))
    return out
sent = {sp["kind"]: 0 for sp in specs}
print("ready", flush=True)
i, t0 = 0, time.monotonic()
while True:
    r, _, _ = select.select([sys.stdin], [], [], max(0.0, t0 + i / rate - time.monotonic()))
    if r and not sys.stdin.read(1):
        break
    if time.monotonic() < t0 + i / rate:
        continue
    sp = specs[i % len(specs)]
    for f in forge(sp, i):
        s.send(f)
        sent[sp["kind"]] += 1
    i += 1
print(json.dumps(sent))
`

// forgeSpec is one thing pyForge forges.
type forgeSpec struct {
	Kind     string `json:"kind"`
	SrcMAC   string `json:"src_mac"`
	DstMAC   string `json:"dst_mac"`
	Src      string `json:"src"`
	Dst      string `json:"dst"`
	Key      uint32 `json:"key"`
	Path     uint16 `json:"path,omitempty"`
	InnerSrc string `json:"inner_src,omitempty"`
	InnerDst string `json:"inner_dst,omitempty"`
}

// linkMAC returns the MAC address of interface itf in namespace ns.
func linkMAC(t *testing.T, ns, itf string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-j", "link", "show", "dev", itf).Output()
	if err != nil {
		t.Fatalf("ip -n %s link show %s: %v", ns, itf, err)
	}
	var l []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal(out, &l); err != nil || len(l) != 1 {
		t.Fatalf("ip -n %s link show %s: %q: %v", ns, itf, out, err)
	}
	return l[0].Address
}

// TestLabForgedWAN: a sender on wan1's underlay, outside both gateways,
// forges what GRE lets anyone forge who knows a path's addresses and key
// (all in clear on the wire): GRE packets of path 1 with random
// sequence numbers toward gateway B while A sends a redundant stream
// over both paths (the forged numbers must not empty B's
// de-duplication window), and answers to gateway A's probes of path 1
// with far sequence numbers and send times of now while A's monitor
// runs (they must not take the path down or fake its RTT). The stream
// loses under 1 %, both paths stay up with their links' RTTs, and the
// counters name what was refused.
func TestLabForgedWAN(t *testing.T) {
	st := newSteeredLab(t)
	l, gc, ctx := st.sdwanLab, st.gc, st.ctx
	gb, ctxb := labGatewayIn(t, l, l.GWB)
	reasons := func(c pb.GatewayClient) map[string]uint64 {
		t.Helper()
		s, err := c.GetStats(ctxb, &pb.GetStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for k, v := range s.GetReasons() {
			out[k] = v.GetPackets()
		}
		return out
	}
	link := l.LinkNS("wan1")
	macA, macB := linkMAC(t, l.GWA, "wan1"), linkMAC(t, l.GWB, "wan1")
	wanA, wanB := lab.WanAddr(1, 'a'), lab.WanAddr(1, 'b')
	gre := forgeSpec{Kind: "gre-seq", SrcMAC: macA, DstMAC: macB, Src: wanA, Dst: wanB, Key: 1,
		InnerSrc: "10.1.0.2", InnerDst: "10.2.0.2"}
	// Path 1 is gateway A's first path: stable index 0.
	reply := forgeSpec{Kind: "probe-reply", SrcMAC: macB, DstMAC: macA, Src: wanB, Dst: wanA, Key: 1, Path: 0}
	request := forgeSpec{Kind: "probe-request", SrcMAC: macA, DstMAC: macB, Src: wanA, Dst: wanB, Key: 1, Path: 0}
	// Path 1 is gateway A's first path: stable index 0.

	changes0 := stateChanges(t, gc, ctx)
	ra0, rb0 := reasons(gc), reasons(gb)
	port := strconv.Itoa(lab.RedundantPortLo)
	recv := startProc(t, l.B, pyGaps, lab.AddrB, port)
	// GRE toward B leaves by wan1's b side; answers toward A by its a
	// side. About one forged GRE packet per 30 of the stream's.
	towardB, _ := json.Marshal([]forgeSpec{gre, request})
	towardA, _ := json.Marshal([]forgeSpec{reply})
	fb := startProc(t, link, pyForge, lab.LinkB, string(towardB), "60")
	fa := startProc(t, link, pyForge, lab.LinkA, string(towardA), "20")
	const n, rate = 5000, 1000
	r, err := sendUDP(ctx, l.A, lab.AddrB, lab.RedundantPortLo, n, rate, 64)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != n {
		t.Fatalf("sent %d of %d", r.Sent, n)
	}
	time.Sleep(300 * time.Millisecond) // the slower path's last copies
	var sentB, sentA map[string]int
	fb.finish(&sentB)
	fa.finish(&sentA)
	var rep gapReport
	recv.finish(&rep)
	ra, rb := reasons(gc), reasons(gb)
	d := func(now, then map[string]uint64, k string) uint64 { return now[k] - then[k] }

	loss := 1 - float64(rep.Distinct)/n
	t.Logf("forged toward B: %v; toward A: %v", sentB, sentA)
	gaps := rep.Gaps
	if len(gaps) > 5 {
		gaps = gaps[:5]
	}
	t.Logf("redundant stream: %d of %d arrived (loss %.2f %%), %d gaps over 10 ms, the first %+v", rep.Distinct, n, 100*loss, len(rep.Gaps), gaps)
	t.Logf("B refused: dup_jump %d, dup_late %d, dup_seen %d, probe_bad_mac %d, bad_probe %d; A refused: probe_bad_mac %d, probe_stale %d, bad_probe %d",
		d(rb, rb0, "dup_jump"), d(rb, rb0, "dup_late"), d(rb, rb0, "dup_seen"), d(rb, rb0, "probe_bad_mac"), d(rb, rb0, "bad_probe"),
		d(ra, ra0, "probe_bad_mac"), d(ra, ra0, "probe_stale"), d(ra, ra0, "bad_probe"))
	if loss > 0.01 {
		t.Errorf("the redundant stream lost %.2f %% under forged GRE sequence numbers, want < 1 %%", 100*loss)
	}
	if rep.Packets != rep.Distinct {
		t.Errorf("host B received %d datagrams twice", rep.Packets-rep.Distinct)
	}
	if got, sent := d(rb, rb0, "dup_jump")+d(rb, rb0, "dup_late"), uint64(sentB["gre-seq"]); got < sent*9/10 || sentB["gre-seq"] < 100 {
		t.Errorf("B counted %d forged GRE packets as out of its window's reach (dup_jump + dup_late), forged %d", got, sent)
	}
	// Each forged probe comes in both formats: the first is no probe
	// any more (bad_probe), the one with a MAC fails it.
	if got, sent := d(ra, ra0, "probe_bad_mac"), uint64(sentA["probe-reply"]/2); got < sent || sent < 20 {
		t.Errorf("A counted %d forged answers as probe_bad_mac, forged %d", got, sent)
	}
	if got, sent := d(rb, rb0, "probe_bad_mac"), uint64(sentB["probe-request"]/2); got < sent || sent < 20 {
		t.Errorf("B counted %d forged requests as probe_bad_mac, forged %d", got, sent)
	}
	if changes := stateChanges(t, gc, ctx); changes != changes0 {
		t.Errorf("gateway A's paths changed state under forged answers: %v, was %v", changes, changes0)
	}
	ps, err := gc.ListPathStatus(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps.GetPaths() {
		t.Logf("path %d: %s, RTT %d µs (min %d, last %d), probes %d/%d", p.GetPath(), p.GetState(), p.GetRttUs(), p.GetMinRttUs(),
			p.GetLastRttUs(), p.GetProbesAnswered(), p.GetProbesSent())
		if p.GetState() != "up" {
			t.Errorf("path %d is %s under forged answers", p.GetPath(), p.GetState())
		}
		// wan1 is 2 ms each way, wan2 5 ms: a forged send time of now
		// would show as an RTT near 0.
		if lo := map[uint32]uint64{1: 3500, 2: 9500}[p.GetPath()]; p.GetMinRttUs() < lo {
			t.Errorf("path %d: min RTT %d µs, below its link's %d µs: a forged answer was timed", p.GetPath(), p.GetMinRttUs(), lo)
		}
	}
}

// stateChanges returns each of a gateway's paths with its state and
// since when it has been in it: a change of state changes it.
func stateChanges(t *testing.T, gc pb.GatewayClient, ctx context.Context) string {
	t.Helper()
	r, err := gc.ListPathStatus(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, p := range r.GetPaths() {
		s += fmt.Sprintf("%d %s since %s; ", p.GetPath(), p.GetState(), p.GetSince())
	}
	return s
}

// TestLabProbeSecret: a path's probe secret is not shown by the API:
// `get paths -o yaml` and `-o json` and the REST API give its redacted
// form (a fingerprint), never the key, nor does the agent's log; that
// form applied back (the interval changed) keeps the secret, so the path
// stays up; another secret's redacted form is refused at its field,
// nothing applied; the config file the agent writes back holds the key
// and is its owner's alone.
func TestLabProbeSecret(t *testing.T) {
	st := newSteeredLab(t)
	l, gc, ctx := st.sdwanLab, st.gc, st.ctx
	key := lab.PathSecret(l.Name, 1)
	sock := "unix://" + l.APISocket(l.GWA)
	for _, format := range []string{"yaml", "json"} {
		out, err := exec.Command(edgeplaneBin, "get", "paths", "-o", format, "--server", sock).CombinedOutput()
		if err != nil || strings.Contains(string(out), key) || !strings.Contains(string(out), "redacted:") {
			t.Errorf("get paths -o %s shows the secret, or no redacted form: %v\n%s", format, err, out)
		}
	}
	rest, err := exec.Command("curl", "-sS", "--unix-socket", filepath.Join(l.RunDir, "gwa-rest.sock"), "http://x/v1/paths").CombinedOutput()
	if err != nil || strings.Contains(string(rest), key) || !strings.Contains(string(rest), "redacted:") {
		t.Errorf("GET /v1/paths shows the secret, or no redacted form: %v\n%s", err, rest)
	}

	shown, err := exec.Command(edgeplaneBin, "get", "paths", "-o", "yaml", "--server", sock).Output()
	if err != nil {
		t.Fatal(err)
	}
	// addToMonitor adds field to path 1's monitor in doc, beside its
	// secret, at its indentation.
	addToMonitor := func(doc, field string) string {
		m := regexp.MustCompile(`(?m)^( *)secret: .*$`).FindStringSubmatchIndex(doc)
		if m == nil {
			t.Fatalf("no secret in\n%s", doc)
		}
		return doc[:m[1]] + "\n" + doc[m[2]:m[3]] + field + doc[m[1]:]
	}
	edited := addToMonitor(string(shown), "interval: 50ms")
	file := filepath.Join(t.TempDir(), "paths.yaml")
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(edgeplaneBin, "apply", "-f", file, "--server", sock).CombinedOutput(); err != nil {
		t.Fatalf("apply of get's output, interval changed: %v\n%s\n%s", err, out, edited)
	}
	p, err := gc.GetPath(ctx, &pb.GetByIDRequest{Id: 1})
	if err != nil || p.GetMonitor().GetInterval() != "50ms" || !strings.HasPrefix(p.GetMonitor().GetSecret(), "redacted:") {
		t.Fatalf("path 1 after the apply: %v %v", p, err)
	}
	// Still signed with the same secret: the peer still answers.
	time.Sleep(500 * time.Millisecond)
	before, _ := gc.ListPathStatus(ctx, &pb.ListRequest{})
	time.Sleep(500 * time.Millisecond)
	after, _ := gc.ListPathStatus(ctx, &pb.ListRequest{})
	if s := after.GetPaths()[0]; s.GetState() != "up" || s.GetProbesAnswered() <= before.GetPaths()[0].GetProbesAnswered() {
		t.Errorf("path 1 after keeping its secret: %v", s)
	}

	other := strings.Replace(string(shown), strings.TrimPrefix(p.GetMonitor().GetSecret(), "redacted:"), "0badc0de", 1)
	if err := os.WriteFile(file, []byte(addToMonitor(other, "window: 50")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(edgeplaneBin, "apply", "-f", file, "--server", sock).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "monitor.secret: redacted:0badc0de is how a secret is shown, not one") {
		t.Errorf("apply of another secret's redacted form: %v\n%s", err, out)
	}
	if p, _ := gc.GetPath(ctx, &pb.GetByIDRequest{Id: 1}); p.GetMonitor().GetWindow() == 50 {
		t.Error("the refused apply changed path 1")
	}

	cfgFile := filepath.Join(l.RunDir, "gwa.yaml")
	if st, err := os.Stat(cfgFile); err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("the agent's config file with the secret: %v, mode %v", err, st.Mode().Perm())
	}
	if b, _ := os.ReadFile(cfgFile); !strings.Contains(string(b), key) {
		t.Errorf("the agent's config file lost the secret:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(l.RunDir, "gwa.log")); strings.Contains(string(b), key) {
		t.Error("the agent's log shows the secret")
	}
}
