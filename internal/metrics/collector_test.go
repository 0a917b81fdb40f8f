// SPDX-License-Identifier: Apache-2.0

package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgeplane/edgeplane/internal/dataplane"
	"github.com/edgeplane/edgeplane/internal/metrics"
)

// TestScrapesShareOneRead scrapes /metrics over HTTP in a tight loop and
// from 8 scrapers at once: the dataplane (the connection-table walk) is
// read at most once a second however many scrapes come.
func TestScrapesShareOneRead(t *testing.T) {
	var reads atomic.Int32
	src := func() (*dataplane.Snapshot, error) {
		reads.Add(1)
		time.Sleep(5 * time.Millisecond) // a walk takes time
		return &dataplane.Snapshot{Gen: uint32(reads.Load()), PDRs: map[uint32]dataplane.Counter{}, Paths: map[uint32]dataplane.PathCounters{},
			Verdicts: make([]dataplane.Counter, len(dataplane.VerdictNames)), Reasons: make([]dataplane.Counter, len(dataplane.ReasonNames))}, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(metrics.Throttle(src, metrics.SnapshotEvery)))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	scrape := func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 1500*time.Millisecond {
				scrape()
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	t.Logf("8 scrapers for %.1f s: %d reads of the dataplane", secs, reads.Load())
	if n := reads.Load(); float64(n) > secs+1 {
		t.Errorf("%d reads of the dataplane in %.1f s, want at most one a second", n, secs)
	}
	// A scrape after a quiet second reads again.
	time.Sleep(metrics.SnapshotEvery)
	before := reads.Load()
	scrape()
	if reads.Load() != before+1 {
		t.Errorf("a scrape a second after the last did not read the dataplane")
	}
}
