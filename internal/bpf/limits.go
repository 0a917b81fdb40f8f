// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Limits are the map sizes taken from the config at load time.
type Limits struct {
	Flows uint32 // flows the flow table holds, of both families (FTEntries)
	Rules uint32 // classifier entries and FARs per generation
	// MaglevSize is the entries of each service's Maglev table (a prime;
	// 0: DefaultMaglevSize), Conns the connections (0: Flows; a
	// connection is a flow's entry: the table holds the larger).
	MaglevSize uint32
	Conns      uint32
	// Sessions is the PFCP sessions the user plane holds (0:
	// DefaultSessions).
	Sessions uint32
}

// DefaultSessions is Limits.Sessions' default.
const DefaultSessions = 4096

// SessMask is the slot bits of a TEID the user plane chooses: the power
// of two at or above Sessions, less one (XDP's sess_mask).
func (l Limits) SessMask() uint32 {
	n := l.WithDefaults().Sessions
	m := uint32(1)
	for m < n {
		m <<= 1
	}
	return m - 1
}

// SessPDRs mirrors EDGE_SESS_PDRS: the PDRs a session's record holds.
const SessPDRs = 8

// SessMAs mirrors EDGE_SESS_MAS: the multi-access rules a session's
// record holds.
const SessMAs = 2

// GTPUPeers mirrors EDGE_GTPU_PEERS: the GTP-U peers whose liveness and
// RTT the dataplane keeps for multi-access steering.
const GTPUPeers = 1024

// MaglevBlock mirrors EDGE_MAGLEV_BLOCK: Maglev entries per edge_maglev
// element.
const MaglevBlock = 4096

// MaglevBlocks is the edge_maglev elements a table of MaglevSize entries
// takes.
func (l Limits) MaglevBlocks() uint32 {
	return (l.WithDefaults().MaglevSize + MaglevBlock - 1) / MaglevBlock
}

// DefaultMaglevSize is the Maglev table size when the limits name none.
const DefaultMaglevSize = 65537

// WithDefaults fills the zero sizes that have defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaglevSize == 0 {
		l.MaglevSize = DefaultMaglevSize
	}
	if l.Conns == 0 {
		l.Conns = l.Flows
	}
	if l.Sessions == 0 {
		l.Sessions = DefaultSessions
	}
	return l
}

// FARStride is the FAR places per slot: one per rule, then one reply
// rewrite per service (index Rules + service tag).
func (l Limits) FARStride() uint32 { return l.Rules + MaxServices }

// ErrIncompatible is returned when pinned maps exist with other sizes or
// layouts than this build and config want: an upgrade takes them
// over.
var ErrIncompatible = errors.New("pinned maps do not match this config")

// Spec returns the dataplane's collection spec with map sizes and load-time
// constants set from l.
func Spec(l Limits) (*ebpf.CollectionSpec, error) {
	if l.Flows == 0 || l.Rules == 0 {
		return nil, fmt.Errorf("limits must be positive: flows %d, rules %d", l.Flows, l.Rules)
	}
	spec, err := LoadSpec()
	if err != nil {
		return nil, err
	}
	if err := ApplyLimits(spec, l); err != nil {
		return nil, err
	}
	return spec, nil
}

// ApplyLimits sets map sizes and load-time constants from l on spec, which
// is the dataplane's or another object built from the same headers (the
// benchmark wrappers).
func ApplyLimits(spec *ebpf.CollectionSpec, l Limits) error {
	l = l.WithDefaults()
	spec.Maps[edgeMapEdgeFt].MaxEntries = l.FTEntries()
	spec.Maps[edgeMapEdgeFo].MaxEntries = l.FOEntries()
	spec.Maps[edgeMapEdgeFtMeta].MaxEntries = l.FTEntries() / FTWays
	// Both slots of a generation live in one map: twice the capacity.
	spec.Maps[edgeMapEdgeRules].MaxEntries = 2 * l.Rules
	spec.Maps[edgeMapEdgeFars].MaxEntries = 2 * l.FARStride()
	spec.Maps[edgeMapEdgePdrStats].MaxEntries = l.Rules
	spec.Maps[edgeMapEdgeMaglev].MaxEntries = 2 * MaxServices * l.MaglevBlocks()
	// A session's two records; its TEIDs and UE addresses, two each
	// on average.
	spec.Maps[edgeMapEdgeSessions].MaxEntries = 2 * l.Sessions
	spec.Maps[edgeMapEdgeSessLive].MaxEntries = l.Sessions
	spec.Maps[edgeMapEdgeSessStats].MaxEntries = SessPDRs * l.Sessions
	spec.Maps[edgeMapEdgeSessMbr].MaxEntries = SessPDRs * l.Sessions
	spec.Maps[edgeMapEdgeTeid].MaxEntries = 2 * l.Sessions
	spec.Maps[edgeMapEdgeUe4].MaxEntries = 2 * l.Sessions
	spec.Maps[edgeMapEdgeUe6].MaxEntries = 2 * l.Sessions
	if err := spec.Variables[edgeVarFarStride].Set(l.FARStride()); err != nil {
		return fmt.Errorf("set far_stride: %w", err)
	}
	if err := spec.Variables[edgeVarFtBuckets].Set(l.FTEntries() / FTWays); err != nil {
		return fmt.Errorf("set ft_buckets: %w", err)
	}
	if err := spec.Variables[edgeVarFoSlots].Set(l.FOEntries()); err != nil {
		return fmt.Errorf("set fo_slots: %w", err)
	}
	if err := spec.Variables[edgeVarMaglevSize].Set(l.MaglevSize); err != nil {
		return fmt.Errorf("set maglev_size: %w", err)
	}
	if err := spec.Variables[edgeVarSessMask].Set(l.SessMask()); err != nil {
		return fmt.Errorf("set sess_mask: %w", err)
	}
	if err := spec.Variables[edgeVarMaglevBlocks].Set(l.MaglevBlocks()); err != nil {
		return fmt.Errorf("set maglev_blocks: %w", err)
	}
	return nil
}

// ProgramID identifies the program this build loads for l: a restarted
// agent adopts a pinned program only when its ID matches.
func ProgramID(l Limits) string {
	h := sha256.New()
	h.Write(_EdgeBytes)
	_ = binary.Write(h, binary.LittleEndian, l)
	return hex.EncodeToString(h.Sum(nil)[:12])
}
