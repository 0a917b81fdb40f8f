// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/n4"
)

// TestN4NodeID: the node ID is the one given, else the listen
// address's IP; a wildcard address without one is refused.
func TestN4NodeID(t *testing.T) {
	for _, c := range []struct{ addr, id, want, err string }{
		{"10.0.0.1:8805", "", "10.0.0.1", ""},
		{"[fd00::1]:8805", "", "fd00::1", ""},
		{"0.0.0.0:8805", "upf.example.net", "upf.example.net", ""},
		{"0.0.0.0:8805", "", "", "names no address"},
		{":8805", "", "", "names no address"},
		{"10.0.0.1", "", "", "missing port"},
	} {
		got, err := n4NodeID(c.addr, c.id)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q %q: %q, %v; want an error with %q", c.addr, c.id, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q %q: %q, %v; want %q", c.addr, c.id, got, err, c.want)
		}
	}
}

// TestN4State: the first start takes now (to the second) as its
// recovery time stamp; what is written is read back whole; a file that
// is not the agent's stops the start, named.
func TestN4State(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml.n4")
	now := time.Date(2026, 11, 28, 6, 0, 0, 123, time.UTC)
	st, err := readN4State(path, now)
	if err != nil || !st.Recovery.Equal(now.Truncate(time.Second)) || len(st.Peers) != 0 {
		t.Fatalf("first start: %+v, %v", st, err)
	}
	st.Peers = []n4.Peer{{NodeID: "10.1.0.2", Recovery: now, Since: now}}
	if err := writeN4State(path, st); err != nil {
		t.Fatal(err)
	}
	back, err := readN4State(path, now.Add(time.Hour))
	if err != nil || !back.Recovery.Equal(st.Recovery) || len(back.Peers) != 1 || back.Peers[0].NodeID != "10.1.0.2" {
		t.Fatalf("read back: %+v, %v", back, err)
	}
	if err := os.WriteFile(path, []byte("recovery: yesterday\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readN4State(path, now); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a file not the agent's: %v, want an error naming it", err)
	}
}
