// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
)

// TestControllerNoDataplane asks a controller's API for what only a
// gateway's dataplane knows: each call is refused with
// FailedPrecondition and ErrNoDataplane's text (it names the command
// that lists the gateways to ask instead).
func TestControllerNoDataplane(t *testing.T) {
	f := newTestFleet(t)
	s := api.NewServer(f.ctl)
	ctx := context.Background()
	for call, fn := range map[string]func() error{
		"GetStats":           func() error { _, err := s.GetStats(ctx, &pb.GetStatsRequest{}); return err },
		"ListFlows":          func() error { _, err := s.ListFlows(ctx, &pb.ListFlowsRequest{}); return err },
		"ListPathStatus":     func() error { _, err := s.ListPathStatus(ctx, &pb.ListRequest{}); return err },
		"ListStrategyStatus": func() error { _, err := s.ListStrategyStatus(ctx, &pb.ListRequest{}); return err },
	} {
		st := status.Convert(fn())
		if st.Code() != codes.FailedPrecondition || st.Message() != api.ErrNoDataplane.Error() {
			t.Errorf("%s: %v, want %s %q", call, st.Err(), codes.FailedPrecondition, api.ErrNoDataplane.Error())
		}
	}
}
