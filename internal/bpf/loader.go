// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf/rcu"
)

// Limits are the map sizes taken from the config at load time.
type Limits struct {
	Flows uint32 // flows the flow table holds, of both families (FTEntries)
	Rules uint32 // classifier entries and FARs per generation
	// MaglevSize is the entries of each service's Maglev table (a prime;
	// 0: DefaultMaglevSize), Conns the connections (0: Flows; a
	// connection is a flow's entry: the table holds the larger).
	MaglevSize uint32
	Conns      uint32
}

// MaglevBlock mirrors EDGE_MAGLEV_BLOCK: Maglev entries per edge_maglev
// element.
const MaglevBlock = 64

// MaglevBlocks is the edge_maglev elements a table of MaglevSize entries
// takes.
func (l Limits) MaglevBlocks() uint32 {
	return (l.WithDefaults().MaglevSize + MaglevBlock - 1) / MaglevBlock
}

// DefaultMaglevSize is the Maglev table size when the limits name none.
const DefaultMaglevSize = 65537

// WithDefaults fills the zero sizes that have defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaglevSize == 0 {
		l.MaglevSize = DefaultMaglevSize
	}
	if l.Conns == 0 {
		l.Conns = l.Flows
	}
	return l
}

// FARStride is the FAR places per slot: one per rule, then one reply
// rewrite per service (index Rules + service tag).
func (l Limits) FARStride() uint32 { return l.Rules + MaxServices }

// ErrIncompatible is returned when pinned maps exist with other sizes or
// layouts than this build and config want: PrepareUpgrade takes them
// over.
var ErrIncompatible = errors.New("pinned maps do not match this config")

// Spec returns the dataplane's collection spec with map sizes and load-time
// constants set from l.
func Spec(l Limits) (*ebpf.CollectionSpec, error) {
	if l.Flows == 0 || l.Rules == 0 {
		return nil, fmt.Errorf("limits must be positive: flows %d, rules %d", l.Flows, l.Rules)
	}
	spec, err := loadEdge()
	if err != nil {
		return nil, fmt.Errorf("load embedded object: %w", err)
	}
	if err := ApplyLimits(spec, l); err != nil {
		return nil, err
	}
	return spec, nil
}

// ApplyLimits sets map sizes and load-time constants from l on spec, which
// is the dataplane's or another object built from the same headers (the
// benchmark wrappers).
func ApplyLimits(spec *ebpf.CollectionSpec, l Limits) error {
	l = l.WithDefaults()
	spec.Maps[edgeMapEdgeFt].MaxEntries = l.FTEntries()
	spec.Maps[edgeMapEdgeFo].MaxEntries = l.FOEntries()
	spec.Maps[edgeMapEdgeFtMeta].MaxEntries = l.FTEntries() / FTWays
	// Both slots of a generation live in one map: twice the capacity.
	spec.Maps[edgeMapEdgeRules].MaxEntries = 2 * l.Rules
	spec.Maps[edgeMapEdgeFars].MaxEntries = 2 * l.FARStride()
	spec.Maps[edgeMapEdgePdrStats].MaxEntries = l.Rules
	spec.Maps[edgeMapEdgeMaglev].MaxEntries = 2 * MaxServices * l.MaglevBlocks()
	if err := spec.Variables[edgeVarFarStride].Set(l.FARStride()); err != nil {
		return fmt.Errorf("set far_stride: %w", err)
	}
	if err := spec.Variables[edgeVarFtBuckets].Set(l.FTEntries() / FTWays); err != nil {
		return fmt.Errorf("set ft_buckets: %w", err)
	}
	if err := spec.Variables[edgeVarFoSlots].Set(l.FOEntries()); err != nil {
		return fmt.Errorf("set fo_slots: %w", err)
	}
	if err := spec.Variables[edgeVarMaglevSize].Set(l.MaglevSize); err != nil {
		return fmt.Errorf("set maglev_size: %w", err)
	}
	if err := spec.Variables[edgeVarMaglevBlocks].Set(l.MaglevBlocks()); err != nil {
		return fmt.Errorf("set maglev_blocks: %w", err)
	}
	return nil
}

// ProgramID identifies the program this build loads for l: a restarted
// agent adopts a pinned program only when its ID matches.
func ProgramID(l Limits) string {
	h := sha256.New()
	h.Write(_EdgeBytes)
	_ = binary.Write(h, binary.LittleEndian, l)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Dataplane holds the loaded maps (and, once loaded or adopted, the
// program) of one gateway.
type Dataplane struct {
	edgeMaps
	Limits Limits
	Prog   *ebpf.Program

	dupProg *ebpf.Program // see dupProgram
	cpuProg *ebpf.Program // see cpuProgram
	// probeMu guards probeProg (see SendProbe).
	probeMu   sync.Mutex
	probeProg *ebpf.Program
	// cpuMu guards the cpumap's users: relief (all CPUs while on) and
	// the interfaces steered to a CPU (SetIfSteer, by ifindex slot).
	cpuMu    sync.Mutex
	reliefOn bool
	steered  map[uint32]int
	spec     *ebpf.CollectionSpec
	barrier  *rcu.Barrier
	writer   *writer
	// secret keys the flows' hashes: the program's (set into spec) and
	// the agent's mirror of them (FTHash, FOPlace).
	secret HashSecret
}

// Open creates the dataplane's maps, or reuses those pinned under pinDir
// (none pinned when pinDir is empty). It does not load the program.
func Open(l Limits, pinDir string) (*Dataplane, error) {
	spec, err := Spec(l)
	if err != nil {
		return nil, err
	}
	return open(spec, l, pinDir)
}

// open is Open of spec, the dataplane's object with l applied (a test's
// build of it too).
func open(spec *ebpf.CollectionSpec, l Limits, pinDir string) (*Dataplane, error) {
	opts := &ebpf.CollectionOptions{}
	if pinDir != "" {
		if err := os.MkdirAll(pinDir, 0o700); err != nil {
			return nil, fmt.Errorf("create pin dir: %w", err)
		}
		opts.Maps.PinPath = pinDir
		// The kernel compares sizes only: a struct whose members moved
		// within the same size would be read at the wrong places.
		if err := checkPinned(spec, pinDir); err != nil {
			return nil, err
		}
	} else {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
	}
	dp := &Dataplane{Limits: l.WithDefaults(), spec: spec}
	if err := spec.LoadAndAssign(&dp.edgeMaps, opts); err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("%w: %w", ErrIncompatible, err)
		}
		return nil, fmt.Errorf("load maps: %w", err)
	}
	if err := dp.useSecret(); err != nil {
		dp.Close()
		return nil, err
	}
	var err error
	if dp.barrier, err = rcu.New(); err != nil {
		dp.Close()
		return nil, err
	}
	if dp.writer, err = newWriter(dp); err != nil {
		dp.Close()
		return nil, err
	}
	if pinDir != "" {
		if err := dp.unlockStuckBuckets(); err != nil {
			dp.Close()
			return nil, err
		}
	}
	return dp, nil
}

// useSecret takes the secret kept in dp's edge_secret (drawing one into
// a map just created) as the key of every program dp loads.
func (dp *Dataplane) useSecret() error {
	s, _, err := ensureSecret(dp.EdgeSecret)
	if err != nil {
		return err
	}
	dp.secret = s
	return applySecret(dp.spec, s)
}

// ApplyTo sets dp's map sizes, load-time constants and hash secret on
// spec, an object built from the same headers (the benchmark wrappers)
// to be loaded against dp's maps: it places flows where dp's program
// does.
func (dp *Dataplane) ApplyTo(spec *ebpf.CollectionSpec) error {
	if err := ApplyLimits(spec, dp.Limits); err != nil {
		return err
	}
	return applySecret(spec, dp.secret)
}

// LoadProgram loads the XDP program against dp's maps.
func (dp *Dataplane) LoadProgram() (*ebpf.Program, error) {
	var progs struct {
		EdgeXdp *ebpf.Program `ebpf:"edge_xdp"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: dp.MapReplacements()}
	if err := dp.spec.LoadAndAssign(&progs, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load xdp program: %+v", ve)
		}
		return nil, fmt.Errorf("load xdp program: %w", err)
	}
	if dp.Prog != nil {
		dp.Prog.Close()
	}
	dp.Prog = progs.EdgeXdp
	return dp.Prog, nil
}

// dupProgram loads (once) the program the kernel runs on each copy of a
// redundant group's packet as it leaves (edge_xdp_dup), against dp's
// maps. It is loaded apart from the XDP program, which an agent may
// adopt from its pin instead of loading; each redundant group's devmap
// holds a reference to it.
func (dp *Dataplane) dupProgram() (*ebpf.Program, error) {
	if dp.dupProg != nil {
		return dp.dupProg, nil
	}
	var p struct {
		Prog *ebpf.Program `ebpf:"edge_xdp_dup"`
	}
	if err := dp.loadApart(&p, "redundant copies' program"); err != nil {
		return nil, err
	}
	dp.dupProg = p.Prog
	return p.Prog, nil
}

// loadApart loads into to (a struct of tagged programs, as
// LoadAndAssign takes) programs of dp's object against dp's maps: those
// the agent loads apart from the XDP program, which it may adopt from
// its pin instead. what names them in the error, with the verifier's
// log if it refused them.
func (dp *Dataplane) loadApart(to any, what string) error {
	opts := &ebpf.CollectionOptions{MapReplacements: dp.MapReplacements()}
	if err := dp.spec.LoadAndAssign(to, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("load %s: %+v", what, ve)
		}
		return fmt.Errorf("load %s: %w", what, err)
	}
	return nil
}

// privateMaps are the maps a program loaded apart from the XDP program
// (the redundant copies', relief's CPU program, the probe sender, the
// benchmark wrappers) gets its own of: per-CPU scratch and caches no
// other program reads. Every other map of the object is shared.
var privateMaps = map[string]bool{
	edgeMapEdgeCtx:        true,
	edgeMapEdgeIcmpBucket: true,
	edgeMapEdgeDstNh:      true,
}

// MapReplacements returns dp's maps by name, for loading other programs
// (benchmark wrappers) against them: every map of the object but the
// private ones, so a map a stage adds to bpf/edge_maps.h is shared
// without a line here.
func (dp *Dataplane) MapReplacements() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(&dp.edgeMaps).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("ebpf")
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && name != "" && !privateMaps[name] {
			out[name] = m
		}
	}
	return out
}

// Unpin removes the maps' pins; the maps live on while something holds them.
func (dp *Dataplane) Unpin() error {
	var errs []error
	for name, m := range dp.MapReplacements() {
		if err := m.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Close releases dp's file descriptors; pinned objects stay in the kernel.
func (dp *Dataplane) Close() error {
	var errs []error
	if dp.Prog != nil {
		errs = append(errs, dp.Prog.Close())
	}
	if dp.cpuProg != nil {
		errs = append(errs, dp.cpuProg.Close())
	}
	if dp.dupProg != nil {
		errs = append(errs, dp.dupProg.Close())
	}
	dp.probeMu.Lock()
	if dp.probeProg != nil {
		errs = append(errs, dp.probeProg.Close())
		dp.probeProg = nil
	}
	dp.probeMu.Unlock()
	if dp.barrier != nil {
		if dp.writer != nil {
			dp.writer.mu.Lock()
			if dp.writer.grace != nil {
				<-dp.writer.grace
				dp.writer.grace = nil
			}
			dp.writer.mu.Unlock()
		}
		errs = append(errs, dp.barrier.Close())
	}
	errs = append(errs, dp.edgeMaps.Close())
	return errors.Join(errs...)
}

// Expedited runs fn with the kernel's grace periods expedited, as commits
// wait for theirs: for kernel paths that wait for one inside a syscall.
func (dp *Dataplane) Expedited(fn func() error) error { return dp.barrier.Expedited(fn) }
