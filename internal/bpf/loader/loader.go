// SPDX-License-Identifier: Apache-2.0

// Package loader is the dataplane a gateway runs: it creates the
// object's maps or adopts those pinned (taking over another build's
// through an upgrade), loads the XDP program and the programs loaded
// apart from it (relief's CPU program, the probe sender), attaches it to
// the interfaces through pinned XDP links and takes all of it down
// (attach.go: the pin layout), and puts the rule writer and the
// counters' readers over the maps in one Dataplane.
// It also asks the kernel what the loaded program depends on: a device's
// XDP features, and whether routing goes by destination alone.
package loader

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/bpf/commit"
	"github.com/edgeplane/edgeplane/internal/bpf/rcu"
	"github.com/edgeplane/edgeplane/internal/bpf/stats"
	"github.com/edgeplane/edgeplane/internal/bpf/upgrade"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// Dataplane is the loaded dataplane of one gateway: the object's maps
// (bpf.Object: typed access to them), the rule writer over them
// (commit.Writer: commits and what the agent sets between them) and,
// once loaded or adopted, the XDP program.
type Dataplane struct {
	*bpf.Object
	*commit.Writer
	Prog *ebpf.Program

	barrier *rcu.Barrier
	cpuProg *ebpf.Program // see cpuProgram
	// probeMu guards probeProg (see SendProbe).
	probeMu   sync.Mutex
	probeProg *ebpf.Program
	// cpuMu guards the cpumap's users: relief (all CPUs while on) and
	// the interfaces steered to a CPU (SetIfSteer, by ifindex slot).
	cpuMu    sync.Mutex
	reliefOn bool
	steered  map[uint32]int
}

// Open creates the dataplane's maps, or reuses those pinned under pinDir
// (none pinned when pinDir is empty). It does not load the program. Pins
// of another layout or size than this build's are bpf.ErrIncompatible:
// PrepareUpgrade takes them over.
func Open(l bpf.Limits, pinDir string) (*Dataplane, error) {
	spec, err := bpf.Spec(l)
	if err != nil {
		return nil, err
	}
	return open(spec, l, pinDir)
}

// OpenSpec is Open of spec, a build of the dataplane's object other than
// the embedded one (a test's), with no pins.
func OpenSpec(spec *ebpf.CollectionSpec, l bpf.Limits) (*Dataplane, error) {
	if err := bpf.ApplyLimits(spec, l); err != nil {
		return nil, err
	}
	return open(spec, l, "")
}

// open is Open of spec, the dataplane's object with l applied.
func open(spec *ebpf.CollectionSpec, l bpf.Limits, pinDir string) (*Dataplane, error) {
	opts := &ebpf.CollectionOptions{}
	if pinDir != "" {
		if err := os.MkdirAll(pinDir, 0o700); err != nil {
			return nil, fmt.Errorf("create pin dir: %w", err)
		}
		opts.Maps.PinPath = pinDir
		if err := upgrade.CheckPinned(spec, pinDir); err != nil {
			return nil, err
		}
	} else {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
	}
	o, err := bpf.LoadObject(spec, l, opts)
	if err != nil {
		return nil, err
	}
	dp, err := newDataplane(o)
	if err != nil {
		o.Close()
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

// newDataplane puts a rule writer over o's maps, which learns what they
// hold (created, adopted or copied by an upgrade), so commits write
// differences.
func newDataplane(o *bpf.Object) (*Dataplane, error) {
	dp := &Dataplane{Object: o}
	var err error
	if dp.barrier, err = rcu.New(); err != nil {
		return nil, err
	}
	if dp.Writer, err = commit.NewWriter(o, dp.barrier); err != nil {
		dp.barrier.Close()
		return nil, err
	}
	return dp, nil
}

// LoadProgram loads the XDP program against dp's maps.
func (dp *Dataplane) LoadProgram() (*ebpf.Program, error) {
	var progs struct {
		EdgeXdp *ebpf.Program `ebpf:"edge_xdp"`
	}
	if err := dp.LoadApart(&progs, "xdp program"); err != nil {
		return nil, err
	}
	if dp.Prog != nil {
		dp.Prog.Close()
	}
	dp.Prog = progs.EdgeXdp
	return dp.Prog, nil
}

// Expedited runs fn with the kernel's grace periods expedited, as commits
// wait for theirs: for kernel paths that wait for one inside a syscall.
func (dp *Dataplane) Expedited(fn func() error) error { return dp.barrier.Expedited(fn) }

// Close releases dp's file descriptors once the last commit's grace
// period is over; pinned objects stay in the kernel.
func (dp *Dataplane) Close() error {
	var errs []error
	if dp.Prog != nil {
		errs = append(errs, dp.Prog.Close())
	}
	if dp.cpuProg != nil {
		errs = append(errs, dp.cpuProg.Close())
	}
	dp.probeMu.Lock()
	if dp.probeProg != nil {
		errs = append(errs, dp.probeProg.Close())
		dp.probeProg = nil
	}
	dp.probeMu.Unlock()
	if dp.Writer != nil {
		errs = append(errs, dp.Writer.Close())
	}
	if dp.barrier != nil {
		errs = append(errs, dp.barrier.Close())
	}
	errs = append(errs, dp.Object.Close())
	return errors.Join(errs...)
}

// Snapshot reads and sums every per-CPU counter of the live generation.
func (dp *Dataplane) Snapshot() (*dataplane.Snapshot, error) {
	rules, gen, err := dp.ActiveRules()
	if err != nil {
		return nil, err
	}
	paths, err := dp.ActivePaths()
	if err != nil {
		return nil, err
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	names := map[uint32]string{}
	for _, itf := range ifs {
		names[uint32(itf.Index)] = itf.Name
	}
	return stats.Read(&dp.Maps, stats.Live{Gen: gen, Rules: rules, Paths: paths, Members: dp.ActiveMembers(), Ifnames: names})
}

// Flows returns the top n flows by bytes (all when n <= 0), their PDRs
// named by the live generation's rules.
func (dp *Dataplane) Flows(n int) ([]dataplane.FlowStat, error) {
	rules, gen, err := dp.ActiveRules()
	if err != nil {
		return nil, err
	}
	return stats.Flows(dp.Object, rules, gen, n)
}

// Upgrade takes a pinned dataplane of another build over
// (upgrade.Upgrade), with the Dataplane over its new maps.
type Upgrade struct {
	*upgrade.Upgrade
	dp *Dataplane
}

// PrepareUpgrade builds the dataplane for l beside the one pinned under
// pinDir and copies the pinned state into it (the first copy). It loads
// no program.
func PrepareUpgrade(l bpf.Limits, pinDir string, log *slog.Logger) (*Upgrade, error) {
	u, err := upgrade.Prepare(l, pinDir, log)
	if err != nil {
		return nil, err
	}
	// The writer learns what the copied tables hold, as at a restart.
	dp, err := newDataplane(u.Object())
	if err != nil {
		u.Object().Close()
		u.Abort()
		return nil, err
	}
	return &Upgrade{Upgrade: u, dp: dp}, nil
}

// Dataplane returns the new dataplane: commit to it, load its program.
func (u *Upgrade) Dataplane() *Dataplane { return u.dp }

// Finish runs once every link runs the new program (upgrade.Upgrade's
// Finish), waiting out the old program with the new dataplane's barrier:
// one per process, as its mark of the expedited switch is.
func (u *Upgrade) Finish() error { return u.Upgrade.Finish(u.dp.barrier) }

// Abort, before the switch, closes the new dataplane and removes its pins;
// the old one is as it was.
func (u *Upgrade) Abort() {
	if u.dp != nil {
		u.dp.Close()
		u.dp = nil
	}
	u.Upgrade.Abort()
}

// unlockStuckBuckets releases the buckets of dp's pinned flow table an
// agent left locked: one killed while it placed flows in the table (an
// upgrade's copy) leaves its bucket's version odd, and packets would
// neither find nor record a flow there again (flow_busy). A version odd
// now and still the same stuckWait later is no packet's.
func (dp *Dataplane) unlockStuckBuckets() error {
	t, err := dp.FlowTable()
	if err != nil {
		return err
	}
	defer t.Unmap()
	odd := map[uint32]uint32{}
	for b := range t.Buckets {
		if seq := atomic.LoadUint32(&t.Bucket(b).Seq); seq&1 != 0 {
			odd[b] = seq
		}
	}
	if len(odd) == 0 {
		return nil
	}
	time.Sleep(stuckWait)
	for b, seq := range odd {
		atomic.CompareAndSwapUint32(&t.Bucket(b).Seq, seq, seq+1)
	}
	return nil
}

// stuckWait is how long a bucket's lock must stay taken, with the same
// version, to count as stuck: a packet holds one for well under a
// microsecond.
const stuckWait = 10 * time.Millisecond
