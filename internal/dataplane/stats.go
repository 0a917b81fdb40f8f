// SPDX-License-Identifier: Apache-2.0

package dataplane

// Counter is a packets/bytes pair summed over CPUs.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Snapshot is every counter of the dataplane at one moment.
type Snapshot struct {
	Gen       uint32
	PDRs      map[uint32]Counter // by PDR id
	Verdicts  []Counter          // by XDP verdict
	Reasons   []Counter          // by reason
	CacheHit  uint64
	CacheMiss uint64
	// CacheFirst counts of the misses the first packets of flows decided
	// and not recorded: a flow a rule decides enters the flow table on
	// its second packet.
	CacheFirst uint64
	Paths      map[uint32]PathCounters // by path id
	// Backends are the balancer's counters per service and backend FAR
	// (FAR 0: the service's NAT replies).
	Backends []BackendCounters
	// NextHopsByDst: the kernel routes by destination alone, and new
	// flows share a destination's next hop (SetFIBByDst); false: each
	// new flow asks the FIB.
	NextHopsByDst bool
	// XDPCPU is, by interface name (of this network namespace), the
	// packets the pipeline ran on each CPU for frames that came in by
	// it: the CPU doing the interface's XDP work. Interfaces without
	// any are left out.
	XDPCPU map[string][]uint64
}

// BackendCounters are one backend's (or a service's replies') counters.
type BackendCounters struct {
	Service, FAR uint32
	Counter
	// NewConns counts connections the balancer gave the backend;
	// Active the connection-table entries pinned to it that have not
	// seen a FIN or RST from the client (approximate: an entry stays
	// until the table evicts it, so a connection that ended without
	// either, UDP's and lost ones', counts until then).
	NewConns, Active uint64
}

// PathCounters are what a path sent (encapsulated) and received
// (decapsulated).
type PathCounters struct {
	Tx Counter `json:"tx"`
	Rx Counter `json:"rx"`
}

// VerdictNames names the XDP verdicts by value (enum xdp_action in
// linux/bpf.h): Snapshot.Verdicts' labels.
var VerdictNames = []string{"aborted", "drop", "pass", "tx", "redirect"}

// ReasonNone is the reason of a packet that left without one: its
// counter is the rest of the traffic, not an exit to explain.
const ReasonNone = 0

// ReasonNames names enum edge_reason (bpf/edge_types.h) by value:
// Snapshot.Reasons' labels. The loader's tests keep it in step with the
// header.
var ReasonNames = []string{
	"none",
	"bad_eth",
	"bad_vlan",
	"vlan_depth",
	"bad_ip4",
	"bad_ihl",
	"bad_ip4_csum",
	"bad_ip6",
	"bad_ip6_ext",
	"bad_l4",
	"bad_gre",
	"non_ip",
	"no_match",
	"no_neigh",
	"fib_fail",
	"route_mismatch",
	"ttl",
	"frag_needed",
	"vlan_fwd",
	"no_tx",
	"flow_full",
	"no_state",
	"gre_no_path",
	"gre_inner",
	"mtu_icmp",
	"mtu_drop",
	"adjust",
	"lb_no_backend",
	"lb_conn_full",
	"nat_l4",
	"nat_icmp",
	"gre_nested",
	"icmp_limit",
	"flow_evict_cold",
	"flow_evict_idle",
	"flow_busy",
	"probe_reflect",
	"probe_reply",
	"bad_probe",
	"steer_none",
	"steer_moved",
	"dup_seen",
	"dup_late",
	"dup_no_copy",
	"fo_drop",
	"fo_full",
	"fo_evict",
	"cpu_moved",
	"dup_jump",
	"probe_bad_mac",
	"probe_stale",
	"fo_share_drop",
	"icmp_src_limit",
	"flow_locked",
	"bad_gtpu",
	"gtpu_echo",
	"gtpu_no_session",
	"gtpu_signal",
	"gtpu_no_pdr",
	"gtpu_gate",
	"gtpu_far_drop",
	"gtpu_buffer",
	"gtpu_inner",
	"gtpu_error_ind",
	"gtpu_buff_full",
	"gtpu_mbr",
	"gtpu_end_marker",
	"gtpu_echo_resp",
}
