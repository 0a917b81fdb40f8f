// SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"gopkg.in/yaml.v3"
)

const testSecret = "00112233445566778899aabbccddeeff"

// TestSecretShown: a path secret is shown only redacted (String, the
// form the API and tables use), as the same fingerprint for the same key
// and another for another; read back from that form it holds no key and
// is the same secret as far as both show; the config file the agent
// writes holds the key, and the file is its owner's alone.
func TestSecretShown(t *testing.T) {
	s, err := config.ParseSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	shown := s.String()
	if !strings.HasPrefix(shown, "redacted:") || len(shown) != len("redacted:")+8 || strings.Contains(shown, testSecret[:8]) {
		t.Fatalf("shown as %q", shown)
	}
	other, _ := config.ParseSecret(strings.Repeat("f", 32))
	if other.String() == shown {
		t.Fatal("two secrets show the same")
	}
	back, err := config.ParseSecret(shown)
	if err != nil || !back.Redacted() || !back.Same(s) || back.Same(other) || back.String() != shown {
		t.Fatalf("read back from %q: %+v %v", shown, back, err)
	}
	if _, ok := back.Key(); ok {
		t.Fatal("a redacted secret holds a key")
	}
	for _, bad := range []string{"redacted:12", "redacted:zzzzzzzz", testSecret + "00", "0x" + testSecret[2:]} {
		if _, err := config.ParseSecret(bad); err == nil {
			t.Errorf("%q parsed", bad)
		} else if strings.Contains(err.Error(), bad) {
			t.Errorf("the error quotes the value: %v", err)
		}
	}

	cfg, err := yamlcfg.Parse([]byte("interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {secret: " + testSecret + "}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cfg.Paths[0])
	if err != nil || !strings.Contains(string(out), testSecret) {
		t.Errorf("yaml of a path with its key: %s %v", out, err)
	}
	file := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := yamlcfg.WriteFile(file, cfg, false, ""); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("config file with a secret written %v, want 0600 (%v)", st.Mode().Perm(), err)
	}
	b, _ := os.ReadFile(file)
	again, err := yamlcfg.Parse(b)
	if err != nil || !again.Paths[0].Monitor.Secret.Same(s) {
		t.Errorf("the written file reads back with another secret: %v", err)
	}
}

// TestSecretKeptOnUpdate: an update that gives a path's secret back in
// its redacted form keeps the secret; one that gives another's redacted
// form, or a create that gives one, holds no key (the compiler refuses
// it, internal/rules); one that gives a new key takes it.
func TestSecretKeptOnUpdate(t *testing.T) {
	cfg, err := yamlcfg.Parse([]byte("interfaces: [{name: wan0, role: wan}]\npaths: [{id: 1, type: gre, interface: wan0, local: 10.0.0.1, remote: 10.0.0.2, monitor: {secret: " + testSecret + "}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	st := config.NewStore(cfg)
	shown := cfg.Paths[0]
	shown.Monitor.Secret, _ = config.ParseSecret(cfg.Paths[0].Monitor.Secret.String())
	shown.TTL = 9
	if _, _, err := st.Apply([]config.Op{{Verb: config.Update, Kind: config.KindPath, Object: shown}}); err != nil {
		t.Fatal(err)
	}
	p, _ := st.Path(1)
	if k, ok := p.Monitor.Secret.Key(); !ok || !config.NewSecret(k).Same(cfg.Paths[0].Monitor.Secret) || p.TTL != 9 {
		t.Fatalf("after an update with the redacted secret: %+v", p.Monitor)
	}
	other, _ := config.ParseSecret(strings.Repeat("e", 32))
	wrong := shown
	wrong.Monitor.Secret, _ = config.ParseSecret(other.String())
	if _, _, err := st.Apply([]config.Op{{Verb: config.Update, Kind: config.KindPath, Object: wrong}}); err != nil {
		t.Fatal(err)
	}
	if p, _ := st.Path(1); !p.Monitor.Secret.Redacted() {
		t.Errorf("another secret's redacted form was resolved: %+v", p.Monitor)
	}
	created := shown
	created.ID, created.Key = 2, new(uint32)
	if _, _, err := st.Apply([]config.Op{{Verb: config.Create, Kind: config.KindPath, Object: created}}); err != nil {
		t.Fatal(err)
	}
	if p, _ := st.Path(2); !p.Monitor.Secret.Redacted() {
		t.Errorf("a created path's redacted secret was resolved: %+v", p.Monitor)
	}
}
