// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.Name != "ep" {
		t.Errorf("name %q, want ep", c.Name)
	}
	w1, err := c.Links["wan1"].Impairment()
	if err != nil || w1.Delay != 5*time.Millisecond || w1.LossPercent != 0 || w1.RateBps != 0 {
		t.Errorf("wan1 %+v %v, want 5ms, no loss, unlimited", w1, err)
	}
	w2, err := c.Links["wan2"].Impairment()
	if err != nil || w2.Delay != 30*time.Millisecond || w2.LossPercent != 1 {
		t.Errorf("wan2 %+v %v, want 30ms, 1%% loss", w2, err)
	}
	// YAML round trip: the text Up compares to decide "same config".
	back, err := ParseConfig(c.YAML())
	if err != nil {
		t.Fatal(err)
	}
	if string(back.YAML()) != string(c.YAML()) {
		t.Errorf("round trip:\n%s\nvs\n%s", back.YAML(), c.YAML())
	}
}

func TestParseConfigOverlay(t *testing.T) {
	c, err := ParseConfig([]byte("name: lab1\nlinks:\n  wan2: {loss: 5%, rate: 50mbit}\n"))
	if err != nil {
		t.Fatal(err)
	}
	w2, _ := c.Links["wan2"].Impairment()
	if c.Name != "lab1" || w2.Delay != 30*time.Millisecond || w2.LossPercent != 5 || w2.RateBps != 50e6 {
		t.Errorf("got %s %+v, want lab1 with wan2 30ms (default) 5%% 50mbit", c.Name, w2)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"bad mtu", "mtu: 9000", []string{"mtu: 9000 out of range 1280-3000"}},
		{"long name", "name: abcdef", []string{`name: "abcdef" is longer than 5 characters`}},
		{"bad name", "name: Ab", []string{`name: "Ab" must start with a letter a-z`}},
		{"unknown top", "nmae: x", []string{"nmae: unknown field (want name, mtu or links)"}},
		{"unknown link", "links: {wan3: {delay: 1ms}}", []string{"links.wan3: unknown link (want wan1 or wan2)"}},
		{"every field", "links: {wan1: {delay: 5x, jitter: -1ms, loss: 200%, rate: 5bps, mtu: 9}}", []string{
			"links.wan1.mtu: unknown field (want delay, jitter, loss or rate)",
			`links.wan1.delay: invalid duration "5x" (want e.g. 5ms)`,
			"links.wan1.jitter: -1ms is negative",
			`links.wan1.loss: invalid loss "200%"`,
			`links.wan1.rate: invalid rate "5bps"`,
		}},
		{"not yaml", "links: [", []string{"lab: invalid YAML"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.doc))
			var errs config.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v, want config.Errors", err)
			}
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(errs[i].Error(), w) {
					t.Errorf("error %d: %q, want prefix %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}

func TestGatewayConfigs(t *testing.T) {
	for _, side := range []byte{'a', 'b'} {
		b, err := GatewayConfig("ep", side)
		if err != nil {
			t.Fatalf("gateway %c: %v", side, err)
		}
		c, err := yamlcfg.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		local, remote := "172.16.1.1", "172.16.1.2"
		if side == 'b' {
			local, remote = remote, local
		}
		if got := c.Paths[0]; got.Local.String() != local || got.Remote.String() != remote || *got.Key != 1 {
			t.Errorf("gateway %c path 1: %+v", side, got)
		}
	}
}

func TestProcMatches(t *testing.T) {
	l := NewSDWAN(DefaultConfig(), "/usr/bin/edgeplane", "/usr/bin/edgeplane-dev")
	ps := l.procs()
	for _, p := range ps {
		argv := p.Argv
		// After nsenter / ip netns exec exec the binary.
		for i, a := range argv {
			if a == l.Bin || a == l.DevBin {
				argv = argv[i:]
			}
		}
		if !p.matches(argv) || !p.matches(p.Argv) {
			t.Errorf("%s does not match its own command line %q", p.Name, argv)
		}
		for _, q := range ps {
			if q.Name != p.Name && q.matches(argv) {
				t.Errorf("%s matches %s's command line", q.Name, p.Name)
			}
		}
	}
	for _, argv := range [][]string{
		{"edgeplane", "wanem", "set", "--control", l.Socket("wan1"), "--delay", "1ms"},
		{"edgeplane", "stats", "--pin-dir", l.PinDir(l.GWA)},
	} {
		for _, p := range ps {
			if p.matches(argv) {
				t.Errorf("%s matches %q", p.Name, argv)
			}
		}
	}
}
