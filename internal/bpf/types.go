// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// Aliases for the structs bpf2go generates from bpf/edge_types.h, so callers
// outside this package can use them.
type (
	FlowKey    = edgeEdgeFlowKey
	RuleKey    = edgeEdgeRuleKey
	Rule       = edgeEdgeRule
	Group      = edgeEdgeGroup
	Far        = edgeEdgeFar
	State      = edgeEdgeState
	Flow       = edgeEdgeFlow
	Ctr        = edgeEdgeCtr
	Path       = edgeEdgePath
	DecapKey   = edgeEdgeDecapKey
	Decap      = edgeEdgeDecap
	IfAddr     = edgeEdgeIfaddr
	SvcKey     = edgeEdgeSvcKey
	Svc        = edgeEdgeSvc
	SvcSlot    = edgeEdgeSvcSlot
	MaglevBlk  = edgeEdgeMaglevBlk
	ConnKey    = edgeEdgeConnKey
	Member     = edgeEdgeMember
	NATUser    = edgeEdgeNatUser
	NATBackend = edgeEdgeNatBackend
	FTWay      = edgeEdgeFtWay
	FTBucket   = edgeEdgeFtBucket
	Steer      = edgeEdgeSteerGroup
	Sess       = edgeEdgeSess
	SessPDR    = edgeEdgeSessPdr
	SessMA     = edgeEdgeSessMa
	GTPUPeer   = edgeEdgeGtpuPeer
	MBR        = edgeEdgeMbr
)

// Session PDR flags (edge_sess_pdr.flags) and FAR actions
// (edge_sess_pdr.action), as bpf/edge_types.h defines them.
const (
	SessUL     = 0x01
	SessUEIP   = 0x02
	SessQFI    = 0x04
	SessRemove = 0x08
	SessOHC    = 0x10
	SessTOS    = 0x20
	SessAny    = 0x40
	SessUE6    = 0x80

	SessDrop = 0
	SessForw = 1
	SessBuff = 2
)

// Multi-access steering (edge_sess_ma.mode): the mode in the low bits,
// as TS 29.244's Steering Mode numbers it, and whether the second
// access is the preferred one.
const (
	MAActiveStandby = 0
	MASmallestDelay = 1
	MALoadBalancing = 2
	MAPriority      = 3
	MAPrefer2       = 0x80
)

// BE32 is v as a __be32 field holds it: its bytes in network order,
// read in this machine's.
func BE32(v uint32) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.NativeEndian.Uint32(b[:])
}

// Addr4 is IPv4 address a as a __be32 field holds it.
func Addr4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

// FlowKey4 is the compact IPv4 flow-cache key.
type FlowKey4 = edgeEdgeFlowKey4

// EMC4 is struct edge_emc_slot, a slot of the exact-match cache
// edge_emc4.
type EMC4 = edgeEdgeEmcSlot

// MaxServices and MaxMembers mirror EDGE_MAX_SERVICES and
// EDGE_MAX_MEMBERS: services per generation, backends per service. A
// service's counters are at tag * MaxMembers + member; member
// ReplyMember counts the replies of its NAT'd connections.
const (
	MaxServices = 16
	MaxMembers  = 256
	ReplyMember = MaxMembers - 1
)

// LBTable is a service's Maglev table as the kernel holds it: each
// entry's member index (ReplyMember: no backend), one byte an entry in
// edge_maglev, and each member's FAR index (NoFAR: none) in edge_lb_far.
// A member's counters are at tag * MaxMembers + member. A table in a
// generation is never modified (a change builds a new one), so the
// writer keeps the one it wrote as what the kernel holds.
type LBTable struct {
	Members []uint8
	Far     [MaxMembers]uint32
}

// SvcIndexSize and SvcProbes mirror EDGE_SVC_INDEX and EDGE_SVC_PROBES:
// buckets of a slot's service index, and how many a lookup tries.
const (
	SvcIndexSize = 256
	SvcProbes    = 4
)

// SvcIndexHash is svc_hash (balance.h): the bucket hash of a
// service key, before masking.
func SvcIndexHash(k SvcKey) uint32 {
	a := func(i int) uint32 { return binary.NativeEndian.Uint32(k.Vip[4*i:]) }
	h := a(0)*0x9e3779b1 ^ a(1)*0x85ebca77 ^ a(2)*0xc2b2ae3d ^ a(3)*0x27d4eb2f ^
		(uint32(k.Port)<<16|uint32(k.Proto)<<8|uint32(k.Family))*0x165667b1
	h ^= h >> 15
	h *= 0x2c1b3c6d
	h ^= h >> 12
	return h
}

// StatelessBit is sl_bit (balance.h): the bit of the state's
// stateless_vips a packet to the service key's VIP and port tests.
func StatelessBit(k SvcKey) uint32 {
	a := func(i int) uint32 { return binary.NativeEndian.Uint32(k.Vip[4*i:]) }
	return ((a(0) ^ a(1) ^ a(2) ^ a(3) ^ uint32(k.Port)) * 0x9e3779b1) >> 26
}

// SvcIndex places services (of one slot) in the index's buckets: each at
// the first empty one of the SvcProbes from its own, in the order of
// their ids; one that finds none is left to edge_services. It returns the
// buckets and the services left out.
func SvcIndex(services map[SvcKey]Svc) (idx [SvcIndexSize]SvcSlot, spilled int) {
	keys := slices.SortedFunc(maps.Keys(services), func(a, b SvcKey) int { return cmp.Compare(services[a].Id, services[b].Id) })
	for _, k := range keys {
		h := SvcIndexHash(k)
		placed := false
		for p := uint32(0); p < SvcProbes && !placed; p++ {
			b := &idx[(h+p)&(SvcIndexSize-1)]
			if b.V.Id == 0 {
				b.K, b.V, placed = k, services[k], true
			}
		}
		if !placed {
			spilled++
		}
	}
	return idx, spilled
}

// Steering groups, mirroring EDGE_MAX_STEER, EDGE_STEER_MEMBERS,
// EDGE_STEER_TABLE and EDGE_SF_*.
const (
	MaxSteer       = 64
	SteerMembers   = 8
	SteerTable     = 64
	SteerPerPacket = 1
	SteerRedundant = 2
)

// A redundant group's de-duplication window, mirroring EDGE_DEDUP_JUMP
// and EDGE_DEDUP_CONFIRM: one packet moves it at most DedupJump numbers
// ahead; DedupConfirm numbers in a row out of its reach, each following
// the last, move it further.
const (
	DedupJump    = 4096
	DedupConfirm = 8
)

// FIBByDst mirrors EDGE_FIB_BY_DST, a bit of edge_state.fib_flags.
const FIBByDst = 1

// StatsLB marks an edge_flow.stats index into edge_lb_stats.
const StatsLB = 0x80000000

// IfSlots is edge_if_cpu's size (EDGE_IF_SLOTS): an interface counts in
// slot ifindex mod IfSlots.
const IfSlots = 1024

// MaxPaths mirrors EDGE_MAX_PATHS in bpf/edge_consts.h.
const MaxPaths = 256

// Path flag bits, mirroring EDGE_PF_*.
const (
	PathFlagKey       = 0x01
	PathFlagSeq       = 0x02
	PathFlagDSCPFixed = 0x04
)

// MaxGroups mirrors EDGE_MAX_GROUPS in bpf/edge_consts.h.
const MaxGroups = 32

// Key flag bits, mirroring EDGE_KF_* in bpf/edge_consts.h.
const (
	KeyFlagGREKey = 0x01
	KeyFlagFrag   = 0x02
)

// Sentinels, mirroring EDGE_NO_FAR / EDGE_NO_PDR.
const (
	NoFAR = 0xffffffff
	NoPDR = 0xffffffff
)

// FAR actions, mirroring enum edge_action.
const (
	ActPass     = 0
	ActDrop     = 1
	ActRedirect = 2
	ActEncap    = 3
	ActDecap    = 4
	ActNAT      = 5
	ActUnNAT    = 6
	ActSteer    = 7
)

// SvcStateless is edge_svc.flags' EDGE_SVC_STATELESS: the service records
// no connections.
const SvcStateless = 0x01

// SvcGuarded is edge_svc.flags' EDGE_SVC_GUARDED: PDRs may stand before
// the service, so its packets are classified first.
const SvcGuarded = 0x02

// XDP verdicts (enum xdp_action in linux/bpf.h).
const (
	XDPAborted  = 0
	XDPDrop     = 1
	XDPPass     = 2
	XDPTx       = 3
	XDPRedirect = 4
)

// Reason values used by callers and tests (dataplane.ReasonNames names
// them).
const (
	ReasonNone = iota
	ReasonBadEth
	ReasonBadVLAN
	ReasonVLANDepth
	ReasonBadIP4
	ReasonBadIHL
	ReasonBadIP4Csum
	ReasonBadIP6
	ReasonBadIP6Ext
	ReasonBadL4
	ReasonBadGRE
	ReasonNonIP
	ReasonNoMatch
	ReasonNoNeigh
	ReasonFIBFail
	ReasonRouteMismatch
	ReasonTTL
	ReasonFragNeeded
	ReasonVLANFwd
	ReasonNoTx
	ReasonFlowFull
	ReasonNoState
	ReasonGRENoPath
	ReasonGREInner
	ReasonMTUICMP
	ReasonMTUDrop
	ReasonAdjust
	ReasonLBNoBackend
	ReasonLBConnFull
	ReasonNATL4
	ReasonNATICMP
	ReasonGRENested
	ReasonICMPLimit
	ReasonFlowEvictCold
	ReasonFlowEvictIdle
	ReasonFlowBusy
	ReasonProbeReflect
	ReasonProbeReply
	ReasonBadProbe
	ReasonSteerNone
	ReasonSteerMoved
	ReasonDupSeen
	ReasonDupLate
	ReasonDupNoCopy
	ReasonFODrop
	ReasonFOFull
	ReasonFOEvict
	ReasonCPUMoved
	ReasonDupJump
	ReasonProbeBadMAC
	ReasonProbeStale
	ReasonFOShareDrop
	ReasonICMPSrcLimit
	ReasonFlowLocked
	ReasonBadGTPU
	ReasonGTPUEcho
	ReasonGTPUNoSession
	ReasonGTPUSignal
	ReasonGTPUNoPDR
	ReasonGTPUGate
	ReasonGTPUFARDrop
	ReasonGTPUBuffer
	ReasonGTPUInner
	ReasonGTPUErrorInd
	ReasonGTPUBuffFull
	ReasonGTPUMBR
	ReasonGTPUEndMarker
	ReasonGTPUEchoResp
	ReasonMax
)

// MemberRef is the service and backend FAR (0: the service's replies) an
// edge_lb_stats index counts.
type MemberRef struct {
	Service, FAR uint32
}

// ReadMembers reads edge_lb_members.
func ReadMembers(m *ebpf.Map) (map[uint32]MemberRef, error) {
	out := map[uint32]MemberRef{}
	var k uint32
	var v Member
	it := m.Iterate()
	for it.Next(&k, &v) {
		if v.Svc != 0 {
			out[k] = MemberRef{Service: v.Svc, FAR: v.Far}
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read balancer members: %w", err)
	}
	return out, nil
}
