// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

func TestStatsFromPB(t *testing.T) {
	s := &dataplane.Snapshot{
		Gen:       3,
		PDRs:      map[uint32]dataplane.Counter{10: {Packets: 5, Bytes: 500}, 20: {}},
		Verdicts:  make([]dataplane.Counter, len(dataplane.VerdictNames)),
		Reasons:   make([]dataplane.Counter, len(dataplane.ReasonNames)),
		CacheHit:  7,
		CacheMiss: 2,
		Paths:     map[uint32]dataplane.PathCounters{1: {Tx: dataplane.Counter{Packets: 1, Bytes: 100}, Rx: dataplane.Counter{Packets: 2, Bytes: 200}}},
	}
	s.Verdicts[bpf.XDPPass] = dataplane.Counter{Packets: 9, Bytes: 900}
	s.Reasons[bpf.ReasonBadIHL] = dataplane.Counter{Packets: 1, Bytes: 60}
	// As the agent sends it: every verdict, only the reasons that happened.
	p := &pb.Stats{
		Generation: 3,
		Pdrs: []*pb.PdrCounter{
			{Id: 10, Counter: &pb.Counter{Packets: 5, Bytes: 500}},
			{Id: 20, Counter: &pb.Counter{}},
		},
		Verdicts:        map[string]*pb.Counter{},
		Reasons:         map[string]*pb.Counter{"bad_ihl": {Packets: 1, Bytes: 60}, "from_the_future": {Packets: 1}},
		Paths:           []*pb.PathCounter{{Id: 1, Tx: &pb.Counter{Packets: 1, Bytes: 100}, Rx: &pb.Counter{Packets: 2, Bytes: 200}}},
		FlowCacheHits:   7,
		FlowCacheMisses: 2,
	}
	for i, n := range dataplane.VerdictNames {
		p.Verdicts[n] = &pb.Counter{Packets: s.Verdicts[i].Packets, Bytes: s.Verdicts[i].Bytes}
	}
	got := statsFromPB(p)
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("snapshot = %+v\nwant %+v", got, s)
	}
	for _, asJSON := range []bool{false, true} {
		var a, b bytes.Buffer
		ca, cb := &cobra.Command{}, &cobra.Command{}
		ca.SetOut(&a)
		cb.SetOut(&b)
		if err := printStats(ca, s, asJSON); err != nil {
			t.Fatal(err)
		}
		if err := printStats(cb, got, asJSON); err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() {
			t.Errorf("json %v: output differs:\n%s\nvs\n%s", asJSON, a.String(), b.String())
		}
	}
}

func TestStatsAPIFlagsNeedServer(t *testing.T) {
	for _, args := range [][]string{
		{"stats", "--token", "x"},
		{"stats", "--tls"},
		{"stats", "--server", "127.0.0.1:1", "--pin-dir", "/x"},
	} {
		err := run(context.Background(), args)
		if err == nil || !(strings.Contains(err.Error(), "needs --server") || strings.Contains(err.Error(), "pin-dir")) {
			t.Errorf("%q: error %v", args, err)
		}
	}
}
