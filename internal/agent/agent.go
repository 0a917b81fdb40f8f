// SPDX-License-Identifier: Apache-2.0

// Package agent runs one gateway: it loads or adopts the pinned dataplane,
// attaches it to the configured interfaces, writes the rules, serves
// metrics and applies config reloads.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/fibwatch"
	"github.com/edgeplane/edgeplane/internal/fleet"
	"github.com/edgeplane/edgeplane/internal/n4"
	"github.com/edgeplane/edgeplane/internal/pathmon"
	"github.com/edgeplane/edgeplane/internal/rules"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/upf"
)

// Options configure an agent.
type Options struct {
	ConfigPath   string
	PinDir       string
	MetricsAddr  string // empty disables the metrics server
	DetachOnExit bool
	// GRPCAddr and RESTAddr are the control API's TCP listen
	// addresses; empty disables one. They need APITokens or APIJWTKey,
	// or APILoopbackNoAuth (and then serve loopback only).
	GRPCAddr, RESTAddr string
	// APISocket and RESTSocket are the control API's unix sockets,
	// served without tokens to root only: "" places them in the
	// gateway's run dir (DefaultAPISocket, DefaultRESTSocket), "none"
	// disables one.
	APISocket, RESTSocket string
	// APILoopbackNoAuth lets the TCP API serve without tokens, on
	// loopback only.
	APILoopbackNoAuth bool
	// APITokens is a file of static bearer tokens, APIJWTKey a file
	// holding the HMAC key of accepted JWTs, JWT what such a JWT must
	// satisfy. SIGHUP re-reads both files.
	APITokens, APIJWTKey string
	JWT                  api.JWTRules
	// TLSCert and TLSKey serve the API over TLS when both are set;
	// SIGHUP re-reads them.
	TLSCert, TLSKey string
	// NormalGracePeriods keeps commits from expediting their RCU grace
	// period (rcu.ExpediteGracePeriods): slower commits (5-20 ms here),
	// no inter-processor interrupts for them.
	NormalGracePeriods bool
	// Pprof serves Go's profiles under /debug/pprof/ on the metrics
	// listener, which must then be on loopback; PprofAddr serves them
	// on a listener of their own, on loopback unless
	// PprofBeyondLoopback: profiles are unauthenticated, show what the
	// agent's memory holds (heap, goroutine stacks with their
	// arguments) and cost CPU on demand (30 s CPU profiles, traces).
	Pprof               bool
	PprofAddr           string
	PprofBeyondLoopback bool
	// PodList is where CPU strategies' pod_labels are read (a URL, such
	// as the kubelet's /pods, or a file); "": none.
	PodList string
	// SchedExt schedules every task with edgeplane's sched_ext
	// scheduler (internal/sched/scx), priority strategies' processes first;
	// without sched_ext in the kernel the agent says so once and keeps
	// to the real-time policies.
	SchedExt bool
	// N4Addr serves N4 (PFCP, internal/n4) on this UDP address (""
	// none), as node N4NodeID ("": the address's IP).
	N4Addr, N4NodeID string
	// N3Addr is the user plane's GTP-U address on N3 (an IPv4 address,
	// an IPv6 one, or one of each, comma-separated; "": none), where XDP answers GTP-U (bpf/lib/gtpu.h). It needs
	// N4Addr: N3 carries the sessions N4 sets up.
	N3Addr string
	// N3EchoInterval is how often the user plane sends an Echo Request
	// to each access peer of its multi-access sessions (0: 1 s).
	N3EchoInterval time.Duration
	// Fleet joins the agent to a fleet in etcd (nil: the config file
	// and the API are its only sources).
	Fleet *FleetOptions
	Log   *slog.Logger
}

// Agent is one running gateway agent.
type Agent struct {
	opts Options
	log  *slog.Logger

	// fileMu serialises reading the config file (reloads) and writing
	// it (folds). commitMu serialises whole changes (reloads, API
	// applies: check, attach, commit, journal). Lock order: fileMu,
	// commitMu, mu.
	fileMu   sync.Mutex
	commitMu sync.Mutex
	// syncReq asks the syncer to fold the journal into the config file.
	syncReq chan struct{}
	// journal holds API batches not yet in the config file; seq numbers
	// the last batch committed. Guarded by commitMu.
	journal *journal
	seq     uint64
	// applies are the Applies waiting to commit as a group (apply.go).
	applies applyQueue
	// mu guards the fields below it; a change holds it from checking
	// the batch to the flip, so readers see one committed config.
	mu sync.Mutex
	// store is the config that serves, comp its compiled form.
	store *config.Store
	comp  *rules.Compiler
	gen   uint32
	dp    *loader.Dataplane
	mon   *pathmon.Monitor // probes and judges the paths, steers by them
	// down lists the backends health checks took out; a reload's fresh
	// compile takes them out again.
	down map[healthKey]bool

	backendUp *prometheus.GaugeVec
	// dupTxReady: whether each interface redundant groups broadcast to
	// takes redirected frames (watchDupTx).
	dupTxReady *prometheus.GaugeVec

	reloads *prometheus.CounterVec
	// fo is FlowOpt's control loop (fairness rounds, relief).
	fo *foLoop
	// n4 is the N4 endpoint (nil: none).
	n4 *n4.Node
	// upf carries N4's sessions where N3 is served (n3, n3v6: its GTP-U
	// addresses).
	upf  *upf.Plane
	idle *upf.Buffer
	em   *upf.EndMarkers
	// peers tracks the GTP-U peers of multi-access sessions' accesses.
	peers *upf.Peers
	n3    netip.Addr
	n3v6  netip.Addr
	// strategies runs the CPU strategies.
	strategies *sched.Runtime

	// member keeps the agent in step with its fleet (nil: none),
	// through fleetClient.
	member      *fleet.Member
	fleetClient io.Closer

	// cfgLock is the config file's lock; boot what the start read:
	// the config, the journal's batches replayed and skipped, the
	// API's options.
	cfgLock *lock
	boot    struct {
		cfg      *config.Config
		replayed int
		skipped  []skippedBatch
		api      api.Options
	}
	// reg is the agent's metrics registry, where each subsystem
	// registers its own; errc takes a server's failure, which ends Run.
	reg  *prometheus.Registry
	errc chan error
	// fib follows the kernel's routing for the next hops.
	fib *fibwatch.Watch

	// apiAuth and apiCert are the API's credentials (nil: none), re-read
	// on SIGHUP.
	apiAuth *api.Auth
	apiCert *api.Cert
	// apiRefused counts what the TCP API refuses (by source budget too).
	apiRefused *prometheus.CounterVec

	// held keeps the XDP links attached whatever happens to their pins;
	// guard checks them and the pins against the kernel (guard.go).
	// pinLock is the pin dir's lock, taken again by the guard when it
	// makes a removed pin dir again (commitMu held).
	held    *loader.Links
	guard   *guard
	pinLock *lock
}

// hostResolver returns a rules.Resolver that asks the kernel for each
// name once (SIOCGIFINDEX, one ioctl) and answers repeats from memory: a
// compile resolves a name per rule, and net.InterfaceByName dumps every
// link each time (~60 us).
func hostResolver() rules.Resolver {
	byName := map[string]uint32{}
	return func(name string) (uint32, error) {
		if idx, ok := byName[name]; ok {
			return idx, nil
		}
		idx, err := ifindexIoctl(name)
		if err != nil {
			return 0, fmt.Errorf("no interface %q on this host", name)
		}
		byName[name] = idx
		return idx, nil
	}
}

// ifindexIoctl returns name's ifindex in the calling thread's network
// namespace.
func ifindexIoctl(name string) (uint32, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, err
	}
	return ifr.Uint32(), nil
}

func limitsOf(cfg *config.Config) bpf.Limits {
	return bpf.Limits{Flows: cfg.Limits.Flows, Rules: cfg.Limits.Rules, MaglevSize: cfg.Limits.MaglevTable, Conns: cfg.Limits.Connections, Sessions: cfg.Limits.Sessions}
}

// CheckHost compiles cfg against this host's interfaces without touching the
// dataplane: what `edgeplane validate` and the agent check before loading.
func CheckHost(cfg *config.Config) error {
	if err := checkHostRules(cfg); err != nil {
		return err
	}
	return sched.CheckConfig(cfg, nil)
}

// checkHostRules is CheckHost without the strategies: what the
// dataplane needs of the host.
func checkHostRules(cfg *config.Config) error {
	_, _, err := rules.Compile(cfg, hostResolver(), rules.NewAllocs(cfg.Limits.Rules, nil, nil), limitsOf(cfg))
	return err
}

// start opens (or adopts) the dataplane and applies cfg. Pinned maps of
// another layout or size are taken over (upgrade.go).
func (a *Agent) start(cfg *config.Config) error {
	if err := recoverUpgrade(a.opts.PinDir, a.log); err != nil {
		return err
	}
	dp, err := loader.Open(limitsOf(cfg), a.opts.PinDir)
	if errors.Is(err, bpf.ErrIncompatible) {
		return a.upgrade(cfg, err)
	}
	if err != nil {
		return err
	}
	newProg, err := dp.EnsureProgram(a.opts.PinDir, a.log)
	if err != nil {
		dp.Close()
		return err
	}
	if err := enableForwarding(cfg.Interfaces, a.log); err != nil {
		dp.Close()
		return err
	}
	if newProg {
		// The links there are switch to the new program before the
		// commit, so no old program runs a generation this build
		// compiled.
		var pinned []config.Interface
		for _, itf := range cfg.Interfaces {
			if _, err := os.Stat(filepath.Join(a.opts.PinDir, loader.LinkPrefix+itf.Name)); err == nil {
				pinned = append(pinned, itf)
			}
		}
		if _, err := dp.Attach(a.opts.PinDir, ifacesOf(pinned), true, a.held, a.log); err != nil {
			dp.Close()
			return err
		}
	}
	if err := a.commitAdopted(cfg, dp); err != nil {
		return err
	}
	// Commit first, attach after: a link made before the first commit
	// would run generation 0, which matches nothing and passes every
	// packet to the kernel, and a start that then failed would leave it
	// so. An adopted link kept running the last committed generation
	// until this one flipped.
	if _, err := dp.Attach(a.opts.PinDir, ifacesOf(cfg.Interfaces), false, a.held, a.log); err != nil {
		dp.Close()
		return err
	}
	if err := loader.DetachExcept(a.opts.PinDir, ifacesOf(cfg.Interfaces), a.held, a.log); err != nil {
		dp.Close()
		return err
	}
	dp.RemoveStalePrograms(a.opts.PinDir)
	return nil
}

// commitAdopted commits cfg as the next generation of dp, whose maps hold
// what an earlier agent (or build) committed: every object keeps the
// statistics index and place it had there.
func (a *Agent) commitAdopted(cfg *config.Config, dp *loader.Dataplane) error {
	// Keep each PDR's statistics index from the live generation so its
	// counters continue across restarts.
	live, _, err := dp.ActiveRules()
	if err != nil {
		dp.Close()
		return err
	}
	seed := map[uint32]uint32{}
	for _, r := range live {
		seed[uint32(r.Prio)] = r.Stats
	}
	paths, err := dp.ActivePaths()
	if err != nil {
		dp.Close()
		return err
	}
	pathSeed := map[uint32]uint32{}
	for _, p := range paths {
		pathSeed[p.Id] = p.Stats
	}
	a.dp = dp
	a.mu.Lock()
	defer a.mu.Unlock()
	// FARs and services keep their places too: a connection pinned to a
	// backend's FAR index keeps it, and a service's counters continue.
	fars, services, err := dp.ActiveFARs()
	if err != nil {
		dp.Close()
		return err
	}
	farSeed, svcSeed := map[uint32]uint32{}, map[uint32]uint32{}
	for idx, f := range fars {
		if idx < cfg.Limits.Rules && f.Id != 0 && f.Action != bpf.ActUnNAT {
			farSeed[f.Id] = idx
		}
	}
	for _, sv := range services {
		svcSeed[sv.Id] = sv.Tag
	}
	allocs := rules.NewAllocs(cfg.Limits.Rules, seed, pathSeed)
	allocs.FAR = rules.NewStatsAlloc(cfg.Limits.Rules, farSeed)
	allocs.Service = rules.NewStatsAlloc(bpf.MaxServices, svcSeed)
	// And each backend its counter index, so its counters continue.
	allocs.Members = map[uint32]map[uint32]uint32{}
	for idx, ref := range dp.ActiveMembers() {
		if ref.FAR == 0 || svcSeed[ref.Service] != idx/bpf.MaxMembers {
			continue // a service's replies, or a service that moved
		}
		if allocs.Members[ref.Service] == nil {
			allocs.Members[ref.Service] = map[uint32]uint32{}
		}
		allocs.Members[ref.Service][ref.FAR] = idx % bpf.MaxMembers
	}
	if err := a.load(cfg, allocs); err != nil {
		dp.Close()
		return err
	}
	return nil
}

// load compiles cfg whole and commits it as the next generation; a.mu
// held. The allocators of statistics indexes carry over from allocs.
func (a *Agent) load(cfg *config.Config, allocs rules.Allocs) error {
	down := map[uint32]map[uint32]bool{}
	for k := range a.down {
		if down[k.svc] == nil {
			down[k.svc] = map[uint32]bool{}
		}
		down[k.svc][k.far] = true
	}
	comp, err := rules.BuildDown(cfg, hostResolver(), allocs, a.dp.Limits, down)
	if err != nil {
		return err
	}
	if err := a.setInterfaces(cfg.Interfaces); err != nil {
		return err
	}
	start := time.Now()
	gen := comp.Generation()
	n, err := a.dp.Commit(gen)
	if err != nil {
		return commitError(err)
	}
	a.store, a.comp, a.gen = config.NewStore(cfg), comp, n
	a.log.Info("rules committed", "generation", n, "pdrs", len(cfg.PDRs), "entries", len(gen.Rules), "groups", len(gen.Groups), "took", time.Since(start))
	return nil
}

// setInterfaces points the devmap and the ICMP source addresses at the
// interfaces; address changes reach refreshIfAddrs over netlink.
func (a *Agent) setInterfaces(ifaces []config.Interface) error {
	resolve := hostResolver()
	var tx []uint32
	for _, itf := range ifaces {
		idx, err := resolve(itf.Name)
		if err != nil {
			return err
		}
		tx = append(tx, idx)
	}
	if err := a.dp.SetTx(tx); err != nil {
		return err
	}
	return a.dp.SetIfAddrs(ifAddrs(ifaces))
}

// refreshIfAddrs rewrites the interface addresses XDP sends ICMP from.
func (a *Agent) refreshIfAddrs() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.dp.SetIfAddrs(ifAddrs(a.store.Interfaces())); err != nil {
		a.log.Error("update interface addresses", "error", err)
	}
}

// Reload re-reads the config file and applies it whole. An invalid file
// changes nothing.
func (a *Agent) Reload() error {
	a.fileMu.Lock()
	defer a.fileMu.Unlock()
	// No batch may be journalled between reading the journal and
	// committing what it replays.
	a.commitMu.Lock()
	defer a.commitMu.Unlock()
	cfg, _, _, skipped, err := loadState(a.opts.ConfigPath)
	if err != nil {
		return err
	}
	for _, s := range skipped {
		a.log.Error("journal batch skipped: the edited config file no longer takes it (kept in "+journalPath(a.opts.ConfigPath)+".skipped)", "error", s.err)
	}
	if limitsOf(cfg) != a.dp.Limits {
		return config.Errors{{Path: "limits", Reason: "map sizes cannot change while running; restart the agent to resize (it takes the pinned state over)"}}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// Check the whole change against the host before touching links
	// (the strategies it changes: one the host now refuses that the
	// file keeps as it was refuses no reload).
	if err := checkHostRules(cfg); err != nil {
		return err
	}
	if err := sched.CheckConfig(cfg, a.store.List(config.KindStrategy)); err != nil {
		return err
	}
	old := a.store.Interfaces()
	added, err := a.links(old, cfg.Interfaces)
	if err != nil {
		return err
	}
	if err := a.load(cfg, a.comp.Allocs()); err != nil {
		a.restoreInterfaces(old, added)
		return err
	}
	if err := loader.DetachExcept(a.opts.PinDir, ifacesOf(cfg.Interfaces), a.held, a.log); err != nil {
		a.log.Error("detach interfaces no longer in config", "error", err)
	}
	// The file now lags what serves by the journal's batches (and a
	// skipped batch must not come back): fold them in, once the skipped
	// ones are kept aside.
	if err := keepSkipped(a.opts.ConfigPath, skipped); err != nil {
		a.log.Error("keep skipped batches; the journal keeps them until the next fold", "error", err)
	}
	a.syncSoon()
	a.strategies.Wake()
	return nil
}

// links attaches the dataplane to the interfaces of a change, new ones
// included, and returns the links it created. It detaches none: the
// caller does that with detachExcept once the change has committed, and
// takes the created ones off with restoreInterfaces if it failed.
func (a *Agent) links(old, ifaces []config.Interface) ([]string, error) {
	if reflect.DeepEqual(old, ifaces) {
		return nil, nil
	}
	if err := enableForwarding(ifaces, a.log); err != nil {
		return nil, err
	}
	return a.dp.Attach(a.opts.PinDir, ifacesOf(ifaces), false, a.held, a.log)
}

// restoreInterfaces puts the interfaces back as they were before a
// change that failed: the transmit and address maps for old, and no link
// on the interfaces the change attached.
func (a *Agent) restoreInterfaces(old []config.Interface, added []string) {
	if err := a.setInterfaces(old); err != nil {
		a.log.Error("restore interfaces", "error", err)
	}
	loader.DetachAdded(added, a.held, a.log)
}

// Config returns the config now serving (api.Backend). It is replaced,
// never modified, by a change.
func (a *Agent) Config() *config.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.store.Config()
}

// View runs fn on the store that serves, a.mu held (api.Backend).
func (a *Agent) View(fn func(*config.Store)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn(a.store)
}

// Snapshot reads the dataplane counters (dataplane.Counters).
func (a *Agent) Snapshot() (*dataplane.Snapshot, error) { return a.dp.Snapshot() }

// Flows reads the top n flows and names the interfaces they came in on
// (dataplane.Counters).
func (a *Agent) Flows(n int) ([]dataplane.FlowStat, map[uint32]string, error) {
	flows, err := a.dp.Flows(n)
	if err != nil {
		return nil, nil, err
	}
	names := map[uint32]string{}
	for _, f := range flows {
		if _, ok := names[f.Ifindex]; !ok {
			if itf, err := net.InterfaceByIndex(int(f.Ifindex)); err == nil {
				names[f.Ifindex] = itf.Name
			}
		}
	}
	return flows, names, nil
}

// stop releases the agent's handles. Pinned links and maps stay, so the
// dataplane keeps forwarding, unless DetachOnExit asks to remove it.
func (a *Agent) stop() {
	a.commitMu.Lock()
	defer a.commitMu.Unlock()
	if a.opts.DetachOnExit {
		if err := loader.Down(a.opts.PinDir); err != nil {
			a.log.Error("detach", "error", err)
		} else {
			a.log.Info("detached and removed pins", "pin_dir", a.opts.PinDir)
		}
	} else {
		// Pins removed since the last check are made again first: a
		// link whose pin is gone would go with the fd closed below.
		var c guardCheck
		if a.checkPins(&c, true) {
			for _, name := range a.held.Names() {
				a.checkLinkPin(&c, name, true)
			}
		}
		for _, r := range c.repairs {
			a.log.Warn("dataplane: repaired what was taken away behind the agent's back", "what", r.What)
		}
		for _, p := range c.problems {
			a.log.Error("dataplane: stopping with a pin missing: what it holds goes with the agent", "problem", p)
		}
	}
	a.held.CloseAll()
	a.dp.Close()
}

// enableForwarding turns on IPv4/IPv6 forwarding on the interfaces:
// bpf_fib_lookup refuses to route (BPF_FIB_LKUP_RET_FWD_DISABLED) from an
// interface without it, and punted packets are then forwarded by the
// kernel as the same rules intend.
//
// An IPv6 interface that forwards ignores router advertisements while
// accept_ra is 1 (Documentation/networking/ip-sysctl.rst): a WAN that
// gets its address and default route by SLAAC would lose both when they
// expire. accept_ra=2 takes them while forwarding, so it is set first
// where it was 1 (0, the operator's "never", stays).
func enableForwarding(ifaces []config.Interface, log *slog.Logger) error {
	for _, itf := range ifaces {
		v6 := "/proc/sys/net/ipv6/conf/" + itf.Name + "/"
		if cur, err := os.ReadFile(v6 + "accept_ra"); err == nil && string(cur) == "1\n" {
			if err := os.WriteFile(v6+"accept_ra", []byte("2"), 0o644); err != nil {
				return fmt.Errorf("keep accepting router advertisements on %s: %w", itf.Name, err)
			}
			log.Info("accepting router advertisements while forwarding", "sysctl", v6+"accept_ra", "value", 2)
		}
		for _, p := range []string{
			"/proc/sys/net/ipv4/conf/" + itf.Name + "/forwarding",
			v6 + "forwarding",
		} {
			cur, err := os.ReadFile(p)
			if err != nil {
				continue // IPv6 disabled on this interface
			}
			if string(cur) == "1\n" {
				continue
			}
			if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
				return fmt.Errorf("enable forwarding on %s: %w", itf.Name, err)
			}
			log.Info("enabled forwarding", "sysctl", p)
		}
	}
	return nil
}

// foldDelay is how long after an API change the journal is folded into
// the config file at the latest; changes within it share one rewrite.
// Until then the journal holds them, each fsynced before its Apply
// returned: neither a crash nor a power loss loses one.
const foldDelay = time.Second

// syncSoon asks the syncer to fold the journal into the file.
func (a *Agent) syncSoon() {
	select {
	case a.syncReq <- struct{}{}:
	default: // a fold is already pending and will cover this change
	}
}

// syncer folds the journal into the config file after changes, until ctx
// ends, then once more if a change is pending.
func (a *Agent) syncer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			select {
			case <-a.syncReq:
				a.fold()
			default:
			}
			return
		case <-a.syncReq:
			select {
			case <-time.After(foldDelay):
			case <-ctx.Done():
			}
			a.fold()
		}
	}
}

// fold writes what serves to the config file, durably, with the sequence
// number of the last batch it holds, then drops those batches from the
// journal. Commits go on while it writes (it holds commitMu only to take
// the config and to trim the journal, which later batches are appended
// to meanwhile); fileMu keeps a reload from reading the file in between.
func (a *Agent) fold() {
	a.fileMu.Lock()
	defer a.fileMu.Unlock()
	a.commitMu.Lock()
	cfg, seq := a.Config(), a.seq
	a.commitMu.Unlock()
	if err := yamlcfg.WriteFile(a.opts.ConfigPath, cfg, true, seqMarker+strconv.FormatUint(seq, 10)+"\n"); err != nil {
		a.log.Error("fold the journal into the config file", "config", a.opts.ConfigPath, "error", err)
		return
	}
	a.commitMu.Lock()
	defer a.commitMu.Unlock()
	if err := a.journal.keepAfter(seq); err != nil {
		a.log.Error("trim the journal", "journal", a.journal.path, "error", err)
	}
}
