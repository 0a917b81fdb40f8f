// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/internal/maglev"
)

// LBR algorithms.
const (
	AlgorithmMaglev = "maglev"
)

// MaxMembers bounds an LBR, mirroring the dataplane's EDGE_MAX_MEMBERS
// (one member index is the replies' counter).
const MaxMembers = 255

// LBR is a load-balancing rule: a group of FARs (members) one of which
// each flow is given.
type LBR struct {
	// ID identifies the LBR; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Algorithm is AlgorithmMaglev: consistent hashing of the flow's
	// 5-tuple, weighted, with the connection pinned to its member.
	Algorithm string `yaml:"algorithm,omitempty"`
	// Members are FARs with action nat or encap.
	Members []Member `yaml:"members"`
	// TableSize is the entries of the Maglev table of the service using
	// this LBR: a prime up to limits.maglev_table (0: that). More entries
	// per backend spread more evenly and move fewer on changes.
	TableSize uint32 `yaml:"table_size,omitempty"`
}

// Member is one FAR of an LBR and its weight.
type Member struct {
	FAR uint32 `yaml:"far"`
	// Weight is relative to the other members'; nil means 1, 0 drains
	// the member: no new connections, established ones continue.
	Weight *uint32 `yaml:"weight,omitempty"`
}

// EffectiveWeight is the member's weight, 1 when unset.
func (m Member) EffectiveWeight() uint32 {
	if m.Weight == nil {
		return 1
	}
	return *m.Weight
}

var lbrKind = &KindOf[LBR]{
	Kind:     KindLBR,
	Plural:   "lbrs",
	KeyField: "id",
	Check:    checkLBR,
	Refs: func(l *LBR) []Ref {
		out := make([]Ref, len(l.Members))
		for i, m := range l.Members {
			out[i] = Ref{Field: "members[" + strconv.Itoa(i) + "].far", Kind: KindFAR, Key: IDKey(m.FAR), Check: memberFAR}
		}
		return out
	},
	Columns: []Column[LBR]{
		{Name: "ID", Value: func(l *LBR) string { return always(l.ID) }},
		{Name: "ALGORITHM", Value: func(l *LBR) string { return l.Algorithm }, Unset: "-"},
		// Members as far:weight.
		{Name: "MEMBERS", Value: func(l *LBR) string {
			ms := make([]string, len(l.Members))
			for i, m := range l.Members {
				ms[i] = fmt.Sprintf("%d:%d", m.FAR, m.EffectiveWeight())
			}
			return strings.Join(ms, ",")
		}, Unset: "-"},
	},
}

// memberFAR is what an LBR requires of its members' FARs.
func memberFAR(target any) (field, problem string) {
	if f := target.(*FAR); f.Action != ActionNAT && f.Action != ActionEncap {
		return "action", "has action " + f.Action + "; members need nat or encap"
	}
	return "", ""
}

func checkLBR(c *Check, l *LBR) {
	if l.ID == 0 {
		c.Add("id", "required")
	}
	maxTable := c.Limits().MaglevTable
	switch t := l.TableSize; {
	case t == 0:
	case t < MinMaglevTable || t > maxTable:
		c.Add("table_size", "%d outside %d..%d (limits.maglev_table)", t, MinMaglevTable, maxTable)
	case !maglev.IsPrime(t):
		c.Add("table_size", "%d is not prime", t)
	}
	switch l.Algorithm {
	case AlgorithmMaglev:
	case "":
		c.Add("algorithm", "required (want maglev)")
	default:
		c.Add("algorithm", "unknown algorithm %q (want maglev)", l.Algorithm)
	}
	if len(l.Members) > MaxMembers {
		c.AddCode(CodeCapacity, "members", "%d members, at most %d", len(l.Members), MaxMembers)
	}
	seen := map[uint32]int{}
	for j, m := range l.Members {
		mp := "members[" + strconv.Itoa(j) + "].far"
		if first, dup := seen[m.FAR]; dup {
			c.Add(mp, "far %d is already members[%d]", m.FAR, first)
			continue
		}
		seen[m.FAR] = j
		if m.FAR == 0 {
			c.Add(mp, "required")
		}
	}
}
