// SPDX-License-Identifier: Apache-2.0

package api_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestRESTOverTLSNoHTTP2: REST over TLS speaks HTTP/1.1 only. Go's HTTP/2
// server answers every PING with no limit, so over HTTP/2 one client
// could keep the agent answering PINGs as fast as it sends them (the
// gRPC listener has its keepalive policy for that; REST gains nothing
// from HTTP/2). A client offering h2 gets http/1.1, and a PING flood on
// such a connection is no HTTP at all: it is refused and closed.
func TestRESTOverTLSNoHTTP2(t *testing.T) {
	auth, _ := tokenAuth(t, testToken)
	c := testutil.NewTestCert(t)
	cert, err := api.LoadCert(c.CertFile, c.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	l := serve(t, newBackend(t), api.Options{RESTAddr: "127.0.0.1:0", Auth: auth, TLS: cert.Config()})
	conn, err := tls.Dial("tcp", l.REST.String(), &tls.Config{RootCAs: c.Pool, ServerName: "127.0.0.1", NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
		// What a flood gets: every PING answered.
		const pings = 10000
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fr := http2.NewFramer(conn, conn)
		_, _ = conn.Write([]byte(http2.ClientPreface))
		_ = fr.WriteSettings()
		go func() {
			for i := 0; i < pings; i++ {
				if fr.WritePing(false, [8]byte{}) != nil {
					return
				}
			}
		}()
		acks := 0
		for acks < pings {
			f, err := fr.ReadFrame()
			if err != nil {
				break
			}
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
				acks++
			}
		}
		t.Fatalf("REST over TLS negotiated h2: %d of %d PINGs of a flood answered", acks, pings)
	}
	fmt.Fprintf(conn, "GET /v1/pdrs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP/1.1 over TLS: %v %v", resp, err)
	}
}
