// SPDX-License-Identifier: Apache-2.0

// Package control is the bench's control-plane part: latency of a
// gateway agent's gRPC API (single-PDR creates, updates and deletes,
// paced creates, a large batch, a backend's removal; a backend taken
// out, put in or reweighted until the flip) beside a unary call's floor
// timed in the same run, against an agent in a namespace of its own.
package control

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/topo"
)

// Result is the control-plane part of the report: latency of the agent's
// gRPC API on loopback, beside an empty-ish unary call timed in the same
// run, and the time of one large batch.
type Result struct {
	Setup string `json:"setup"`
	// Floor is the gRPC floor: what any unary call costs here, back to
	// back; FloorPaced the same call on the paced creates' ticker (a
	// call that finds both processes idle pays their wake-ups).
	Floor       Latency `json:"grpc_floor"`
	FloorPaced  Latency `json:"grpc_floor_paced"`
	Create      Latency `json:"pdr_create"`
	Update      Latency `json:"pdr_update"`
	Delete      Latency `json:"pdr_delete"`
	CreatePaced Latency `json:"pdr_create_paced"`
	BatchCreate Batch   `json:"batch_create"`
	BatchDelete Batch   `json:"batch_delete"`
	// RemoveBackend is the time from an Apply that takes a backend out
	// of a service's LBR to its answer, which comes after the flip.
	RemoveBackend Latency `json:"lb_remove_backend"`
	// BackendRemove, BackendAdd and BackendWeight are the times from an
	// Apply that takes a backend out, puts one in or changes one's
	// weight until the flip, until no packet reads the old table, and
	// until the answer, paced.
	BackendRemove BackendChange `json:"lb_backend_remove"`
	BackendAdd    BackendChange `json:"lb_backend_add"`
	BackendWeight BackendChange `json:"lb_backend_weight"`
	// SyncFloor is what an append and an fdatasync cost on the disk of
	// the agent's journal, in the same run: the floor of an Apply's
	// wait for its batch to be durable.
	SyncFloor Latency `json:"journal_sync_floor"`
	// Concurrency is Applies a second at 1 and at many concurrent
	// clients.
	Concurrency *Concurrency `json:"concurrency,omitempty"`
}

// Latency is the distribution of one kind of call, client wall time in
// microseconds.
type Latency struct {
	Name   string  `json:"name"`
	Ops    int     `json:"ops"`
	P50Us  float64 `json:"p50_us"`
	P90Us  float64 `json:"p90_us"`
	P99Us  float64 `json:"p99_us"`
	MaxUs  float64 `json:"max_us"`
	MeanUs float64 `json:"mean_us"`
	// Ratios divide each figure by the floor's p50 (absent for the
	// floor itself).
	Ratios *Ratios `json:"ratio_to_floor_p50,omitempty"`
	// P50FirstTenthUs and P50LastTenthUs are the p50 of the first and
	// the last tenth of the calls: a commit whose cost grows with the
	// rules already installed shows here.
	P50FirstTenthUs float64 `json:"p50_first_tenth_us"`
	P50LastTenthUs  float64 `json:"p50_last_tenth_us"`
	// ServerCommit* are the agent's own validate+compile+commit time
	// (ApplyResponse.commit_micros); absent for the floor.
	ServerCommitP50Us float64 `json:"server_commit_p50_us,omitempty"`
	ServerCommitP99Us float64 `json:"server_commit_p99_us,omitempty"`
	ServerCommitMaxUs float64 `json:"server_commit_max_us,omitempty"`
	// ServerSync* are the journal sync's part of the agent's time
	// (ApplyResponse.sync_micros), ServerNoSync* the agent's time
	// without it, call by call; absent for an agent that does not
	// report it.
	ServerSyncP50Us   float64 `json:"server_sync_p50_us,omitempty"`
	ServerNoSyncP50Us float64 `json:"server_commit_minus_sync_p50_us,omitempty"`
	ServerNoSyncP99Us float64 `json:"server_commit_minus_sync_p99_us,omitempty"`
	Method            string  `json:"method"`
}

// Ratios are a Latency's figures over the floor's p50.
type Ratios struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Batch is one Apply of many operations.
type Batch struct {
	Name string `json:"name"`
	Ops  int    `json:"ops"`
	// Ms is the client's wall time of the call, ServerCommitMs the
	// agent's own (ApplyResponse.commit_micros).
	Ms             float64 `json:"ms"`
	ServerCommitMs float64 `json:"server_commit_ms"`
	// PdrsAfter is what ListPdrs returned after the call.
	PdrsAfter int    `json:"pdrs_after"`
	Method    string `json:"method"`
}

const (
	// ctlAddr is the agent's gRPC address inside its own namespace.
	ctlAddr = "127.0.0.1:50051"
	// ctlWarmup calls of each kind run before anything is timed: the
	// connection, the agent's first commits and both sides' caches.
	ctlWarmup = 50
	// ctlPace is the interval of the paced creates.
	ctlPace = 20 * time.Millisecond
	// ctlMaxRules keeps every bench PDR's destination a distinct /24 of
	// 10.0.0.0/8 and inside limits.rules (65536, one rule taken by the
	// config's own PDR).
	ctlMaxRules = 65535 - 1
	// ctlWarmID is the PDR the warm-up creates and deletes; bench PDRs
	// are 1..ctlMaxRules, the config's own is 900000.
	ctlWarmID = ctlMaxRules + 1

	ctlSetup = "edgeplane agent (the binary under test) in a fresh network namespace with lan0 and wan0 as veths " +
		"(both ends in the namespace), native XDP, fars {1: redirect wan0, 2: drop}, one PDR, limits {flows: 65536, rules: 65536}; " +
		"gRPC without TLS or auth on 127.0.0.1:50051 inside the namespace, one client connection dialled into it; " +
		"every Apply fsyncs its journal record before it answers (the config file is rewritten in the background)"
	ctlTiming = "client wall time per call (time.Now around the unary call), nearest-rank percentiles"
)

// ctlConfig is the agent's config: one PDR of its own, far from the
// bench's destinations.
const ctlConfig = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: drop}
pdrs:
  - {id: 900000, precedence: 60000, match: {in: wan0, dst: 192.0.2.0/24}, far: 2}
limits: {flows: 65536, rules: 65536}
`

// ctlLab is the namespace, temp dir and agent of the control part.
type ctlLab struct {
	o   Options
	bin string
	// cfg and args, when set, are the agent's config and extra flags
	// (the N4 part's); otherwise ctlConfig and none.
	cfg    string
	args   []string
	ns     *topo.NS
	pinDir string
	dir    string
	agent  *exec.Cmd
	exited chan struct{} // closed when the agent process has been reaped
	conn   *grpc.ClientConn
	gc     pb.GatewayClient
}

// Options are what the part takes.
type Options struct {
	// Ops is the number of single-PDR creates, updates and deletes
	// (each) and of gRPC floor calls; Paced the number of paced
	// creates, Batch the PDRs of the batch.
	Ops   int
	Paced int
	Batch int
	// ConcurrentSeconds is the length of each round of the
	// concurrency figures (0: 1 s; below 0: none).
	ConcurrentSeconds float64
	// Bins.Edgeplane is the binary the agent runs.
	Bins measure.Binaries
	Log  measure.Logf
}

// Run starts an agent in a namespace of its own, measures every
// control figure against it and removes everything, also on error.
func Run(ctx context.Context, o Options) (*Result, error) {
	switch {
	case o.Ops <= 0 || o.Ops > ctlMaxRules:
		return nil, fmt.Errorf("control ops %d: want 1..%d", o.Ops, ctlMaxRules)
	case o.Batch <= 0 || o.Batch > ctlMaxRules:
		return nil, fmt.Errorf("control batch %d: want 1..%d", o.Batch, ctlMaxRules)
	case o.Paced <= 0 || o.Paced > ctlMaxRules:
		return nil, fmt.Errorf("control paced ops %d: want 1..%d", o.Paced, ctlMaxRules)
	}
	bin, err := o.Bins.Gateway()
	if err != nil {
		return nil, err
	}
	l := &ctlLab{o: o, bin: bin}
	defer l.close()
	if err := l.setup(ctx); err != nil {
		return nil, err
	}
	c := &Result{Setup: ctlSetup}
	o.Log("control: gRPC floor, %d ListInterfaces calls back to back, %d paced", o.Ops, o.Paced)
	if c.Floor, err = l.floor(ctx, o.Ops, 0); err != nil {
		return nil, fmt.Errorf("grpc floor: %w", err)
	}
	if c.FloorPaced, err = l.floor(ctx, o.Paced, ctlPace); err != nil {
		return nil, fmt.Errorf("paced grpc floor: %w", err)
	}
	floorP50 := c.Floor.P50Us
	if c.SyncFloor, err = l.syncFloor(min(o.Ops, 1000)); err != nil {
		return nil, err
	}

	// Warm the Apply path (first commits, the config file) untimed.
	for i := 0; i < ctlWarmup; i++ {
		if _, err := l.apply(ctx, createOp(ctlPdr(ctlWarmID, ctlWarmID))); err != nil {
			return nil, fmt.Errorf("warm-up create: %w", err)
		}
		if _, err := l.apply(ctx, deleteOp(ctlWarmID)); err != nil {
			return nil, fmt.Errorf("warm-up delete: %w", err)
		}
	}

	n := o.Ops
	const order = "all creates, then all updates, then all deletes (not interleaved), back to back over one connection; "
	o.Log("control: %d single-PDR creates, updates and deletes over gRPC", n)
	if c.Create, err = l.singles(ctx, "pdr_create", n, floorP50, func(id uint32) *pb.Operation {
		return createOp(ctlPdr(id, id))
	}, 1+n, order+"Apply of one create per call: PDR id N, in lan0, dst 10.(N/256).(N%256).0/24, far 1, precedence N; "+
		"PDRs live grow from 1 to N+1; "+ctlTiming); err != nil {
		return nil, err
	}
	if c.Update, err = l.singles(ctx, "pdr_update", n, floorP50, func(id uint32) *pb.Operation {
		return updateOp(ctlPdr(id, id+100000))
	}, 1+n, order+"Apply of one update per call: the same PDR with its precedence changed (N+100000); "+
		"N+1 PDRs live throughout; "+ctlTiming); err != nil {
		return nil, err
	}
	if c.Delete, err = l.singles(ctx, "pdr_delete", n, floorP50, deleteOp, 1,
		order+"Apply of one delete per call (KIND_PDR, id N); PDRs live shrink from N+1 to 1; "+ctlTiming); err != nil {
		return nil, err
	}

	p := o.Paced
	o.Log("control: %d single-PDR creates paced at one per %s", p, ctlPace)
	if c.CreatePaced, err = l.paced(ctx, p, c.FloorPaced.P50Us); err != nil {
		return nil, err
	}
	// The paced PDRs go in one batch, untimed: the batch starts from the
	// config's own PDR alone.
	ops := make([]*pb.Operation, p)
	for i := range ops {
		ops[i] = deleteOp(uint32(i + 1))
	}
	if _, err := l.apply(ctx, ops...); err != nil {
		return nil, fmt.Errorf("remove paced PDRs: %w", err)
	}
	if err := l.expectPdrs(ctx, 1); err != nil {
		return nil, err
	}

	b := o.Batch
	o.Log("control: one Apply creating %d PDRs, one deleting them", b)
	if c.BatchCreate, c.BatchDelete, err = l.batch(ctx, b); err != nil {
		return nil, err
	}
	o.Log("control: removing a backend from a service of %d", ctlBackends)
	if err := l.setUpService(ctx); err != nil {
		return nil, err
	}
	if c.RemoveBackend, err = l.removeBackend(ctx, floorP50); err != nil {
		return nil, err
	}
	o.Log("control: %d backend removals, additions and weight changes, one every %s, to the flip", ctlChanges, ctlChangePace)
	if c.BackendRemove, c.BackendAdd, c.BackendWeight, err = l.backendChanges(ctx, floorP50); err != nil {
		return nil, err
	}
	if secs := o.ConcurrentSeconds; secs >= 0 {
		if secs == 0 {
			secs = 1
		}
		o.Log("control: one-PDR Applies from 1 and %d concurrent clients, %d rounds of %.1f s", ctlClients, ctlConcRounds, secs)
		if c.Concurrency, err = l.concurrency(ctx, secs); err != nil {
			return nil, fmt.Errorf("concurrent applies: %w", err)
		}
	}
	o.Log("control: floor p50 %.0f µs; create p50 %.0f µs (x%.1f), update %.0f µs, delete %.0f µs, paced create %.0f µs; batch of %d: create %.0f ms, delete %.0f ms",
		floorP50, c.Create.P50Us, c.Create.Ratios.P50, c.Update.P50Us, c.Delete.P50Us, c.CreatePaced.P50Us, b, c.BatchCreate.Ms, c.BatchDelete.Ms)
	return c, nil
}

// ctlPdr is bench PDR id with a /24 of its own.
func ctlPdr(id, precedence uint32) *pb.Pdr {
	return &pb.Pdr{Id: id, Precedence: precedence, Far: 1,
		Match: &pb.Match{In: "lan0", Dst: fmt.Sprintf("10.%d.%d.0/24", id>>8, id&0xff)}}
}

func createOp(p *pb.Pdr) *pb.Operation {
	return &pb.Operation{Op: &pb.Operation_Create{Create: &pb.Object{Kind: &pb.Object_Pdr{Pdr: p}}}}
}

func updateOp(p *pb.Pdr) *pb.Operation {
	return &pb.Operation{Op: &pb.Operation_Update{Update: &pb.Object{Kind: &pb.Object_Pdr{Pdr: p}}}}
}

func deleteOp(id uint32) *pb.Operation {
	return &pb.Operation{Op: &pb.Operation_Delete{Delete: &pb.Ref{Kind: pb.Kind_KIND_PDR, Id: id}}}
}

// setup creates the namespace, its veths and the config, starts the agent
// and connects to it.
func (l *ctlLab) setup(ctx context.Context) error {
	name := fmt.Sprintf("epctl%d", os.Getpid())
	var err error
	if l.dir, err = os.MkdirTemp("", "epctl"); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	cfgPath := filepath.Join(l.dir, "gateway.yaml")
	cfg := ctlConfig
	if l.cfg != "" {
		cfg = l.cfg
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write agent config: %w", err)
	}
	if l.ns, err = topo.NewNS(name); err != nil {
		return err
	}
	for _, itf := range []string{"lan0", "wan0"} {
		if err := topo.AddVeth(topo.End{NS: l.ns, Name: itf}, topo.End{Name: itf + "p"}); err != nil {
			return err
		}
	}

	// nsenter --net, not `ip netns exec`: the latter remounts /sys, and
	// the agent would not see the host's bpffs and its pins.
	l.pinDir = "/sys/fs/bpf/" + name
	logf, err := os.Create(filepath.Join(l.dir, "agent.log"))
	if err != nil {
		return fmt.Errorf("agent log: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	l.agent = exec.Command("nsenter", append([]string{"--net=/run/netns/" + name, l.bin, "agent", "--config", cfgPath,
		"--pin-dir", l.pinDir, "--metrics-addr", "", "--grpc-addr", ctlAddr, "--rest-addr", "",
		// TCP on loopback without tokens, as the figures always were
		// measured; no unix sockets.
		"--api-loopback-no-auth", "--api-socket", "none", "--rest-socket", "none"}, l.args...)...)
	l.agent.Stdout, l.agent.Stderr = logf, logf
	if err := l.agent.Start(); err != nil {
		l.agent = nil
		return fmt.Errorf("start agent: %w", err)
	}
	l.exited = make(chan struct{})
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(l.exited) }(l.agent)

	l.conn, err = grpc.NewClient("passthrough:///"+ctlAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(l.dial))
	if err != nil {
		return fmt.Errorf("grpc client: %w", err)
	}
	l.gc = pb.NewGatewayClient(l.conn)
	return l.waitReady(ctx)
}

// dial opens a TCP connection inside the agent's namespace; the socket
// keeps its namespace after the thread that made it is gone.
func (l *ctlLab) dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := l.ns.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// waitReady polls the API until it answers: the agent serves it only
// after its first commit.
func (l *ctlLab) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := l.gc.ListInterfaces(cctx, &pb.ListRequest{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-l.exited:
			return fmt.Errorf("agent exited before serving the API: %s", l.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent API not answering within 20s (%v): %s", err, l.logTail())
		}
	}
}

// logTail is the end of the agent's log, for errors.
func (l *ctlLab) logTail() string {
	b, _ := os.ReadFile(filepath.Join(l.dir, "agent.log"))
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// close stops the agent, removes its dataplane and pins, the namespace
// and the temp dir; every step runs whatever failed before it.
func (l *ctlLab) close() {
	if l.conn != nil {
		_ = l.conn.Close()
	}
	if l.agent != nil {
		_ = l.agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-l.exited:
		case <-time.After(10 * time.Second):
			l.o.Log("control: agent ignored SIGTERM for 10 s, killing it")
			_ = l.agent.Process.Kill()
			<-l.exited
		}
	}
	if l.pinDir != "" {
		if out, err := exec.Command(l.bin, "down", "--pin-dir", l.pinDir).CombinedOutput(); err != nil {
			l.o.Log("control: %s down --pin-dir %s: %v: %s", l.bin, l.pinDir, err, strings.TrimSpace(string(out)))
		}
	}
	if l.ns != nil {
		if err := l.ns.Delete(); err != nil {
			l.o.Log("control: %v", err)
		}
	}
	if l.dir != "" {
		_ = os.RemoveAll(l.dir)
	}
}

// callTimeout bounds one call, so a stuck agent fails the run.
const callTimeout = 60 * time.Second

func (l *ctlLab) apply(ctx context.Context, ops ...*pb.Operation) (*pb.ApplyResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return l.gc.Apply(cctx, &pb.ApplyRequest{Operations: ops})
}

func (l *ctlLab) countPdrs(ctx context.Context) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	r, err := l.gc.ListPdrs(cctx, &pb.ListRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pdrs: %w", err)
	}
	return len(r.GetPdrs()), nil
}

// expectPdrs fails unless the agent holds want PDRs: a figure must time
// changes that took effect.
func (l *ctlLab) expectPdrs(ctx context.Context, want int) error {
	got, err := l.countPdrs(ctx)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("agent holds %d PDRs, want %d", got, want)
	}
	return nil
}

// timed runs call n times, back to back or (pace > 0) one call started
// every pace, and returns each call's client wall time and the server
// time it reported.
func timed(ctx context.Context, n int, pace time.Duration, call func(i int) (agentTime, error)) (d []time.Duration, server []agentTime, err error) {
	d, server = make([]time.Duration, n), make([]agentTime, n)
	var tick <-chan time.Time
	if pace > 0 {
		t := time.NewTicker(pace)
		defer t.Stop()
		tick = t.C
	}
	for i := range d {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		t0 := time.Now()
		s, err := call(i)
		d[i], server[i] = time.Since(t0), s
		if err != nil {
			return nil, nil, err
		}
	}
	return d, server, nil
}

// floor times n ListInterfaces calls after a warm-up, back to back or
// paced.
func (l *ctlLab) floor(ctx context.Context, n int, pace time.Duration) (Latency, error) {
	call := func(int) (agentTime, error) {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		_, err := l.gc.ListInterfaces(cctx, &pb.ListRequest{})
		return agentTime{}, err
	}
	for i := 0; i < ctlWarmup; i++ {
		if _, err := call(i); err != nil {
			return Latency{}, err
		}
	}
	d, _, err := timed(ctx, n, pace, call)
	if err != nil {
		return Latency{}, err
	}
	name, how := "grpc_floor", "back to back"
	if pace > 0 {
		name, how = "grpc_floor_paced", "one call started every "+pace.String()+" on a ticker"
	}
	lat := latency(name, d, nil, 0)
	lat.Method = fmt.Sprintf("unary ListInterfaces (2 interfaces in the answer) over the same connection, %s, after %d untimed calls; ", how, ctlWarmup) + ctlTiming
	return lat, nil
}

// applyTimed applies one operation and returns the agent's commit time
// and its sync's part.
func (l *ctlLab) applyTimed(ctx context.Context, op *pb.Operation) (agentTime, error) {
	r, err := l.apply(ctx, op)
	if err != nil {
		return agentTime{}, err
	}
	return agentTime{commit: time.Duration(r.GetCommitMicros()) * time.Microsecond, sync: time.Duration(r.GetSyncMicros()) * time.Microsecond}, nil
}

// agentTime is what the agent says an Apply took (commit_micros) and its
// journal sync's part (sync_micros).
type agentTime struct{ commit, sync time.Duration }

// singles runs one Apply per id 1..n, back to back, and checks the agent
// holds want PDRs afterwards.
func (l *ctlLab) singles(ctx context.Context, name string, n int, floorP50 float64, op func(uint32) *pb.Operation, want int, method string) (Latency, error) {
	d, server, err := timed(ctx, n, 0, func(i int) (agentTime, error) { return l.applyTimed(ctx, op(uint32(i+1))) })
	if err != nil {
		return Latency{}, fmt.Errorf("%s: %w", name, err)
	}
	if err := l.expectPdrs(ctx, want); err != nil {
		return Latency{}, fmt.Errorf("after %s: %w", name, err)
	}
	lat := latency(name, d, server, floorP50)
	lat.Method = method
	return lat, nil
}

// paced creates PDRs 1..n, one Apply started every ctlPace, so no call
// waits behind another; ratios are to the paced floor.
func (l *ctlLab) paced(ctx context.Context, n int, floorP50 float64) (Latency, error) {
	d, server, err := timed(ctx, n, ctlPace, func(i int) (agentTime, error) {
		id := uint32(i + 1)
		return l.applyTimed(ctx, createOp(ctlPdr(id, id)))
	})
	if err != nil {
		return Latency{}, fmt.Errorf("paced create: %w", err)
	}
	if err := l.expectPdrs(ctx, 1+n); err != nil {
		return Latency{}, fmt.Errorf("after paced creates: %w", err)
	}
	lat := latency("pdr_create_paced", d, server, floorP50)
	lat.Method = fmt.Sprintf("Apply of one create per call (as pdr_create: PDR id N, in lan0, dst 10.(N/256).(N%%256).0/24, far 1), "+
		"one call started every %s on a ticker, so each finds the agent idle and no change queues behind another "+
		"(what an operator or a controller making occasional changes sees); PDRs live grow from 1 to N+1; ratios to grpc_floor_paced; %s", ctlPace, ctlTiming)
	return lat, nil
}

// batch times one Apply creating n PDRs and one deleting them.
func (l *ctlLab) batch(ctx context.Context, n int) (Batch, Batch, error) {
	create := make([]*pb.Operation, n)
	del := make([]*pb.Operation, n)
	for i := range create {
		id := uint32(i + 1)
		p := ctlPdr(id, id)
		// Three match shapes: dst only, UDP to an aligned port block
		// (one classifier entry), TCP to one port.
		switch i % 4 {
		case 1:
			p.Match.Proto, p.Match.Dport = "udp", "8192-16383"
		case 2:
			p.Match.Proto, p.Match.Dport = "tcp", "443"
		}
		create[i] = createOp(p)
		del[i] = deleteOp(id)
	}
	timed := func(name string, ops []*pb.Operation, want int, method string) (Batch, error) {
		t0 := time.Now()
		r, err := l.apply(ctx, ops...)
		el := time.Since(t0)
		if err != nil {
			return Batch{}, fmt.Errorf("%s: %w", name, err)
		}
		got, err := l.countPdrs(ctx)
		if err != nil {
			return Batch{}, err
		}
		if got != want {
			return Batch{}, fmt.Errorf("%s: agent holds %d PDRs after it, want %d", name, got, want)
		}
		return Batch{Name: name, Ops: len(ops), Ms: measure.Ms(el), ServerCommitMs: float64(r.GetCommitMicros()) / 1e3, PdrsAfter: got, Method: method}, nil
	}
	bc, err := timed("batch_create", create, n+1, fmt.Sprintf("one Apply of %d creates (PDR id N, in lan0, dst 10.(N/256).(N%%256).0/24, far 1; "+
		"N%%4 == 1 also udp dport 8192-16383, N%%4 == 2 also tcp dport 443) on top of the config's one PDR; "+
		"client wall time of the call; ListPdrs afterwards must list %d", n, n+1))
	if err != nil {
		return Batch{}, Batch{}, err
	}
	bd, err := timed("batch_delete", del, 1, fmt.Sprintf("one Apply of %d deletes removing every PDR batch_create made; "+
		"client wall time of the call; ListPdrs afterwards must list 1", n))
	if err != nil {
		return Batch{}, Batch{}, err
	}
	return bc, bd, nil
}

// latency summarises client times d (in call order) and the agent's own
// commit times (nil for calls that commit nothing); floorP50 > 0 adds
// the ratios.
func latency(name string, d []time.Duration, server []agentTime, floorP50 float64) Latency {
	s := measure.Sorted(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	tenth := max(1, len(d)/10)
	lat := Latency{
		Name: name, Ops: len(d),
		P50Us: measure.Us(measure.Pct(s, 50)), P90Us: measure.Us(measure.Pct(s, 90)), P99Us: measure.Us(measure.Pct(s, 99)), MaxUs: measure.Us(s[len(s)-1]),
		MeanUs:          measure.Us(sum) / float64(len(d)),
		P50FirstTenthUs: measure.Us(measure.Pct(measure.Sorted(d[:tenth]), 50)),
		P50LastTenthUs:  measure.Us(measure.Pct(measure.Sorted(d[len(d)-tenth:]), 50)),
	}
	if server != nil {
		commits, syncs, noSync := make([]time.Duration, len(server)), make([]time.Duration, len(server)), make([]time.Duration, len(server))
		reported := false
		for i, a := range server {
			commits[i], syncs[i], noSync[i] = a.commit, a.sync, a.commit-a.sync
			reported = reported || a.sync > 0
		}
		ss := measure.Sorted(commits)
		lat.ServerCommitP50Us, lat.ServerCommitP99Us, lat.ServerCommitMaxUs = measure.Us(measure.Pct(ss, 50)), measure.Us(measure.Pct(ss, 99)), measure.Us(ss[len(ss)-1])
		if reported {
			ns := measure.Sorted(noSync)
			lat.ServerSyncP50Us = measure.Us(measure.Pct(measure.Sorted(syncs), 50))
			lat.ServerNoSyncP50Us, lat.ServerNoSyncP99Us = measure.Us(measure.Pct(ns, 50)), measure.Us(measure.Pct(ns, 99))
		}
	}

	if floorP50 > 0 {
		lat.Ratios = &Ratios{P50: lat.P50Us / floorP50, P90: lat.P90Us / floorP50, P99: lat.P99Us / floorP50,
			Max: lat.MaxUs / floorP50, Mean: lat.MeanUs / floorP50}
	}
	return lat
}

// Text renders the figures, a line each.
func (c *Result) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "control over gRPC on loopback, client wall time:\n")
	fmt.Fprintf(&sb, "%-36s %6s %9s %9s %9s %9s %9s %8s %8s %11s\n", "figure", "ops", "p50 us", "p90 us", "p99 us", "max us", "mean us", "p50/fl", "p99/fl", "agent p50")
	lats := []Latency{c.Floor, c.FloorPaced, c.SyncFloor, c.Create, c.Update, c.Delete, c.CreatePaced, c.RemoveBackend}
	for _, b := range []BackendChange{c.BackendRemove, c.BackendAdd, c.BackendWeight} {
		lats = append(lats, b.Flip, b.Settled, b.Answer)
	}
	for _, l := range lats {
		rp50, rp99 := 1.0, l.P99Us/l.P50Us
		if l.Ratios != nil {
			rp50, rp99 = l.Ratios.P50, l.Ratios.P99
		}
		fmt.Fprintf(&sb, "%-36s %6d %9.0f %9.0f %9.0f %9.0f %9.0f %8.1f %8.1f %11.0f\n", l.Name, l.Ops, l.P50Us, l.P90Us, l.P99Us, l.MaxUs, l.MeanUs, rp50, rp99, l.ServerCommitP50Us)
	}
	for _, b := range []Batch{c.BatchCreate, c.BatchDelete} {
		fmt.Fprintf(&sb, "%-36s %6d ops in one Apply: %.1f ms (agent %.1f ms)\n", b.Name, b.Ops, b.Ms, b.ServerCommitMs)
	}
	for _, l := range []Latency{c.Create, c.Update, c.Delete} {
		if l.ServerSyncP50Us > 0 {
			fmt.Fprintf(&sb, "%-36s agent p50 %.0f us: journal sync %.0f us, the rest %.0f us (p99 %.0f)\n", l.Name, l.ServerCommitP50Us, l.ServerSyncP50Us, l.ServerNoSyncP50Us, l.ServerNoSyncP99Us)
		}
	}
	if cc := c.Concurrency; cc != nil {
		for _, t := range cc.Figures {
			fmt.Fprintf(&sb, "%-36s %3d clients, %2d conns: %8.0f calls/s (rounds %v), p50 %.0f us, p99 %.0f us\n", t.Name, t.Clients, t.Connections, t.PerSec, roundAll(t.PerSecRounds), t.P50Us, t.P99Us)
		}
		for _, k := range slices.Sorted(maps.Keys(cc.Ratios)) {
			fmt.Fprintf(&sb, "%-36s x%.1f\n", k, cc.Ratios[k])
		}
	}
	return sb.String()
}

func roundAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Round(x)
	}
	return out
}

// Goals are the control part's goals: many clients applying at once
// commit far more Applies a second than one (they share the journal's
// sync), and a single Apply costs the agent little besides its sync.
func Goals(c *Result) []measure.Goal {
	var goals []measure.Goal
	if c.Create.ServerSyncP50Us > 0 {
		goals = append(goals, measure.Goal{Name: "one-PDR create, agent time minus its journal sync, p50 us", Value: c.Create.ServerNoSyncP50Us, Limit: 50})
	}
	if cc := c.Concurrency; cc != nil {
		for _, suffix := range []string{"", "_conns"} {
			name := fmt.Sprintf("pdr_update_%d%s_over_1", cc.Clients, suffix)
			how := "sharing connections"
			if suffix != "" {
				how = "a connection each"
			}
			goals = append(goals, measure.Goal{Name: fmt.Sprintf("one-PDR Applies/s, %d clients (%s) / 1 client", cc.Clients, how), Value: cc.Ratios[name], Limit: 10, AtLeast: true})
		}
	}
	return goals
}
