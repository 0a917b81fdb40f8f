// SPDX-License-Identifier: Apache-2.0

package fleetbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

// runFleetNoDataplane runs n members without a dataplane in this
// process, perClient of them on each etcd client, under a prefix of
// their own: first the Applies with nobody asking for statuses (timed
// until every member has committed, seen here), then the series that
// asks after each Apply (timed until etcd holds every status); then it
// stops them.
func runFleetNoDataplane(ctx context.Context, o Options, bin, dir string, etcd *child, endpoints []string, applies, n, perClient int) (s Series, err error) {
	rig, err := newFleetRig(ctx, bin, dir, etcd, endpoints, fleetPrefixNoDataplane)
	if err != nil {
		return s, err
	}
	defer rig.close()
	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var clis []*clientv3.Client
	// The members stop before their clients close, so each revokes its
	// lease on the way out.
	defer func() {
		cancel()
		wg.Wait()
		for _, c := range clis {
			c.Close()
		}
	}()
	names := make([]string, n)
	done := newCommits(n)
	var cli *clientv3.Client
	for i := range names {
		if i%perClient == 0 {
			if cli, err = fleet.NewClient(fleet.ClientOptions{Endpoints: endpoints}); err != nil {
				return s, err
			}
			clis = append(clis, cli)
		}
		names[i] = fmt.Sprintf("nd%03d", i)
		gw := &countingGateway{NoDataplane: fleetlab.NewNoDataplane(), c: done, i: i}
		m := fleet.NewMember(cli, gw, fleet.MemberOptions{Name: names[i], Prefix: fleetPrefixNoDataplane})
		wg.Go(func() { m.Run(mctx) })
	}
	if err := rig.ob.waitReady(ctx, names, rig.seeded, nil); err != nil {
		return s, err
	}
	o.Log("fleet: %d members without a dataplane (%d on each etcd client) joined and committed the base objects", n, min(perClient, n))
	// Idle, at the sizes the goals are for (a small fleet's idle cost
	// says nothing, and would lengthen TestBenchFleet).
	var idle *Costs
	if n >= 100 {
		c, err := rig.idle(ctx)
		if err != nil {
			return s, err
		}
		idle = &c
		o.Log("fleet: %d members idle for %.0f s: etcd %.2f of a CPU, members and bench %.2f, controller %.2f",
			n, c.Seconds, c.Etcd.CPUShare, c.MembersAndBench.CPUShare, c.Controller.CPUShare)
	}
	un, err := rig.unasked(ctx, o, names, applies, done.expect, func(ctx context.Context) (time.Time, error) { return done.wait(ctx, fleetCommitTimeout) })
	if err != nil {
		return s, err
	}
	if s, err = rig.series(ctx, o, names, applies); err != nil {
		return s, err
	}
	s.Name, s.What, s.Unasked, s.MembersPerClient, s.Idle = "members_without_dataplane", whatNoDataplane, un, min(perClient, n), idle
	return s, nil
}

// countingGateway is a member's gateway that tells c when a batch it
// commits has been applied: the moment its dataplane would have flipped.
type countingGateway struct {
	*fleetlab.NoDataplane
	c *commits
	i int
}

// Apply implements fleet.Gateway.
func (g *countingGateway) Apply(ops []config.Op, dryRun bool, rec []byte) (uint32, error) {
	gen, err := g.NoDataplane.Apply(ops, dryRun, rec)
	if err == nil && !dryRun {
		g.c.add(g.i)
	}
	return gen, err
}

// commits counts the members that have committed since expect, and says
// when the last of them did.
type commits struct {
	mu   sync.Mutex
	seen []bool
	n    int
	last time.Time
	full chan struct{} // closed when every member has committed
}

func newCommits(n int) *commits {
	return &commits{seen: make([]bool, n), full: make(chan struct{})}
}

// expect starts counting anew.
func (c *commits) expect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.seen)
	c.n, c.full = 0, make(chan struct{})
}

// add records member i's commit; a member counts once.
func (c *commits) add(i int) {
	at := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[i] {
		return
	}
	c.seen[i], c.last = true, at
	if c.n++; c.n == len(c.seen) {
		close(c.full)
	}
}

// wait waits until every member has committed since expect and returns
// when the last did.
func (c *commits) wait(ctx context.Context, timeout time.Duration) (time.Time, error) {
	c.mu.Lock()
	full := c.full
	c.mu.Unlock()
	select {
	case <-full:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(timeout):
		c.mu.Lock()
		defer c.mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d members committed within %s", c.n, len(c.seen), timeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, nil
}
