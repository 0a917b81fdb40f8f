// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// subsystem is one part of a running agent (a lock, the dataplane, a
// control loop, a server), owning its start, its stop and its metrics.
// Run starts the agent's subsystems in order and stops the ones started
// in reverse order, so each may use what the ones before it started.
type subsystem struct {
	name string
	// start takes what the subsystem needs; an error ends the agent's
	// start (named by the subsystem). Nil: nothing to take.
	start func(ctx context.Context) error
	// run is its loop, if it has one: it runs from the subsystem's
	// start until its stop cancels ctx, and stop waits for it.
	run func(ctx context.Context)
	// stop gives back what start took, once run has returned.
	stop func()
	// metrics are its collectors, registered on the agent's registry
	// once it started.
	metrics func() []prometheus.Collector
}

// subsystems starts subsystems and stops them: the one place that
// cancels their loops and waits for them.
type subsystems struct {
	reg     *prometheus.Registry
	started []running
}

type running struct {
	s      subsystem
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned (nil: no run)
}

// start starts each of list in order, until one fails; those started
// stay so (stop stops them).
func (r *subsystems) start(ctx context.Context, list []subsystem) error {
	for _, s := range list {
		if err := r.startOne(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func (r *subsystems) startOne(ctx context.Context, s subsystem) error {
	// Its own context, with ctx's values: a subsystem's loop ends when
	// it is stopped, in its turn, not as soon as ctx ends while those
	// started after it still use it.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if s.start != nil {
		if err := s.start(sctx); err != nil {
			cancel()
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	rs := running{s: s, cancel: cancel}
	if s.run != nil {
		rs.done = make(chan struct{})
		go func() {
			defer close(rs.done)
			s.run(sctx)
		}()
	}
	r.started = append(r.started, rs)
	if s.metrics != nil {
		for _, c := range s.metrics() {
			if err := r.reg.Register(c); err != nil {
				return fmt.Errorf("%s: register its metrics: %w", s.name, err)
			}
		}
	}
	return nil
}

// stop stops the subsystems started, last first: each one's loop is
// cancelled and waited for, then its stop runs.
func (r *subsystems) stop() {
	for i := len(r.started) - 1; i >= 0; i-- {
		rs := r.started[i]
		rs.cancel()
		if rs.done != nil {
			<-rs.done
		}
		if rs.s.stop != nil {
			rs.s.stop()
		}
	}
	r.started = nil
}
