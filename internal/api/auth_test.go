// SPDX-License-Identifier: Apache-2.0

package api_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
)

const testJWTKey = "jwt-key-for-serve-tests-0123456789abcdef"

func signJWT(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testJWTKey))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestJWTRules checks audience, issuer, leeway and the lifetime cap, on
// gRPC calls to a real server.
func TestJWTRules(t *testing.T) {
	key := filepath.Join(t.TempDir(), "jwt.key")
	if err := os.WriteFile(key, []byte(testJWTKey), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := api.LoadAuthRules("", key, api.JWTRules{Audience: "edgeplane", Issuer: "https://idp.example",
		Leeway: 30 * time.Second, MaxLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l := serve(t, newBackend(t), api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth})
	gc := pb.NewGatewayClient(dialGRPC(t, "passthrough:///"+l.GRPC.String()))
	now := time.Now()
	good := func() jwt.MapClaims {
		return jwt.MapClaims{"aud": "edgeplane", "iss": "https://idp.example", "iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
	}
	with := func(k string, v any) jwt.MapClaims {
		c := good()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	for _, c := range []struct {
		name   string
		claims jwt.MapClaims
		ok     bool
	}{
		{"good", good(), true},
		{"audience among several", with("aud", []string{"other", "edgeplane"}), true},
		{"other audience", with("aud", "billing"), false},
		{"no audience", with("aud", nil), false},
		{"other issuer", with("iss", "https://evil.example"), false},
		{"no issuer", with("iss", nil), false},
		{"expired within leeway", with("exp", now.Add(-10*time.Second).Unix()), true},
		{"expired beyond leeway", with("exp", now.Add(-time.Minute).Unix()), false},
		{"issued in the future beyond leeway", with("iat", now.Add(time.Minute).Unix()), false},
		{"not before, beyond leeway", with("nbf", now.Add(time.Minute).Unix()), false},
		{"lifetime over the cap", with("exp", now.Add(2*time.Hour).Unix()), false},
		{"no iat, exp beyond the cap", func() jwt.MapClaims {
			c := with("iat", nil)
			c["exp"] = now.Add(48 * time.Hour).Unix()
			return c
		}(), false},
		{"issued long ago for long", with("iat", now.Add(-2*time.Hour).Unix()), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := gc.ListPdrs(authCtx(t, signJWT(t, c.claims)), &pb.ListRequest{})
			want := codes.OK
			if !c.ok {
				want = codes.Unauthenticated
			}
			wantCode(t, "list", err, want)
		})
	}
}

// TestAuthReload: a token removed from the file stops working at the
// next Reload; a file that no longer loads refuses every token.
func TestAuthReload(t *testing.T) {
	const other = "other-token-0123456789abcdef"
	auth, file := tokenAuth(t, testToken, other)
	l := serve(t, newBackend(t), api.Options{GRPCAddr: "127.0.0.1:0", Auth: auth})
	gc := pb.NewGatewayClient(dialGRPC(t, "passthrough:///"+l.GRPC.String()))
	list := func(tok string) error {
		_, err := gc.ListPdrs(authCtx(t, tok), &pb.ListRequest{})
		return err
	}
	wantCode(t, "before the reload", list(other), codes.OK)
	if err := os.WriteFile(file, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := auth.Reload(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "revoked token", list(other), codes.Unauthenticated)
	wantCode(t, "kept token", list(testToken), codes.OK)
	if err := os.WriteFile(file, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := auth.Reload(); err == nil {
		t.Fatal("reload of a file with a short token: no error")
	}
	wantCode(t, "after a failed reload", list(testToken), codes.Unauthenticated)
}
