// SPDX-License-Identifier: Apache-2.0

package dataplane

import "net/netip"

// FlowStat is one flow of the flow cache with its counters.
type FlowStat struct {
	Src, Dst     netip.Addr
	Proto        uint8
	Sport, Dport uint16 // host order
	Ifindex      uint32
	DSCP         uint8
	GREKey       uint32
	HasGREKey    bool
	// PDR is the id of the PDR that classified the flow (0: none
	// matched); Gen the generation it was classified under, Live
	// whether that is the serving one (else the next packet reclassifies).
	PDR  uint32
	Gen  uint32
	Live bool
	// Packets and Bytes count the flow since it entered the cache: the
	// shared entry's total plus what each CPU's exact-match copy has
	// counted since it was last added in.
	Packets, Bytes uint64
	// FlowOpt's probe, from its connection's record (zeros: none): the
	// direction's smoothed and smallest RTT (µs), samples, rate (bytes a
	// second) and congestion hint.
	RTTUs, MinRTTUs, RTTSamples uint32
	Rate                        uint32
	Congested                   bool
}
