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

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Pin layout under the pin dir (bpffs holds only BPF objects, so the
// program's identity is in its pin name): the maps by their own names, the
// program as prog_<id>, and one XDP link per interface.
const (
	progPrefix = "prog_"
	linkPrefix = "link_"
)

// EnsureBPFFS mounts a bpffs at /sys/fs/bpf if none is there (fresh
// machines and containers often lack it) and creates pinDir.
func EnsureBPFFS(pinDir string) error {
	root := "/sys/fs/bpf"
	if !strings.HasPrefix(filepath.Clean(pinDir), root) {
		return os.MkdirAll(pinDir, 0o700)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return os.MkdirAll(pinDir, 0o700)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", root, err)
	}
	if err := unix.Mount("bpffs", root, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", root, err)
	}
	return os.MkdirAll(pinDir, 0o700)
}

// ensureProgram adopts the pinned program when it is the one this build
// would load for these limits; otherwise it loads ours and pins it. It
// reports whether the program was newly loaded.
func ensureProgram(dp *bpf.Dataplane, pinDir string, log *slog.Logger) (bool, error) {
	want := progPrefix + bpf.ProgramID(dp.Limits)
	pinPath := filepath.Join(pinDir, want)
	if prog, err := ebpf.LoadPinnedProgram(pinPath, nil); err == nil {
		dp.Prog = prog
		log.Info("adopted pinned program", "pin", pinPath)
		return false, nil
	}
	prog, err := dp.LoadProgram()
	if err != nil {
		return false, err
	}
	if err := prog.Pin(pinPath); err != nil {
		return false, fmt.Errorf("pin program: %w", err)
	}
	log.Info("loaded program", "pin", pinPath)
	return true, nil
}

// removeStalePrograms unpins programs other than the current one, once the
// links run the current one.
func removeStalePrograms(pinDir string, dp *bpf.Dataplane) {
	keep := progPrefix + bpf.ProgramID(dp.Limits)
	old, _ := filepath.Glob(filepath.Join(pinDir, progPrefix+"*"))
	for _, p := range old {
		if filepath.Base(p) != keep {
			_ = os.Remove(p)
		}
	}
}

// attach makes every configured interface run dp.Prog through a pinned XDP
// link: an existing link is adopted (and atomically switched to the new
// program if one was loaded), a missing one is created. Links of
// interfaces no longer configured are removed.
func attach(dp *bpf.Dataplane, pinDir string, ifaces []config.Interface, newProg bool, log *slog.Logger) error {
	want := map[string]bool{}
	for _, itf := range ifaces {
		want[itf.Name] = true
		if err := attachOne(dp, pinDir, itf, newProg, log); err != nil {
			return fmt.Errorf("attach xdp to %s: %w", itf.Name, err)
		}
	}
	pins, _ := filepath.Glob(filepath.Join(pinDir, linkPrefix+"*"))
	for _, p := range pins {
		name := strings.TrimPrefix(filepath.Base(p), linkPrefix)
		if want[name] {
			continue
		}
		if err := detachPin(p); err != nil {
			return err
		}
		log.Info("detached interface no longer in config", "interface", name)
	}
	return nil
}

func attachOne(dp *bpf.Dataplane, pinDir string, itf config.Interface, newProg bool, log *slog.Logger) error {
	nif, err := net.InterfaceByName(itf.Name)
	if err != nil {
		return err
	}
	pinPath := filepath.Join(pinDir, linkPrefix+itf.Name)
	if l, err := link.LoadPinnedLink(pinPath, nil); err == nil {
		defer l.Close()
		info, ierr := l.Info()
		if ierr == nil && info.XDP() != nil && int(info.XDP().Ifindex) == nif.Index {
			if newProg {
				if err := l.Update(dp.Prog); err != nil {
					return fmt.Errorf("replace program through link: %w", err)
				}
				log.Info("replaced program on interface", "interface", itf.Name)
			} else {
				log.Info("adopted XDP link", "interface", itf.Name)
			}
			return nil
		}
		// The interface was recreated: its old link is defunct.
		_ = l.Unpin()
	}
	modes := []struct {
		name  string
		flags link.XDPAttachFlags
	}{{"native", link.XDPDriverMode}, {"generic", link.XDPGenericMode}}
	switch itf.XDP {
	case "native":
		modes = modes[:1]
	case "generic":
		modes = modes[1:]
	}
	var l link.Link
	for i, m := range modes {
		l, err = link.AttachXDP(link.XDPOptions{Program: dp.Prog, Interface: nif.Index, Flags: m.flags})
		if err == nil {
			if i > 0 {
				log.Warn("native XDP unavailable, using generic mode (slower)", "interface", itf.Name)
			}
			log.Info("attached XDP", "interface", itf.Name, "mode", m.name)
			break
		}
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("interface already has an XDP program not managed by this agent (remove it, or use another --pin-dir's `edgeplane down`): %w", err)
		}
	}
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.Pin(pinPath); err != nil {
		return fmt.Errorf("pin link: %w", err)
	}
	return nil
}

func detachPin(p string) error {
	l, err := link.LoadPinnedLink(p, nil)
	if err != nil {
		return os.Remove(p)
	}
	defer l.Close()
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpin %s: %w", p, err)
	}
	return nil
}

// Down detaches every link pinned under pinDir and removes all pins: the
// explicit way to take edgeplane off a gateway.
func Down(pinDir string) error {
	pins, _ := filepath.Glob(filepath.Join(pinDir, linkPrefix+"*"))
	var errs []error
	for _, p := range pins {
		errs = append(errs, detachPin(p))
	}
	// An unfinished upgrade's pins, in a directory of their own.
	errs = append(errs, bpf.DiscardStaged(pinDir))
	entries, err := os.ReadDir(pinDir)
	if err != nil {
		if os.IsNotExist(err) {
			return errors.Join(errs...)
		}
		return fmt.Errorf("read pin dir: %w", err)
	}
	for _, e := range entries {
		errs = append(errs, os.Remove(filepath.Join(pinDir, e.Name())))
	}
	errs = append(errs, os.Remove(pinDir))
	return errors.Join(errs...)
}
