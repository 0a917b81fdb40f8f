// SPDX-License-Identifier: Apache-2.0

package n4

import (
	"context"
	"testing"
	"time"

	"github.com/omec-project/pfcpsim/pkg/pfcpsim"
)

// TestPFCPSim: omec-project's pfcpsim, an SMF's side of N4 written
// elsewhere, sets an association up with the node, keeps it alive
// with its heartbeats (every 5 s), is refused a session (not kept yet)
// and releases the association, naming the UPF's address as the node
// ID: the node finds the association by where the request came from.
func TestPFCPSim(t *testing.T) {
	// pfcpsim answers no heartbeat requests, and would take the node's
	// for the answer it waits for: the node's come too late to meet it.
	n, err := Listen(Options{Addr: "127.0.0.1:0", NodeID: "127.0.0.1", Recovery: started, HeartbeatEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Serve(ctx)

	const smf = "127.0.0.2" // pfcpsim binds its address's port 8805
	c := pfcpsim.NewPFCPClient(smf)
	c.SetPFCPResponseTimeout(2 * time.Second)
	if err := c.ConnectN4(n.Addr().String()); err != nil {
		t.Fatal(err)
	}
	defer c.DisconnectN4()
	if err := c.SetupAssociation(); err != nil {
		t.Fatalf("pfcpsim's association: %v", err)
	}
	if p := peersOf(n); len(p) != 1 || p[0] != smf {
		t.Fatalf("peers after pfcpsim's setup: %v, want [%s]", p, smf)
	}
	before := n.Stats()["answered"]
	deadline := time.Now().Add(8 * time.Second)
	for n.Stats()["answered"] == before && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // its answer read
	if n.Stats()["answered"] == before || !c.IsAssociationAlive() {
		t.Fatalf("pfcpsim's heartbeat: %d answered, association alive %v", n.Stats()["answered"]-before, c.IsAssociationAlive())
	}
	if _, err := c.EstablishSession(nil, nil, nil, nil); err == nil {
		t.Error("pfcpsim's session establishment accepted; sessions are not kept yet")
	}
	if err := c.TeardownAssociation(); err != nil {
		t.Fatalf("pfcpsim's release: %v", err)
	}
	if p := peersOf(n); len(p) != 0 {
		t.Errorf("peers after pfcpsim's release: %v", p)
	}
	t.Logf("node's counts: %v", n.Stats())
}
