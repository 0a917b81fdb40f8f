// SPDX-License-Identifier: Apache-2.0

// Package pathmon monitors a gateway's WAN paths (probes, judges
// their state) and steers the steering groups' flows over them.
package pathmon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/cpuwatch"
	"github.com/edgeplane/edgeplane/internal/rtloop"
)

// Path monitoring. Every GRE path of the config whose monitor is not off
// gets a probe every interval: a GRE packet (protocol type
// bpf.ProbeProto) from the path's local address to its remote one, which
// the agent hands to the dataplane's probe sender (BPF_PROG_TEST_RUN
// with live frames). The sender stamps it with bpf_ktime_get_ns as it
// redirects it out of the path's interface, keeps the stamp and signs it
// with the path's secret; the peer's XDP checks the signature and sends
// it back signed, and this gateway's XDP checks that and times the
// answer against the stamp it kept, into edge_path_probe. So both times
// are the dataplane's: however late the agent runs under load, what it
// reads is when the probe left and when its answer came. The monitor
// reads that record a few times per interval: a probe is answered once
// the record says so, unanswered once its timeout passed without (the
// largest of SRTT + 4 RTTVAR, twice SRTT, half the probe interval and 2
// ms, so a queue building up on the path shows as RTT before it shows as
// loss; 1 s before any answer), counted from when it left, less any time
// a CPU of the machine ran nothing meanwhile (cpuwatch: a virtual
// machine's CPU the host stopped holds what waits on it, the answer
// perhaps, while this loop runs on another), and judged on a record
// read after the time it is judged at, each outcome in the
// order the probes went out; pathJudge turns the outcomes and the RTT
// estimators into the path's state. Each change of state is logged once
// and counted; the states and measures are what `edgeplane get paths`
// and the metrics show.

// PathStatus is what the monitor knows of one path.
type PathStatus struct {
	ID              uint32
	State           PathState
	Since           time.Time // when it entered State
	SRTT, Jitter    time.Duration
	MinRTT, LastRTT time.Duration
	Loss            float64 // over the last Window probes
	Sent, Answered  uint64
	TxBytes         uint64 // encapsulated onto the path so far (cmon's measure)
	// TCPRTT and TCPMinRTT are the passive RTT from the TCP timestamps of
	// the flows the path carries, smoothed and smallest, over
	// TCPSamples samples (0: none yet).
	TCPRTT, TCPMinRTT time.Duration
	TCPSamples        uint64
	Why               string // what the last change of state was about
	Monitored         bool   // false: monitor off (the path counts as up)
}

// probeTick is the shortest time between two looks at the probe records.
const probeTick = 2 * time.Millisecond

// firstTimeout is how long a probe may go unanswered before any has been.
const firstTimeout = time.Second

// lookSpan is how far past the previous look the time a look judges at
// may be (judgeClock): two ticks, so a look on time judges at its own
// time.
const lookSpan = 2 * probeTick

// judgeClock returns the time a look at now judges the probes' timeouts
// at, the previous look having been at prev (0: none): now, or no more
// than lookSpan past prev. A look that comes late comes after a pause
// of this thread, which is most often a pause of the whole machine
// (the host running another guest: measured here under stress-ng, every
// process's real-time threads 14-24 ms late at once), and answers that
// came meanwhile may still be on their way in (the NIC's ring, the
// softirq backlog; in the lab, the WAN emulator, paused as well). Such a
// look judges only the timeouts that ran out by lookSpan past the
// previous one; the next, a tick later and after the machine caught up,
// judges the rest. A pause delays a verdict by a tick at most and is not
// counted against the path.
func judgeClock(prev, now int64) int64 {
	if prev != 0 && now-prev > int64(lookSpan) {
		return prev + int64(lookSpan)
	}
	return now
}

// probedPath is one path under the monitor.
type probedPath struct {
	cfg     config.Path
	mon     config.PathMonitor
	bp      bpf.Path // as the dataplane holds it
	stats   uint32   // stable index: edge_path_probe's key
	probing bool     // false: monitor off
	seq     uint32   // the next probe's sequence number
	sentAt  []int64
	decide  uint32 // the oldest probe without an outcome
	next    time.Time
	tcpNext time.Time // when to read the passive RTT next
	judge   *pathJudge
	status  PathStatus
	minRTT  minWindow
	replies uint64 // answers seen so far
}

// minRTTWindow is how long one window of the minimum RTT lasts.
const minRTTWindow = 10 * time.Second

// minWindow is a windowed minimum: the smallest sample of the current
// window and of the one before (minRTTWindow each), so a path whose base
// delay grows for good stops counting as congested within two windows.
type minWindow struct {
	cur, prev time.Duration
	since     time.Time
}

// add records sample v at now.
func (w *minWindow) add(v time.Duration, now time.Time) {
	w.roll(now)
	if w.cur == 0 || v < w.cur {
		w.cur = v
	}
}

// roll starts a new window when the current one is over.
func (w *minWindow) roll(now time.Time) {
	if w.since.IsZero() {
		w.since = now
	}
	if now.Sub(w.since) >= minRTTWindow {
		w.prev, w.cur, w.since = w.cur, 0, now
	}
}

// min is the smallest sample of the two windows (0: none).
func (w *minWindow) min(now time.Time) time.Duration {
	w.roll(now)
	m := w.prev
	if w.cur != 0 && (m == 0 || w.cur < m) {
		m = w.cur
	}
	return m
}

// Monitor probes the config's paths and keeps their states.
type Monitor struct {
	dp  *loader.Dataplane
	log *slog.Logger
	// cfgPaths returns the paths of the config that serves. Only the
	// paths: follow asks every followEvery, and a whole Config is
	// rebuilt (every object sorted, under the agent's lock) after each
	// commit.
	cfgPaths func() []config.Path

	changes *prometheus.CounterVec
	// cpus says how long a CPU of the machine ran nothing (nil: not
	// known, or no path probed yet); cpusTried once it was started.
	cpus      atomic.Pointer[cpuwatch.Watch]
	cpusTried bool
	// groups lists the steering groups (nil: none steered).
	groups func() []Group

	mu     sync.Mutex
	paths  map[uint32]*probedPath
	plans  map[uint32]steerPlan // by steering group index
	looked int64                // when the last look began (rtloop.Monotonic)
	// statuses is what the last look found, for Statuses.
	statuses atomic.Pointer[map[uint32]PathStatus]
	// view is what follow read last; groupsNow the steering groups of
	// the view the loop follows, groupsChanged set when they may differ
	// from those the last steer wrote for.
	view          atomic.Pointer[view]
	groupsNow     []Group
	groupsChanged bool
}

// New returns a monitor of the paths paths returns (those of the config
// that serves), as dp holds them, steering the groups groups returns
// (nil: none steered). It probes nothing until Run.
func New(dp *loader.Dataplane, log *slog.Logger, paths func() []config.Path, groups func() []Group) *Monitor {
	return &Monitor{
		dp: dp, log: log, cfgPaths: paths, groups: groups, paths: map[uint32]*probedPath{}, plans: map[uint32]steerPlan{},
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgeplane_path_state_changes_total", Help: "Changes of a path's state as its monitor judged it, by the state entered.",
		}, []string{"path", "state"}),
	}
}

// Statuses returns every monitored path's status, by path id, as the
// last look left them. It takes no lock the monitor's loop takes: a
// caller at the default policy (an API call, a scrape) that the load
// holds up must not hold up the real-time loop with it.
func (m *Monitor) Statuses() map[uint32]PathStatus {
	if st := m.statuses.Load(); st != nil {
		return maps.Clone(*st)
	}
	return map[uint32]PathStatus{}
}

// Run follows the config's paths, probes, judges and steers by them
// every probeTick until ctx ends, on a protected thread (rtloop): the
// gateway's load does not delay when probes leave nor when their
// outcomes are seen. What it follows of the agent an ordinary goroutine
// reads (follow): those reads take the agent's and the rule writer's
// locks, which commits, API calls and the agent's clock hold at the
// default policy, and a real-time loop that takes them waits as long as
// the load holds their holder up.
func (m *Monitor) Run(ctx context.Context) {
	defer m.closeAll()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.read()
	go m.follow(ctx)
	var applied *view
	var synced time.Time
	whole := true
	rtloop.Run(ctx, m.log, "path monitor", probeTick, func(now time.Time) {
		// A new view, or again after 100 ms a path that could not start.
		if v := m.view.Load(); v != applied || !whole && now.Sub(synced) >= 100*time.Millisecond {
			whole = m.sync(v)
			applied, synced = v, now
		}
		m.step(now)
	})
}

// followEvery is how often follow reads what the monitor follows: a
// change of the paths or the steering groups reaches the loop within
// it.
const followEvery = 10 * time.Millisecond

// view is what the monitor follows of the agent, as follow read it.
type view struct {
	live   map[uint32]bpf.Path // the dataplane's paths, by id
	paths  []config.Path       // the config's
	groups []Group             // the steering groups (nil: none steered)
}

// follow reads what the monitor follows every followEvery until ctx
// ends.
func (m *Monitor) follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(followEvery):
			m.read()
		}
	}
}

// read reads the dataplane's paths, the config's and the steering
// groups into m.view.
func (m *Monitor) read() {
	active, err := m.dp.ActivePaths()
	if err != nil {
		m.log.Error("path monitor: read paths", "error", err)
		return
	}
	v := &view{live: make(map[uint32]bpf.Path, len(active)), paths: m.cfgPaths()}
	for _, p := range active {
		v.live[p.Id] = p
	}
	if m.groups != nil {
		v.groups = m.groups()
	}
	// A new view only when something changed: the loop syncs on each.
	if old := m.view.Load(); old == nil || !reflect.DeepEqual(*old, *v) {
		m.view.Store(v)
	}
}

func (m *Monitor) closeAll() {
	_ = m.cpus.Swap(nil).Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.paths)
	m.statuses.Store(&map[uint32]PathStatus{})
}

// sync starts monitoring new paths of v, stops removed ones and starts
// again those whose addressing or monitor changed; the steering groups
// become v's. It returns false when a path could not start.
func (m *Monitor) sync(v *view) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v == nil {
		return true
	}
	m.groupsNow, m.groupsChanged = v.groups, true
	whole := true
	want := map[uint32]config.Path{}
	for _, p := range v.paths {
		if _, ok := v.live[p.ID]; ok {
			want[p.ID] = p
		}
	}
	for id, p := range m.paths {
		w, ok := want[id]
		if !ok || !samePath(p.cfg, w) || p.bp != v.live[id] {
			delete(m.paths, id)
		}
	}
	for id, c := range want {
		if _, ok := m.paths[id]; ok {
			continue
		}
		p, err := m.startPath(c, v.live[id])
		if err != nil {
			m.log.Error("path monitor: cannot probe path", "path", id, "error", err)
			whole = false
			continue
		}
		m.paths[id] = p
	}
	return whole
}

func samePath(a, b config.Path) bool {
	ma, mb := a.Monitor.Effective(), b.Monitor.Effective()
	return a.Interface == b.Interface && a.Local == b.Local && a.Remote == b.Remote &&
		(a.Key == nil) == (b.Key == nil) && (a.Key == nil || *a.Key == *b.Key) && ma == mb
}

// startPath starts monitoring path c, bp as the dataplane holds it:
// from no answers.
func (m *Monitor) startPath(c config.Path, bp bpf.Path) (*probedPath, error) {
	mon := c.Monitor.Effective()
	p := &probedPath{cfg: c, mon: mon, bp: bp, stats: bp.Stats, judge: newPathJudge(mon),
		sentAt: make([]int64, 4096)}
	p.status = PathStatus{ID: c.ID, Since: time.Now(), Monitored: !mon.Off}
	if err := m.dp.ClearPathTCPRTT(p.stats); err != nil {
		return nil, err
	}
	if mon.Off {
		p.status.State = PathUp
		return p, nil
	}
	if err := m.dp.ClearPathProbe(p.stats); err != nil {
		return nil, err
	}
	p.probing = true
	p.next = time.Now()
	return p, nil
}

// step sends the probes that are due, judges every path and steers the
// steering groups by what it found.
func (m *Monitor) step(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer func() {
		st := make(map[uint32]PathStatus, len(m.paths))
		for id, p := range m.paths {
			st[id] = p.status
		}
		m.statuses.Store(&st)
		m.steer(st, now)
	}()
	// The time first, then the records (judgePath): whatever answer
	// came by then is in them, however long this thread waits in
	// between.
	mono := rtloop.Monotonic()
	at := judgeClock(m.looked, mono)
	m.looked = mono
	for _, p := range m.paths {
		if !now.Before(p.tcpNext) {
			m.readTCPRTT(p)
			p.tcpNext = now.Add(tcpRTTEvery)
		}
		if !p.probing {
			continue
		}
		m.judgePath(p, now, at)
		if !now.Before(p.next) {
			m.send(p)
			p.next = p.next.Add(p.mon.Interval.D)
			if p.next.Before(now) {
				p.next = now.Add(p.mon.Interval.D)
			}
		}
	}
}

// tcpRTTEvery is how often the monitor reads a path's passive RTT.
const tcpRTTEvery = 100 * time.Millisecond

// readTCPRTT reads path p's passive RTT into its status (a path whose
// monitor is off has one too: its flows' timestamps need no peer).
func (m *Monitor) readTCPRTT(p *probedPath) {
	r, err := m.dp.ReadPathTCPRTT(p.stats)
	if err != nil {
		m.log.Error("path monitor", "path", p.cfg.ID, "error", err)
		return
	}
	p.status.TCPRTT, p.status.TCPMinRTT = time.Duration(r.SrttNs), time.Duration(r.MinNs)
	p.status.TCPSamples = r.Samples
}

// send sends path p's next probe, from the dataplane.
func (m *Monitor) send(p *probedPath) {
	err := m.dp.SendProbe(bpf.ProbeFrame(p.bp, p.seq))
	// After the send: never before the probe left, so a timeout counted
	// from here is never early (the record's own stamp, when it has one,
	// is when it left).
	p.sentAt[p.seq%uint32(len(p.sentAt))] = rtloop.Monotonic()
	if err == nil {
		var rec bpf.PathProbe
		if rec, err = m.dp.ReadPathProbe(p.stats); err == nil && (rec.Sent == 0 || rec.SentSeq != p.seq) {
			err = errNotSent
		}
	}
	if err != nil {
		// Unsent is unanswered: the judge sees it as lost. No
		// neighbour is the likely cause: ask the kernel to resolve it.
		m.log.Debug("path probe not sent", "path", p.cfg.ID, "error", err)
		if errors.Is(err, errNotSent) {
			_ = ensureNeighbour(p.cfg)
		}
	}
	p.seq++
	p.status.Sent++
}

// errNotSent: the dataplane did not send a probe (no route or neighbour
// for it, or the path not in the live rules yet); edge_reasons says why.
var errNotSent = errors.New("the dataplane did not send it (see the reason counters: no_neigh, fib_fail, no_state)")

// judgePath gives every probe of p whose outcome is known at time at
// (rtloop.Monotonic, taken before the record is read: a probe is never
// judged unanswered at a time its answer had come by) its outcome, in
// order, and judges the path.
func (m *Monitor) judgePath(p *probedPath, now time.Time, at int64) {
	m.watchCPUs()
	rec, err := m.dp.ReadPathProbe(p.stats)
	if err != nil {
		m.log.Error("path monitor", "path", p.cfg.ID, "error", err)
		return
	}
	srtt, jitter := time.Duration(rec.SrttNs), time.Duration(rec.RttvarNs)
	timeout := firstTimeout
	if rec.Replies > 0 {
		timeout = max(srtt+4*jitter, 2*srtt, p.mon.Interval.D/2, 2*time.Millisecond)
	}
	for p.decide != p.seq {
		answered := rec.Answered(p.decide)
		sent := p.sentAt[p.decide%uint32(len(p.sentAt))]
		if stamp := int64(rec.SentAt(p.decide)); stamp != 0 {
			sent = stamp // when it left, as the dataplane stamped it
		}
		if !answered && time.Duration(at-sent) < timeout {
			break
		}
		// Nor once the time a CPU ran nothing is taken out (judgeClock
		// covers a stop of this loop's own CPU).
		if !answered && time.Duration(at-sent-m.cpus.Load().Lost(sent, at)) < timeout {
			break
		}
		p.judge.add(answered)
		if answered {
			p.status.Answered++
		}
		p.decide++
	}
	state, why := p.judge.judge(srtt, jitter)
	s := &p.status
	s.SRTT, s.Jitter = srtt, jitter
	s.LastRTT = time.Duration(rec.LastRttNs)
	if rec.Replies != p.replies {
		p.replies = rec.Replies
		p.minRTT.add(s.LastRTT, now)
	}
	s.MinRTT = p.minRTT.min(now)
	s.Loss = p.judge.loss()
	if tx, err := m.dp.PathTx(p.stats); err == nil {
		s.TxBytes = tx.Bytes
	}
	if why == "" {
		return
	}
	from := s.State
	s.State, s.Since, s.Why = state, now, why
	m.changes.WithLabelValues(strconv.FormatUint(uint64(p.cfg.ID), 10), state.String()).Inc()
	m.log.Info("path "+state.String(), "path", p.cfg.ID, "was", from.String(), "why", why,
		"rtt", srtt.Round(10*time.Microsecond), "jitter", jitter.Round(10*time.Microsecond), "loss", fmt.Sprintf("%.1f%%", 100*s.Loss))
}

// watchCPUs starts the CPU watch, once: at the first path judged, so a
// gateway that probes no path does not beat its CPUs.
func (m *Monitor) watchCPUs() {
	if m.cpusTried {
		return
	}
	m.cpusTried = true
	w, err := cpuwatch.Start(cpuwatch.DefaultPeriod)
	if err != nil {
		m.log.Warn("path monitor: no CPU watch: a stopped CPU (a virtual machine's host running something else on it) counts as probe loss", "error", err)
		return
	}
	m.cpus.Store(w)
}

// Collectors are the monitor's metrics: changes of state, and each
// path's state and measures at scrape time.
func (m *Monitor) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.changes, newPathMetrics(m), cpuStalls{m}}
}

// cpuStalls exposes the time each CPU ran nothing, as the watch saw it.
type cpuStalls struct{ m *Monitor }

var cpuStalledDesc = prometheus.NewDesc("edgeplane_cpu_stalled_seconds_total",
	fmt.Sprintf("Time a CPU ran nothing, not even its timer interrupt, in stops of more than %s (a virtual machine's host running something else on it), since the path monitor first judged a probe; probe timeouts do not count it.", 2*cpuwatch.DefaultPeriod),
	[]string{"cpu"}, nil)

// Describe implements prometheus.Collector.
func (c cpuStalls) Describe(ch chan<- *prometheus.Desc) { ch <- cpuStalledDesc }

// Collect implements prometheus.Collector.
func (c cpuStalls) Collect(ch chan<- prometheus.Metric) {
	w := c.m.cpus.Load()
	if w == nil {
		return
	}
	for _, cpu := range w.CPUs() {
		if _, _, stalled, err := w.Beats(cpu); err == nil {
			ch <- prometheus.MustNewConstMetric(cpuStalledDesc, prometheus.CounterValue, stalled.Seconds(), strconv.FormatUint(uint64(cpu), 10))
		}
	}
}

// pathMetrics exposes the monitor's view of each path at scrape time.
type pathMetrics struct {
	m                                         *Monitor
	state, srtt, jitter, minRTT, loss, tcpRTT *prometheus.Desc
}

func newPathMetrics(m *Monitor) *pathMetrics {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("edgeplane_path_"+name, help, []string{"path"}, nil)
	}
	return &pathMetrics{
		m:      m,
		state:  prometheus.NewDesc("edgeplane_path_state", "1 for a path's state as its monitor judges it (unknown, up, degraded, down), 0 for the others.", []string{"path", "state"}, nil),
		srtt:   d("rtt_seconds", "Smoothed round-trip time of a path's probes (RFC 6298, gain 1/8)."),
		jitter: d("jitter_seconds", "RTT variation of a path's probes (RFC 6298's RTTVAR, gain 1/4)."),
		minRTT: d("min_rtt_seconds", "Smallest round-trip time of a path's probes over the last 10-20 s (two 10 s windows)."),
		loss:   d("loss_ratio", "Share of a path's last window of probes that went unanswered."),
		tcpRTT: d("tcp_rtt_seconds", "Passive round-trip time of a path from the TCP timestamps of the flows it carries, far-end hosts included (smoothed, gain 1/8); absent before the first sample."),
	}
}

// Describe implements prometheus.Collector.
func (p *pathMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.state, p.srtt, p.jitter, p.minRTT, p.loss, p.tcpRTT} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (p *pathMetrics) Collect(ch chan<- prometheus.Metric) {
	for id, s := range p.m.Statuses() {
		l := strconv.FormatUint(uint64(id), 10)
		for st, name := range pathStateNames {
			v := 0.0
			if PathState(st) == s.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(p.state, prometheus.GaugeValue, v, l, name)
		}
		if s.TCPSamples > 0 {
			ch <- prometheus.MustNewConstMetric(p.tcpRTT, prometheus.GaugeValue, s.TCPRTT.Seconds(), l)
		}
		if !s.Monitored {
			continue
		}
		ch <- prometheus.MustNewConstMetric(p.srtt, prometheus.GaugeValue, s.SRTT.Seconds(), l)
		ch <- prometheus.MustNewConstMetric(p.jitter, prometheus.GaugeValue, s.Jitter.Seconds(), l)
		ch <- prometheus.MustNewConstMetric(p.minRTT, prometheus.GaugeValue, s.MinRTT.Seconds(), l)
		ch <- prometheus.MustNewConstMetric(p.loss, prometheus.GaugeValue, s.Loss, l)
	}
}
