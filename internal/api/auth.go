// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrUnauthenticated is returned for a missing or wrong bearer token.
var ErrUnauthenticated = errors.New("missing or invalid bearer token")

// Defaults of JWTRules the agent's flags start from.
const (
	// DefaultJWTLeeway absorbs clock skew between the token's issuer and
	// the gateway; a minute would already let a token expired a minute
	// ago in.
	DefaultJWTLeeway = 30 * time.Second
	// DefaultJWTMaxLifetime caps how long a JWT may be valid: a token
	// minted for years is a static token that cannot be revoked without
	// rotating the key.
	DefaultJWTMaxLifetime = 24 * time.Hour
)

// JWTRules are what a JWT must satisfy besides its HMAC signature and a
// future exp.
type JWTRules struct {
	// Audience, when set, must be one of the token's aud values, and
	// Issuer, when set, its iss: a token minted for another service with
	// the same key is refused.
	Audience, Issuer string
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway time.Duration
	// MaxLifetime, when not 0, refuses a token whose exp lies more than
	// MaxLifetime after its iat, or (with or without iat) after now.
	MaxLifetime time.Duration
}

// authKeys are the credentials one load of the files gave.
type authKeys struct {
	// tokens are SHA-256 digests, compared in constant time.
	tokens [][sha256.Size]byte
	key    []byte
}

// Auth checks bearer tokens: static tokens from a file, or JWTs signed
// with a shared HMAC key (HS256/384/512), or both. The zero Auth (no
// tokens, no key) accepts nothing; a nil *Auth accepts everything.
// Reload re-reads the files, so revoking a token needs no restart.
type Auth struct {
	tokenFile, keyFile string
	rules              JWTRules
	keys               atomic.Pointer[authKeys]
}

// LoadAuth reads a token file (one token per line; blank lines and lines
// starting with # are skipped) and a JWT key file (the key's bytes,
// surrounding white space trimmed), with the default JWT rules. Either
// path may be empty; both empty returns nil.
func LoadAuth(tokenFile, jwtKeyFile string) (*Auth, error) {
	return LoadAuthRules(tokenFile, jwtKeyFile, JWTRules{Leeway: DefaultJWTLeeway, MaxLifetime: DefaultJWTMaxLifetime})
}

// LoadAuthRules is LoadAuth with the JWT rules given.
func LoadAuthRules(tokenFile, jwtKeyFile string, rules JWTRules) (*Auth, error) {
	if tokenFile == "" && jwtKeyFile == "" {
		return nil, nil
	}
	if rules.Leeway < 0 || rules.MaxLifetime < 0 {
		return nil, errors.New("jwt leeway and maximum lifetime must not be negative")
	}
	a := &Auth{tokenFile: tokenFile, keyFile: jwtKeyFile, rules: rules}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload re-reads the token and key files. On failure it fails closed:
// every bearer token is refused until a reload succeeds, because keeping
// the old set would keep a token the operator just revoked working.
func (a *Auth) Reload() error {
	k, err := readKeys(a.tokenFile, a.keyFile)
	if err != nil {
		a.keys.Store(&authKeys{})
		return fmt.Errorf("%w (every bearer token is refused until the files are fixed and reloaded)", err)
	}
	a.keys.Store(k)
	return nil
}

func readKeys(tokenFile, jwtKeyFile string) (*authKeys, error) {
	k := &authKeys{}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("read api tokens: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if len(line) < 16 {
				return nil, fmt.Errorf("api tokens %s: a token of %d characters is too short to be secret (at least 16)", tokenFile, len(line))
			}
			k.tokens = append(k.tokens, sha256.Sum256([]byte(line)))
		}
		if len(k.tokens) == 0 {
			return nil, fmt.Errorf("api tokens %s: no token in the file", tokenFile)
		}
	}
	if jwtKeyFile != "" {
		b, err := os.ReadFile(jwtKeyFile)
		if err != nil {
			return nil, fmt.Errorf("read api jwt key: %w", err)
		}
		k.key = bytes.TrimSpace(b)
		if len(k.key) < 32 {
			return nil, fmt.Errorf("api jwt key %s: %d bytes, want at least 32 for HMAC-SHA256", jwtKeyFile, len(k.key))
		}
	}
	return k, nil
}

// Check verifies an Authorization header value ("Bearer TOKEN").
func (a *Auth) Check(header string) error {
	if a == nil {
		return nil
	}
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || tok == "" {
		return ErrUnauthenticated
	}
	k := a.keys.Load()
	if k == nil {
		return ErrUnauthenticated
	}
	if len(k.tokens) > 0 {
		d := sha256.Sum256([]byte(tok))
		match := 0
		for _, t := range k.tokens {
			match |= subtle.ConstantTimeCompare(d[:], t[:])
		}
		if match == 1 {
			return nil
		}
	}
	if k.key != nil && strings.Count(tok, ".") == 2 {
		if err := a.checkJWT(k.key, tok); err != nil {
			return fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		return nil
	}
	return ErrUnauthenticated
}

// errLifetime is a JWT valid for longer than JWTRules.MaxLifetime.
var errLifetime = errors.New("token lifetime exceeds the maximum the agent accepts")

func (a *Auth) checkJWT(key []byte, tok string) error {
	r := a.rules
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{"HS256", "HS384", "HS512"}),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(r.Leeway),
	}
	if r.Audience != "" {
		opts = append(opts, jwt.WithAudience(r.Audience))
	}
	if r.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(r.Issuer))
	}
	var claims jwt.RegisteredClaims
	if _, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return key, nil }, opts...); err != nil {
		return err
	}
	if r.MaxLifetime == 0 {
		return nil
	}
	exp := claims.ExpiresAt.Time
	if time.Until(exp) > r.MaxLifetime+r.Leeway {
		return fmt.Errorf("%w (%s): expires in %s", errLifetime, r.MaxLifetime, time.Until(exp).Round(time.Second))
	}
	if claims.IssuedAt != nil && exp.Sub(claims.IssuedAt.Time) > r.MaxLifetime {
		return fmt.Errorf("%w (%s): issued for %s", errLifetime, r.MaxLifetime, exp.Sub(claims.IssuedAt.Time))
	}
	return nil
}
