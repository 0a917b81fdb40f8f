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

	"github.com/golang-jwt/jwt/v5"
)

// ErrUnauthenticated is returned for a missing or wrong bearer token.
var ErrUnauthenticated = errors.New("missing or invalid bearer token")

// Auth checks bearer tokens: static tokens from a file, or JWTs signed
// with a shared HMAC key (HS256/384/512), or both. The zero Auth (no
// tokens, no key) accepts nothing; a nil *Auth accepts everything.
type Auth struct {
	// tokens are SHA-256 digests, compared in constant time.
	tokens [][sha256.Size]byte
	key    []byte
}

// LoadAuth reads a token file (one token per line; blank lines and lines
// starting with # are skipped) and a JWT key file (the key's bytes,
// surrounding white space trimmed). Either path may be empty; both empty
// returns nil.
func LoadAuth(tokenFile, jwtKeyFile string) (*Auth, error) {
	if tokenFile == "" && jwtKeyFile == "" {
		return nil, nil
	}
	a := &Auth{}
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
			a.tokens = append(a.tokens, sha256.Sum256([]byte(line)))
		}
		if len(a.tokens) == 0 {
			return nil, fmt.Errorf("api tokens %s: no token in the file", tokenFile)
		}
	}
	if jwtKeyFile != "" {
		b, err := os.ReadFile(jwtKeyFile)
		if err != nil {
			return nil, fmt.Errorf("read api jwt key: %w", err)
		}
		a.key = bytes.TrimSpace(b)
		if len(a.key) < 32 {
			return nil, fmt.Errorf("api jwt key %s: %d bytes, want at least 32 for HMAC-SHA256", jwtKeyFile, len(a.key))
		}
	}
	return a, nil
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
	if len(a.tokens) > 0 {
		d := sha256.Sum256([]byte(tok))
		match := 0
		for _, t := range a.tokens {
			match |= subtle.ConstantTimeCompare(d[:], t[:])
		}
		if match == 1 {
			return nil
		}
	}
	if a.key != nil && strings.Count(tok, ".") == 2 {
		_, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return a.key, nil },
			jwt.WithValidMethods([]string{"HS256", "HS384", "HS512"}),
			jwt.WithExpirationRequired(), jwt.WithLeeway(0))
		if err == nil {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	return ErrUnauthenticated
}
