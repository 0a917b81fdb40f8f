// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/bpf/upgrade"
	"github.com/edgeplane/edgeplane/internal/config"
)

// An upgrade takes over a pinned dataplane whose map layouts or sizes
// differ from this build's, without a forwarding gap. The pins move
// through these states; an agent that ends in any of them (crash, kill,
// error) leaves the gateway forwarding, and the next start
// (recoverUpgrade) resolves the state before anything else:
//
//  1. Prepared: the new maps (and then the new program) are pinned under
//     pinDir/next, filled from the old ones; then the agent commits its
//     config into them as a new generation. The links run the old
//     program on the old maps. Recovery: remove next/ (the old dataplane
//     is as it was); the next start upgrades again from scratch.
//  2. Switching: each link is moved to the new program by one atomic
//     link update, one interface after the other. Recovery: move the
//     remaining links to the program in next/, then go on as from 3.
//  3. Switched: every link runs the new program. The agent waits out the
//     old program (an RCU grace period), copies the connections it
//     opened since the first copy and adds what it counted (recovery
//     copies the connections; the counts since the first copy are lost,
//     the snapshot was the ended agent's).
//  4. Promoting: the new pins replace the old ones by name, one rename
//     each (a map in next/ is new, one gone from it was moved), the
//     program pin last, then next/ is removed. Recovery: the rest of 3
//     and 4, whichever build starts; a build whose layout is the old one
//     then upgrades back from the new one.
//
// A failure in state 1 or 2 moves any switched link back to the old
// program and removes next/: the old program forwards as before.

// haltEnv names a state (prepared, committed, switching, switched,
// promoting) at which the agent kills itself with SIGKILL: the upgrade
// test's crashes. Unset in production.
const haltEnv = "EDGEPLANE_UPGRADE_HALT"

// halt ends the process at phase when haltEnv asks for it.
func halt(phase string) {
	if os.Getenv(haltEnv) == phase {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// upgrade takes over the pinned dataplane (see above) and commits cfg.
func (a *Agent) upgrade(cfg *config.Config, why error) error {
	start := time.Now()
	a.log.Info("pinned maps differ from this build's: taking their state over while the old program forwards", "pin_dir", a.opts.PinDir, "differences", why.Error())
	u, err := loader.PrepareUpgrade(limitsOf(cfg), a.opts.PinDir, a.log)
	if err != nil {
		return fmt.Errorf("upgrade (the old program forwards as before): %w", err)
	}
	u.Halt = halt
	fail := func(err error) error {
		a.dp = nil
		u.Abort()
		return fmt.Errorf("upgrade (the old program forwards as before): %w", err)
	}
	dp := u.Dataplane()
	prog, err := dp.LoadProgram()
	if err != nil {
		return fail(err)
	}
	progPin := filepath.Join(u.Stage(), loader.ProgPrefix+bpf.ProgramID(dp.Limits))
	if err := prog.Pin(progPin); err != nil {
		return fail(fmt.Errorf("pin program: %w", err))
	}
	prepared := time.Since(start)
	halt("prepared")
	if err := enableForwarding(cfg.Interfaces, a.log); err != nil {
		return fail(err)
	}
	if err := a.commitAdopted(cfg, dp); err != nil {
		return fail(err)
	}
	halt("committed")
	window := time.Now()
	if err := u.CopyAgain(); err != nil {
		return fail(err)
	}
	prev, err := linkPrograms(a.opts.PinDir)
	if err != nil {
		return fail(err)
	}
	// An XDP link update waits for a grace period in the kernel: 8 ms
	// here between the two interfaces' updates, 0.2-0.4 ms expedited.
	var switched time.Duration
	err = dp.Expedited(func() (err error) {
		switched, err = switchLinks(a.opts.PinDir, cfg.Interfaces, dp.Prog)
		return err
	})
	if err == nil {
		// Interfaces new in the config get their link now.
		_, err = dp.Attach(a.opts.PinDir, ifacesOf(cfg.Interfaces), false, a.held, a.log)
	}
	if err != nil {
		a.restoreLinks(prev)
		return fail(err)
	}
	for _, p := range prev {
		p.Close()
	}
	// Interfaces that left the config lose their link now, before Finish
	// waits the old program out: it runs nowhere after that.
	if err := loader.DetachExcept(a.opts.PinDir, ifacesOf(cfg.Interfaces), a.held, a.log); err != nil {
		return fmt.Errorf("finish the upgrade (the new program forwards; the next start completes it): %w", err)
	}
	halt("switched")
	if err := u.Finish(); err != nil {
		return fmt.Errorf("finish the upgrade (the new program forwards; the next start completes it): %w", err)
	}
	if err := promoteProgram(a.opts.PinDir, progPin); err != nil {
		return fmt.Errorf("finish the upgrade (the new program forwards; the next start completes it): %w", err)
	}
	a.log.Info("upgraded: the links run this build's program on the carried-over state",
		"took", time.Since(start).Round(time.Microsecond), "prepare", prepared.Round(time.Microsecond),
		"switch", switched.Round(time.Microsecond), "interfaces", len(cfg.Interfaces),
		"window", time.Since(window).Round(time.Microsecond))
	return nil
}

// switchLinks moves the pinned link of every configured interface that
// has one to prog, one atomic update each, the links opened first so the
// updates follow each other closely. It returns the time from the first
// update to the end of the last: how long the interfaces ran different
// programs.
func switchLinks(pinDir string, ifaces []config.Interface, prog *ebpf.Program) (time.Duration, error) {
	var links []link.Link
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	for _, itf := range ifaces {
		l, err := link.LoadPinnedLink(filepath.Join(pinDir, loader.LinkPrefix+itf.Name), nil)
		if err != nil {
			continue // none yet: attach makes it
		}
		nif, nerr := net.InterfaceByName(itf.Name)
		info, ierr := l.Info()
		if nerr != nil || ierr != nil || info.XDP() == nil || int(info.XDP().Ifindex) != nif.Index {
			l.Close()
			continue // the interface was recreated: attach replaces the link
		}
		links = append(links, l)
	}
	start := time.Now()
	for i, l := range links {
		if err := l.Update(prog); err != nil {
			return time.Since(start), fmt.Errorf("switch link %d of %d to the new program: %w", i+1, len(links), err)
		}
		if i == 0 && len(links) > 1 {
			halt("switching")
		}
	}
	return time.Since(start), nil
}

// linkPrograms returns the program each pinned link runs, by pin path.
func linkPrograms(pinDir string) (map[string]*ebpf.Program, error) {
	out := map[string]*ebpf.Program{}
	pins, _ := filepath.Glob(filepath.Join(pinDir, loader.LinkPrefix+"*"))
	for _, p := range pins {
		id, err := linkProgramID(p)
		if err != nil {
			continue // a defunct link: attach replaces it
		}
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			for _, q := range out {
				q.Close()
			}
			return nil, fmt.Errorf("open the program of %s: %w", filepath.Base(p), err)
		}
		out[p] = prog
	}
	return out, nil
}

// linkProgramID returns the id of the program the link pinned at p runs.
func linkProgramID(p string) (ebpf.ProgramID, error) {
	l, err := link.LoadPinnedLink(p, nil)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return 0, err
	}
	return info.Program, nil
}

// restoreLinks, after a failed switch, moves the links back to the
// programs they ran and removes links the switch created.
func (a *Agent) restoreLinks(prev map[string]*ebpf.Program) {
	pins, _ := filepath.Glob(filepath.Join(a.opts.PinDir, loader.LinkPrefix+"*"))
	for _, p := range pins {
		prog, ok := prev[p]
		if !ok {
			a.held.Drop(strings.TrimPrefix(filepath.Base(p), loader.LinkPrefix))
			if err := loader.DetachPin(p); err != nil {
				a.log.Error("upgrade: remove a link the switch created", "link", p, "error", err)
			}
			continue
		}
		l, err := link.LoadPinnedLink(p, nil)
		if err == nil {
			err = l.Update(prog)
			l.Close()
		}
		if err != nil {
			a.log.Error("upgrade: move a link back to the old program", "link", p, "error", err)
		}
	}
	for _, prog := range prev {
		prog.Close()
	}
}

// promoteProgram moves the new program's pin into the pin dir, removes the
// upgrade directory and the pins of programs no link runs any more.
func promoteProgram(pinDir, progPin string) error {
	keep := filepath.Join(pinDir, filepath.Base(progPin))
	if err := os.Rename(progPin, keep); err != nil {
		return fmt.Errorf("move the program pin into %s: %w", pinDir, err)
	}
	if err := os.Remove(filepath.Dir(progPin)); err != nil {
		return fmt.Errorf("remove %s: %w", filepath.Dir(progPin), err)
	}
	old, _ := filepath.Glob(filepath.Join(pinDir, loader.ProgPrefix+"*"))
	for _, p := range old {
		if p != keep {
			_ = os.Remove(p)
		}
	}
	return nil
}

// recoverUpgrade resolves what an agent that ended during an upgrade left
// (states above): with no link on the staged program it discards the
// staged pins; otherwise it moves every link to that program and
// completes the upgrade from the pins.
func recoverUpgrade(pinDir string, log *slog.Logger) error {
	stage := filepath.Join(pinDir, upgrade.Dir)
	if _, err := os.Stat(stage); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	progs, _ := filepath.Glob(filepath.Join(stage, loader.ProgPrefix+"*"))
	var staged *ebpf.Program
	var stagedID ebpf.ProgramID
	if len(progs) == 1 {
		if p, err := ebpf.LoadPinnedProgram(progs[0], nil); err == nil {
			if info, err := p.Info(); err == nil {
				stagedID, _ = info.ID()
				staged = p
				defer p.Close()
			} else {
				p.Close()
			}
		}
	}
	links, _ := filepath.Glob(filepath.Join(pinDir, loader.LinkPrefix+"*"))
	var behind []string
	running := 0
	for _, l := range links {
		id, err := linkProgramID(l)
		switch {
		case err != nil || staged == nil:
		case id == stagedID:
			running++
		default:
			behind = append(behind, l)
		}
	}
	if running == 0 {
		log.Info("upgrade: an earlier agent ended before its switch: removing what it staged; the pinned dataplane is as it was", "dir", stage)
		return upgrade.DiscardStaged(pinDir)
	}
	log.Info("upgrade: an earlier agent ended after its switch: completing it", "dir", stage, "links_behind", len(behind))
	for _, p := range behind {
		l, err := link.LoadPinnedLink(p, nil)
		if err != nil {
			return fmt.Errorf("complete the upgrade: %w", err)
		}
		err = l.Update(staged)
		l.Close()
		if err != nil {
			return fmt.Errorf("complete the upgrade: move %s to the new program: %w", filepath.Base(p), err)
		}
	}
	if err := upgrade.FinishStaged(pinDir, log); err != nil {
		return fmt.Errorf("complete the upgrade: %w", err)
	}
	if err := promoteProgram(pinDir, progs[0]); err != nil {
		return fmt.Errorf("complete the upgrade: %w", err)
	}
	return nil
}
