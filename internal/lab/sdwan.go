// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/internal/agent"
	"github.com/edgeplane/edgeplane/internal/bpf/stats"
	"github.com/edgeplane/edgeplane/internal/topo"
	"github.com/edgeplane/edgeplane/internal/wanem"
)

// RunRoot holds one directory per running lab: generated configs, logs,
// pid files and the emulators' control sockets.
const RunRoot = "/run/edgeplane/lab"

// SDWAN is the two-site lab of DESIGN.md, in network namespaces named
// after the lab (prefix p):
//
//	 p+a              p+gwa                p+wan1             p+gwb             p+b
//	eth0 ══════════ lan0 [XDP]  wan1 ═══ a [emulator] b ═══ wan1  [XDP] lan0 ══════════ eth0
//	10.1.0.2/24   10.1.0.1/24   172.16.1.1/24     172.16.1.2/24   10.2.0.1/24    10.2.0.2/24
//	fd01::2/64    fd01::1/64    wan2 ═══ a [emulator] b ═══ wan2    fd02::1/64     fd02::2/64
//	                            172.16.2.1/24     172.16.2.2/24
//	                                    p+wan2
//
// Each gateway runs an edgeplane agent with GRE path 1 over wan1 and path
// 2 over wan2 (GatewayConfig); each WAN link namespace runs an emulator
// (`edgeplane-dev wanem`) bridging its veths a and b with the link's delay,
// jitter, loss and rate. Processes run detached (own session) so the lab
// outlives the command that built it; Down finds them by their command
// lines, so it works without pid files and after a half-finished Up.
type SDWAN struct {
	Cfg    Config
	Bin    string // the edgeplane binary the agents and the lab's CLI calls run
	DevBin string // the edgeplane-dev binary the emulators run
	Name   string
	A, B   string // host namespaces
	GWA    string // gateway namespaces
	GWB    string
	RunDir string
	// Progress, when set, receives one line per step of Up and Down.
	Progress io.Writer
	// KeepOnFailure leaves what a failed Up built in place, to debug it.
	KeepOnFailure bool
	// AgentArgs are more arguments for each gateway's agent, by gateway
	// namespace (the fleet lab's --etcd ...).
	AgentArgs map[string][]string
	// AfterBuild runs once the namespaces and links are built, before
	// the processes start (the fleet lab's management links).
	AfterBuild func() error
}

// Interface names inside the lab's namespaces.
const (
	HostIf = "eth0"
	LinkA  = "a" // the emulator's side toward gateway A
	LinkB  = "b"
)

// Lab agents' metrics address, inside each gateway's namespace.
// MetricsAddr is where each gateway's agent serves its metrics, in the
// gateway's namespace.
const MetricsAddr = "127.0.0.1:9090"

// NewSDWAN names the lab of cfg; Up builds it. bin is the edgeplane binary
// to run the agents with, devBin the edgeplane-dev binary to run the
// emulators with.
func NewSDWAN(cfg Config, bin, devBin string) *SDWAN {
	p := cfg.Name
	return &SDWAN{
		Cfg: cfg, Bin: bin, DevBin: devBin, Name: p,
		A: p + "a", GWA: p + "gwa", GWB: p + "gwb", B: p + "b",
		RunDir: filepath.Join(RunRoot, p),
	}
}

// LinkNS returns the namespace of WAN link name.
func (l *SDWAN) LinkNS(link string) string { return l.Name + link }

// Namespaces lists the lab's namespaces from site A to site B.
func (l *SDWAN) Namespaces() []string {
	return []string{l.A, l.GWA, l.LinkNS("wan1"), l.LinkNS("wan2"), l.GWB, l.B}
}

// APISocket returns the unix socket a gateway's agent serves its gRPC
// API on (to root, without tokens).
func (l *SDWAN) APISocket(gwNS string) string {
	return filepath.Join(l.RunDir, strings.TrimPrefix(gwNS, l.Name)+"-api.sock")
}

// PinDir returns the bpffs pin dir of a gateway namespace.
func (l *SDWAN) PinDir(gwNS string) string { return "/sys/fs/bpf/" + gwNS }

// Socket returns the control socket of WAN link name's emulator.
func (l *SDWAN) Socket(link string) string { return filepath.Join(l.RunDir, link+".sock") }

func (l *SDWAN) step(format string, a ...any) {
	if l.Progress != nil {
		fmt.Fprintf(l.Progress, "==> "+format+"\n", a...)
	}
}

// proc is one of the lab's background processes.
type proc struct {
	Name string // gwa, gwb, wan1, wan2: also the stem of its log and pid files
	NS   string
	Argv []string
	// marker is the pair of arguments that identifies this process among
	// all of the machine's: the subcommand and the flag naming the lab's
	// own pin dir or socket.
	sub, flag, value string
}

func (l *SDWAN) procs() []proc {
	var ps []proc
	for _, link := range LinkNames {
		sock := l.Socket(link)
		imp, _ := l.Cfg.Links[link].Impairment()
		ns := l.LinkNS(link)
		ps = append(ps, proc{
			Name: link, NS: ns,
			// ip netns exec: the emulator needs only the namespace's
			// interfaces (its XDP programs are not pinned), and /run
			// stays shared, so the socket is reachable from outside.
			Argv: []string{"ip", "netns", "exec", ns, l.DevBin, "wanem", "--a", LinkA, "--b", LinkB,
				"--control", sock,
				"--delay", imp.Delay.String(), "--jitter", imp.Jitter.String(),
				"--loss", strconv.FormatFloat(imp.LossPercent, 'g', -1, 64),
				"--rate", strconv.FormatUint(imp.RateBps, 10)},
			sub: "wanem", flag: "--control", value: sock,
		})
	}
	for _, gw := range []string{l.GWA, l.GWB} {
		name := strings.TrimPrefix(gw, l.Name)
		pin := l.PinDir(gw)
		// nsenter --net: network namespace only, so the agent keeps the
		// host's bpffs and pins (ip netns exec remounts /sys). The API's
		// unix sockets in the lab's run dir, which lab down removes.
		argv := []string{"nsenter", "--net=/run/netns/" + gw, l.Bin, "agent",
			"--config", filepath.Join(l.RunDir, name+".yaml"),
			"--pin-dir", pin, "--metrics-addr", MetricsAddr,
			"--api-socket", l.APISocket(gw), "--rest-socket", filepath.Join(l.RunDir, name+"-rest.sock")}
		ps = append(ps, proc{
			Name: name, NS: gw, Argv: append(argv, l.AgentArgs[gw]...),
			sub: "agent", flag: "--pin-dir", value: pin,
		})
	}
	return ps
}

// matches reports whether argv (a process's command line) is p: its
// subcommand followed by flags (not `wanem set`, say) and its own flag.
func (p proc) matches(argv []string) bool {
	sub, val := false, false
	for i, a := range argv {
		if a == p.sub && i+1 < len(argv) && strings.HasPrefix(argv[i+1], "-") {
			sub = true
		}
		if (a == p.flag && i+1 < len(argv) && argv[i+1] == p.value) || a == p.flag+"="+p.value {
			val = true
		}
	}
	return sub && val
}

// Up builds the lab, starts its emulators and agents and waits until host
// A reaches host B over IPv4 and IPv6. A lab of this name that is already
// up with the same config is left running (Up reports false); anything
// else under the name (a lab with other settings, one missing a
// namespace or a process, leftovers of a failed run) is torn down and
// rebuilt (Up reports true). When Up fails it tears down what it built,
// unless KeepOnFailure.
func (l *SDWAN) Up(ctx context.Context) (rebuilt bool, err error) {
	if l.healthy() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := l.WaitReady(wctx)
		cancel()
		if err == nil {
			l.step("lab %s is already up with this config: left running", l.Name)
			return false, nil
		}
		l.step("lab %s is up but not ready (%v): rebuilding", l.Name, err)
	}
	if l.exists() {
		l.step("removing the earlier lab %s", l.Name)
	}
	if err := l.Down(); err != nil {
		return true, fmt.Errorf("remove earlier lab %s: %w", l.Name, err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, l.logTails())
			if l.KeepOnFailure {
				l.step("lab up failed: leaving it as it is for inspection (edgeplane-dev lab down removes it)")
				return
			}
			l.step("lab up failed: tearing down")
			if derr := l.Down(); derr != nil {
				err = errors.Join(err, fmt.Errorf("tear down: %w", derr))
			}
		}
	}()
	if err := l.writeRunDir(); err != nil {
		return true, err
	}
	l.step("building namespaces %s", strings.Join(l.Namespaces(), ", "))
	if err := l.build(ctx); err != nil {
		return true, err
	}
	if l.AfterBuild != nil {
		if err := l.AfterBuild(); err != nil {
			return true, err
		}
	}
	for _, p := range l.procs() {
		if p.sub == "wanem" {
			l.step("starting the %s emulator in %s (%s)", p.Name, p.NS, l.linkSummary(p.Name))
		} else {
			l.step("starting the agent in %s (pins under %s)", p.NS, p.value)
		}
		if err := l.start(p); err != nil {
			return true, err
		}
		// Emulators first: until they run, the gateways' WAN veths have
		// no peer that takes redirected frames, nor ARP answers.
		if p.sub == "wanem" {
			if err := l.waitEmulator(ctx, p); err != nil {
				return true, err
			}
		}
	}
	if err := l.WaitReady(ctx); err != nil {
		return true, err
	}
	return true, nil
}

func (l *SDWAN) linkSummary(link string) string {
	imp, _ := l.Cfg.Links[link].Impairment()
	return imp.String()
}

// healthy reports whether the lab is complete (every namespace, every
// process alive) and was built from the same config.
func (l *SDWAN) healthy() bool {
	cur, err := os.ReadFile(filepath.Join(l.RunDir, "lab.yaml"))
	if err != nil || !bytes.Equal(cur, l.Cfg.YAML()) {
		return false
	}
	for _, ns := range l.Namespaces() {
		if !topo.NSExists(ns) {
			return false
		}
	}
	found := l.findProcs()
	for _, p := range l.procs() {
		if len(found[p.Name]) == 0 || !l.pidAlive(p.Name) {
			return false
		}
	}
	return true
}

// exists reports whether anything of the lab is there.
func (l *SDWAN) exists() bool {
	if _, err := os.Stat(l.RunDir); err == nil {
		return true
	}
	for _, ns := range l.Namespaces() {
		if topo.NSExists(ns) {
			return true
		}
	}
	for _, gw := range []string{l.GWA, l.GWB} {
		if _, err := os.Stat(l.PinDir(gw)); err == nil {
			return true
		}
	}
	return false
}

func (l *SDWAN) writeRunDir() error {
	if err := os.MkdirAll(l.RunDir, 0o700); err != nil {
		return fmt.Errorf("create run dir: %w", err)
	}
	files := map[string][]byte{"lab.yaml": l.Cfg.YAML()}
	for _, side := range []byte{'a', 'b'} {
		b, err := GatewayConfig(l.Name, side)
		if err != nil {
			return err
		}
		files["gw"+string(side)+".yaml"] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(l.RunDir, name), b, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// build creates the namespaces, links, addresses and routes.
func (l *SDWAN) build(ctx context.Context) error {
	ns := map[string]*topo.NS{}
	defer func() {
		for _, n := range ns {
			n.Close() // the namespaces stay until Down
		}
	}()
	for _, name := range l.Namespaces() {
		n, err := topo.NewNS(name)
		if err != nil {
			return err
		}
		ns[name] = n
	}
	// Sysctls before the links exist, so the interfaces inherit the
	// defaults: no duplicate address detection (an address would stay
	// tentative for a second), no IPv6 at all on the WAN link namespaces
	// (a bridge has nothing to say on the link it emulates).
	noDAD := []string{"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"}
	sysctls := map[string][]string{
		l.A:              noDAD,
		l.B:              noDAD,
		l.GWA:            append(noDAD, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"),
		l.GWB:            append(noDAD, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"),
		l.LinkNS("wan1"): {"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
		l.LinkNS("wan2"): {"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
	}
	for _, name := range l.Namespaces() {
		if err := ns[name].Sysctl(sysctls[name]...); err != nil {
			return err
		}
	}
	// Hosts to gateways' lan0, then each WAN link's emulator ends a and
	// b to the gateways' WAN interfaces. The WAN links' MTU leaves room
	// for the GRE header (Config.MTU).
	links := [][2]topo.End{
		{{NS: ns[l.A], Name: HostIf, Addrs: []string{AddrA + "/24", AddrA6 + "/64"}},
			{NS: ns[l.GWA], Name: "lan0", Addrs: []string{GWLan + "/24", GWLan6 + "/64"}}},
		{{NS: ns[l.B], Name: HostIf, Addrs: []string{AddrB + "/24", AddrB6 + "/64"}},
			{NS: ns[l.GWB], Name: "lan0", Addrs: []string{GWB + "/24", GWB6 + "/64"}}},
	}
	mtu := l.Cfg.MTU
	for i, w := range LinkNames {
		wan := ns[l.LinkNS(w)]
		links = append(links,
			[2]topo.End{{NS: wan, Name: LinkA, MTU: mtu}, {NS: ns[l.GWA], Name: w, MTU: mtu, Addrs: []string{WanAddr(i+1, 'a') + "/24"}}},
			[2]topo.End{{NS: wan, Name: LinkB, MTU: mtu}, {NS: ns[l.GWB], Name: w, MTU: mtu, Addrs: []string{WanAddr(i+1, 'b') + "/24"}}})
	}
	for _, v := range links {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := topo.AddVeth(v[0], v[1]); err != nil {
			return err
		}
	}
	for _, h := range []struct {
		ns, gw, gw6 string
	}{{l.A, GWLan, GWLan6}, {l.B, GWB, GWB6}} {
		if err := ns[h.ns].AddRoute("default", h.gw, ""); err != nil {
			return err
		}
		if err := ns[h.ns].AddRoute("default", h.gw6, ""); err != nil {
			return err
		}
	}
	// IPv6 stays on on the gateways' WAN interfaces although the outer
	// packets are IPv4: decap hands an inner packet whose next hop is not
	// resolved yet to the kernel as received on the WAN interface, and the
	// kernel drops IPv6 arriving where IPv6 is disabled (the neighbour
	// would then never get resolved).
	// Hosts send through an XDP forwarder: no TX checksum offload, or TCP
	// arrives with partial checksums; GRO on gives their veth NAPI, without
	// which it refuses the frames the gateway's XDP redirects into it. The
	// gateways' own frames (ARP, ICMP) go out with full checksums too.
	for _, h := range []string{l.A, l.B} {
		if err := ns[h].SetTxChecksum(HostIf, false); err != nil {
			return err
		}
		if err := ns[h].SetGRO(HostIf, true); err != nil {
			return err
		}
	}
	for _, gw := range []string{l.GWA, l.GWB} {
		for _, itf := range append([]string{"lan0"}, LinkNames...) {
			if err := ns[gw].SetTxChecksum(itf, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// start launches p detached: its own session (a Ctrl-C on the terminal
// that ran `lab up` does not reach it), stdout and stderr appended to
// its log, its pid in its pid file.
func (l *SDWAN) start(p proc) error {
	logf, err := os.OpenFile(filepath.Join(l.RunDir, p.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open %s log: %w", p.Name, err)
	}
	defer logf.Close()
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	// Reap it if it exits while this process lives (the demo); after `lab
	// up` returns, init does.
	go func() { _ = cmd.Wait() }()
	pidf := filepath.Join(l.RunDir, p.Name+".pid")
	if err := os.WriteFile(pidf, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", pidf, err)
	}
	return nil
}

// waitEmulator waits until the emulator answers on its control socket.
func (l *SDWAN) waitEmulator(ctx context.Context, p proc) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		if _, err := wanem.Control(p.value, wanem.Request{Op: wanem.OpGet}); err == nil {
			return nil
		}
		if !l.pidAlive(p.Name) {
			return fmt.Errorf("the %s emulator exited", p.Name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the %s emulator did not answer on %s: %w", p.Name, p.value, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitReady waits until both agents have committed rules (generation > 0)
// and host A reaches host B over IPv4 and IPv6 through the overlay. It
// fails early when a process of the lab has exited.
func (l *SDWAN) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	alive := func() error {
		for _, p := range l.procs() {
			if !l.pidAlive(p.Name) {
				return fmt.Errorf("%s (%s) is not running", p.Name, p.sub)
			}
		}
		return nil
	}
	wait := func(what string, ok func() bool) error {
		for !ok() {
			if err := alive(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	}
	for _, gw := range []string{l.GWA, l.GWB} {
		pin := l.PinDir(gw)
		if err := wait("the agent in "+gw+" to commit its rules", func() bool {
			s, err := stats.PinnedSnapshot(pin)
			return err == nil && s.Gen > 0
		}); err != nil {
			return err
		}
	}
	l.step("agents ready; waiting until %s reaches %s and %s", l.A, AddrB, AddrB6)
	for _, dst := range []string{AddrB, AddrB6} {
		if err := wait(l.A+" to reach "+dst, func() bool {
			return exec.CommandContext(ctx, "ip", "netns", "exec", l.A, "ping", "-n", "-q", "-c", "1", "-W", "1", dst).Run() == nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// pidAlive reports whether the process Up started as name (its pid file)
// is alive. Up's own checks use it rather than findProcs: while nsenter
// execs the agent, /proc/PID/cmdline reads empty for a moment.
func (l *SDWAN) pidAlive(name string) bool {
	b, err := os.ReadFile(filepath.Join(l.RunDir, name+".pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && alive(pid)
}

// findProcs returns the pids of the lab's processes by name, found by
// their command lines in /proc (pid files can be missing or stale).
func (l *SDWAN) findProcs() map[string][]int {
	out := map[string][]int{}
	ps := l.procs()
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		if !alive(pid) {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		for _, p := range ps {
			if p.matches(argv) {
				out[p.Name] = append(out[p.Name], pid)
			}
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// Down stops the lab's processes, detaches the agents' XDP programs and
// removes their pins, deletes the namespaces and the run dir. It works on
// whatever part of the lab exists (a failed or interrupted Up, processes
// already killed) and succeeds when nothing of the lab is left.
func (l *SDWAN) Down() error {
	var errs []error
	found := l.findProcs()
	var pids []int
	// Agents first (they watch the interfaces), then the emulators.
	for _, name := range []string{"gwa", "gwb", "wan1", "wan2"} {
		pids = append(pids, found[name]...)
	}
	if len(pids) > 0 {
		l.step("stopping %d processes of lab %s", len(pids), l.Name)
	}
	errs = append(errs, stopPids(pids))
	for _, gw := range []string{l.GWA, l.GWB} {
		pin := l.PinDir(gw)
		if _, err := os.Stat(pin); err == nil {
			l.step("detaching the dataplane of %s (edgeplane down --pin-dir %s)", gw, pin)
			// Links hold the program on the gateway's interfaces: unpin
			// them while the interfaces still exist.
			if err := agent.Down(pin); err != nil {
				errs = append(errs, fmt.Errorf("edgeplane down --pin-dir %s: %w", pin, err))
			}
		}
	}
	var del []string
	for _, ns := range l.Namespaces() {
		if topo.NSExists(ns) {
			del = append(del, ns)
			if err := topo.DeleteNS(ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(del) > 0 {
		l.step("deleted namespaces %s", strings.Join(del, ", "))
	}
	if err := os.RemoveAll(l.RunDir); err != nil {
		errs = append(errs, fmt.Errorf("remove run dir: %w", err))
	}
	return errors.Join(errs...)
}

// stopPids sends SIGTERM, waits up to 5 s, then SIGKILLs what is left.
func stopPids(pids []int) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []int
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(200 * time.Millisecond)
			var stuck []string
			for _, pid := range left {
				if alive(pid) {
					stuck = append(stuck, strconv.Itoa(pid))
				}
			}
			if len(stuck) > 0 {
				return fmt.Errorf("processes %s survived SIGKILL", strings.Join(stuck, ", "))
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logTails returns the last lines of every process log, for errors.
func (l *SDWAN) logTails() string {
	var b strings.Builder
	for _, p := range l.procs() {
		data, err := os.ReadFile(filepath.Join(l.RunDir, p.Name+".log"))
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s log (last lines):\n    %s", p.Name, lastLines(string(data), 8))
	}
	return b.String()
}
