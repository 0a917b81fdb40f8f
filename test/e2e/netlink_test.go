// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// TestNextHopAfterNetlinkOverflow: a storm of route and neighbour changes
// overflows the agent's netlink sockets (the kernel drops what does not
// fit and the next read fails with ENOBUFS). The agent is stopped
// (SIGSTOP) during the storm so the overflow is certain. It must log the
// failure, resubscribe, and keep following changes: afterwards host B's
// MAC changes, and the same cached flow must reach B at its new MAC.
// Without the resubscribe the watcher is gone, the flow keeps its cached
// next hop and B drops every frame.
func TestNextHopAfterNetlinkOverflow(t *testing.T) {
	const storm = 20000
	g := newGateway(t, forwardConfig)
	g.start()
	g.warmUp()
	if got := ping(g.A, lab.AddrB, 5, "0.1"); got != 5 {
		t.Fatalf("ping before the storm: %d of 5", got)
	}

	// The storm, as `ip -batch` lines: routes added and removed, and
	// neighbours that come and go, on the WAN.
	var b strings.Builder
	for i := 0; i < storm; i++ {
		fmt.Fprintf(&b, "route add 10.99.%d.%d/32 dev %s\n", i/256, i%256, lab.WanName)
	}
	for i := 0; i < storm; i++ {
		fmt.Fprintf(&b, "route del 10.99.%d.%d/32 dev %s\n", i/256, i%256, lab.WanName)
	}
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&b, "neigh replace 10.2.0.%d lladdr 02:00:00:00:%02x:%02x dev %s nud permanent\n", 100+i%100, i/256, i%256, lab.WanName)
	}
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, "neigh del 10.2.0.%d dev %s\n", 100+i, lab.WanName)
	}
	batch := filepath.Join(g.dir, "storm.batch")
	if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	g.signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			g.signal(syscall.SIGCONT)
		}
	}()
	start := time.Now()
	if out, err := nsRun(g.GW, "ip", "-batch", batch); err != nil {
		t.Fatalf("route storm: %v\n%s", err, out)
	}
	t.Logf("%d route and 2100 neighbour changes in %v while the agent was stopped", 2*storm, time.Since(start).Round(time.Millisecond))
	g.signal(syscall.SIGCONT)
	stopped = false

	// The agent drains what its sockets hold, then reads ENOBUFS.
	resubscribed := waitFor(5*time.Second, func() bool { return strings.Contains(g.log(), "netlink watch resubscribed") })

	// The same flow, after B's MAC changed and the gateway learned it.
	before := g.stats()
	g.moveB("02:00:00:00:bb:02")
	if got := ping(g.A, lab.AddrB, 10, "0.1"); got != 10 {
		t.Errorf("ping after B's MAC changed, after the storm: %d of 10 replies (neighbour change not followed)", got)
	}
	if d := g.stats().pdr(20).Packets - before.pdr(20).Packets; d < 10 {
		t.Errorf("PDR 20 counted %d echo requests after the change, want >= 10 (not through XDP)", d)
	}
	if !resubscribed {
		t.Errorf("agent did not log a resubscribe after the storm (socket buffers not overflowed, or the watcher died)")
	}
	if !strings.Contains(g.log(), "no buffer space available") {
		t.Errorf("the failure logged is not ENOBUFS")
	}
	if c := strings.Count(g.log(), "watch failed"); c == 0 || c > 4 {
		t.Errorf("agent logged %d watch failures for one storm, want 1 to 4 (one per subscription at most)", c)
	}
}
