// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/config"
)

// TestCompileCaches: a strategy's command_regex is compiled once and
// reused by later scans, and dropped when no strategy has it.
func TestCompileCaches(t *testing.T) {
	e := &Engine{}
	a := []config.Strategy{{ID: 1, CommandRegex: "^nr-gnb$"}, {ID: 2}, {ID: 3, CommandRegex: "^upf"}}
	first := e.compile(a)
	if first[0] == nil || first[1] != nil || first[2] == nil || !first[0].MatchString("nr-gnb") {
		t.Fatalf("compile: %v", first)
	}
	again := e.compile(a)
	if again[0] != first[0] || again[2] != first[2] {
		t.Errorf("a second scan compiled the regexes again")
	}
	e.compile(a[:1])
	if len(e.regexps) != 1 || e.regexps["^upf"] != nil {
		t.Errorf("after strategy 3 went: cached %v, want ^nr-gnb$ alone", e.regexps)
	}
}

// TestPodsTokenOnlyOverTLS: the service account's token goes with an
// https:// pod list, never with an http:// one.
func TestPodsTokenOnlyOverTLS(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("sa-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := serviceAccount
	serviceAccount = dir
	defer func() { serviceAccount = old }()
	for src, want := range map[string]string{"http://127.0.0.1:10255/pods": "", "https://127.0.0.1:10250/pods": "sa-token"} {
		p, err := NewPods(src, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if p.token != want {
			t.Errorf("%s: token %q, want %q", src, p.token, want)
		}
	}
}
