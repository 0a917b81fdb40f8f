// SPDX-License-Identifier: Apache-2.0

package dataplane

import "time"

// PathStatus is one path's state as the path monitor judges it.
type PathStatus struct {
	Path  uint32
	State string    // unknown | up | degraded | down
	Since time.Time // when it entered State
	Why   string    // what the last change of state was about
	// RFC 6298's smoothed RTT and RTT variation (the jitter), the
	// smallest and the last RTT, of the probes.
	SRTT, Jitter, MinRTT, LastRTT time.Duration
	Loss                          float64 // share of the last window of probes unanswered
	Sent, Answered                uint64  // probes
	// TCPRTT and TCPMinRTT are the passive RTT from the TCP timestamps of
	// the flows the path carries, smoothed and smallest, over
	// TCPSamples samples (0: none yet).
	TCPRTT, TCPMinRTT time.Duration
	TCPSamples        uint64
	Monitored         bool // false: monitor off (the path counts as up)
}

// StrategyStatus is what a gateway holds for one CPU strategy.
type StrategyStatus struct {
	Strategy uint32
	Procs    []StrategyProcess
	// Error is why a matching process was not given what the strategy
	// says ("" none); Others what it changed beyond its processes.
	Error  string
	Others string
}

// StrategyProcess is a process a strategy holds.
type StrategyProcess struct {
	PID     int
	Comm    string
	Threads int    // its threads the strategy holds
	Applied string // what was applied to them, such as "fifo 50, cpus 1"
	// RanOn is the CPUs its threads were seen on since the strategy
	// took it.
	RanOn []int
}

// SessionStatus is a PFCP session the user plane carries: the SMF's
// F-SEID and node, and its PDRs.
type SessionStatus struct {
	UPSEID, CPSEID uint64
	CPAddr, CPNode string
	PDRs           []SessionPDR
}

// SessionPDR is a session's PDR as the dataplane holds it: how it
// detects (direction, TEID, UE address, QFI, SDF filters), what its FAR
// and QERs make of it (action, a closed gate, the outer header it
// creates), and what it counted.
type SessionPDR struct {
	ID         uint16
	Precedence uint32
	Uplink     bool
	TEID       uint32
	UEIP       string
	QFI        uint8
	SDF        []string
	FAR        uint32
	Action     string // "forward", "buffer", "drop"
	GateClosed bool
	OuterTEID  uint32
	OuterAddr  string
	Packets    uint64
	Bytes      uint64
	// A multi-access PDR: the MAR it names (0: none), its steering mode
	// and its accesses (the 3GPP one first).
	MAR      uint16
	Steering string
	Accesses []SessionAccess
}

// SessionAccess is one access of a multi-access PDR: its FAR, the outer
// header toward its peer, whether the peer answers GTP-U echoes and its
// echo RTT (0: none yet), and whether the mode prefers it.
type SessionAccess struct {
	FAR       uint32
	OuterTEID uint32
	OuterAddr string
	Up        bool
	RTT       time.Duration
	Preferred bool
}
