// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
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
)

// selfSigned writes a certificate for 127.0.0.1 and its key into dir and
// returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "edgeplane test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// TestAPITLSAndLimits serves the API over TLS: a client trusting the
// certificate gets through on gRPC and REST, a plaintext client does not;
// and a request over the size limit is refused, on both protocols.
func TestAPITLSAndLimits(t *testing.T) {
	g := newGateway(t, forwardConfig)
	tokens := filepath.Join(g.dir, "tokens")
	if err := os.WriteFile(tokens, []byte(apiToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, pool := selfSigned(t, g.dir)
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
