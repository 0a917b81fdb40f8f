// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
)

// The guard checks, every guardEvery, that what the agent reports is what
// the kernel runs: the pin dir and every pin of the agent's maps, program
// and links are there, and each configured interface runs the agent's
// program at its XDP hook through the link the agent holds (asked of the
// kernel over netlink, not of the pins). What was taken away behind the
// agent's back is put back: the pin dir and pins made again from the
// objects the agent holds, an interface whose XDP was detached attached
// again. What it cannot put back (another program at an interface's
// hook, an interface gone) makes the dataplane not OK, with the reason:
// in /healthz, edgeplane_dataplane_ok, the fleet's status and the log.

// guardEvery is how often the guard checks: a pin removed or an XDP
// program detached is noticed within it.
const guardEvery = time.Second

// keepRepairs is how many of the last repairs /healthz lists.
const keepRepairs = 16

// XDP states of an interface (InterfaceHealth.XDP).
const (
	xdpOurs  = "edgeplane" // the agent's program, through its held link
	xdpNone  = "none"      // nothing attached
	xdpOther = "other"     // another program
	xdpGone  = "gone"      // no such interface
)

// Repair kinds (edgeplane_dataplane_repairs_total's what).
const (
	repairPinDir = "pin_dir" // the pin dir made again
	repairPin    = "pin"     // pins of maps, program or links made again
	repairXDP    = "xdp"     // an interface's XDP attached again
)

// DataplaneHealth is the guard's last check, served at /healthz.
type DataplaneHealth struct {
	OK      bool      `json:"ok"`
	Checked time.Time `json:"checked"`
	// Problems says what is wrong now ("": nothing).
	Problems   []string          `json:"problems,omitempty"`
	Interfaces []InterfaceHealth `json:"interfaces"`
	// Repairs lists the last repairs, oldest first.
	Repairs []Repair `json:"repairs,omitempty"`
}

// InterfaceHealth is what runs at one configured interface's XDP hook.
type InterfaceHealth struct {
	Name    string `json:"name"`
	Ifindex int    `json:"ifindex,omitempty"`
	// XDP is edgeplane, none, other or gone.
	XDP string `json:"xdp"`
	// Mode is native, generic or offload.
	Mode   string `json:"mode,omitempty"`
	ProgID uint32 `json:"prog_id,omitempty"`
	LinkID uint32 `json:"link_id,omitempty"`
}

// Repair is one thing the guard put back.
type Repair struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	What string    `json:"what"`
}

// guard keeps the last check and its metrics.
type guard struct {
	mu       sync.Mutex
	health   DataplaneHealth
	attached *prometheus.GaugeVec
	ok       prometheus.Gauge
	repairs  *prometheus.CounterVec
}

func newGuard() *guard {
	g := &guard{
		attached: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgeplane_xdp_attached",
			Help: "1 if a configured interface runs the agent's XDP program through the agent's link (asked of the kernel every second), 0 if it runs none, another one, or is gone.",
		}, []string{"interface"}),
		ok: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgeplane_dataplane_ok",
			Help: "1 if every configured interface runs the agent's XDP program and every pin is in place (or was put back), 0 otherwise: /healthz says why.",
		}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgeplane_dataplane_repairs_total",
			Help: "What the agent put back that was taken away behind its back: the pin dir (pin_dir), pins of its maps, program and links (pin), an interface's XDP attachment (xdp).",
		}, []string{"what"}),
	}
	for _, k := range []string{repairPinDir, repairPin, repairXDP} {
		g.repairs.WithLabelValues(k)
	}
	return g
}

func (g *guard) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.attached, g.ok, g.repairs}
}

// Health returns the guard's last check.
func (a *Agent) Health() DataplaneHealth {
	a.guard.mu.Lock()
	defer a.guard.mu.Unlock()
	h := a.guard.health
	h.Problems = slices.Clone(h.Problems)
	h.Interfaces = slices.Clone(h.Interfaces)
	h.Repairs = slices.Clone(h.Repairs)
	return h
}

// serveHealth answers /healthz: the last check as JSON, status 200 when
// the dataplane is OK and 503 when not.
func (a *Agent) serveHealth(w http.ResponseWriter, _ *http.Request) {
	h := a.Health()
	w.Header().Set("Content-Type", "application/json")
	if !h.OK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(h)
}

// guardLoop checks the dataplane every guardEvery until done closes.
func (a *Agent) guardLoop(ctx context.Context) {
	t := time.NewTicker(guardEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.guardOnce()
	}
}

// guardOnce checks the dataplane, and when something is off, checks it
// again holding commitMu (no change attaches or detaches meanwhile) and
// repairs what it can. The first look takes no lock a commit waits for.
func (a *Agent) guardOnce() {
	var c guardCheck
	a.checkDataplane(&c, false)
	if len(c.problems) > 0 {
		a.commitMu.Lock()
		c = guardCheck{}
		a.checkDataplane(&c, true)
		a.commitMu.Unlock()
	}
	a.record(&c)
}

// guardCheck collects one check's findings.
type guardCheck struct {
	problems []string
	repairs  []Repair
	ifaces   []InterfaceHealth
}

func (c *guardCheck) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *guardCheck) repaired(kind, format string, args ...any) {
	c.repairs = append(c.repairs, Repair{At: time.Now(), Kind: kind, What: fmt.Sprintf(format, args...)})
}

// record keeps c as the last check, updates the metrics and logs what
// changed: each repair, each new problem, and the return to health.
func (a *Agent) record(c *guardCheck) {
	g := a.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range c.repairs {
		g.repairs.WithLabelValues(r.Kind).Inc()
		a.log.Warn("dataplane: repaired what was taken away behind the agent's back", "what", r.What)
	}
	for _, p := range c.problems {
		if !slices.Contains(g.health.Problems, p) {
			a.log.Error("dataplane: not as the agent reports it", "problem", p)
		}
	}
	if len(c.problems) == 0 && len(g.health.Problems) > 0 {
		a.log.Info("dataplane: every interface runs the agent's program again")
	}
	prev := g.health.Interfaces
	rep := append(g.health.Repairs, c.repairs...)
	if len(rep) > keepRepairs {
		rep = slices.Clone(rep[len(rep)-keepRepairs:])
	}
	g.health = DataplaneHealth{OK: len(c.problems) == 0, Checked: time.Now(), Problems: c.problems, Interfaces: c.ifaces, Repairs: rep}
	now := map[string]bool{}
	for _, ih := range c.ifaces {
		v := 0.0
		if ih.XDP == xdpOurs {
			v = 1
		}
		g.attached.WithLabelValues(ih.Name).Set(v)
		now[ih.Name] = true
	}
	for _, ih := range prev {
		if !now[ih.Name] {
			g.attached.DeleteLabelValues(ih.Name) // left the config
		}
	}
	if g.health.OK {
		g.ok.Set(1)
	} else {
		g.ok.Set(0)
	}
}

// checkDataplane checks the pins and every configured interface's XDP
// hook into c; with fix (commitMu held) it puts back what it can.
func (a *Agent) checkDataplane(c *guardCheck, fix bool) {
	pinsOK := a.checkPins(c, fix)
	prog, err := a.dp.Prog.Info()
	if err != nil {
		c.problem("read the agent's program: %v", err)
		return
	}
	ours, _ := prog.ID()
	for _, itf := range a.interfaces() {
		ih := InterfaceHealth{Name: itf.Name}
		a.checkInterface(c, &ih, itf, uint32(ours), fix && pinsOK)
		c.ifaces = append(c.ifaces, ih)
	}
}

// interfaces returns the configured interfaces. Not Config(): after a
// change that rebuilds the whole config (64K rules and more), which the
// guard would do every second under a stream of Applies, holding a.mu.
func (a *Agent) interfaces() []config.Interface {
	var out []config.Interface
	a.View(func(s *config.Store) { out = s.Interfaces() })
	return out
}

// checkInterface finds what runs at itf's XDP hook and, with fix,
// attaches the agent's program again where nothing runs.
func (a *Agent) checkInterface(c *guardCheck, ih *InterfaceHealth, itf config.Interface, ours uint32, fix bool) {
	nl, err := netlink.LinkByName(ih.Name)
	if err != nil {
		ih.XDP = xdpGone
		c.problem("interface %s: not found (%v): no XDP there until it comes back", ih.Name, err)
		return
	}
	at := nl.Attrs()
	ih.Ifindex = at.Index
	var progID uint32
	if x := at.Xdp; x != nil && x.Attached {
		progID, ih.Mode = x.ProgId, xdpMode(x.AttachMode)
		if progID == 0 {
			progID = ^uint32(0) // several programs (one per mode)
		}
	}
	linkID, linkIf := heldLinkInfo(a.held.Get(ih.Name))
	switch {
	case progID == ours && linkIf == uint32(at.Index):
		ih.XDP, ih.ProgID, ih.LinkID = xdpOurs, progID, linkID
		a.checkLinkPin(c, ih.Name, fix)
	case progID == 0:
		ih.XDP = xdpNone
		if !fix {
			c.problem("interface %s: no XDP program attached", ih.Name)
			return
		}
		if _, err := a.dp.AttachOne(a.opts.PinDir, ifaceOf(itf), false, a.held, a.log); err != nil {
			c.problem("interface %s: no XDP program attached (link %d was detached behind the agent's back, or the interface made again), and attaching it again failed: %v", ih.Name, linkID, err)
			return
		}
		newID, _ := heldLinkInfo(a.held.Get(ih.Name))
		ih.XDP, ih.ProgID, ih.LinkID = xdpOurs, ours, newID
		if x, err := netlink.LinkByIndex(at.Index); err == nil && x.Attrs().Xdp != nil {
			ih.Mode = xdpMode(x.Attrs().Xdp.AttachMode)
		}
		c.repaired(repairXDP, "interface %s: no XDP program attached (link %d was detached behind the agent's back, or the interface made again): attached the agent's again (link %d)", ih.Name, linkID, newID)
	case progID == ours:
		// The agent's program, but not through the link it holds: a
		// link the agent did not make (or lost track of) runs it.
		ih.XDP, ih.ProgID = xdpOurs, progID
		if !fix {
			c.problem("interface %s: runs the agent's program through a link the agent does not hold", ih.Name)
			return
		}
		if _, err := a.dp.AttachOne(a.opts.PinDir, ifaceOf(itf), false, a.held, a.log); err != nil {
			c.problem("interface %s: runs the agent's program through a link the agent does not hold, and adopting it failed: %v", ih.Name, err)
			return
		}
		ih.LinkID, _ = heldLinkInfo(a.held.Get(ih.Name))
	default:
		ih.XDP, ih.ProgID = xdpOther, progID
		what := "several XDP programs"
		if progID != ^uint32(0) {
			what = fmt.Sprintf("XDP program %d%s", progID, progName(progID))
		}
		c.problem("interface %s: runs %s, not the agent's (%d): its packets skip the agent's rules; detach it and the agent attaches its own again", ih.Name, what, ours)
	}
}

// heldLinkInfo returns a held link's id and the ifindex it is attached
// to (0: detached, or the interface is gone).
func heldLinkInfo(l link.Link) (id, ifindex uint32) {
	if l == nil {
		return 0, 0
	}
	info, err := l.Info()
	if err != nil {
		return 0, 0
	}
	if x := info.XDP(); x != nil {
		ifindex = x.Ifindex
	}
	return uint32(info.ID), ifindex
}

// progName returns ` (NAME)` for a program id, or "".
func progName(id uint32) string {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return ""
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil || info.Name == "" {
		return ""
	}
	return " (" + info.Name + ")"
}

// xdpMode names an IFLA_XDP_ATTACHED mode.
func xdpMode(m uint32) string {
	switch m {
	case 1:
		return "native"
	case 2:
		return "generic"
	case 3:
		return "offload"
	case 4:
		return "several"
	}
	return ""
}

// checkPins checks the pin dir (still the one the agent locked) and the
// pins of the agent's maps and program; with fix it makes them again. It
// reports whether the pin dir is there to pin into.
func (a *Agent) checkPins(c *guardCheck, fix bool) bool {
	dir := a.opts.PinDir
	if !a.pinLock.holds(dir) {
		if !fix {
			c.problem("pin dir %s: removed or replaced", dir)
			return false
		}
		if err := a.remakePinDir(); err != nil {
			c.problem("pin dir %s: removed or replaced behind the agent's back, and making it again failed: %v", dir, err)
			return false
		}
		c.repaired(repairPinDir, "pin dir %s was removed or replaced: made it again", dir)
	}
	var made []string
	pin := func(name string, clone func() (pinCloser, error)) {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); err == nil {
			return
		}
		if !fix {
			c.problem("pin %s: missing", p)
			return
		}
		if err := repin(p, clone); err != nil {
			c.problem("pin %s: missing, and pinning it again failed: %v", p, err)
			return
		}
		made = append(made, name)
	}
	for name, m := range a.dp.MapReplacements() {
		if !m.IsPinned() {
			continue // a map this build does not pin
		}
		pin(name, func() (pinCloser, error) { return m.Clone() })
	}
	pin(loader.ProgPrefix+bpf.ProgramID(a.dp.Limits), func() (pinCloser, error) { return a.dp.Prog.Clone() })
	if len(made) > 0 {
		slices.Sort(made)
		c.repaired(repairPin, "pinned again in %s what was removed: %s", dir, strings.Join(made, ", "))
	}
	return true
}

// checkLinkPin checks the pin of the link held for interface name; with
// fix it pins the held link again.
func (a *Agent) checkLinkPin(c *guardCheck, name string, fix bool) {
	p := filepath.Join(a.opts.PinDir, loader.LinkPrefix+name)
	if _, err := os.Lstat(p); err == nil {
		return
	}
	if !fix {
		c.problem("pin %s: missing (the agent's fd keeps the link attached)", p)
		return
	}
	l, ok := a.held.Get(name).(interface{ FD() int })
	if !ok {
		c.problem("pin %s: missing, and no link held to pin again", p)
		return
	}
	err := repin(p, func() (pinCloser, error) {
		fd, err := unix.FcntlInt(uintptr(l.FD()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		return link.NewFromFD(fd)
	})
	if err != nil {
		c.problem("pin %s: missing, and pinning the held link again failed: %v", p, err)
		return
	}
	c.repaired(repairPin, "pinned the link of interface %s again at %s", name, p)
}

// pinCloser is a BPF object handle: a map, a program or a link.
type pinCloser interface {
	Pin(string) error
	Close() error
}

// repin pins at p a fresh handle (clone) on an object the agent holds:
// its own handles keep the path they were pinned at, so nothing else
// the agent does with them changes.
func repin(p string, clone func() (pinCloser, error)) error {
	o, err := clone()
	if err != nil {
		return err
	}
	defer o.Close()
	return o.Pin(p)
}

// holds reports whether l locks the directory now at path (the same
// inode): rm -rf of a pin dir leaves the agent holding the lock of a
// directory no longer there.
func (l *lock) holds(path string) bool {
	var have, now unix.Stat_t
	if unix.Fstat(int(l.f.Fd()), &have) != nil || unix.Stat(path, &now) != nil {
		return false
	}
	return have.Dev == now.Dev && have.Ino == now.Ino
}

// remakePinDir makes the pin dir again and locks it; commitMu held.
func (a *Agent) remakePinDir() error {
	if err := loader.EnsureBPFFS(a.opts.PinDir); err != nil {
		return err
	}
	l, err := lockPath(a.opts.PinDir, "pin dir", true)
	if err != nil {
		if errors.Is(err, ErrLocked) {
			return fmt.Errorf("another agent took it meanwhile: %w", err)
		}
		return err
	}
	a.pinLock.release()
	a.pinLock = l
	return nil
}
