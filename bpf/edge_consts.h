/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Compile-time limits of the dataplane. Each is #ifndef so a build can
 * override it (-DEDGE_MAX_GROUPS=64); per-deployment sizes (flow cache,
 * rule capacity) are map sizes set from the config at load time instead. */
#ifndef EDGE_CONSTS_H
#define EDGE_CONSTS_H

/* Mask groups (tuple-space search subtables) per rules generation. The
 * classify loop runs at most this many hash lookups per flow-cache miss,
 * whatever the number of rules. */
#ifndef EDGE_MAX_GROUPS
#define EDGE_MAX_GROUPS 32
#endif

/* VLAN tags parsed (802.1Q / 802.1ad); a deeper stack is punted. */
#ifndef EDGE_MAX_VLANS
#define EDGE_MAX_VLANS 2
#endif

/* IPv6 extension headers walked before giving up (RFC 8200 section 4.1
 * recommends at most one of each; 8 covers every legal ordering). */
#ifndef EDGE_MAX_IP6_EXT
#define EDGE_MAX_IP6_EXT 8
#endif

/* Slots of the per-CPU IPv4 exact-match cache (power of two). */
/* Packets of other flows an exact-match slot in use refuses before the
 * next one takes it (flowcache.h's emc_take). */
#define EDGE_EMC_PRESSURE 16

#ifndef EDGE_EMC_SLOTS
#define EDGE_EMC_SLOTS 1024
#endif

/* Interfaces the dataplane sends on and answers from (edge_tx,
 * edge_ifaddrs): the config takes at most this many. */
#ifndef EDGE_MAX_IFACES
#define EDGE_MAX_IFACES 64
#endif

/* Slots of edge_if_cpu: an interface counts in slot ifindex mod this (a
 * power of two); the agent knows its interfaces' slots. */
#define EDGE_IF_SLOTS 1024

/* GRE paths per generation. */
#ifndef EDGE_MAX_PATHS
#define EDGE_MAX_PATHS 256
#endif

/* L4 services (each with its own Maglev table) per generation, and
 * backends per service (power of two). A service's per-backend counters
 * sit at service * EDGE_MAX_MEMBERS + member; the last member index counts
 * the replies of NAT'd connections. */
#ifndef EDGE_MAX_SERVICES
#define EDGE_MAX_SERVICES 16
#endif
#ifndef EDGE_MAX_MEMBERS
#define EDGE_MAX_MEMBERS 256
#endif

/* Maglev table entries per edge_maglev element: one byte each (the
 * backend's member index), so a table of 65,537 entries takes 64 KiB in
 * 17 elements. A packet reads one byte of one element whatever their
 * size; the agent writes a changed table in one batch, which costs about
 * as much per element as per KiB, so elements are a page: a backend
 * change writes 17 of them, not 1,025 of 64 bytes (~0.2-0.5 ms here). */
#define EDGE_MAGLEV_BLOCK 4096

/* Buckets of each slot's service index (power of two) and the buckets a
 * lookup probes from a key's own before it asks edge_services. */
#define EDGE_SVC_INDEX 256
#define EDGE_SVC_PROBES 4

/* ICMP errors XDP may send per second and CPU, and how many at once
 * (Linux's own defaults, net.ipv4.icmp_msgs_per_sec and _burst): an
 * answer to a packet is a reflection vector, one with a spoofed source
 * a flood toward a victim. */
#ifndef EDGE_ICMP_RATE
#define EDGE_ICMP_RATE 1000
#endif
#ifndef EDGE_ICMP_BURST
#define EDGE_ICMP_BURST 50
#endif
/* Each source's share of them (an IPv4 address, an IPv6 /64), spent
 * before the CPU's: one source flooding big packets is refused on its
 * own and leaves the rest to answer others' (a tenth of the rate each,
 * so it takes ten flooding sources to spend a CPU's). Sources tracked
 * at once (an LRU: an evicted one starts again with a full burst). */
#ifndef EDGE_ICMP_SRC_RATE
#define EDGE_ICMP_SRC_RATE 100
#endif
#ifndef EDGE_ICMP_SRC_BURST
#define EDGE_ICMP_SRC_BURST 10
#endif
#ifndef EDGE_ICMP_SOURCES
#define EDGE_ICMP_SOURCES 4096
#endif

/* Rules generations live in two slots: the live one and the one the agent
 * builds beside it. The slot of generation g is g & 1. */
#define EDGE_SLOTS 2

/* Sentinels in struct edge_flow / edge_rule. EDGE_FAR_ROUTE: no PDR
 * matched a decapsulated packet, which then goes where the FIB routes
 * it (what decap did before its inner packets were classified). */
#define EDGE_NO_FAR 0xffffffffu
#define EDGE_FAR_ROUTE 0xfffffffeu
#define EDGE_NO_PDR 0xffffffffu

/* edge_flow.stats of a balanced flow: the index is into edge_lb_stats, not
 * edge_pdr_stats. */
#define EDGE_STATS_LB 0x80000000u

/* edge_flow_key.flags */
#define EDGE_KF_GRE_KEY 0x01 /* packet carries a GRE key (RFC 2890 K bit) */
#define EDGE_KF_FRAG 0x02    /* non-first fragment: no L4 header, ports 0 */

/* edge_flow.flags */
#define EDGE_FF_CONN 0x01   /* a connection to a stateful service */
#define EDGE_FF_REPLY 0x02  /* the reply of a NAT'd connection */
#define EDGE_FF_CLOSED 0x04 /* EDGE_FF_CONN: the client sent FIN or RST */
#define EDGE_FF_STEERED 0x08 /* sent over a member of a steering group (svc) */

/* Ways per bucket of the flow table (edge_ft): a flow may sit in any
 * way of the bucket its 5-tuple hashes to. Eight tags fill half of the
 * bucket's line in edge_ft_meta. */
#define EDGE_FT_WAYS 8

/* Ticks (edge_state.tick) a flow that had more than one packet must go unused
 * before a new flow may take its way (the agent ticks once a second). */
#ifndef EDGE_FT_IDLE
#define EDGE_FT_IDLE 8
#endif

/* Indexes of edge_cache_stats: hits, misses, and of the misses the
 * first packets decided and not recorded (flowcache.h's flow_admit). */
#define EDGE_CACHE_HIT 0
#define EDGE_CACHE_MISS 1
#define EDGE_CACHE_FIRST 2
#define EDGE_CACHE_STATS 3

/* The doorkeeper (edge_dk, flowcache.h) that remembers flows seen once:
 * sets (a power of two) of notes (a line of them), and the
 * ticks a flow's first packet is remembered for: its next packet within
 * them admits it to the flow table. */
#define EDGE_DK_SETS 4096
#define EDGE_DK_WAYS 8
#define EDGE_DK_TICKS 2

/* Slots of the per-CPU next-hop cache by destination (power of two). */
#define EDGE_DST_NH_SLOTS 1024

/* Steering groups (an LBR of encap FARs over paths): at most
 * EDGE_MAX_STEER per gateway, EDGE_STEER_MEMBERS members each, a flow
 * picks its member from EDGE_STEER_TABLE weighted entries. */
#define EDGE_MAX_STEER 64
#define EDGE_STEER_MEMBERS 8
#define EDGE_STEER_TABLE 64
/* edge_steer.flags */
#define EDGE_SF_PER_PACKET 1 /* each packet picks (no stickiness) */
#define EDGE_SF_REDUNDANT 2  /* each packet goes over every usable member */

/* Redundant groups: the receiving gateway's de-duplication window of GRE
 * sequence numbers, in 64-number words (RFC 6479's block bitmap): a copy
 * is told from a new packet while fewer than (EDGE_DEDUP_WORDS - 1) * 64
 * packets separate it from the newest (16,320: 16 ms of path delay
 * difference at 1 Mpps). One packet moves the window at most
 * EDGE_DEDUP_JUMP numbers ahead (4 ms of numbers at 1 Mpps lost on every
 * path at once), so a forged one leaves the window over the numbers the
 * sender is about to use; EDGE_DEDUP_CONFIRM numbers in a row out of
 * reach, each following the last, move it further (a sender that
 * restarted its numbers, or came back after a long outage). */
#define EDGE_DEDUP_WORDS 256
#define EDGE_DEDUP_JUMP 4096
#define EDGE_DEDUP_CONFIRM 8

/* Path probes (struct edge_probe): GRE protocol type (IEEE 802's local
 * experimental EtherType 1), magic ("EPR2": the format with a MAC; the
 * first, "EPRB", is refused) and kinds; the probes in flight a path's
 * record keeps (a power of two), and edge_path_auth.flags. */
#define EDGE_PROBE_PROTO 0x88b5
#define EDGE_PROBE_MAGIC 0x45505232
#define EDGE_PROBE_REQUEST 1
#define EDGE_PROBE_REPLY 2
#define EDGE_PROBE_RING 64
#define EDGE_PA_MAC 1

/* FlowOpt (lib/flowopt.h). QoS classes per gateway: a flow's class is
 * its index + 1 in the top byte of edge_flow.flags (EDGE_FF_QOS_SHIFT),
 * an index the agent keeps for the class's life. CPUs the relief stage
 * places flows on. */
#define EDGE_MAX_QOS 64
#define EDGE_FF_QOS_SHIFT 8
#ifndef EDGE_MAX_CPUS
#define EDGE_MAX_CPUS 64
#endif
/* edge_state.fo_flags: the modules that are on */
#define EDGE_FO_PROBE 1
#define EDGE_FO_FAIR 2
#define EDGE_FO_RELIEF 4
/* edge_fo_dir.flags */
#define EDGE_FOD_HINT 1 /* congested: the latest RTT sample over k × min */
#define EDGE_FOD_ECN 2  /* ECN-capable: a packet of it was ECT */
/* edge_qos_class.flags */
#define EDGE_QF_URLLC 1 /* never held back */
#define EDGE_QF_DROP 2  /* over its share: dropped, even when ECN-capable */
/* A flow direction's activity is counted once a period of 2^26 ns
 * (67 ms): the agent divides by the periods to get active flows. */
#define EDGE_FO_PERIOD_SHIFT 26
/* Connections (edge_fo) a flood of new ones may not evict: seen in the
 * last EDGE_FO_IDLE_NS with at least EDGE_FO_WARM packets. */
#define EDGE_FO_IDLE_NS 2000000000ull
#define EDGE_FO_WARM 4
/* Shares per class (a power of two) that flows without a record of their
 * own (both slots held by active connections) are judged in, by their
 * keyed hash: such a flow is held to a flow's share beside those sharing
 * it, never unpoliced. */
#define EDGE_FO_SHARES 16
/* Fairness in integers: a flow's tokens are kept in 1/1024 bytes
 * (EDGE_FO_TOKEN_SHIFT), so a refill between two packets a few
 * microseconds apart is not rounded away. edge_qos_class's tok_mul (the
 * tokens a flow earns a ns) is in 1/2^EDGE_FO_MUL_SHIFT, ns_byte (the ns
 * the class's phantom queue takes to drain a byte) in
 * 1/2^EDGE_FO_NSB_SHIFT. */
#define EDGE_FO_TOKEN_SHIFT 10
#define EDGE_FO_MUL_SHIFT 24
#define EDGE_FO_NSB_SHIFT 16

/* edge_secret.hash: the hash the flow table and FlowOpt place by. An
 * upgrade to a build with another places every flow again. */
#define EDGE_HASH_SIPHASH13 1

/* edge_state.fib_flags */
#define EDGE_FIB_BY_DST 1

/* NAT services one backend (address, port, protocol) may serve. */
#define EDGE_NAT_USERS 8

/* PDRs a PFCP session's record holds in the dataplane (gtpu.h): an SMF
 * gives a PDU session two (uplink, downlink), a few more for its
 * signalling and flows of other QoS. */
/* IPv6 peers a session's PDRs create outer headers toward (a gNB and,
 * for a multi-access session, an N3IWF). */
#define EDGE_SESS_PEERS6 2

#ifndef EDGE_SESS_PDRS
#define EDGE_SESS_PDRS 8
#endif

/* Multi-access rules a session's record holds (edge_sess.ma; a power
 * of two): an MA PDU session steers its downlink by one, a second for
 * another QoS flow's. */
#define EDGE_SESS_MAS 2

/* GTP-U peers (gNBs, N3IWFs) whose liveness and RTT the agent tracks
 * for the accesses of multi-access sessions (edge_gtpu_peers). */
#define EDGE_GTPU_PEERS 1024
/* The low bits of an Echo Request's sequence number that count rounds;
 * the rest name the peer's place (16 bits in all). */
#define EDGE_GTPU_SEQ_ROUND 6

/* edge_sess_ma.mode: the steering mode of TS 29.244 8.2.165 in the low
 * bits (ATSSS-LL), and which access is the active or high-priority
 * one. */
#define EDGE_MA_ACTIVE_STANDBY 0
#define EDGE_MA_SMALLEST_DELAY 1
#define EDGE_MA_LOAD_BALANCING 2
#define EDGE_MA_PRIORITY 3
#define EDGE_MA_MODE 0x0f
#define EDGE_MA_PREFER2 0x80

/* Bits of edge_ue_bits (a power of two). */
#define EDGE_UE_BITS (1 << 20)

/* The longest frame XDP hands the agent to buffer (edge_buff_rec). */
#define EDGE_BUFF_FRAME 2032

#endif
