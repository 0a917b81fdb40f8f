// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bpf/stats"
	"github.com/edgeplane/edgeplane/internal/client"
	"github.com/edgeplane/edgeplane/internal/dataplane"
)

func newStatsCmd() *cobra.Command {
	var pinDir string
	var asJSON bool
	var af client.Flags
	c := &cobra.Command{
		Use:   "stats",
		Short: "Print counters read straight from the pinned maps (no agent needed), or with --server from an agent's API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("server") {
				s, err := apiStats(cmd, &af)
				if err != nil {
					return err
				}
				return printStats(cmd, s, asJSON)
			}
			if f := apiFlagWithoutServer(cmd); f != "" {
				return fmt.Errorf("--%s needs --server", f)
			}
			s, err := stats.PinnedSnapshot(pinDir)
			if err != nil {
				return err
			}
			return printStats(cmd, s, asJSON)
		},
	}
	c.Flags().StringVar(&pinDir, "pin-dir", defaultPinDir, "bpffs directory of the gateway")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	af.Register(c)
	c.MarkFlagsMutuallyExclusive("server", "pin-dir")
	return c
}

// statsJSON is the stable JSON shape of `edgeplane stats --json`.
type statsJSON struct {
	Generation uint32                            `json:"generation"`
	PDRs       map[string]dataplane.Counter      `json:"pdrs"`
	Verdicts   map[string]dataplane.Counter      `json:"verdicts"`
	Reasons    map[string]dataplane.Counter      `json:"reasons"`
	FlowCache  map[string]uint64                 `json:"flow_cache"`
	Paths      map[string]dataplane.PathCounters `json:"paths"`
	Backends   []backendJSON                     `json:"backends,omitempty"`
	// NextHopsByDst: new flows share a destination's next hop (the
	// kernel routes by destination alone).
	NextHopsByDst bool `json:"next_hops_by_destination"`
	// XDPCPU: by interface, the packets its XDP work ran on each CPU.
	XDPCPU map[string][]uint64 `json:"xdp_cpu,omitempty"`
}

// backendJSON is one service backend's counters (far 0: the service's
// NAT replies).
type backendJSON struct {
	Service  uint32 `json:"service"`
	FAR      uint32 `json:"far"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
	NewConns uint64 `json:"new_connections"`
	Active   uint64 `json:"active_connections"`
}

func printStats(cmd *cobra.Command, s *dataplane.Snapshot, asJSON bool) error {
	out := statsJSON{
		Generation: s.Gen,
		PDRs:       map[string]dataplane.Counter{},
		Verdicts:   map[string]dataplane.Counter{},
		Reasons:    map[string]dataplane.Counter{},
		FlowCache:  map[string]uint64{"hit": s.CacheHit, "miss": s.CacheMiss, "first_not_recorded": s.CacheFirst},
		Paths:      map[string]dataplane.PathCounters{},

		NextHopsByDst: s.NextHopsByDst,
		XDPCPU:        s.XDPCPU,
	}
	for id, c := range s.Paths {
		out.Paths[fmt.Sprint(id)] = c
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, backendJSON{Service: b.Service, FAR: b.FAR, Packets: b.Packets, Bytes: b.Bytes,
			NewConns: b.NewConns, Active: b.Active})
	}
	for id, c := range s.PDRs {
		out.PDRs[fmt.Sprint(id)] = c
	}
	for i, c := range s.Verdicts {
		out.Verdicts[dataplane.VerdictNames[i]] = c
	}
	for i, c := range s.Reasons {
		if i != dataplane.ReasonNone {
			out.Reasons[dataplane.ReasonNames[i]] = c
		}
	}
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "generation %d\t\t\t\n\n", s.Gen)
	fmt.Fprintln(w, "PDR\tPACKETS\tBYTES\t")
	for _, id := range slices.Sorted(maps.Keys(s.PDRs)) {
		fmt.Fprintf(w, "%d\t%d\t%d\t\n", id, s.PDRs[id].Packets, s.PDRs[id].Bytes)
	}
	fmt.Fprintln(w, "\t\t\t\nVERDICT\tPACKETS\tBYTES\t")
	for i, c := range s.Verdicts {
		fmt.Fprintf(w, "%s\t%d\t%d\t\n", dataplane.VerdictNames[i], c.Packets, c.Bytes)
	}
	fmt.Fprintln(w, "\t\t\t\nREASON\tPACKETS\tBYTES\t")
	for i, c := range s.Reasons {
		if i != dataplane.ReasonNone && c.Packets > 0 {
			fmt.Fprintf(w, "%s\t%d\t%d\t\n", dataplane.ReasonNames[i], c.Packets, c.Bytes)
		}
	}
	if len(s.Paths) > 0 {
		fmt.Fprintln(w, "\t\t\t\nPATH\tTX PKTS/BYTES\tRX PKTS/BYTES\t")
		for _, id := range slices.Sorted(maps.Keys(s.Paths)) {
			c := s.Paths[id]
			fmt.Fprintf(w, "%d\t%d / %d\t%d / %d\t\n", id, c.Tx.Packets, c.Tx.Bytes, c.Rx.Packets, c.Rx.Bytes)
		}
	}
	if len(s.Backends) > 0 {
		fmt.Fprintln(w, "\t\t\t\nSERVICE/FAR\tPKTS/BYTES\tNEW/ACTIVE CONNS\t")
		for _, b := range s.Backends {
			name := fmt.Sprintf("%d/%d", b.Service, b.FAR)
			if b.FAR == 0 {
				name = fmt.Sprintf("%d/replies", b.Service)
			}
			fmt.Fprintf(w, "%s\t%d / %d\t%d / %d\t\n", name, b.Packets, b.Bytes, b.NewConns, b.Active)
		}
	}
	if len(s.XDPCPU) > 0 {
		// Which CPU does each interface's XDP work: its packets per
		// CPU, with the share.
		fmt.Fprintln(w, "\t\t\t\nINTERFACE\tXDP PACKETS BY CPU\t\t")
		for _, name := range slices.Sorted(maps.Keys(s.XDPCPU)) {
			per := s.XDPCPU[name]
			var total uint64
			for _, v := range per {
				total += v
			}
			var parts []string
			for cpu, v := range per {
				if v > 0 {
					parts = append(parts, fmt.Sprintf("cpu%d %d (%.0f%%)", cpu, v, 100*float64(v)/float64(max(total, 1))))
				}
			}
			fmt.Fprintf(w, "%s\t%s\t\t\n", name, strings.Join(parts, ", "))
		}
	}
	fmt.Fprintf(w, "\t\t\t\nflow cache\thit %d\tmiss %d (first packets not recorded %d)\t\n", s.CacheHit, s.CacheMiss, s.CacheFirst)
	shared := "no: each new flow asks the FIB"
	if s.NextHopsByDst {
		shared = "yes: routing is by destination alone"
	}
	fmt.Fprintf(w, "next hops shared by destination\t%s\t\t\n", shared)
	return w.Flush()
}

// apiStats reads the counters through the API, as the snapshot that
// reading the pinned maps gives, so `stats` prints the same either way.
func apiStats(cmd *cobra.Command, af *client.Flags) (*dataplane.Snapshot, error) {
	conn, err := af.Connect(cmd.Context(), cmd.ErrOrStderr())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	s, err := conn.GetStats(conn.Ctx, &pb.GetStatsRequest{})
	if err != nil {
		return nil, conn.Err("stats", err)
	}
	return statsFromPB(s), nil
}

// apiFlagWithoutServer returns the first API flag given on a command that
// uses the API only with --server, or "" when there is none.
func apiFlagWithoutServer(cmd *cobra.Command) string {
	if cmd.Flags().Changed("server") {
		return ""
	}
	for _, f := range client.APIOnlyFlags {
		if cmd.Flags().Changed(f) {
			return f
		}
	}
	return ""
}

// statsFromPB turns the API's counters back into a snapshot. The API
// leaves out reasons that never happened; here they are zero, as in a
// snapshot of the maps. Names this build does not know (a newer agent)
// have no place in a snapshot and are dropped.
func statsFromPB(p *pb.Stats) *dataplane.Snapshot {
	ctr := func(c *pb.Counter) dataplane.Counter {
		return dataplane.Counter{Packets: c.GetPackets(), Bytes: c.GetBytes()}
	}
	s := &dataplane.Snapshot{
		Gen:        p.GetGeneration(),
		PDRs:       map[uint32]dataplane.Counter{},
		Verdicts:   make([]dataplane.Counter, len(dataplane.VerdictNames)),
		Reasons:    make([]dataplane.Counter, len(dataplane.ReasonNames)),
		CacheHit:   p.GetFlowCacheHits(),
		CacheMiss:  p.GetFlowCacheMisses(),
		CacheFirst: p.GetFlowFirstPackets(),
		Paths:      map[uint32]dataplane.PathCounters{},
	}
	for _, c := range p.GetPdrs() {
		s.PDRs[c.GetId()] = ctr(c.GetCounter())
	}
	for name, c := range p.GetVerdicts() {
		if i := slices.Index(dataplane.VerdictNames, name); i >= 0 {
			s.Verdicts[i] = ctr(c)
		}
	}
	for name, c := range p.GetReasons() {
		if i := slices.Index(dataplane.ReasonNames, name); i >= 0 {
			s.Reasons[i] = ctr(c)
		}
	}
	for _, c := range p.GetPaths() {
		s.Paths[c.GetId()] = dataplane.PathCounters{Tx: ctr(c.GetTx()), Rx: ctr(c.GetRx())}
	}
	for _, b := range p.GetBackends() {
		s.Backends = append(s.Backends, dataplane.BackendCounters{Service: b.GetService(), FAR: b.GetFar(), Counter: ctr(b.GetCounter()),
			NewConns: b.GetNewConnections(), Active: b.GetActiveConnections()})
	}
	for name, c := range p.GetXdpCpu() {
		if s.XDPCPU == nil {
			s.XDPCPU = map[string][]uint64{}
		}
		s.XDPCPU[name] = c.GetPackets()
	}
	return s
}
