// SPDX-License-Identifier: Apache-2.0

package rtloop

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestRunProtected: a protected loop's steps run on a thread at
// SCHED_FIFO Priority whose children start at the default policy,
// once a tick, and the loop ends with its context.
func TestRunProtected(t *testing.T) {
	testutil.RequireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	var steps int
	var attr *unix.SchedAttr
	var tid int
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, slog.New(slog.DiscardHandler), "test", 2*time.Millisecond, func(time.Time) {
			if steps++; steps == 1 {
				tid = unix.Gettid()
				attr, _ = unix.SchedGetAttr(0, 0)
			} else if unix.Gettid() != tid {
				t.Errorf("step %d on thread %d, the first on %d", steps, unix.Gettid(), tid)
			}
			if steps == 50 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the loop did not end with its context (%d steps)", steps)
	}
	if attr == nil || attr.Policy != unix.SCHED_FIFO || attr.Priority != Priority || attr.Flags&unix.SCHED_FLAG_RESET_ON_FORK == 0 {
		t.Errorf("the loop's thread: %+v, want SCHED_FIFO %d, reset on fork", attr, Priority)
	}
	if steps != 50 {
		t.Errorf("%d steps, want 50", steps)
	}
}

// TestProtectAddsP: each protected thread adds a P to GOMAXPROCS while
// it runs (a loop woken from a sleep finds one without waiting for the
// runtime's ordinary threads) and gives it back when released.
func TestProtectAddsP(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	const n = 3
	var wg sync.WaitGroup
	protected, stop := make(chan struct{}), make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, _ := Protect(Priority) // without the privilege: a P all the same
			defer release()
			protected <- struct{}{}
			<-stop
		}()
	}
	for range n {
		<-protected
	}
	if got := runtime.GOMAXPROCS(0); got != base+n {
		t.Errorf("%d protected threads: GOMAXPROCS %d, want %d", n, got, base+n)
	}
	close(stop)
	wg.Wait()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Errorf("all released: GOMAXPROCS %d, want %d", got, base)
	}
}
