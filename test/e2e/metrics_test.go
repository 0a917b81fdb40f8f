// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// TestMetricsExposition scrapes the agent's /metrics after known traffic
// and checks the families, their types, and that the PDR counters equal
// what `edgeplane stats` reads from the pins.
func TestMetricsExposition(t *testing.T) {
	const n, payload = 300, 120
	g := newGateway(t, forwardConfig)
	g.start()
	g.warmUp()
	mustSendUDP(t, g.A, lab.AddrB, countUDPPort, n, 20000, payload)
	if got := ping(g.A, lab.AddrB6, 3, "0.1"); got != 3 {
		t.Fatalf("ping A -> B over IPv6: %d of 3 replies", got)
	}
	// Traffic has stopped once two reads in a row agree.
	var st stats
	if !waitFor(5*time.Second, func() bool {
		a := g.stats()
		time.Sleep(100 * time.Millisecond)
		st = g.stats()
		return samePDRs(a, st)
	}) {
		t.Fatal("PDR counters still moving 5s after the traffic stopped")
	}
	fams := g.scrape()
	if after := g.stats(); !samePDRs(st, after) {
		t.Fatal("PDR counters moved while scraping")
	}

	types := map[string]dto.MetricType{
		"edgeplane_pdr_packets_total":        dto.MetricType_COUNTER,
		"edgeplane_pdr_bytes_total":          dto.MetricType_COUNTER,
		"edgeplane_verdict_packets_total":    dto.MetricType_COUNTER,
		"edgeplane_reason_packets_total":     dto.MetricType_COUNTER,
		"edgeplane_flow_cache_lookups_total": dto.MetricType_COUNTER,
		"edgeplane_rules_generation":         dto.MetricType_GAUGE,
		"edgeplane_config_reloads_total":     dto.MetricType_COUNTER,
	}
	checkFamilies := func(t *testing.T, fams map[string]*dto.MetricFamily) {
		t.Helper()
		for name, typ := range types {
			mf, ok := fams[name]
			if !ok {
				t.Errorf("family %s missing from /metrics", name)
				continue
			}
			if mf.GetType() != typ {
				t.Errorf("family %s has type %s, want %s", name, mf.GetType(), typ)
			}
		}
	}

	t.Run("families", func(t *testing.T) {
		// On the first scrape, before any reload: a counter a dashboard
		// or alert reads must exist from the start, at 0.
		checkFamilies(t, fams)
		for _, verdict := range []string{"drop", "pass", "redirect"} {
			if _, ok := metricValue(fams, "edgeplane_verdict_packets_total", map[string]string{"verdict": verdict}); !ok {
				t.Errorf("edgeplane_verdict_packets_total{verdict=%q} missing", verdict)
			}
		}
		if _, ok := metricValue(fams, "edgeplane_reason_packets_total", map[string]string{"reason": "no_match"}); !ok {
			t.Errorf("edgeplane_reason_packets_total{reason=\"no_match\"} missing")
		}
		for _, result := range []string{"hit", "miss"} {
			if _, ok := metricValue(fams, "edgeplane_flow_cache_lookups_total", map[string]string{"result": result}); !ok {
				t.Errorf("edgeplane_flow_cache_lookups_total{result=%q} missing", result)
			}
		}
	})

	t.Run("equals-stats", func(t *testing.T) {
		if len(st.PDRs) != 8 {
			t.Errorf("stats lists %d PDRs, want the 8 configured", len(st.PDRs))
		}
		for id, c := range st.PDRs {
			l := map[string]string{"pdr": id}
			if v, ok := metricValue(fams, "edgeplane_pdr_packets_total", l); !ok || uint64(v) != c.Packets {
				t.Errorf("edgeplane_pdr_packets_total{pdr=%q} = %v (present %v), stats says %d", id, v, ok, c.Packets)
			}
			if v, ok := metricValue(fams, "edgeplane_pdr_bytes_total", l); !ok || uint64(v) != c.Bytes {
				t.Errorf("edgeplane_pdr_bytes_total{pdr=%q} = %v (present %v), stats says %d", id, v, ok, c.Bytes)
			}
		}
		if c := st.pdr(12); c.Packets != n || c.Bytes != n*udp4Frame(payload) {
			t.Errorf("PDR 12 = %d packets / %d bytes, want %d / %d", c.Packets, c.Bytes, n, n*udp4Frame(payload))
		}
		if c := st.pdr(21); c.Packets < 3 {
			t.Errorf("PDR 21 = %d packets, want >= 3 echo requests", c.Packets)
		}
		if v, _ := metricValue(fams, "edgeplane_rules_generation", nil); uint32(v) != st.Generation || v == 0 {
			t.Errorf("edgeplane_rules_generation = %v, stats says %d", v, st.Generation)
		}
		if v, _ := metricValue(fams, "edgeplane_verdict_packets_total", map[string]string{"verdict": "redirect"}); v < n {
			t.Errorf("edgeplane_verdict_packets_total{verdict=\"redirect\"} = %v, want >= %d", v, n)
		}
	})

	t.Run("after-reload", func(t *testing.T) {
		gen := st.Generation
		g.signal(syscall.SIGHUP)
		if !waitFor(5*time.Second, func() bool { return g.reloads("ok") == 1 }) {
			t.Fatalf("edgeplane_config_reloads_total{result=\"ok\"} = %v after one good reload, want 1", g.reloads("ok"))
		}
		fams := g.scrape()
		checkFamilies(t, fams)
		if v, _ := metricValue(fams, "edgeplane_rules_generation", nil); v != float64(gen+1) {
			t.Errorf("edgeplane_rules_generation = %v after a reload, want %d", v, gen+1)
		}
		// Counters continue across a reload.
		if v, _ := metricValue(fams, "edgeplane_pdr_packets_total", map[string]string{"pdr": strconv.Itoa(12)}); v != n {
			t.Errorf("edgeplane_pdr_packets_total{pdr=\"12\"} = %v after a reload, want %d", v, n)
		}
	})
}

func samePDRs(a, b stats) bool {
	if a.Generation != b.Generation || len(a.PDRs) != len(b.PDRs) {
		return false
	}
	for id, c := range a.PDRs {
		if b.PDRs[id] != c {
			return false
		}
	}
	return true
}
