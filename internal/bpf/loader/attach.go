// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/upgrade"
)

// Pin layout under the pin dir (bpffs holds only BPF objects, so the
// program's identity is in its pin name): the maps by their own names, the
// program as prog_<id>, and one XDP link per interface.
const (
	ProgPrefix = "prog_"
	LinkPrefix = "link_"
	// mapPrefix starts the name of every map (and so map pin) and of
	// the XDP program edgeplane loads.
	mapPrefix = "edge_"
	// pinMarker is a directory edgeplane makes in a pin dir it created
	// (bpffs holds no regular files, and no names with a dot): Down
	// removes the dir only then.
	pinMarker = "edgeplane_pin_dir"
)

// EnsureBPFFS mounts a bpffs at /sys/fs/bpf if none is there (fresh
// machines and containers often lack it) and creates pinDir.
func EnsureBPFFS(pinDir string) error {
	root := "/sys/fs/bpf"
	if !strings.HasPrefix(filepath.Clean(pinDir), root) {
		return makePinDir(pinDir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return makePinDir(pinDir)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", root, err)
	}
	if err := unix.Mount("bpffs", root, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", root, err)
	}
	return makePinDir(pinDir)
}

// makePinDir creates pinDir and marks it as edgeplane's when it is new
// or empty. A dir that already holds pins without the mark (the bpffs
// root, another tool's dir, one from a build before the mark) stays
// unmarked: Down then removes only what the kernel shows is edgeplane's.
func makePinDir(pinDir string) error {
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		return fmt.Errorf("create pin dir: %w", err)
	}
	entries, err := os.ReadDir(pinDir)
	if err != nil {
		return fmt.Errorf("read pin dir: %w", err)
	}
	if len(entries) > 0 || filepath.Clean(pinDir) == "/sys/fs/bpf" {
		return nil
	}
	if err := os.Mkdir(filepath.Join(pinDir, pinMarker), 0o700); err != nil && !os.IsExist(err) {
		return fmt.Errorf("mark pin dir: %w", err)
	}
	return nil
}

// EnsureProgram adopts the pinned program when it is the one this build
// would load for these limits; otherwise it loads ours and pins it. It
// reports whether the program was newly loaded.
func (dp *Dataplane) EnsureProgram(pinDir string, log *slog.Logger) (bool, error) {
	want := ProgPrefix + bpf.ProgramID(dp.Limits)
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

// RemoveStalePrograms unpins programs other than the current one, once the
// links run the current one.
func (dp *Dataplane) RemoveStalePrograms(pinDir string) {
	keep := ProgPrefix + bpf.ProgramID(dp.Limits)
	old, _ := filepath.Glob(filepath.Join(pinDir, ProgPrefix+"*"))
	for _, p := range old {
		if filepath.Base(p) != keep {
			_ = os.Remove(p)
		}
	}
}

// Iface is an interface the dataplane runs on: its name, and its XDP
// attach mode ("native", "generic", or anything else for native
// falling back to generic with a warning).
type Iface struct {
	Name, XDP string
}

// Links holds an open fd of each interface's XDP link for the
// agent's life. A link lives while a pin or an fd refers to it: with
// only the pin, removing the pin dir (rm -rf) detached XDP at once and
// the interface passed every packet unfiltered while the agent went on
// reporting its rules. Held, a link goes only when the agent takes it
// off (DetachPin: a change that removed its interface, --detach-on-exit,
// edgeplane down), and the agent's guard pins it again. A nil
// *Links holds nothing: what it is given is closed.
type Links struct {
	mu sync.Mutex
	m  map[string]link.Link // by interface name
}

// NewLinks holds no link yet.
func NewLinks() *Links { return &Links{m: map[string]link.Link{}} }

// Keep holds l as name's link, closing the one held before.
func (h *Links) Keep(name string, l link.Link) {
	if h == nil {
		l.Close()
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.m[name]; old != nil && old != l {
		old.Close()
	}
	h.m[name] = l
}

// Get returns name's held link (nil: none).
func (h *Links) Get(name string) link.Link {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[name]
}

// Drop closes name's held link (DetachPin has taken it off, or is about
// to).
func (h *Links) Drop(name string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.m[name]; l != nil {
		l.Close()
		delete(h.m, name)
	}
}

// Names lists the interfaces whose links are held.
func (h *Links) Names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.m))
	for n := range h.m {
		out = append(out, n)
	}
	return out
}

// CloseAll closes every held fd: the links stay as long as their pins.
func (h *Links) CloseAll() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for n, l := range h.m {
		l.Close()
		delete(h.m, n)
	}
}

// Attach makes every configured interface run dp.Prog through a pinned XDP
// link, held in held: an existing link is adopted (and atomically
// switched to the new program if one was loaded), a missing one is
// created. It returns the pins of the links it created. It detaches
// nothing: interfaces that left the config keep their link until
// DetachExcept, after the change that removed them has committed, so a
// change that fails leaves every interface with XDP and the last
// committed generation. When it fails, it takes off the links it created
// itself.
func (dp *Dataplane) Attach(pinDir string, ifaces []Iface, newProg bool, held *Links, log *slog.Logger) ([]string, error) {
	var added []string
	for _, itf := range ifaces {
		created, err := dp.AttachOne(pinDir, itf, newProg, held, log)
		if created {
			added = append(added, filepath.Join(pinDir, LinkPrefix+itf.Name))
		}
		if err != nil {
			DetachAdded(added, held, log)
			return nil, fmt.Errorf("attach xdp to %s: %w", itf.Name, err)
		}
	}
	return added, nil
}

// DetachAdded takes off the links a failed change created, so the
// interfaces are as they were before it.
func DetachAdded(pins []string, held *Links, log *slog.Logger) {
	for _, p := range pins {
		held.Drop(strings.TrimPrefix(filepath.Base(p), LinkPrefix))
		if err := DetachPin(p); err != nil {
			log.Error("take off a link a failed change attached", "pin", p, "error", err)
		}
	}
}

// DetachExcept detaches the links of interfaces not in ifaces: the last
// step of a change that removed them, once it has committed.
func DetachExcept(pinDir string, ifaces []Iface, held *Links, log *slog.Logger) error {
	want := map[string]bool{}
	for _, itf := range ifaces {
		want[itf.Name] = true
	}
	pins, _ := filepath.Glob(filepath.Join(pinDir, LinkPrefix+"*"))
	var errs []error
	for _, p := range pins {
		name := strings.TrimPrefix(filepath.Base(p), LinkPrefix)
		if want[name] {
			continue
		}
		held.Drop(name)
		if err := DetachPin(p); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("detached interface no longer in config", "interface", name)
	}
	// A held link whose pin is gone is taken off all the same.
	if held != nil {
		for _, name := range held.Names() {
			if !want[name] {
				if l := held.Get(name); l != nil {
					_ = l.Detach()
				}
				held.Drop(name)
				log.Info("detached interface no longer in config", "interface", name)
			}
		}
	}
	return errors.Join(errs...)
}

// AttachOne makes interface itf run dp.Prog through a pinned XDP link, as
// Attach does for each, and reports whether it created the link (an
// adopted one is not).
// The link it adopts or creates is held in held.
func (dp *Dataplane) AttachOne(pinDir string, itf Iface, newProg bool, held *Links, log *slog.Logger) (bool, error) {
	nif, err := net.InterfaceByName(itf.Name)
	if err != nil {
		return false, err
	}
	pinPath := filepath.Join(pinDir, LinkPrefix+itf.Name)
	if l, err := link.LoadPinnedLink(pinPath, nil); err == nil {
		info, ierr := l.Info()
		if ierr == nil && info.XDP() != nil && int(info.XDP().Ifindex) == nif.Index {
			if newProg {
				if err := l.Update(dp.Prog); err != nil {
					l.Close()
					return false, fmt.Errorf("replace program through link: %w", err)
				}
				log.Info("replaced program on interface", "interface", itf.Name)
			} else if held.Get(itf.Name) == nil {
				log.Info("adopted XDP link", "interface", itf.Name)
			}
			held.Keep(itf.Name, l)
			return false, nil
		}
		// The interface was recreated, or the link detached: it is
		// defunct.
		_ = l.Unpin()
		l.Close()
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
			return false, fmt.Errorf("interface already has an XDP program not managed by this agent (remove it, or use another --pin-dir's `edgeplane down`): %w", err)
		}
	}
	if err != nil {
		return false, err
	}
	if err := l.Pin(pinPath); err != nil {
		// Unpinned, the link goes with its last fd.
		l.Close()
		return false, fmt.Errorf("pin link: %w", err)
	}
	held.Keep(itf.Name, l)
	return true, nil
}

// DetachPin takes the link pinned at p off its interface and removes the
// pin. The link is detached (BPF_LINK_DETACH), not only unpinned: an fd
// the agent holds would otherwise keep it attached.
func DetachPin(p string) error {
	l, err := link.LoadPinnedLink(p, nil)
	if err != nil {
		return os.Remove(p)
	}
	defer l.Close()
	if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("detach %s: %w", p, err)
	}
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpin %s: %w", p, err)
	}
	return nil
}

// Down takes edgeplane off a gateway: it detaches the XDP links pinned
// under pinDir and removes edgeplane's pins, and only those, so a pin dir
// shared with other tools (even the bpffs root) keeps theirs. In a dir
// edgeplane created (it holds pinMarker) every pin with one of edgeplane's
// names is edgeplane's, and the dir goes too. Elsewhere a pin is removed
// only when the kernel says it is edgeplane's: a program named edge_*, a
// link running one, a map one of them uses. The caller holds pinDir's
// lock (agent.Down takes it): a running agent's pins are left alone.
func Down(pinDir string) error {
	entries, err := os.ReadDir(pinDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("read pin dir: %w", err)
	}
	_, err = os.Stat(filepath.Join(pinDir, pinMarker))
	marked := err == nil
	// An unfinished upgrade's pins, in a directory of their own: all
	// edgeplane's in a dir it made, else told one by one as here.
	var errs []error
	if marked {
		errs = append(errs, upgrade.DiscardStaged(pinDir))
	} else if st, err := os.Stat(filepath.Join(pinDir, upgrade.Dir)); err == nil && st.IsDir() {
		errs = append(errs, Down(filepath.Join(pinDir, upgrade.Dir)))
	}
	// The maps edgeplane's pinned programs use, by ID.
	ourMaps := map[ebpf.MapID]bool{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ProgPrefix) {
			continue
		}
		prog, err := ebpf.LoadPinnedProgram(filepath.Join(pinDir, e.Name()), nil)
		if err != nil {
			continue
		}
		if info, err := prog.Info(); err == nil && ourProgram(info) {
			ids, _ := info.MapIDs()
			for _, id := range ids {
				ourMaps[id] = true
			}
		}
		prog.Close()
	}
	var left []string
	// Links first: a program or map stays loaded while a link uses it.
	for _, e := range entries {
		if p := filepath.Join(pinDir, e.Name()); strings.HasPrefix(e.Name(), LinkPrefix) && (marked || ourLink(p)) {
			errs = append(errs, DetachPin(p))
		}
	}
	for _, e := range entries {
		name, p := e.Name(), filepath.Join(pinDir, e.Name())
		var ours bool
		switch {
		case name == pinMarker || strings.HasPrefix(name, LinkPrefix) || name == upgrade.Dir && marked:
			continue
		case strings.HasPrefix(name, ProgPrefix):
			ours = marked || ourPinnedProgram(p)
		case strings.HasPrefix(name, mapPrefix):
			ours = marked || ourPinnedMap(p, ourMaps)
		}
		if !ours {
			left = append(left, name)
			continue
		}
		errs = append(errs, os.Remove(p))
	}
	if !marked {
		if len(left) > 0 {
			slog.Info("left pins edgeplane did not make", "pin_dir", pinDir, "pins", len(left))
		}
		return errors.Join(errs...)
	}
	if len(left) > 0 {
		return errors.Join(append(errs, fmt.Errorf("pin dir %s also holds %s, which edgeplane did not pin: left it and them in place", pinDir, strings.Join(left, ", ")))...)
	}
	errs = append(errs, os.Remove(filepath.Join(pinDir, pinMarker)), os.Remove(pinDir))
	return errors.Join(errs...)
}

// ourProgram tells edgeplane's XDP programs by their kernel name (the
// first 15 bytes of the C function's, edge_xdp).
func ourProgram(info *ebpf.ProgramInfo) bool {
	return info.Type == ebpf.XDP && strings.HasPrefix(info.Name, mapPrefix)
}

func ourPinnedProgram(p string) bool {
	prog, err := ebpf.LoadPinnedProgram(p, nil)
	if err != nil {
		return false
	}
	defer prog.Close()
	info, err := prog.Info()
	return err == nil && ourProgram(info)
}

// ourLink reports an XDP link that runs one of edgeplane's programs.
func ourLink(p string) bool {
	l, err := link.LoadPinnedLink(p, nil)
	if err != nil {
		return false
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil || info.XDP() == nil {
		return false
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return false
	}
	defer prog.Close()
	pi, err := prog.Info()
	return err == nil && ourProgram(pi)
}

// ourPinnedMap reports a map that one of edgeplane's programs uses, or
// one that only the agent uses (no program refers to it) with the name
// of one of this build's maps, in the kernel too.
func ourPinnedMap(p string, ours map[ebpf.MapID]bool) bool {
	m, err := ebpf.LoadPinnedMap(p, nil)
	if err != nil {
		return false
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		return false
	}
	if id, ok := info.ID(); ok && ours[id] {
		return true
	}
	name := filepath.Base(p)
	spec, err := bpf.Spec(bpf.Limits{Flows: 1, Rules: 1})
	if err != nil {
		return false
	}
	_, declared := spec.Maps[name]
	// The kernel keeps BPF_OBJ_NAME_LEN-1 bytes of a map's name.
	return declared && info.Name == name[:min(len(name), unix.BPF_OBJ_NAME_LEN-1)]
}
