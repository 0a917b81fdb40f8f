// SPDX-License-Identifier: Apache-2.0

package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// SecretLen is the bytes of a Secret: a 128-bit key (SipHash's).
const SecretLen = 16

// redactedPrefix starts a Secret's redacted form.
const redactedPrefix = "redacted:"

// Secret is a 128-bit key, written as 32 hex digits, that both ends of
// a path hold (a path's probe secret). It is never shown: its text, the
// API's answers and `get -o yaml` give its redacted form, "redacted:"
// and a fingerprint (the first 8 hex digits of SHA-256 over a label and
// the key) that tells two secrets apart without giving either away. The
// config file the agent writes back holds the key itself.
//
// A Secret read from its redacted form holds only the fingerprint: an
// update that gives back the redacted form of the secret the object
// has keeps that secret (KindOf.Keep); anywhere else it is no key, and
// a commit refuses it.
type Secret struct {
	key [SecretLen]byte
	set bool   // key holds the secret
	fp  string // the fingerprint, when read from the redacted form
}

// NewSecret returns the secret whose key is k.
func NewSecret(k [SecretLen]byte) Secret { return Secret{key: k, set: true} }

// ParseSecret parses 32 hex digits, or a redacted form. Its errors never
// quote the text: it may be a secret with a typo.
func ParseSecret(s string) (Secret, error) {
	t := strings.TrimSpace(s)
	if fp, ok := strings.CutPrefix(t, redactedPrefix); ok {
		if len(fp) != 8 || !isHex(fp) {
			return Secret{}, fmt.Errorf("a redacted secret is %s and 8 hex digits", redactedPrefix)
		}
		return Secret{fp: strings.ToLower(fp)}, nil
	}
	if len(t) != 2*SecretLen || !isHex(t) {
		return Secret{}, fmt.Errorf("want %d hex digits (a %d-bit key, e.g. from `openssl rand -hex %d`), got %d characters",
			2*SecretLen, 8*SecretLen, SecretLen, len(t))
	}
	var k [SecretLen]byte
	if _, err := hex.Decode(k[:], []byte(t)); err != nil {
		return Secret{}, fmt.Errorf("want %d hex digits", 2*SecretLen)
	}
	if k == ([SecretLen]byte{}) {
		return Secret{}, fmt.Errorf("all zero: not a secret")
	}
	return Secret{key: k, set: true}, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// IsZero reports whether the secret is unset (yaml's omitempty).
func (s Secret) IsZero() bool { return !s.IsSet() }

// IsSet reports whether the secret is given, as a key or redacted.
func (s Secret) IsSet() bool { return s.set || s.fp != "" }

// Key returns the key, if the secret holds one (not only its redacted
// form).
func (s Secret) Key() ([SecretLen]byte, bool) { return s.key, s.set }

// Redacted reports whether the secret holds only its redacted form.
func (s Secret) Redacted() bool { return !s.set && s.fp != "" }

// fingerprint is the secret's fingerprint: 8 hex digits.
func (s Secret) fingerprint() string {
	if !s.set {
		return s.fp
	}
	h := sha256.Sum256(append([]byte("edgeplane secret fingerprint\x00"), s.key[:]...))
	return hex.EncodeToString(h[:4])
}

// Same reports whether s and o are the same secret, as far as both
// show: equal keys, or equal fingerprints where one holds none.
func (s Secret) Same(o Secret) bool {
	if s.set && o.set {
		return subtle.ConstantTimeCompare(s.key[:], o.key[:]) == 1
	}
	return s.IsSet() == o.IsSet() && s.fingerprint() == o.fingerprint()
}

// String is the redacted form ("" when unset): what logs, tables and the
// API show.
func (s Secret) String() string {
	if !s.IsSet() {
		return ""
	}
	return redactedPrefix + s.fingerprint()
}

// Reveal is the key as 32 hex digits (the redacted form when it holds
// none): for the config file the agent writes and the fleet's store,
// never for display.
func (s Secret) Reveal() string {
	if !s.set {
		return s.String()
	}
	return hex.EncodeToString(s.key[:])
}

// SetString parses a secret ("" unsets it).
func (s *Secret) SetString(v string) (err error) {
	if v == "" {
		*s = Secret{}
		return nil
	}
	*s, err = ParseSecret(v)
	return err
}

// UnmarshalYAML decodes a secret.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalText(s, n, "a secret (32 hex digits)")
}

// MarshalYAML encodes the key itself (nothing when unset): what the agent
// writes back into its config file. A Secret read from the API holds
// only its redacted form, which is what `get -o yaml` prints.
func (s Secret) MarshalYAML() (any, error) {
	if !s.IsSet() {
		return nil, nil
	}
	return s.Reveal(), nil
}
