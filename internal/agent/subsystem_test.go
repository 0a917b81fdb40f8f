// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSubsystems: subsystems start in order and stop last first, each
// loop cancelled and returned before its stop runs and before the
// subsystems started ahead of it stop; a failed start is named by its
// subsystem, the later ones never start and the earlier ones stop;
// each one's metrics are on the registry once it started.
func TestSubsystems(t *testing.T) {
	var events []string
	note := func(s string) { events = append(events, s) }
	loop := func(name string) func(ctx context.Context) {
		return func(ctx context.Context) {
			<-ctx.Done()
			note(name + " run returned")
		}
	}
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "edgeplane_test_gauge", Help: "A test's."})
	list := func(fail bool) []subsystem {
		return []subsystem{
			{name: "one", start: func(context.Context) error { note("one start"); return nil }, stop: func() { note("one stop") }},
			{name: "two", start: func(context.Context) error { note("two start"); return nil }, run: loop("two"),
				stop: func() { note("two stop") }, metrics: collect(gauge)},
			{name: "three", start: func(context.Context) error {
				note("three start")
				if fail {
					return errors.New("no luck")
				}
				return nil
			}, run: loop("three")},
			{name: "four", start: func(context.Context) error { note("four start"); return nil }},
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &subsystems{reg: prometheus.NewRegistry()}
	if err := r.start(ctx, list(false)); err != nil {
		t.Fatal(err)
	}
	mfs, err := r.reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "edgeplane_test_gauge" {
		t.Errorf("registry after start: %v, %v; want the second subsystem's gauge", mfs, err)
	}
	// The caller's context ending stops nothing: stop does, in turn.
	cancel()
	if len(events) != 4 {
		t.Errorf("after ctx ended, before stop: %q", events)
	}
	r.stop()
	want := []string{"one start", "two start", "three start", "four start",
		"three run returned", "two run returned", "two stop", "one stop"}
	if !slices.Equal(events, want) {
		t.Errorf("events\n got %q\nwant %q", events, want)
	}

	events = nil
	r = &subsystems{reg: prometheus.NewRegistry()}
	err = r.start(context.Background(), list(true))
	if err == nil || !strings.HasPrefix(err.Error(), "three: ") || !strings.Contains(err.Error(), "no luck") {
		t.Errorf("failed start: %v, want it named by the subsystem (three: no luck)", err)
	}
	r.stop()
	want = []string{"one start", "two start", "three start", "two run returned", "two stop", "one stop"}
	if !slices.Equal(events, want) {
		t.Errorf("events\n got %q\nwant %q", events, want)
	}
}
