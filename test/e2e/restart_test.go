// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/lab"
)

// TestRestartZeroLoss kills the agent with SIGKILL twice during a paced UDP
// stream and restarts it: the pinned program, maps and links keep
// forwarding while no agent runs, the restarted agent adopts them without
// detaching, and no datagram and no count is lost.
func TestRestartZeroLoss(t *testing.T) {
	const (
		rate    = 20000
		seconds = 6
		n       = rate * seconds
		payload = 64
		pdr     = 12 // UDP 7777 A -> B
	)
	g := newGateway(t, forwardConfig)
	g.start()
	g.warmUp()
	progLan, progWan := xdpProgID(t, g.GW, lab.LanName), xdpProgID(t, g.GW, lab.WanName)
	if progLan == "" || progWan == "" {
		t.Fatalf("no XDP program id on lan0 (%q) or wan0 (%q)", progLan, progWan)
	}
	before := g.stats()

	// Sample the counter from the pins all along, agent or not.
	type sample struct {
		at      time.Time
		packets uint64
	}
	var (
		mu         sync.Mutex
		samples    []sample
		statErrors []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s, err := readStats(g.PinDir)
			mu.Lock()
			if err != nil {
				statErrors = append(statErrors, err.Error())
			} else {
				samples = append(samples, sample{time.Now(), s.pdr(pdr).Packets})
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	last := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		if len(samples) == 0 {
			return 0
		}
		return samples[len(samples)-1].packets
	}

	rcv := startReceiver(t, g.B, "0.0.0.0", countUDPPort, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type sendResult struct {
		r   sendReport
		err error
	}
	sent := make(chan sendResult, 1)
	go func() {
		r, err := sendUDP(ctx, g.A, lab.AddrB, countUDPPort, n, rate, payload)
		sent <- sendResult{r, err}
	}()
	// Pings alongside, through both directions' PDRs, across the restarts.
	pings := make(chan int, 1)
	go func() { pings <- ping(g.A, lab.AddrB, 500, "0.01") }()

	start := time.Now()
	genBefore := before.Generation
	for i, at := range []time.Duration{1500 * time.Millisecond, 3500 * time.Millisecond} {
		time.Sleep(time.Until(start.Add(at)))
		if err := g.StopAgent(syscall.SIGKILL); err != nil {
			t.Fatalf("kill agent: %v", err)
		}
		killed := time.Now()
		atKill := last()
		// Forwarding without any agent.
		time.Sleep(300 * time.Millisecond)
		g.start()
		atReady := last()
		t.Logf("restart %d: agent down %v; PDR %d counted %d packets meanwhile", i+1, time.Since(killed).Round(time.Millisecond), pdr, atReady-atKill)
		if atReady <= atKill {
			t.Errorf("restart %d: no packets counted while the agent was down (stream not running or not forwarded)", i+1)
		}
	}

	res := <-sent
	close(stop)
	wg.Wait()
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Logf("sent %d datagrams in %.2fs (%d local ENOBUFS retries)", res.r.Sent, res.r.Seconds, res.r.Retries)
	if d := time.Since(start); d < 4*time.Second {
		t.Errorf("stream ended after %v, before the second restart was done", d)
	}
	replies := <-pings
	time.Sleep(300 * time.Millisecond) // the last datagrams in flight
	var got recvReport
	rcv.finish(&got)
	after := g.stats()

	t.Logf("B received %d datagrams, %d distinct of %d", got.Packets, got.Distinct, n)
	if got.Missing != 0 || got.Distinct != n {
		t.Errorf("%d of %d sequence numbers never arrived (first: %v)", got.Missing, n, got.FirstMissing)
	}
	if got.Packets != n {
		t.Errorf("B received %d datagrams, want %d (duplicates?)", got.Packets, n)
	}
	if replies != 500 {
		t.Errorf("ping at 100/s across the restarts: %d of 500 replies", replies)
	}
	if d := after.pdr(pdr).Packets - before.pdr(pdr).Packets; d != n {
		t.Errorf("PDR %d counted %d packets across the restarts, want %d", pdr, d, n)
	}
	if d := after.pdr(pdr).Bytes - before.pdr(pdr).Bytes; d != n*udp4Frame(payload) {
		t.Errorf("PDR %d counted %d bytes across the restarts, want %d", pdr, d, n*udp4Frame(payload))
	}
	mu.Lock()
	for i := 1; i < len(samples); i++ {
		if samples[i].packets < samples[i-1].packets {
			t.Errorf("PDR %d counter went back from %d to %d at %v", pdr, samples[i-1].packets,
				samples[i].packets, samples[i].at.Sub(start).Round(time.Millisecond))
		}
	}
	if len(statErrors) > 0 {
		t.Errorf("edgeplane stats failed %d times during the restarts, first: %s", len(statErrors), statErrors[0])
	}
	t.Logf("%d counter samples, monotonic", len(samples))
	mu.Unlock()

	// Adopted, not reloaded: the same program stays attached, the
	// restarted agents committed one generation each.
	if p := xdpProgID(t, g.GW, lab.LanName); p != progLan {
		t.Errorf("lan0 runs program %s after the restarts, was %s", p, progLan)
	}
	if p := xdpProgID(t, g.GW, lab.WanName); p != progWan {
		t.Errorf("wan0 runs program %s after the restarts, was %s", p, progWan)
	}
	if after.Generation != genBefore+2 {
		t.Errorf("generation %d after two restarts, want %d", after.Generation, genBefore+2)
	}
	log := g.log()
	if c := strings.Count(log, "adopted pinned program"); c != 2 {
		t.Errorf("agent log has %d \"adopted pinned program\" lines, want 2", c)
	}
	if c := strings.Count(log, "adopted XDP link"); c != 4 {
		t.Errorf("agent log has %d \"adopted XDP link\" lines, want 4 (2 interfaces x 2 restarts)", c)
	}
}
