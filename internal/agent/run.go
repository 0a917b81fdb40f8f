// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/bpf/rcu"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/fibwatch"
	"github.com/edgeplane/edgeplane/internal/metrics"
	"github.com/edgeplane/edgeplane/internal/pathmon"
	"github.com/edgeplane/edgeplane/internal/sched"
)

// Run starts the agent's subsystems, in order, and serves until ctx is
// done or a server fails; then it stops them, last first.
func Run(ctx context.Context, opts Options) error {
	a := newAgent(opts)
	r := &subsystems{reg: a.reg}
	defer r.stop()
	if err := r.start(ctx, a.subsystems()); err != nil {
		return err
	}
	cfg := a.boot.cfg
	a.log.Info("agent ready", "pin_dir", opts.PinDir, "metrics", opts.MetricsAddr, "interfaces", len(cfg.Interfaces), "pdrs", len(cfg.PDRs))
	select {
	case <-ctx.Done():
		return nil
	case err := <-a.errc:
		return err
	}
}

// newAgent makes an agent that runs nothing yet, with the metrics its
// subsystems share.
func newAgent(opts Options) *Agent {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	a := &Agent{opts: opts, log: log, held: loader.NewLinks(), guard: newGuard(), apiRefused: api.NewRefusedCounter(),
		down: map[healthKey]bool{}, syncReq: make(chan struct{}, 1), errc: make(chan error, 1), reg: prometheus.NewRegistry()}
	a.reg.MustRegister(collectors.NewGoCollector())
	a.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgeplane_config_reloads_total", Help: "Config reloads by result.",
	}, []string{"result"})
	// Present from the start at 0, so alerts on reload errors have a series.
	a.reloads.WithLabelValues("ok")
	a.reloads.WithLabelValues("error")
	a.backendUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edgeplane_service_backend_up", Help: "1 if a service's backend passes its health checks (or has none), 0 while they took it out.",
	}, []string{"service", "far"})
	a.dupTxReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edgeplane_redundant_tx_ready", Help: "1 if an interface a redundant group broadcasts copies to takes redirected frames (ndo_xdp_xmit), 0 if the kernel drops them there uncounted.",
	}, []string{"interface"})
	a.strategies = a.newStrategies()
	return a
}

// subsystems lists the agent's subsystems in the order they start: each
// may use what those before it started, and stops before them.
func (a *Agent) subsystems() []subsystem {
	list := []subsystem{
		// One agent per config file (and journal) and per pin dir.
		{name: "config lock", start: a.lockConfig, stop: func() { a.cfgLock.release() }},
		// CPU strategies first: give back what a crashed agent left
		// applied (real-time policies, lowered weights, moved threads,
		// IRQs) before anything below can fail, so a restart that
		// fails still gives it back. The config lock says no other
		// agent holds it.
		{name: "cpu strategies' previous run", start: func(context.Context) error { a.strategies.Recover(); return nil }},
		{name: "config", start: a.loadConfig},
		// Checked before the dataplane is touched.
		{name: "api credentials", start: a.loadAPICredentials},
		{name: "pin dir", start: a.lockPinDir, stop: a.releasePinDir},
		{name: "dataplane", start: a.startDataplane, stop: a.stop, metrics: a.dataplaneMetrics},
		// Set, or cleared, on every start: the dataplane outlives the
		// agent that set it.
		{name: "n3", start: a.setN3},
		// The first check before the agent says it is ready, so health
		// is known from then on; then every guardEvery.
		{name: "guard", start: func(context.Context) error { a.guardOnce(); return nil }, run: a.guardLoop, metrics: a.guard.collectors},
		{name: "fib watch", start: a.watchFIB, run: func(ctx context.Context) { a.fib.Run(ctx) }},
		{name: "path neighbours", run: func(ctx context.Context) { pathmon.KeepNeighbours(ctx, a.log, a.Config) }},
		{name: "path monitor", start: a.newPathMonitor, run: func(ctx context.Context) { a.mon.Run(ctx) },
			metrics: func() []prometheus.Collector { return a.mon.Collectors() }},
		{name: "health checks", run: func(ctx context.Context) { a.healthLoop(ctx, a.backendUp) }, metrics: collect(a.backendUp)},
		{name: "flow clock", run: func(ctx context.Context) { tickFlows(ctx, a.dp, a.log) }},
		{name: "redundant copies", run: func(ctx context.Context) { watchDupTx(ctx, a.dp, a.log, a.dupTxReady) }, metrics: collect(a.dupTxReady)},
		{name: "flowopt", start: func(context.Context) error { a.fo = &foLoop{classes: map[uint32]*foClass{}}; return nil },
			run:     func(ctx context.Context) { a.runFlowOpt(ctx, a.fo, a.log) },
			metrics: func() []prometheus.Collector { return []prometheus.Collector{foMetrics{a: a, l: a.fo}} }},
		{name: "cpu strategies", start: func(context.Context) error { return a.strategies.Start() }, run: a.strategies.Run,
			stop: a.strategies.Stop, metrics: a.strategies.Collectors},
		{name: "journal", start: a.openJournal, stop: func() { a.journal.close() }},
	}
	if a.opts.N4Addr != "" {
		list = append(list, subsystem{name: "n4", start: a.startN4, run: a.runN4, stop: func() {
			_ = a.n4.Close()
			if a.idle != nil {
				_ = a.idle.Close()
			}
			if a.em != nil {
				_ = a.em.Close()
			}
			if a.upf != nil {
				_ = a.upf.Close()
			}
		},
			metrics: func() []prometheus.Collector { return []prometheus.Collector{n4Metrics{a.n4, a}} }})
	}
	if a.opts.Fleet != nil {
		// After the journal (the member commits through Apply), before
		// the metrics (which show it).
		list = append(list, subsystem{name: "fleet", start: a.joinFleet, run: a.runFleet,
			metrics: func() []prometheus.Collector { return []prometheus.Collector{newFleetMetrics(a.member)} }})
	}
	var closeMetrics func()
	var ls *api.Listeners
	hup := make(chan os.Signal, 1)
	return append(list,
		subsystem{name: "metrics", start: func(context.Context) (err error) { closeMetrics, err = a.serveMetrics(a.reg, a.errc); return err },
			stop: func() { closeMetrics() }},
		subsystem{name: "journal fold", start: a.foldSkipped, run: a.syncer},
		subsystem{name: "api", start: func(context.Context) (err error) { ls, err = a.serveAPI(a.boot.api, a.errc); return err },
			stop: func() { a.closeAPI(ls) }, metrics: collect(a.apiRefused)},
		// SIGHUP is caught from here on (uncaught, it ends the agent).
		subsystem{name: "reloads", start: func(context.Context) error { signal.Notify(hup, syscall.SIGHUP); return nil },
			run: func(ctx context.Context) { a.reloadOnHUP(ctx, hup) }, stop: func() { signal.Stop(hup) }, metrics: collect(a.reloads)},
	)
}

// collect is a subsystem's metrics that exist before it starts.
func collect(cs ...prometheus.Collector) func() []prometheus.Collector {
	return func() []prometheus.Collector { return cs }
}

// lockConfig takes the config file's lock.
func (a *Agent) lockConfig(context.Context) (err error) {
	a.cfgLock, err = lockPath(a.opts.ConfigPath+".lock", "config file", false)
	return err
}

// loadConfig reads the config file and replays the journal onto it (a
// torn tail cut first), and checks everything the host must provide
// before the kernel is touched.
func (a *Agent) loadConfig(context.Context) error {
	log, path := a.log, a.opts.ConfigPath
	cut, err := repairJournal(path)
	if err != nil {
		return err
	}
	if cut > 0 {
		log.Warn("cut the torn tail off the journal: a write a crash interrupted, whose Apply never returned", "journal", journalPath(path), "bytes", cut)
	}
	cfg, seq, replayed, skipped, err := loadState(path)
	if err != nil {
		return err
	}
	if replayed > 0 {
		log.Info("replayed API changes not yet folded into the config file", "journal", journalPath(path), "batches", replayed)
	}
	for _, s := range skipped {
		log.Error("journal batch skipped: the config file no longer takes it (kept in "+journalPath(path)+".skipped)", "error", s.err)
	}
	if err := checkHostRules(cfg); err != nil {
		return err
	}
	// What the host refuses of the strategies (RT throttling switched
	// off since they were applied, say) does not keep the dataplane
	// from starting: the engine takes nothing for them, and says why.
	if err := sched.CheckConfig(cfg, nil); err != nil {
		log.Warn("cpu strategies this host refuses now; they take no process", "error", err)
	}
	a.seq = seq
	a.boot.cfg, a.boot.replayed, a.boot.skipped = cfg, replayed, skipped
	return nil
}

// loadAPICredentials loads the API's credentials and checks its
// addresses (APIOptions).
func (a *Agent) loadAPICredentials(context.Context) (err error) {
	a.boot.api, a.apiCert, err = APIOptions(a.opts, a.log)
	return err
}

// lockPinDir mounts bpffs where the pin dir needs it and takes the pin
// dir's lock.
func (a *Agent) lockPinDir(context.Context) (err error) {
	if err := loader.EnsureBPFFS(a.opts.PinDir); err != nil {
		return err
	}
	if a.pinLock, err = lockPath(a.opts.PinDir, "pin dir", true); err != nil {
		return err
	}
	rcu.ExpediteGracePeriods = !a.opts.NormalGracePeriods
	return nil
}

// releasePinDir releases the pin dir's lock, no change under way (the
// guard may take it again while one is).
func (a *Agent) releasePinDir() {
	a.commitMu.Lock()
	defer a.commitMu.Unlock()
	a.pinLock.release()
}

// startDataplane opens (or adopts) the dataplane and commits the
// config; on failure no link it took stays held.
func (a *Agent) startDataplane(context.Context) error {
	if err := a.start(a.boot.cfg); err != nil {
		a.held.CloseAll()
		return err
	}
	return nil
}

func (a *Agent) dataplaneMetrics() []prometheus.Collector {
	return []prometheus.Collector{metrics.NewCollector(metrics.Throttle(func() (*dataplane.Snapshot, error) { return a.dp.Snapshot() }, metrics.SnapshotEvery))}
}

// watchFIB starts following the kernel's routes, rules, neighbours and
// addresses for the dataplane's next hops (internal/fibwatch).
func (a *Agent) watchFIB(context.Context) (err error) {
	a.fib, err = fibwatch.New(a.dp, a.log, a.refreshIfAddrs)
	return err
}

// newPathMonitor makes the monitor that probes, judges and steers by
// the paths.
func (a *Agent) newPathMonitor(context.Context) error {
	a.mon = pathmon.New(a.dp, a.log, a.paths, a.steerGroups)
	return nil
}

// openJournal opens the journal API changes are appended to.
func (a *Agent) openJournal(context.Context) (err error) {
	a.journal, err = openJournal(a.opts.ConfigPath)
	return err
}

// foldSkipped keeps the batches the journal's replay skipped where an
// operator finds them (the fold drops them from the journal), and asks
// for a fold of what it replayed.
func (a *Agent) foldSkipped(context.Context) error {
	if err := keepSkipped(a.opts.ConfigPath, a.boot.skipped); err != nil {
		return err
	}
	if a.boot.replayed > 0 || len(a.boot.skipped) > 0 {
		a.syncSoon() // fold the replayed batches into the file
	}
	return nil
}

// reloadOnHUP re-reads the API's credentials and applies the config
// file on every signal of hup, until ctx ends.
func (a *Agent) reloadOnHUP(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		a.reloadCredentials()
		if a.member != nil {
			// The fleet's objects serve: applying the file would
			// only drift from them until the next change came.
			a.log.Info("config file not re-read: in a fleet (--etcd) the controller's objects serve; credentials re-read")
			continue
		}
		if err := a.Reload(); err != nil {
			a.reloads.WithLabelValues("error").Inc()
			a.log.Error("config reload refused; the live rules keep serving", "error", err)
			for _, line := range splitErrors(err) {
				fmt.Fprintln(os.Stderr, line)
			}
		} else {
			a.reloads.WithLabelValues("ok").Inc()
		}
	}
}

// splitErrors is err a line per field error.
func splitErrors(err error) []string {
	var fe config.Errors
	if errors.As(err, &fe) {
		out := make([]string, len(fe))
		for i, e := range fe {
			out[i] = e.Error()
		}
		return out
	}
	return []string{err.Error()}
}
