// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strconv"

	"github.com/edgeplane/edgeplane/internal/maglev"
)

// LBR algorithms: maglev balances a service's connections over
// backends; the others steer a FAR's flows over paths (steering groups,
// members encap FARs), by the paths' states as the path monitor judges
// them:
//   - active-standby: all over the first member whose path is usable,
//     the next one while it is not (back to the first once it is);
//   - smallest-delay: all over the usable path with the smallest RTT
//     (another takes over once it is 10% faster);
//   - load-balancing: each usable member a share of the flows as its
//     weight (percentages, or any relative weights);
//   - wrr: weighted random per packet over the usable members, as the
//     P4 ATSSS proxy's WRR (per_packet implied);
//   - rtt, dwrr, priority, cmon: weights the agent adapts every 100 ms from
//     each path's RTT against its minimum and its loss (docs/multipath.md,
//     "Steering groups", has the rules);
//   - redundant: every packet over every usable member (at least two,
//     each path on an interface of its own), with the group's GRE
//     sequence numbers; the receiving gateway's group of the same paths
//     lets the first copy of each through.
const (
	AlgorithmMaglev        = "maglev"
	AlgorithmActiveStandby = "active-standby"
	AlgorithmSmallestDelay = "smallest-delay"
	AlgorithmLoadBalancing = "load-balancing"
	AlgorithmWRR           = "wrr"
	AlgorithmRTT           = "rtt"
	AlgorithmDWRR          = "dwrr"
	AlgorithmPriority      = "priority"
	AlgorithmCMon          = "cmon"
	AlgorithmRedundant     = "redundant"
)

// Steering reports whether algorithm a is a steering mode.
func Steering(a string) bool {
	switch a {
	case AlgorithmActiveStandby, AlgorithmSmallestDelay, AlgorithmLoadBalancing, AlgorithmWRR,
		AlgorithmRTT, AlgorithmDWRR, AlgorithmPriority, AlgorithmCMon, AlgorithmRedundant:
		return true
	}
	return false
}

// MaxSteerMembers bounds a steering group (EDGE_STEER_MEMBERS).
const MaxSteerMembers = 8

// MaxMembers bounds an LBR, mirroring the dataplane's EDGE_MAX_MEMBERS
// (one member index is the replies' counter).
const MaxMembers = 255

// LBR is a load-balancing rule: a group of FARs (members) one of which
// each flow is given.
type LBR struct {
	// ID identifies the LBR; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Algorithm is AlgorithmMaglev for a service (consistent hashing
	// of the flow's 5-tuple, weighted, with the connection pinned to
	// its member) or a steering mode for a FAR of action steer:
	// AlgorithmActiveStandby, AlgorithmSmallestDelay,
	// AlgorithmLoadBalancing, AlgorithmWRR, AlgorithmRTT, AlgorithmDWRR,
	// AlgorithmPriority, AlgorithmCMon or AlgorithmRedundant.
	Algorithm string `yaml:"algorithm,omitempty"`
	// Members are FARs with action nat or encap (encap only, one per
	// path and at most MaxSteerMembers, in a steering group).
	Members []Member `yaml:"members"`
	// TableSize is the entries of the Maglev table of the service using
	// this LBR: a prime up to limits.maglev_table (0: that). More entries
	// per backend spread more evenly and move fewer on changes.
	TableSize uint32 `yaml:"table_size,omitempty"`
	// PerPacket, for a steering mode, has each packet pick its member
	// (no per-flow stickiness); wrr always does.
	PerPacket bool `yaml:"per_packet,omitempty"`
	// SLA, for a steering mode, limits which paths are usable: one past
	// a limit is used only when no member's path meets them all.
	SLA SLA `yaml:"sla,omitempty"`
}

// SLA is what a steering group asks of its paths; unset: no limit.
type SLA struct {
	// MaxRTT is the largest smoothed RTT a usable path may have.
	MaxRTT Duration `yaml:"max_rtt,omitempty"`
	// MaxJitter is the largest RTT variation a usable path may have.
	MaxJitter Duration `yaml:"max_jitter,omitempty"`
	// MaxLoss is the largest probe loss a usable path may have.
	MaxLoss Ratio `yaml:"max_loss,omitempty"`
}

// Member is one FAR of an LBR and its weight.
type Member struct {
	// FAR is the id of the member's FAR.
	FAR uint32 `yaml:"far"`
	// Weight is relative to the other members'; unset means 1, 0 drains
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
			check := memberFAR
			if Steering(l.Algorithm) {
				check = steerMemberFAR
			}
			out[i] = Ref{Field: "members[" + strconv.Itoa(i) + "].far", Kind: KindFAR, Key: IDKey(m.FAR), Check: check}
		}
		return out
	},
}

// memberFAR is what an LBR requires of its members' FARs.
func memberFAR(target any) (field, problem string) {
	if f := target.(*FAR); f.Action != ActionNAT && f.Action != ActionEncap {
		return "action", "has action " + f.Action + "; members need nat or encap"
	}
	return "", ""
}

// steerMemberFAR is what a steering LBR requires of its members' FARs.
func steerMemberFAR(target any) (field, problem string) {
	if f := target.(*FAR); f.Action != ActionEncap {
		return "action", "has action " + f.Action + "; steering members need encap"
	}
	return "", ""
}

// steeringLBR is what a steer FAR requires of its LBR.
func steeringLBR(target any) (field, problem string) {
	if l := target.(*LBR); !Steering(l.Algorithm) {
		return "algorithm", "is " + l.Algorithm + "; a steer FAR needs a steering algorithm"
	}
	return "", ""
}

// maglevLBR is what a service requires of its LBR.
func maglevLBR(target any) (field, problem string) {
	if l := target.(*LBR); Steering(l.Algorithm) {
		return "algorithm", "is the steering mode " + l.Algorithm + "; a service needs maglev"
	}
	return "", ""
}

const wantAlgorithm = "want maglev, active-standby, smallest-delay, load-balancing, wrr, rtt, dwrr, priority, cmon or redundant"

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
	switch {
	case l.Algorithm == AlgorithmMaglev:
		if l.PerPacket {
			c.Add("per_packet", "not allowed for maglev (connections keep their backend)")
		}
		if l.SLA != (SLA{}) {
			c.Add("sla", "not allowed for maglev")
		}
	case Steering(l.Algorithm):
		if len(l.Members) > MaxSteerMembers {
			c.AddCode(CodeCapacity, "members", "%d members, a steering group takes at most %d", len(l.Members), MaxSteerMembers)
		}
		if l.TableSize != 0 {
			c.Add("table_size", "not allowed for %s (a Maglev setting)", l.Algorithm)
		}
		checkLimits(c, "sla.", l.SLA.MaxRTT, l.SLA.MaxJitter, l.SLA.MaxLoss)
		if l.Algorithm == AlgorithmRedundant {
			if len(l.Members) < 2 {
				c.Add("members", "%d member(s); redundant sends each packet over two or more", len(l.Members))
			}
			if l.PerPacket {
				c.Add("per_packet", "not allowed for redundant (every packet goes over every path)")
			}
		}
	case l.Algorithm == "":
		c.Add("algorithm", "required (%s)", wantAlgorithm)
	default:
		c.Add("algorithm", "unknown algorithm %q (%s)", l.Algorithm, wantAlgorithm)
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
