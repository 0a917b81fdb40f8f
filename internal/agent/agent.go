// SPDX-License-Identifier: Apache-2.0

// Package agent runs one gateway: it loads or adopts the pinned dataplane,
// attaches it to the configured interfaces, writes the rules, serves
// metrics and applies config reloads.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/metrics"
	"github.com/edgeplane/edgeplane/internal/rules"
)

// Options configure an agent.
type Options struct {
	ConfigPath   string
	PinDir       string
	MetricsAddr  string // empty disables the metrics server
	DetachOnExit bool
	Log          *slog.Logger
}

// Agent is one running gateway agent.
type Agent struct {
	opts Options
	log  *slog.Logger

	mu    sync.Mutex
	cfg   *config.Config
	dp    *bpf.Dataplane
	alloc rules.Allocs

	reloads *prometheus.CounterVec
}

// ResolveIfindex is the rules.Resolver for the agent's own namespace.
func ResolveIfindex(name string) (uint32, error) {
	itf, err := net.InterfaceByName(name)
	if err != nil {
		return 0, fmt.Errorf("no interface %q on this host", name)
	}
	return uint32(itf.Index), nil
}

func limitsOf(cfg *config.Config) bpf.Limits {
	return bpf.Limits{Flows: cfg.Limits.Flows, Rules: cfg.Limits.Rules}
}

// CheckHost compiles cfg against this host's interfaces without touching the
// dataplane: what `edgeplane validate` and the agent check before loading.
func CheckHost(cfg *config.Config) error {
	_, _, err := rules.Compile(cfg, ResolveIfindex, rules.NewAllocs(cfg.Limits.Rules, nil, nil), limitsOf(cfg))
	return err
}

// Run starts the agent and serves until ctx is done.
func Run(ctx context.Context, opts Options) error {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	cfg, err := config.Load(opts.ConfigPath)
	if err != nil {
		return err
	}
	// Check everything the host must provide before touching the kernel.
	if err := CheckHost(cfg); err != nil {
		return err
	}
	if err := EnsureBPFFS(opts.PinDir); err != nil {
		return err
	}
	a := &Agent{opts: opts, log: log}
	a.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgeplane_config_reloads_total", Help: "Config reloads by result.",
	}, []string{"result"})
	// Present from the start at 0, so alerts on reload errors have a series.
	a.reloads.WithLabelValues("ok")
	a.reloads.WithLabelValues("error")
	if err := a.start(cfg); err != nil {
		return err
	}
	defer a.stop()
	if err := watchFIB(ctx, a.dp, log, a.refreshIfAddrs); err != nil {
		return err
	}
	go a.keepPathNeighbours(ctx, log)

	errc := make(chan error, 1)
	if opts.MetricsAddr != "" {
		srv, err := a.serveMetrics(errc)
		if err != nil {
			return err
		}
		defer srv.Close()
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log.Info("agent ready", "pin_dir", opts.PinDir, "metrics", opts.MetricsAddr, "interfaces", len(cfg.Interfaces), "pdrs", len(cfg.PDRs))
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-hup:
			if err := a.Reload(); err != nil {
				a.reloads.WithLabelValues("error").Inc()
				log.Error("config reload refused; the live rules keep serving", "error", err)
				for _, line := range splitErrors(err) {
					fmt.Fprintln(os.Stderr, line)
				}
			} else {
				a.reloads.WithLabelValues("ok").Inc()
			}
		}
	}
}

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

// start opens (or adopts) the dataplane and applies cfg.
func (a *Agent) start(cfg *config.Config) error {
	dp, err := bpf.Open(limitsOf(cfg), a.opts.PinDir)
	if err != nil {
		return err
	}
	newProg, err := ensureProgram(dp, a.opts.PinDir, a.log)
	if err != nil {
		dp.Close()
		return err
	}
	if err := attach(dp, a.opts.PinDir, cfg.Interfaces, newProg, a.log); err != nil {
		dp.Close()
		return err
	}
	removeStalePrograms(a.opts.PinDir, dp)
	if err := enableForwarding(cfg.Interfaces, a.log); err != nil {
		dp.Close()
		return err
	}
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
	a.alloc = rules.NewAllocs(cfg.Limits.Rules, seed, pathSeed)
	return a.apply(cfg)
}

// apply compiles cfg and commits it as the next generation.
func (a *Agent) apply(cfg *config.Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	gen, alloc, err := rules.Compile(cfg, ResolveIfindex, a.alloc, a.dp.Limits)
	if err != nil {
		return err
	}
	var tx []uint32
	for _, itf := range cfg.Interfaces {
		idx, err := ResolveIfindex(itf.Name)
		if err != nil {
			return err
		}
		tx = append(tx, idx)
	}
	if err := a.dp.SetTx(tx); err != nil {
		return err
	}
	if err := a.dp.SetIfAddrs(ifAddrs(cfg.Interfaces)); err != nil {
		return err
	}
	start := time.Now()
	n, err := a.dp.Commit(gen)
	if err != nil {
		return err
	}
	a.alloc = alloc
	a.cfg = cfg
	a.log.Info("rules committed", "generation", n, "pdrs", len(cfg.PDRs), "entries", len(gen.Rules), "groups", len(gen.Groups), "took", time.Since(start))
	return nil
}

// refreshIfAddrs rewrites the interface addresses XDP sends ICMP from.
func (a *Agent) refreshIfAddrs() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.dp.SetIfAddrs(ifAddrs(a.cfg.Interfaces)); err != nil {
		a.log.Error("update interface addresses", "error", err)
	}
}

// Reload re-reads the config file and applies the difference. An invalid
// file changes nothing.
func (a *Agent) Reload() error {
	cfg, err := config.Load(a.opts.ConfigPath)
	if err != nil {
		return err
	}
	if limitsOf(cfg) != a.dp.Limits {
		return config.Errors{{Path: "limits", Reason: "map sizes cannot change while running; restart the agent after `edgeplane down` to resize"}}
	}
	// Validate the whole change against the host before touching links.
	if _, _, err := rules.Compile(cfg, ResolveIfindex, a.alloc, a.dp.Limits); err != nil {
		return err
	}
	if !reflect.DeepEqual(cfg.Interfaces, a.cfg.Interfaces) {
		if err := attach(a.dp, a.opts.PinDir, cfg.Interfaces, false, a.log); err != nil {
			return err
		}
		if err := enableForwarding(cfg.Interfaces, a.log); err != nil {
			return err
		}
	}
	return a.apply(cfg)
}

func (a *Agent) serveMetrics(errc chan<- error) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(func() (*bpf.Snapshot, error) { return a.dp.Snapshot() }))
	reg.MustRegister(a.reloads)
	reg.MustRegister(collectors.NewGoCollector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", a.opts.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen metrics on %s: %w", a.opts.MetricsAddr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics server: %w", err)
		}
	}()
	return srv, nil
}

// stop releases the agent's handles. Pinned links and maps stay, so the
// dataplane keeps forwarding, unless DetachOnExit asks to remove it.
func (a *Agent) stop() {
	if a.opts.DetachOnExit {
		if err := Down(a.opts.PinDir); err != nil {
			a.log.Error("detach", "error", err)
		} else {
			a.log.Info("detached and removed pins", "pin_dir", a.opts.PinDir)
		}
	}
	a.dp.Close()
}

// enableForwarding turns on IPv4/IPv6 forwarding on the interfaces:
// bpf_fib_lookup refuses to route (BPF_FIB_LKUP_RET_FWD_DISABLED) from an
// interface without it, and punted packets are then forwarded by the
// kernel as the same rules intend.
func enableForwarding(ifaces []config.Interface, log *slog.Logger) error {
	for _, itf := range ifaces {
		for _, p := range []string{
			"/proc/sys/net/ipv4/conf/" + itf.Name + "/forwarding",
			"/proc/sys/net/ipv6/conf/" + itf.Name + "/forwarding",
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
