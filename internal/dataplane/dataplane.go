// SPDX-License-Identifier: Apache-2.0

// Package dataplane is the contract between a gateway's dataplane and
// the packages that report on it: the counters, flows, path and CPU
// strategy status it produces, and the interfaces that read them. The
// loader (internal/bpf) and the agent produce these; the API, the fleet
// controller, the metrics and the CLI use them without linking the
// loader, its BPF objects or cilium/ebpf. It imports nothing of the
// module, so it stays at the bottom of the import graph.
package dataplane

// Counters reads what the packet path counted.
type Counters interface {
	// Snapshot reads every counter at one moment.
	Snapshot() (*Snapshot, error)
	// Flows reads the top n flows by bytes (n > 0), with the ingress
	// interfaces named by ifindex.
	Flows(n int) ([]FlowStat, map[uint32]string, error)
}

// Paths reports the WAN paths as the path monitor judges them.
type Paths interface {
	// PathStatus returns each path's state, by path id.
	PathStatus() []PathStatus
}

// Strategies reports the CPU strategies.
type Strategies interface {
	// StrategyStatus returns what each CPU strategy holds, by id.
	StrategyStatus() []StrategyStatus
}

// Sessions reports the PFCP sessions a user plane carries.
type Sessions interface {
	// SessionStatus returns the sessions q picks, by UP SEID, with
	// their PDRs' counters, and the UP SEID to ask after for the next
	// page (0: none) (nil error and ok false: no user plane runs).
	SessionStatus(q SessionQuery) (s []SessionStatus, next uint64, ok bool, err error)
}

// SessionQuery picks sessions: those of UPSEIDs (none: all) whose UP
// SEID is above After, the first Limit of them.
type SessionQuery struct {
	UPSEIDs []uint64
	After   uint64
	Limit   int
}

// Dataplane is everything a gateway reports of its dataplane: what the
// API serves at an agent and a controller, which runs none, lacks.
type Dataplane interface {
	Counters
	Paths
	Strategies
}
