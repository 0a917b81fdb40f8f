// SPDX-License-Identifier: Apache-2.0

// Package apitest is an api.Backend without a dataplane, for tests that
// drive the real gRPC and REST servers: it holds the config in a
// config.Store, as the agent does, answers the dataplane's calls with
// made-up counters, flows and statuses, and can hold calls back to show
// how many run at once.
package apitest

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// Backend implements api.Backend over a config.Store, and
// dataplane.Dataplane with made-up answers.
type Backend struct {
	mu    sync.Mutex
	store *config.Store
	gen   uint32
	// NFlows is how many flows the flow cache holds.
	NFlows int
	// Hold, when set, keeps every View waiting until it is closed.
	Hold chan struct{}
	// InView counts Views running, Peak the most at once.
	InView, Peak atomic.Int32
}

// New returns a Backend serving cfg as generation gen.
func New(cfg *config.Config, gen uint32) *Backend {
	return &Backend{store: config.NewStore(cfg), gen: gen}
}

// Config implements api.Backend.
func (b *Backend) Config() *config.Config {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.store.Config()
}

// View implements api.Backend.
func (b *Backend) View(fn func(*config.Store)) {
	n := b.InView.Add(1)
	defer b.InView.Add(-1)
	for {
		p := b.Peak.Load()
		if n <= p || b.Peak.CompareAndSwap(p, n) {
			break
		}
	}
	if b.Hold != nil {
		<-b.Hold
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fn(b.store)
}

// Apply implements api.Backend.
func (b *Backend) Apply(ops []config.Op, dryRun bool, _ []byte) (uint32, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, undo, err := b.store.Apply(ops)
	if err != nil {
		return 0, err
	}
	if dryRun {
		undo()
		return b.gen, nil
	}
	b.gen++
	return b.gen, nil
}

// Snapshot implements dataplane.Counters: PDR 10 has counted one packet.
func (b *Backend) Snapshot() (*dataplane.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &dataplane.Snapshot{Gen: b.gen, PDRs: map[uint32]dataplane.Counter{10: {Packets: 1, Bytes: 64}},
		Verdicts: make([]dataplane.Counter, len(dataplane.VerdictNames)), Reasons: make([]dataplane.Counter, len(dataplane.ReasonNames)),
		Paths: map[uint32]dataplane.PathCounters{}}, nil
}

// Flows implements dataplane.Counters: the first n of NFlows UDP flows.
func (b *Backend) Flows(n int) ([]dataplane.FlowStat, map[uint32]string, error) {
	if n <= 0 || n > b.NFlows {
		n = b.NFlows
	}
	out := make([]dataplane.FlowStat, n)
	for i := range out {
		out[i] = dataplane.FlowStat{Src: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Dst: netip.MustParseAddr("10.2.0.2"),
			Proto: 17, Sport: uint16(i), Dport: 53, Ifindex: 1, Packets: uint64(n - i), Bytes: uint64(64 * (n - i))}
	}
	return out, map[uint32]string{1: "lan0"}, nil
}

// RawCodec sends a request already encoded (a []byte) and receives the
// answer's bytes, so a test can send many megabytes without building
// the message: grpc.ForceCodecV2(RawCodec{}) on the call.
type RawCodec struct{}

// Marshal implements encoding.CodecV2.
func (RawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

// Unmarshal implements encoding.CodecV2.
func (RawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

// Name implements encoding.CodecV2.
func (RawCodec) Name() string { return "proto" }

// CountingConn counts the bytes written to a connection into N: what a
// client got to send before the server stopped reading.
type CountingConn struct {
	net.Conn
	N *atomic.Int64
}

// Write implements net.Conn.
func (c CountingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.N.Add(int64(n))
	return n, err
}

// StrategyStatus implements dataplane.Strategies: each strategy of the
// config, holding nothing (the backend applies none).
func (b *Backend) StrategyStatus() []dataplane.StrategyStatus {
	var out []dataplane.StrategyStatus
	for _, s := range b.Config().Strategies {
		out = append(out, dataplane.StrategyStatus{Strategy: s.ID})
	}
	return out
}

// PathStatus implements dataplane.Paths: every path of the config, up.
func (b *Backend) PathStatus() []dataplane.PathStatus {
	var out []dataplane.PathStatus
	for _, p := range b.Config().Paths {
		out = append(out, dataplane.PathStatus{Path: p.ID, State: "up", Monitored: true})
	}
	return out
}

// The API finds the dataplane's parts by type: a method lost here would
// turn its tests' calls into refusals, so the compiler checks them.
var _ dataplane.Dataplane = (*Backend)(nil)
