// SPDX-License-Identifier: Apache-2.0

// Package apitest is an api.Backend without a dataplane, for tests that
// drive the real gRPC and REST servers: it holds the config in a
// config.Store, as the agent does, and can hold calls back to show how
// many run at once.
package apitest

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Backend implements api.Backend over a config.Store.
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

// Snapshot implements api.Backend: PDR 10 has counted one packet.
func (b *Backend) Snapshot() (*bpf.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &bpf.Snapshot{Gen: b.gen, PDRs: map[uint32]bpf.Counter{10: {Packets: 1, Bytes: 64}},
		Verdicts: make([]bpf.Counter, len(bpf.VerdictNames)), Reasons: make([]bpf.Counter, len(bpf.ReasonNames)),
		Paths: map[uint32]bpf.PathCounters{}}, nil
}

// Flows implements api.Backend: the first n of NFlows UDP flows.
func (b *Backend) Flows(n int) ([]bpf.FlowStat, map[uint32]string, error) {
	if n <= 0 || n > b.NFlows {
		n = b.NFlows
	}
	out := make([]bpf.FlowStat, n)
	for i := range out {
		out[i] = bpf.FlowStat{Src: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Dst: netip.MustParseAddr("10.2.0.2"),
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

// StrategyStatus implements api.Backend: each strategy of the config,
// holding nothing (the backend applies none).
func (b *Backend) StrategyStatus() []*pb.StrategyStatus {
	var out []*pb.StrategyStatus
	for _, s := range b.Config().Strategies {
		out = append(out, &pb.StrategyStatus{Strategy: s.ID})
	}
	return out
}

// PathStatus implements api.Backend: every path of the config, up.
func (b *Backend) PathStatus() []*pb.PathStatus {
	var out []*pb.PathStatus
	for _, p := range b.Config().Paths {
		out = append(out, &pb.PathStatus{Path: p.ID, State: "up", Monitored: true})
	}
	return out
}
