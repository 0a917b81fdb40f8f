// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// reloadConfig is the good config TestInvalidConfigKeepsServing starts
// from; each mistake below is one edit of it.
const reloadConfig = `interfaces:
  - {name: lan0, role: lan, xdp: native}
  - {name: wan0, role: wan, xdp: native}
fars:
  - {id: 1, action: redirect, interface: wan0}
  - {id: 2, action: redirect, interface: lan0}
  - {id: 3, action: drop}
pdrs:
  - {id: 10, precedence: 10, match: {in: lan0, proto: udp, dport: 9999}, far: 3}
  - {id: 20, precedence: 100, match: {in: lan0, dst: 10.2.0.0/24}, far: 1}
  - {id: 21, precedence: 100, match: {in: lan0, dst: "fd02::/64"}, far: 1}
  - {id: 30, precedence: 100, match: {in: wan0, dst: 10.1.0.0/24}, far: 2}
  - {id: 31, precedence: 100, match: {in: wan0, dst: "fd01::/64"}, far: 2}
limits: {flows: 65536, rules: 1024}
`

// edit returns reloadConfig with old replaced by new, which must occur.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if strings.Count(reloadConfig, old) != 1 {
		t.Fatalf("edit: %q does not occur exactly once", old)
	}
	return strings.Replace(reloadConfig, old, new, 1)
}

// validate runs `edgeplane validate --config` inside the gateway's network
// namespace, where the configured interfaces exist, as an operator would
// on the gateway; it returns the exit code and the combined output.
func (g *gateway) validate(path string) (int, string) {
	g.t.Helper()
	out, err := exec.Command("ip", "netns", "exec", g.GW, edgeplaneBin, "validate", "--config", path).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	g.t.Fatalf("validate: %v", err)
	return 0, ""
}

// TestInvalidConfigKeepsServing sends SIGHUP after each kind of mistake in
// the config file: the reload is refused and counted, the validator names
// the field, and the live rules keep forwarding and dropping as before.
// Then a valid change (drop ICMP) is applied.
func TestInvalidConfigKeepsServing(t *testing.T) {
	g := newGateway(t, reloadConfig)
	if code, out := g.validate(g.cfgPath); code != 0 {
		t.Fatalf("validate on the good config: exit %d\n%s", code, out)
	}
	g.start()
	g.warmUp()
	// Whatever reaches UDP 9999 on B during the whole test.
	rcv := startReceiver(t, g.B, "0.0.0.0", dropUDPPort, 0)
	gen := g.stats().Generation
	errorsBefore := g.reloads("error")

	mistakes := []struct {
		name   string
		config string
		path   string // the reported path: reason line starts with path + ": "
		phrase string // and contains this
	}{
		{"unknown field", edit(t, "{id: 20, precedence: 100,", "{id: 20, priority: 100,"),
			"pdrs[1].priority", "unknown field"},
		{"bad CIDR", edit(t, "dst: 10.2.0.0/24}", "dst: 10.2.0.0/33}"),
			"pdrs[1].match.dst", `invalid CIDR "10.2.0.0/33"`},
		{"port range reversed", edit(t, "dport: 9999}", "dport: 9999-9000}"),
			"pdrs[0].match.dport", "port range reversed (9999-9000)"},
		{"dangling FAR id", edit(t, "dst: 10.1.0.0/24}, far: 2}", "dst: 10.1.0.0/24}, far: 7}"),
			"pdrs[3].far", "no far with id 7"},
		{"duplicate PDR id", edit(t, "{id: 31,", "{id: 30,"),
			"pdrs[4].id", "duplicate id 30"},
		{"interface not on the host", edit(t, "  - {name: wan0, role: wan, xdp: native}\n",
			"  - {name: wan0, role: wan, xdp: native}\n  - {name: nope0, role: wan, xdp: native}\n"),
			"interfaces[2].name", `"nope0"`},
	}
	for i, m := range mistakes {
		t.Run(strings.ReplaceAll(m.name, " ", "-"), func(t *testing.T) {
			g.writeConfig(m.config)

			// (a) The validator refuses the file and names the field.
			code, out := g.validate(g.cfgPath)
			if code != 1 || !hasProblem(out, m.path, m.phrase) {
				t.Errorf("edgeplane validate: exit %d, output:\n%s\nwant exit 1 and a line \"%s: ...%s...\"", code, out, m.path, m.phrase)
			}

			// (c) The agent refuses the reload and counts it.
			g.signal(syscall.SIGHUP)
			want := errorsBefore + float64(i+1)
			if !waitFor(5*time.Second, func() bool { return g.reloads("error") >= want }) {
				t.Fatalf("edgeplane_config_reloads_total{result=\"error\"} = %v, want %v", g.reloads("error"), want)
			}
			if !hasProblem(g.log(), m.path, m.phrase) {
				t.Errorf("agent log does not report \"%s: ...%s...\"", m.path, m.phrase)
			}

			// (b) The old rules keep serving: same generation, pings
			// forwarded, UDP 9999 still dropped by PDR 10.
			before := g.stats()
			if before.Generation != gen {
				t.Errorf("generation %d after a refused reload, want %d", before.Generation, gen)
			}
			for _, dst := range []string{lab.AddrB, lab.AddrB6} {
				if got := ping(g.A, dst, 2, "0.1"); got != 2 {
					t.Errorf("ping A -> %s: %d of 2 replies", dst, got)
				}
			}
			mustSendUDP(t, g.A, lab.AddrB, dropUDPPort, 20, 0, 32)
			after := g.stats()
			if d := after.pdr(10).Packets - before.pdr(10).Packets; d != 20 {
				t.Errorf("PDR 10 dropped %d of 20 datagrams to UDP %d", d, dropUDPPort)
			}
			if d := after.pdr(20).Packets - before.pdr(20).Packets; d != 2 {
				t.Errorf("PDR 20 counted %d of 2 echo requests", d)
			}
		})
	}
	if g.reloads("ok") != 0 {
		t.Errorf("edgeplane_config_reloads_total{result=\"ok\"} = %v after refused reloads only", g.reloads("ok"))
	}

	t.Run("valid-change", func(t *testing.T) {
		g.writeConfig(edit(t, "pdrs:\n", "pdrs:\n  - {id: 5, precedence: 1, match: {in: lan0, proto: icmp}, far: 3}\n"))
		if code, out := g.validate(g.cfgPath); code != 0 {
			t.Errorf("validate on the changed config: exit %d\n%s", code, out)
		}
		g.signal(syscall.SIGHUP)
		if !waitFor(5*time.Second, func() bool { return g.stats().Generation > gen }) {
			t.Fatalf("generation still %d 5s after a valid reload", gen)
		}
		if ok := g.reloads("ok"); ok != 1 {
			t.Errorf("edgeplane_config_reloads_total{result=\"ok\"} = %v, want 1", ok)
		}
		before := g.stats()
		if got := ping(g.A, lab.AddrB, 3, "0.2"); got != 0 {
			t.Errorf("ping A -> B over IPv4: %d of 3 replies, want 0 (PDR 5 drops ICMP)", got)
		}
		// ICMPv6 is another protocol: still forwarded.
		if got := ping(g.A, lab.AddrB6, 2, "0.1"); got != 2 {
			t.Errorf("ping A -> B over IPv6: %d of 2 replies, want 2", got)
		}
		mustSendUDP(t, g.A, lab.AddrB, dropUDPPort, 20, 0, 32)
		after := g.stats()
		if d := after.pdr(5).Packets - before.pdr(5).Packets; d != 3 {
			t.Errorf("PDR 5 dropped %d echo requests, want 3", d)
		}
		if d := after.pdr(10).Packets - before.pdr(10).Packets; d != 20 {
			t.Errorf("PDR 10 dropped %d of 20 datagrams after the change", d)
		}
	})

	var got recvReport
	rcv.finish(&got)
	if got.Packets != 0 {
		t.Errorf("B received %d datagrams on UDP %d, want 0", got.Packets, dropUDPPort)
	}
}

// hasProblem reports whether out has a line "path: reason" whose reason
// contains phrase.
func hasProblem(out, path, phrase string) bool {
	for _, line := range strings.Split(out, "\n") {
		if reason, ok := strings.CutPrefix(line, path+": "); ok && strings.Contains(reason, phrase) {
			return true
		}
	}
	return false
}
