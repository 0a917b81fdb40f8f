// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestAPITLSAndLimits serves the API over TLS: a client trusting the
// certificate gets through on gRPC and REST, a plaintext client does not;
// and a request over the size limit is refused, on both protocols.
func TestAPITLSAndLimits(t *testing.T) {
	g := newGateway(t, forwardConfig)
	tokens := filepath.Join(g.dir, "tokens")
	if err := os.WriteFile(tokens, []byte(apiToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert := testutil.NewTestCert(t)
	certPath, keyPath, pool := cert.CertFile, cert.KeyFile, cert.Pool
	g.start("--grpc-addr", apiGRPC, "--rest-addr", apiREST, "--api-tokens", tokens, "--tls-cert", certPath, "--tls-key", keyPath)

	dial := nsDial(g.GW)
	tlsConn, err := grpc.NewClient("passthrough:///"+apiGRPC, grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	defer tlsConn.Close()
	ctx, cancel := withToken(apiToken)
	defer cancel()
	gc := pb.NewGatewayClient(tlsConn)
	if lp, err := gc.ListPdrs(ctx, &pb.ListRequest{}); err != nil || len(lp.GetPdrs()) != 8 {
		t.Errorf("grpc over tls: %v, %d pdrs; want the config's 8", err, len(lp.GetPdrs()))
	}

	plain, err := grpc.NewClient("passthrough:///"+apiGRPC, grpc.WithContextDialer(dial), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if _, err := pb.NewGatewayClient(plain).ListPdrs(pctx, &pb.ListRequest{}); err == nil {
		t.Errorf("plaintext grpc to a tls listener succeeded")
	}

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:     func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
	}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://"+apiREST+"/v1/pdrs", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	if resp, err := hc.Do(req); err != nil {
		t.Errorf("rest over tls: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("rest over tls: %d, want 200", resp.StatusCode)
		}
	}
	req, _ = http.NewRequest(http.MethodGet, "http://"+apiREST+"/v1/pdrs", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain http to a tls listener served the request")
		}
	}

	// 33 MiB in one request: over the 32 MiB limit of both protocols.
	big := strings.Repeat("x", 33<<20)
	_, err = gc.Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{createOp(pdrObj(&pb.Pdr{Id: 900, Far: 1, Match: &pb.Match{In: big}}))}})
	wantCode(t, "grpc apply of 33 MiB", err, codes.ResourceExhausted)
	body := `{"operations":[{"create":{"pdr":{"id":900,"far":1,"match":{"in":"` + big + `"}}}}]}`
	req, _ = http.NewRequest(http.MethodPost, "https://"+apiREST+"/v1/apply", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode >= 500 {
		t.Errorf("rest apply of 33 MiB: %d, want a 4xx", resp.StatusCode)
	}
	if lp, err := gc.ListPdrs(ctx, &pb.ListRequest{}); err != nil || len(lp.GetPdrs()) != 8 {
		t.Errorf("after refused oversized requests: %v, %d pdrs; want 8", err, len(lp.GetPdrs()))
	}
}
