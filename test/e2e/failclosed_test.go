// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/agent"
	"github.com/edgeplane/edgeplane/internal/lab"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// extraConfig is forwardConfig with one more interface, x0, that no rule
// uses: a change can remove it.
var extraConfig = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
  - {name: x0, role: lan, xdp: native}
` + forwardRules

// forwardRules is forwardConfig without its interfaces.
var forwardRules = forwardConfig[strings.Index(forwardConfig, "fars:"):]

// addVeth creates the veth pair name <-> name+"p" in namespace ns, up.
func addVeth(t *testing.T, ns, name string) {
	t.Helper()
	for _, c := range [][]string{
		{"ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"},
		{"ip", "link", "set", name, "up"},
		{"ip", "link", "set", name + "p", "up"},
	} {
		if out, err := nsRun(ns, c...); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
}

// sysctl sets kernel parameters in namespace ns.
func sysctl(t *testing.T, ns string, settings ...string) {
	t.Helper()
	if err := openNS(t, ns).Sysctl(settings...); err != nil {
		t.Fatal(err)
	}
}

// wantXDP checks which of the gateway's interfaces carry XDP.
func wantXDP(t *testing.T, g *gateway, want map[string]bool) {
	t.Helper()
	for itf, on := range want {
		if out, got := xdpOn(t, g.GW, itf); got != on {
			t.Errorf("%s: XDP attached %v, want %v:\n%s", itf, got, on, out)
		}
	}
}

// roAgent is an agent started in the gateway's network namespace and in
// a mount namespace of its own where /proc/sys is read-only, as in a
// container: writing a sysctl fails with EROFS.
type roAgent struct {
	cmd  *exec.Cmd
	done chan error
}

func startReadOnlySysctl(t *testing.T, g *gateway) *roAgent {
	t.Helper()
	testutil.RequireTool(t, "unshare")
	script := `mount --bind /proc/sys /proc/sys && mount -o remount,ro,bind /proc/sys && exec "$@"`
	cmd := exec.Command("nsenter", "--net=/run/netns/"+g.GW, "unshare", "--mount", "--propagation", "private",
		"sh", "-c", script, "sh", edgeplaneBin, "agent", "--config", g.cfgPath, "--pin-dir", g.PinDir, "--metrics-addr", g.MetricsAddr)
	cmd.Stdout, cmd.Stderr = g.logf, g.logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &roAgent{cmd: cmd, done: make(chan error, 1)}
	go func() { a.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-a.done
	})
	return a
}

// TestFailClosedFirstLoad: a first start that fails (here: forwarding
// cannot be turned on, /proc/sys is read-only) leaves no interface with
// XDP and no link pinned: a link left at generation 0 would pass every
// packet, rules or not.
func TestFailClosedFirstLoad(t *testing.T) {
	g := newGateway(t, extraConfig)
	addVeth(t, g.GW, "x0")
	sysctl(t, g.GW, "net.ipv4.conf.x0.forwarding=0")
	a := startReadOnlySysctl(t, g)
	select {
	case err := <-a.done:
		a.done <- err
		if err == nil {
			t.Fatal("agent started with forwarding off on x0 and /proc/sys read-only")
		}
	case <-time.After(readyTO):
		t.Fatal("agent still running")
	}
	if !strings.Contains(g.log(), "read-only file system") {
		t.Errorf("agent did not fail on the read-only sysctl:\n%s", g.log())
	}
	wantXDP(t, g, map[string]bool{lab.LanName: false, lab.WanName: false, "x0": false})
	if links, _ := filepath.Glob(filepath.Join(g.PinDir, "link_*")); len(links) > 0 {
		t.Errorf("links pinned by a start that failed: %v", links)
	}
}

// TestFailClosedReload: a SIGHUP reload that removes x0 and adds y0
// fails (y0's forwarding cannot be turned on): x0 keeps XDP, y0 gets none,
// and the gateway forwards on the last committed generation.
func TestFailClosedReload(t *testing.T) {
	g := newGateway(t, extraConfig)
	addVeth(t, g.GW, "x0")
	addVeth(t, g.GW, "y0")
	// Nothing for the agent to write at start; y0 is what the reload
	// will need.
	var set []string
	for _, itf := range []string{lab.LanName, lab.WanName, "x0"} {
		set = append(set, "net.ipv4.conf."+itf+".forwarding=1", "net.ipv6.conf."+itf+".forwarding=1", "net.ipv6.conf."+itf+".accept_ra=2")
	}
	sysctl(t, g.GW, append(set, "net.ipv4.conf.y0.forwarding=0")...)
	a := startReadOnlySysctl(t, g)
	if !waitFor(readyTO, func() bool { return strings.Contains(g.log(), "agent ready") }) {
		t.Fatal("agent not ready")
	}
	g.warmUp()
	wantXDP(t, g, map[string]bool{lab.LanName: true, lab.WanName: true, "x0": true, "y0": false})
	gen := g.stats().Generation

	g.writeConfig(strings.Replace(extraConfig, "name: x0", "name: y0", 1))
	if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return strings.Contains(g.log(), "config reload refused") }) {
		t.Fatal("reload not refused")
	}
	wantXDP(t, g, map[string]bool{lab.LanName: true, lab.WanName: true, "x0": true, "y0": false})
	if links, _ := filepath.Glob(filepath.Join(g.PinDir, "link_*")); len(links) != 3 {
		t.Errorf("link pins after the failed reload: %v, want lan0, wan0 and x0", links)
	}
	if s := g.stats(); s.Generation != gen {
		t.Errorf("generation %d after a refused reload, was %d", s.Generation, gen)
	}
	before := g.stats()
	if got := ping(g.A, lab.AddrB, 5, "0.1"); got != 5 {
		t.Errorf("ping after the failed reload: %d of 5", got)
	}
	if d := g.stats().pdr(20).Packets - before.pdr(20).Packets; d != 5 {
		t.Errorf("PDR 20 counted %d of 5 pings after the failed reload", d)
	}
}

// TestFailClosedApplyENOSPC: the config file and journal live on a full
// filesystem. An Apply that removes x0 and adds a drop rule cannot be
// journalled: it fails, nothing of it is in force and x0 keeps XDP. With
// room again the same Apply succeeds, and a restart after SIGKILL serves
// it.
func TestFailClosedApplyENOSPC(t *testing.T) {
	g := newGateway(t, extraConfig)
	addVeth(t, g.GW, "x0")
	state := filepath.Join(g.dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(state, unix.MNT_DETACH) })
	g.cfgPath = filepath.Join(state, "gateway.yaml")
	g.writeConfig(extraConfig)
	a := startAPIGateway(t, g)
	a.warmUp()
	wantXDP(t, g, map[string]bool{"x0": true})

	filler := filepath.Join(state, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 512)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	batch := []*pb.Operation{
		deleteOp(pb.Kind_KIND_INTERFACE, 0, "x0"),
		createOp(pdrObj(&pb.Pdr{Id: 40, Precedence: 1, Far: 3, Match: &pb.Match{In: "lan0", Proto: "udp", Dport: "6666"}})),
	}
	_, err = a.apply(t, batch...)
	if err == nil {
		t.Fatal("apply on a full filesystem succeeded")
	}
	if !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("apply on a full filesystem: %v, want ENOSPC", err)
	}
	wantXDP(t, g, map[string]bool{lab.LanName: true, lab.WanName: true, "x0": true})
	ctx, cancel := withToken(apiToken)
	defer cancel()
	if _, err := a.gc.GetPdr(ctx, &pb.GetByIDRequest{Id: 40}); err == nil {
		t.Error("PDR 40 of the failed apply is served")
	} else {
		wantCode(t, "get pdr 40", err, codes.NotFound)
	}
	s0 := a.stats()
	mustSendUDP(t, a.A, lab.AddrB, 6666, 4, 0, 16)
	s1 := a.stats()
	if d := s1.pdr(20).Packets - s0.pdr(20).Packets; d != 4 {
		t.Errorf("PDR 20 counted %d of 4 datagrams to 6666 after the failed apply (PDR 40 in force?)", d)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	a.mustApply(t, batch...)
	wantXDP(t, g, map[string]bool{lab.LanName: true, lab.WanName: true, "x0": false})
	mustSendUDP(t, a.A, lab.AddrB, 6666, 4, 0, 16)
	if d := a.stats().pdr(40).Packets - s1.pdr(40).Packets; d != 4 {
		t.Errorf("PDR 40 counted %d of 4 after the apply succeeded", d)
	}
	if err := a.StopAgent(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.start(a.args...)
	if _, err := a.gc.GetPdr(ctx, &pb.GetByIDRequest{Id: 40}); err != nil {
		t.Errorf("PDR 40 after SIGKILL and restart: %v", err)
	}
	wantXDP(t, g, map[string]bool{"x0": false})
}

// TestOneAgentPerConfigAndPinDir: a second agent on the same config file
// or the same pin dir, or edgeplane down on the pin dir, refuses, naming
// the lock and the agent holding it; the first keeps serving.
func TestOneAgentPerConfigAndPinDir(t *testing.T) {
	g := newGateway(t, forwardConfig)
	g.start()
	pid := g.Agent().Process.Pid
	// Should the second agent start after all, its pins go with the test.
	t.Cleanup(func() {
		_ = agent.Down(g.PinDir + "x")
		_ = os.Remove(g.PinDir + "x")
	})
	other := filepath.Join(g.dir, "other.yaml")
	if err := os.WriteFile(other, []byte(forwardConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, config, pinDir, want string }{
		{"same config", g.cfgPath, g.PinDir + "x", "lock config file " + g.cfgPath + ".lock"},
		{"same pin dir", other, g.PinDir, "lock pin dir " + g.PinDir},
	} {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+g.GW, edgeplaneBin, "agent", "--config", c.config,
			"--pin-dir", c.pinDir, "--metrics-addr", "127.0.0.1:9091").CombinedOutput()
		if err == nil {
			t.Errorf("%s: a second agent started", c.name)
			continue
		}
		for _, want := range []string{c.want, fmt.Sprintf("(pid %d)", pid)} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s: second agent said %q, want %q in it", c.name, out, want)
			}
		}
	}
	if _, err := os.Stat(g.PinDir + "x"); err == nil {
		t.Errorf("the refused agent made pin dir %s", g.PinDir+"x")
	}
	// edgeplane down under a running agent leaves its pins alone.
	out, err := exec.Command(edgeplaneBin, "down", "--pin-dir", g.PinDir).CombinedOutput()
	if err == nil {
		t.Errorf("edgeplane down under a running agent succeeded: %s", out)
	}
	for _, want := range []string{"lock pin dir " + g.PinDir, fmt.Sprintf("(pid %d)", pid)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("edgeplane down said %q, want %q in it", out, want)
		}
	}
	wantXDP(t, g, map[string]bool{"lan0": true, "wan0": true})
	g.warmUp()
}

// journalRecord frames a journal record as
// docs/persistence-and-upgrades.md describes it:
// CRC-32C of the JSON in 8 hex digits, a space, the JSON, a newline.
func journalRecord(seq int, apply string) string {
	body := fmt.Sprintf(`{"seq":%d,"apply":%s}`, seq, apply)
	return fmt.Sprintf("%08x %s\n", crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)), body)
}

// TestCorruptJournalRefused: a journal record damaged in the middle
// stops the agent from starting, with a message that names the file, the
// offset and the way out; taking the way out, the agent starts and serves
// the batches before the damage.
func TestCorruptJournalRefused(t *testing.T) {
	g := newGateway(t, forwardConfig)
	pdr := func(id int) string {
		return fmt.Sprintf(`{"operations":[{"create":{"pdr":{"id":%d,"precedence":%d,"far":3,"match":{"in":"lan0","proto":"udp","dport":"%d"}}}}]}`, id, id, 6000+id)
	}
	first := journalRecord(1, pdr(41))
	second := []byte(journalRecord(2, pdr(42)))
	second[20] ^= 0x20 // a flipped bit
	journal := first + string(second) + journalRecord(3, pdr(43))
	if err := os.WriteFile(g.cfgPath+".journal", []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.StartAgent(edgeplaneBin, g.cfgPath, g.logf); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Agent().Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("agent started on a corrupt journal")
		}
	case <-time.After(readyTO):
		t.Fatal("agent still running on a corrupt journal")
	}
	log := g.log()
	for _, want := range []string{g.cfgPath + ".journal", fmt.Sprintf("byte offset %d", len(first)), fmt.Sprintf("truncate -s %d %s.journal", len(first), g.cfgPath)} {
		if !strings.Contains(log, want) {
			t.Errorf("agent log does not say %q:\n%s", want, log)
		}
	}
	wantXDP(t, g, map[string]bool{lab.LanName: false, lab.WanName: false})
	if err := os.Truncate(g.cfgPath+".journal", int64(len(first))); err != nil {
		t.Fatal(err)
	}
	g.start()
	s0 := g.stats()
	mustSendUDP(t, g.A, lab.AddrB, 6041, 3, 0, 16)
	if d := g.stats().pdr(41).Packets - s0.pdr(41).Packets; d != 3 {
		t.Errorf("PDR 41 (the batch before the damage) counted %d of 3", d)
	}
}
