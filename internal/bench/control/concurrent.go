// SPDX-License-Identifier: Apache-2.0

package control

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/bench/measure"
)

// Concurrency is what many clients applying at once get: Applies a
// second at 1 and at Clients concurrent clients, each beside the gRPC
// floor's calls a second at as many clients, all timed in alternated
// rounds of one run.
type Concurrency struct {
	Clients int     `json:"clients"`
	Rounds  int     `json:"rounds"`
	Seconds float64 `json:"seconds_per_round"`
	// Figures are grpc_floor_1, grpc_floor_N, grpc_floor_N_conns,
	// pdr_update_1, pdr_update_N and pdr_update_N_conns (N: Clients;
	// _conns: a connection per client, else one shared).
	Figures []Throughput `json:"figures"`
	// Ratios divide the calls a second at N clients by those at 1: for
	// the Applies, and for the floor (what the machine and gRPC allow).
	Ratios map[string]float64 `json:"ratios"`
	Method string             `json:"method"`
}

// Throughput is calls a second at a number of concurrent clients.
type Throughput struct {
	Name        string `json:"name"`
	Clients     int    `json:"clients"`
	Connections int    `json:"connections"`
	// PerSec is the median over the rounds of calls completed / wall
	// time; PerSecRounds each round's.
	PerSec       float64   `json:"per_sec"`
	PerSecRounds []float64 `json:"per_sec_rounds"`
	Calls        int       `json:"calls"`
	// Client wall time per call over all rounds, and for Applies the
	// agent's (commit_micros) and its journal sync (sync_micros).
	P50Us             float64 `json:"p50_us"`
	P99Us             float64 `json:"p99_us"`
	ServerCommitP50Us float64 `json:"server_commit_p50_us,omitempty"`
	ServerSyncP50Us   float64 `json:"server_sync_p50_us,omitempty"`
}

const (
	// ctlClients is the concurrent clients of the concurrency figures,
	// ctlConcRounds their alternated rounds.
	ctlClients    = 64
	ctlConcRounds = 3
	// ctlConcID is the first of the PDRs the concurrent clients update,
	// one each, in 172.16.K.0/24, clear of the other figures' ids and
	// destinations.
	ctlConcID = 200000
)

// ctlStreamsPerConn is how many concurrent clients share a connection:
// as many calls as the agent runs at once on one.
var ctlStreamsPerConn = int(api.DefaultLimits.MaxStreams)

// client dials a connection of its own to the agent, from local (nil:
// any address).
func (l *ctlLab) client(local net.IP) (pb.GatewayClient, func(), error) {
	cc, err := grpc.NewClient("passthrough:///"+ctlAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var c net.Conn
			err := l.ns.Do(func() error {
				d := net.Dialer{}
				if local != nil {
					d.LocalAddr = &net.TCPAddr{IP: local}
				}
				var err error
				c, err = d.DialContext(ctx, "tcp", addr)
				return err
			})
			return c, err
		}))
	if err != nil {
		return nil, nil, fmt.Errorf("grpc client: %w", err)
	}
	return pb.NewGatewayClient(cc), func() { _ = cc.Close() }, nil
}

// concPdr is concurrent client k's PDR, at precedence base+k+flip.
func concPdr(k int, flip bool) *pb.Pdr {
	prec := uint32(100000 + k)
	if flip {
		prec += 1000
	}
	return &pb.Pdr{Id: uint32(ctlConcID + k), Precedence: prec, Far: 1,
		Match: &pb.Match{In: "lan0", Dst: fmt.Sprintf("172.16.%d.0/24", k)}}
}

// concurrency creates one PDR per client, times the alternated rounds of
// every figure, and removes the PDRs.
func (l *ctlLab) concurrency(ctx context.Context, seconds float64) (*Concurrency, error) {
	n := ctlClients
	ops := make([]*pb.Operation, n)
	for k := range ops {
		ops[k] = createOp(concPdr(k, false))
	}
	if _, err := l.apply(ctx, ops...); err != nil {
		return nil, fmt.Errorf("create the concurrent clients' PDRs: %w", err)
	}
	// The agent runs at most api.DefaultLimits.MaxStreams calls per
	// connection and keeps at most MaxConnsPerSource connections per
	// source address: the clients sharing connections take as few as
	// that allows, those with a connection each dial theirs from a
	// loopback address of their own, as clients on as many hosts would.
	conns := make([]pb.GatewayClient, n)
	for k := range conns {
		gc, closeConn, err := l.client(net.IPv4(127, 0, 1, byte(k+1)))
		if err != nil {
			return nil, err
		}
		defer closeConn()
		conns[k] = gc
	}
	shared := make([]pb.GatewayClient, n)
	for k := range shared {
		if k%ctlStreamsPerConn == 0 {
			gc, closeConn, err := l.client(nil)
			if err != nil {
				return nil, err
			}
			defer closeConn()
			shared[k] = gc
		} else {
			shared[k] = shared[k-k%ctlStreamsPerConn]
		}
	}
	sharedConns := (n + ctlStreamsPerConn - 1) / ctlStreamsPerConn
	type series struct {
		name    string
		clients []pb.GatewayClient
		apply   bool
		conns   int
		runs    []run
	}
	all := []*series{
		{name: "grpc_floor_1", clients: shared[:1], conns: 1},
		{name: fmt.Sprintf("grpc_floor_%d", n), clients: shared, conns: sharedConns},
		{name: fmt.Sprintf("grpc_floor_%d_conns", n), clients: conns, conns: n},
		{name: "pdr_update_1", clients: shared[:1], apply: true, conns: 1},
		{name: fmt.Sprintf("pdr_update_%d", n), clients: shared, apply: true, conns: sharedConns},
		{name: fmt.Sprintf("pdr_update_%d_conns", n), clients: conns, apply: true, conns: n},
	}
	// Every connection warmed (dialled, its first calls made) untimed.
	for _, s := range all {
		if _, err := l.clients(ctx, s.clients, s.apply, 0.05); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", s.name, err)
		}
	}
	for range ctlConcRounds {
		for _, s := range all {
			r, err := l.clients(ctx, s.clients, s.apply, seconds)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			s.runs = append(s.runs, r)
		}
	}
	del := make([]*pb.Operation, n)
	for k := range del {
		del[k] = deleteOp(uint32(ctlConcID + k))
	}
	if _, err := l.apply(ctx, del...); err != nil {
		return nil, fmt.Errorf("remove the concurrent clients' PDRs: %w", err)
	}
	c := &Concurrency{Clients: n, Rounds: ctlConcRounds, Seconds: seconds, Ratios: map[string]float64{},
		Method: fmt.Sprintf("each figure's clients call back to back for %.1f s (pdr_update: Apply of one update of the client's own PDR, "+
			"its precedence flipped each call, %d PDRs of the clients live; grpc_floor: ListInterfaces), the figures one after the other, "+
			"%d rounds alternated; per_sec: calls completed / wall time, median of the rounds; _conns: a connection per client, each from a "+
			"loopback address of its own (127.0.1.K), else %d clients per connection (the agent runs at most %d calls per connection); "+
			"the bench's clients share the 2 CPUs with the agent", seconds, n, ctlConcRounds, ctlStreamsPerConn, api.DefaultLimits.MaxStreams),
	}
	perSec := map[string]float64{}
	for _, s := range all {
		t := Throughput{Name: s.name, Clients: len(s.clients), Connections: s.conns}
		var d, server, synced []time.Duration
		for _, r := range s.runs {
			t.PerSecRounds = append(t.PerSecRounds, float64(len(r.d))/r.wall.Seconds())
			t.Calls += len(r.d)
			d, server, synced = append(d, r.d...), append(server, r.server...), append(synced, r.sync...)
		}
		t.PerSec = measure.Median(t.PerSecRounds)
		ds := measure.Sorted(d)
		t.P50Us, t.P99Us = measure.Us(measure.Pct(ds, 50)), measure.Us(measure.Pct(ds, 99))
		if s.apply {
			t.ServerCommitP50Us = measure.Us(measure.Pct(measure.Sorted(server), 50))
			t.ServerSyncP50Us = measure.Us(measure.Pct(measure.Sorted(synced), 50))
		}
		perSec[s.name] = t.PerSec
		c.Figures = append(c.Figures, t)
	}
	for _, what := range []string{"grpc_floor", "pdr_update"} {
		one := perSec[what+"_1"]
		for _, suffix := range []string{"", "_conns"} {
			name := fmt.Sprintf("%s_%d%s", what, n, suffix)
			c.Ratios[name+"_over_1"] = perSec[name] / one
		}
	}
	return c, nil
}

// run is one round of one figure: each call's client time (and for
// Applies the agent's and its sync) and the round's wall time.
type run struct {
	d, server, sync []time.Duration
	wall            time.Duration
}

// clients runs one goroutine per client calling back to back for seconds
// (Applies updating client k's PDR with apply, else ListInterfaces).
func (l *ctlLab) clients(ctx context.Context, clients []pb.GatewayClient, apply bool, seconds float64) (run, error) {
	type result struct {
		d, server, sync []time.Duration
		err             error
	}
	res := make([]result, len(clients))
	start := time.Now()
	deadline := start.Add(time.Duration(seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for k, gc := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &res[k]
			for i := 0; time.Now().Before(deadline); i++ {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				t0 := time.Now()
				var err error
				if apply {
					var a *pb.ApplyResponse
					if a, err = gc.Apply(cctx, &pb.ApplyRequest{Operations: []*pb.Operation{updateOp(concPdr(k, i%2 == 0))}}); err == nil {
						r.server = append(r.server, time.Duration(a.GetCommitMicros())*time.Microsecond)
						r.sync = append(r.sync, time.Duration(a.GetSyncMicros())*time.Microsecond)
					}
				} else {
					_, err = gc.ListInterfaces(cctx, &pb.ListRequest{})
				}
				r.d = append(r.d, time.Since(t0))
				cancel()
				if err != nil {
					r.err = err
					return
				}
			}
		}()
	}
	wg.Wait()
	out := run{wall: time.Since(start)}
	for _, r := range res {
		if r.err != nil {
			return run{}, r.err
		}
		out.d, out.server, out.sync = append(out.d, r.d...), append(out.server, r.server...), append(out.sync, r.sync...)
	}
	return out, nil
}

// syncFloor times n appends of a journal-record-sized line, each
// followed by an fdatasync, to a file beside the agent's journal (the
// same filesystem): what making one batch durable costs on this disk in
// this run, the floor of an Apply's sync.
func (l *ctlLab) syncFloor(n int) (Latency, error) {
	p := filepath.Join(l.dir, "sync-floor")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return Latency{}, fmt.Errorf("sync floor: %w", err)
	}
	defer os.Remove(p)
	defer f.Close()
	line := make([]byte, 300)
	for i := range line {
		line[i] = 'x'
	}
	line[len(line)-1] = '\n'
	d := make([]time.Duration, n)
	for i := range d {
		t0 := time.Now()
		if _, err := f.Write(line); err != nil {
			return Latency{}, fmt.Errorf("sync floor: %w", err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return Latency{}, fmt.Errorf("sync floor: %w", err)
		}
		d[i] = time.Since(t0)
	}
	lat := latency("journal_sync_floor", d, nil, 0)
	lat.Method = fmt.Sprintf("%d appends of a %d-byte line to a file in the agent's config directory, each followed by an fdatasync, back to back, in the bench's process; "+
		"wall time per append and sync", n, len(line))
	return lat, nil
}
