// SPDX-License-Identifier: Apache-2.0

package api_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// objectsOnly is a backend with the objects and nothing of a dataplane,
// as a controller is: embedding the interface hides the rest of what
// it wraps.
type objectsOnly struct{ api.Backend }

// TestBackendParts calls what only a dataplane answers on a backend
// that has one and on one that has none: the second is refused with
// FailedPrecondition and ErrNoDataplane's text, and still serves its
// objects.
func TestBackendParts(t *testing.T) {
	ctx := context.Background()
	dataplaneCalls := map[string]func(*api.Server) error{
		"GetStats": func(s *api.Server) error { _, err := s.GetStats(ctx, &pb.GetStatsRequest{}); return err },
		"ListFlows": func(s *api.Server) error {
			_, err := s.ListFlows(ctx, &pb.ListFlowsRequest{})
			return err
		},
		"ListPathStatus": func(s *api.Server) error { _, err := s.ListPathStatus(ctx, &pb.ListRequest{}); return err },
		"ListStrategyStatus": func(s *api.Server) error {
			_, err := s.ListStrategyStatus(ctx, &pb.ListRequest{})
			return err
		},
	}
	full := newBackend(t)
	for name, b := range map[string]api.Backend{"with a dataplane": full, "objects only": objectsOnly{full}} {
		s := api.NewServer(b)
		for call, fn := range dataplaneCalls {
			err := fn(s)
			if b == api.Backend(full) {
				wantCode(t, name+": "+call, err, codes.OK)
				continue
			}
			wantCode(t, name+": "+call, err, codes.FailedPrecondition)
			if msg := status.Convert(err).Message(); msg != api.ErrNoDataplane.Error() {
				t.Errorf("%s: %s: %q, want %q", name, call, msg, api.ErrNoDataplane.Error())
			}
		}
		r, err := s.ListPdrs(ctx, &pb.ListRequest{})
		wantCode(t, name+": ListPdrs", err, codes.OK)
		if len(r.GetPdrs()) != 1 {
			t.Errorf("%s: ListPdrs: %d PDRs, want 1", name, len(r.GetPdrs()))
		}
	}
}

// statusBackend answers path and strategy status with every field set.
type statusBackend struct{ api.Backend }

var since = time.Date(2026, 11, 27, 9, 30, 0, 1000, time.FixedZone("x", 3600))

func (statusBackend) PathStatus() []dataplane.PathStatus {
	return []dataplane.PathStatus{{Path: 7, State: "degraded", Since: since, Why: "loss 0.3 over 0.2",
		SRTT: 1500 * time.Microsecond, Jitter: 200 * time.Microsecond, MinRTT: time.Millisecond, LastRTT: 2 * time.Millisecond,
		Loss: 0.3, Sent: 10, Answered: 7, Monitored: true,
		TCPRTT: 3 * time.Millisecond, TCPMinRTT: 2500 * time.Microsecond, TCPSamples: 4}}
}

func (statusBackend) StrategyStatus() []dataplane.StrategyStatus {
	return []dataplane.StrategyStatus{{Strategy: 3, Error: "e", Others: "o",
		Procs: []dataplane.StrategyProcess{{PID: 42, Comm: "upf", Threads: 2, Applied: "fifo 50", RanOn: []int{0, 1}}}}}
}

// TestStatusToPB checks the conversion of path and strategy status, one
// field each, as the agent made it before the API did.
func TestStatusToPB(t *testing.T) {
	ctx := context.Background()
	s := api.NewServer(statusBackend{newBackend(t)})
	ps, err := s.ListPathStatus(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.PathStatus{Path: 7, State: "degraded", Since: "2026-11-27T08:30:00.000001Z", Why: "loss 0.3 over 0.2",
		RttUs: 1500, JitterUs: 200, MinRttUs: 1000, LastRttUs: 2000, Loss: 0.3, ProbesSent: 10, ProbesAnswered: 7,
		Monitored: true, TcpRttUs: 3000, TcpMinRttUs: 2500, TcpRttSamples: 4}
	if len(ps.GetPaths()) != 1 || !proto.Equal(ps.GetPaths()[0], want) {
		t.Errorf("path status %v, want %v", ps.GetPaths(), want)
	}
	ss, err := s.ListStrategyStatus(ctx, &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantS := &pb.StrategyStatus{Strategy: 3, Error: "e", Others: "o",
		Processes: []*pb.StrategyProcess{{Pid: 42, Comm: "upf", Threads: 2, Applied: "fifo 50", RanOn: []uint32{0, 1}}}}
	if len(ss.GetStrategies()) != 1 || !proto.Equal(ss.GetStrategies()[0], wantS) {
		t.Errorf("strategy status %v, want %v", ss.GetStrategies(), wantS)
	}
}
