// SPDX-License-Identifier: Apache-2.0

package api_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
)

// fromSource dials from the local address ip (any of 127.0.0.0/8 is
// loopback on Linux, so each is a source of its own).
func fromSource(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
}

func grpcFrom(t *testing.T, target, ip string) pb.GatewayClient {
	d := fromSource(ip)
	return pb.NewGatewayClient(dialGRPC(t, "passthrough:///"+target, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})))
}

// TestRefusedBudgetPerSource: a source that has spent its budget of
// refused calls is cut off (the connection of its next refused call is
// closed, and its new connections as they arrive) until the budget
// refills; another source is served all along, its own refusals
// answered; a source holds at most MaxConnsPerSource connections.
func TestRefusedBudgetPerSource(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	refused := api.NewRefusedCounter()
	lim := api.Limits{RefusedBurst: 3, RefusedRate: 2, MaxConnsPerSource: 2, AuthFailureDelay: time.Millisecond}
	l := serve(t, newBackend(t), api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth, Refused: refused, Limits: lim})
	addr := l.GRPC.String()

	bad := grpcFrom(t, addr, "127.0.0.2")
	for i := 0; i < lim.RefusedBurst; i++ {
		_, err := bad.ListPdrs(authCtx(t, "wrong-token-0123456789"), &pb.ListRequest{})
		wantCode(t, "a refused call within the budget", err, codes.Unauthenticated)
	}
	_, err := bad.ListPdrs(authCtx(t, "wrong-token-0123456789"), &pb.ListRequest{})
	wantCode(t, "a refused call past the budget", err, codes.Unavailable)
	c, err := fromSource("127.0.0.2").Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitClosed(t, c, 2*time.Second, "a new connection of a source past its budget")

	good := grpcFrom(t, addr, "127.0.0.1")
	if _, err := good.ListPdrs(authCtx(t, testToken), &pb.ListRequest{}); err != nil {
		t.Fatalf("another source's valid call: %v", err)
	}
	_, err = good.ListPdrs(authCtx(t, "wrong-token-0123456789"), &pb.ListRequest{})
	wantCode(t, "another source's refused call", err, codes.Unauthenticated)

	time.Sleep(time.Duration(float64(time.Second) / lim.RefusedRate * 1.2))
	_, err = grpcFrom(t, addr, "127.0.0.2").ListPdrs(authCtx(t, "wrong-token-0123456789"), &pb.ListRequest{})
	wantCode(t, "a refused call once the budget refilled", err, codes.Unauthenticated)

	var held []net.Conn
	for i := 0; i < lim.MaxConnsPerSource+1; i++ {
		c, err := fromSource("127.0.0.3").Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitClosed(t, held[lim.MaxConnsPerSource], 2*time.Second, "a connection past the source's share")

	for reason, want := range map[string]float64{api.RefusedUnauthenticated: 5, api.RefusedSourceLimit: 2, api.RefusedSourceConns: 1} {
		var m dto.Metric
		if err := refused.WithLabelValues("grpc", reason).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("edgeplane_api_refused_total{grpc,%s} = %v, want %v", reason, got, want)
		}
	}
}

// TestSourceOf: an IPv4 address is a source, an IPv6 one counts under
// its /64, an IPv4-mapped one as the IPv4 address.
func TestSourceOf(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"10.0.0.1:5", "10.0.0.1"},
		{"[::ffff:10.0.0.1]:5", "10.0.0.1"},
		{"[2001:db8::1]:5", "2001:db8::"},
		{"[2001:db8::ffff:1234]:6", "2001:db8::"},
		{"[2001:db8:0:1::1]:5", "2001:db8:0:1::"},
	} {
		got, ok := api.SourceOf(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(c.addr)))
		if !ok || got.String() != c.want {
			t.Errorf("%s: %v %v, want %s", c.addr, got, ok, c.want)
		}
	}
}
