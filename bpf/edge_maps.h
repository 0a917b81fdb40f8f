/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Every map of the dataplane. Sizes marked "config" are overwritten by the
 * agent from limits.* before load; all maps are pinned by name so a
 * restarted agent adopts them. */
#ifndef EDGE_MAPS_H
#define EDGE_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "edge_consts.h"
#include "edge_types.h"
#include "edge_ctx.h"

/* Global state (generation, group counts, defaults), one struct edge_state.
 * Written by the agent; read by every packet. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_state);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_global SEC(".maps");

/* Mask groups of both slots, index slot * EDGE_MAX_GROUPS + i.
 * Written by the agent into the inactive slot; read on flow-cache miss. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_group);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_GROUPS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_groups SEC(".maps");

/* Classifier entries of both slots (masked key -> rule).
 * Written by the agent; read on flow-cache miss. Size: config (2 x rules). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct edge_rule_key);
	__type(value, struct edge_rule);
	__uint(max_entries, 2 * 65536);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_rules SEC(".maps");

/* FARs of both slots, index slot * far_stride + far index.
 * Written by the agent; read per packet. Size: config (2 x rules). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_far);
	__uint(max_entries, 2 * 65536);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_fars SEC(".maps");

/* The flow table: each flow's decision and next hop, and for a
 * connection to a service its backend, tagged with their generation.
 * Set-associative: the flow's 5-tuple (and GRE key) hashes to a bucket
 * of EDGE_FT_WAYS ways (index bucket * EDGE_FT_WAYS + way), whose tags,
 * last use and lock sit in one line of edge_ft_meta. A new flow costs
 * one write into the bucket, against an LRU hash's insert that walks
 * its lists; which way it may take is the bucket's business
 * (flowtab.h). Written by packets; read by packets and the agent. Size:
 * config (the larger of flows and connections, rounded up to a power of
 * two). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ft_way);
	__uint(max_entries, 65536);
	/* The agent maps both: it reads flows without a syscall each, and
	 * takes a bucket's lock as packets do (an upgrade's copy). */
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_ft SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ft_bucket);
	__uint(max_entries, 65536 / EDGE_FT_WAYS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_ft_meta SEC(".maps");

/* Per-CPU exact-match cache in front of edge_ft for IPv4 flows (as Open vSwitch's EMC
 * sits in front of its megaflow cache): a direct-mapped copy of recently
 * used IPv4 flow entries, so a packet of an active flow costs an array
 * lookup and a 24-byte compare instead of a hash-table walk. Entries are
 * validated like flow entries (generation, FIB epoch) and hold only state
 * derivable again from the rules and the FIB, and the packets and bytes
 * this CPU counted for the flow since they were last added to the flow's
 * total in edge_ft; per-flow state that must not fork between copies
 * (FlowOpt's tokens and RTT samples) lives elsewhere (edge_fo). Written
 * by packets; read by packets and, for the counts, the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_emc_slot);
	__uint(max_entries, EDGE_EMC_SLOTS);
	/* Pinned: the agent reads the per-CPU counts of the program it
	 * adopted, not of a map of its own. */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_emc4 SEC(".maps");

/* The doorkeeper (flowcache.h's flow_admit): the flows whose first
 * packet was decided and not recorded, in sets by their flow-table tag.
 * Shared by the CPUs, as the flow table is, so a flow's second packet
 * finds its note on whichever CPU it comes; notes are single 64-bit
 * words, so a race between CPUs loses a note at worst (its flow is then
 * admitted on its next two packets). Soft state: lost on a reload. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_dk_set);
	__uint(max_entries, EDGE_DK_SETS);
} edge_dk SEC(".maps");

/* GRE paths of both slots, index slot * EDGE_MAX_PATHS + path index.
 * Written by the agent into the inactive slot; read by encap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_path);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_paths SEC(".maps");

/* Decapsulation lookup of both slots: (slot, outer dst, key) -> path.
 * Written by the agent; read by decap. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct edge_decap_key);
	__type(value, struct edge_decap);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_decaps SEC(".maps");

/* Per-path packets/bytes, [stats * 2] sent (encap) and [stats * 2 + 1]
 * received (decap). Written by packets; read by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ctr);
	__uint(max_entries, 2 * EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_path_stats SEC(".maps");

/* GRE sequence numbers per path stats index (RFC 2890), shared by all
 * CPUs so one path's numbers increase across them. Written by encap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_path_seq SEC(".maps");

/* Per-CPU next hop of each path, by its stable index (edge_path.stats, as
 * edge_path_seq; the same in both slots, so a commit leaves it warm): a
 * new flow over a path copies it instead of asking the FIB (~0.2 us
 * here), and a redundant group's copies take their paths' from it
 * (dup.h). Derivable state, pinned only so the copies' program, which
 * an agent loads beside a running XDP program it adopts, reads the one
 * that program writes. Written by encap. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_nh);
	__uint(max_entries, EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_path_nh SEC(".maps");

/* Steering groups per slot (struct edge_steer_group): members written by a
 * commit into the slot it fills, tables by the agent into both. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_steer_group);
	__uint(max_entries, 2 * EDGE_MAX_STEER);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_steer SEC(".maps");

/* The members of each steering group a flow may stay on (bit i: member
 * i), by the group's index: a sticky flow whose member's bit goes to 0
 * is decided again. Written by the agent with the tables. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_MAX_STEER);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_steer_ok SEC(".maps");

/* Passive RTT per path from TCP timestamps (struct edge_tcp_rtt), by the
 * path's stable index. Written by encap and decap (tcprtt.h), read and
 * cleared by the agent's path monitor. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_tcp_rtt);
	__uint(max_entries, EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_path_tcp_rtt SEC(".maps");

/* A redundant group's GRE sequence numbers, by the group's index: both
 * copies of a packet carry one number, which the receiving gateway
 * de-duplicates by (edge_dedup). Written by encap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_MAX_STEER);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_dup_seq SEC(".maps");

/* Where a redundant group's packets are broadcast (bpf_redirect_map with
 * BPF_F_BROADCAST), by the group's index: a devmap of its members'
 * egress interfaces, each entry running edge_xdp_dup, which turns its
 * copy into one for the member on that interface. Inner maps built by
 * the agent. */
struct edge_dup_devmap {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct bpf_devmap_val));
	__uint(max_entries, EDGE_STEER_MEMBERS);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, EDGE_MAX_STEER);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct edge_dup_devmap);
} edge_dup_tx SEC(".maps");

/* Which de-duplication window (edge_dedup's index + 1; 0: none) a GRE
 * packet with a sequence number that arrives over a path joins, by slot *
 * EDGE_MAX_PATHS + the path's stable index: the receiving side of a
 * redundant group over its paths. Written by a commit into its slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_path_dedup SEC(".maps");

/* The de-duplication windows of redundant groups (struct edge_dedup_win), by
 * the group's index. Written by decap. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_dedup_win);
	__uint(max_entries, EDGE_MAX_STEER);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_dedup SEC(".maps");

/* Each path's probe secret, slot * EDGE_MAX_PATHS + the path's stable
 * index (struct edge_probe_secret). Written by the agent into the inactive
 * slot with the paths; read by the probe stage and the probe sender. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_probe_secret);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_path_auth SEC(".maps");

/* What each path's probes and their answers showed, by the path's stable
 * index (struct edge_probe_rec). Written by the probe sender and the
 * probe stage, read and cleared by the agent's path monitor. Pinned, so an agent that adopts
 * the running program reads what that program writes (an upgrade starts
 * it afresh: the monitor does). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_probe_rec);
	__uint(max_entries, EDGE_MAX_PATHS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_path_probe SEC(".maps");

/* Per-CPU next hops by destination (slot: a hash of the address and the
 * ingress interface; one entry per slot), used only while the kernel
 * routes by destination alone (edge_state.fib_flags): a new flow to a
 * destination an earlier flow reached through the same interfaces copies
 * its next hop instead of asking the FIB (~70 ns here), whatever its
 * source and ports; a NAT backend's connections all share its one.
 * Derivable state, not pinned. Written by the redirect (fib.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_nh);
	__uint(max_entries, EDGE_DST_NH_SLOTS);
} edge_dst_nh SEC(".maps");

/* Interface addresses by ifindex, source of the ICMP errors XDP sends.
 * Written by the agent; read when a packet is answered from XDP. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct edge_ifaddr);
	__uint(max_entries, EDGE_MAX_IFACES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_ifaddrs SEC(".maps");

/* Egress interfaces for XDP_REDIRECT (ifindex -> ifindex).
 * Written by the agent from interfaces[]; read by redirect. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_MAX_IFACES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_tx SEC(".maps");

/* Per-PDR packets/bytes, by the stats index of edge_rule. Written by
 * packets; read (summed over CPUs) by the agent and `edgeplane stats`.
 * Size: config (rules). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ctr);
	__uint(max_entries, 65536);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_pdr_stats SEC(".maps");

/* Per XDP verdict (XDP_ABORTED..XDP_REDIRECT) packets/bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ctr);
	__uint(max_entries, 8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_verdicts SEC(".maps");

/* Per edge_reason packets/bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ctr);
	__uint(max_entries, EDGE_R_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_reasons SEC(".maps");

/* L4 services of both slots: (slot, VIP, port, proto) -> service. Written
 * by the agent (commits), read by packets on a flow-cache miss. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct edge_svc_key);
	__type(value, struct edge_svc);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_services SEC(".maps");

/* The services of each slot again, open-addressed by svc_hash over
 * EDGE_SVC_INDEX buckets (slot * EDGE_SVC_INDEX + bucket), so a packet
 * finds its service, or learns it has none, with inlined array reads
 * instead of a hash-table call. A service placed nowhere within
 * EDGE_SVC_PROBES buckets of its own is found in edge_services. Written by
 * the agent with edge_services. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_svc_slot);
	__uint(max_entries, EDGE_SLOTS * EDGE_SVC_INDEX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_svc_index SEC(".maps");

/* Maglev tables of both slots: entry i of tag's table in slot s is byte
 * i % EDGE_MAGLEV_BLOCK of element (s * EDGE_MAX_SERVICES + tag) *
 * maglev_blocks + i / EDGE_MAGLEV_BLOCK. One byte per entry keeps a table
 * in a CPU's caches. Written by the agent, read on a new connection.
 * Size: config. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_maglev_blk);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_SERVICES * 4);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_maglev SEC(".maps");

/* The FAR index of each member of each service of both slots, index
 * (slot * EDGE_MAX_SERVICES + tag) * EDGE_MAX_MEMBERS + member. Written
 * by the agent with the tables. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_SERVICES * EDGE_MAX_MEMBERS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_lb_far SEC(".maps");

/* The NAT services each backend serves, by (slot, backend address, port,
 * protocol; in struct edge_svc_key's fields): a reply's flow-table miss
 * finds its service here, and the client's connection through it in the
 * flow table (a stateless service's backend serves it alone, and its
 * replies need no connection). So a NAT'd connection costs one flow
 * entry on its first packet and its reply one on its own. Written by
 * the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct edge_svc_key);
	__type(value, struct edge_nat_backend);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_SERVICES * EDGE_MAX_MEMBERS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_nat_backends SEC(".maps");

/* Per service and backend packets/bytes (EDGE_STATS_LB indexes), and new
 * connections. Written by packets, read by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ctr);
	__uint(max_entries, EDGE_MAX_SERVICES * EDGE_MAX_MEMBERS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_lb_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, EDGE_MAX_SERVICES * EDGE_MAX_MEMBERS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_lb_new SEC(".maps");

/* What each edge_lb_stats index counts, written by the agent with each
 * generation: a restarted agent gives every backend its index again, so
 * its counters continue, and `edgeplane stats` names them. Not read by
 * packets. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_member);
	__uint(max_entries, EDGE_MAX_SERVICES * EDGE_MAX_MEMBERS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_lb_members SEC(".maps");

/* The per-packet context of edge_ctx.h, one per CPU: the stages' state
 * lives here, not on the stack. Written and read by packets only. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ctx);
	__uint(max_entries, 1);
} edge_ctx SEC(".maps");

/* The ICMP errors XDP sends, rate-limited per CPU. Written by packets
 * answered from XDP. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_bucket);
	__uint(max_entries, 1);
} edge_icmp_bucket SEC(".maps");

/* ... and per source, before the CPU's (too_big.h): one source's share.
 * An LRU hash shared by all CPUs (a source's packets land on any).
 * Written by packets answered from XDP. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct edge_icmp_src_key);
	__type(value, struct edge_bucket);
	__uint(max_entries, EDGE_ICMP_SOURCES);
} edge_icmp_src SEC(".maps");

/* The secret the flows' hashes are keyed with (siphash.h), one element.
 * Written by the agent once, when it creates the pinned maps; read by
 * the agent before each load, which sets it into the program (hash_k0,
 * hash_k1). Packets never read it: a restarted or upgraded agent finds
 * its flows where the program before it placed them. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_hash_secret);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_RDONLY_PROG);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_secret SEC(".maps");

/* Packets the pipeline ran on, per CPU, by the ingress interface's
 * ifindex mod EDGE_IF_SLOTS: which CPU does each interface's XDP work
 * (on veth, the sender's; relief's handovers count on both CPUs).
 * Written by packets; read by the agent and `edgeplane stats`. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, EDGE_IF_SLOTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_if_cpu SEC(".maps");

/* The CPU (+ 1; 0: none) each interface's XDP work is handed to, by
 * ifindex mod EDGE_IF_SLOTS: a CPU strategy's irq_affinity for an
 * interface without IRQs (veth), where the work runs on the sender's
 * CPU. The pipeline redirects such a frame into edge_cpus, whose program
 * runs it on that CPU. Written by the agent; read at every entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_IF_SLOTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_if_steer SEC(".maps");

/* Flow-cache hits [0] and misses [1], and of the misses the first
 * packets not recorded [2] (packets only). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, EDGE_CACHE_STATS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_cache_stats SEC(".maps");

/* FlowOpt (lib/flowopt.h). Connections' state: RTT samples, rate
 * estimates, fairness tokens and the CPU relief placed them on, both
 * directions in one element, matched by the connection's whole key, at
 * the pair of slots its direction-free keyed hash names, so a packet of
 * either direction finds the other's sample without a second flow-table
 * lookup. Written by packets; read by the agent. Size: config
 * (limits.flows, a power of two). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_fo_conn);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_fo SEC(".maps");

/* QoS classes of both slots, slot * EDGE_MAX_QOS + index. Written by the
 * agent (commits; round_ns also in the live slot as it adjusts it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_qos_class);
	__uint(max_entries, EDGE_SLOTS * EDGE_MAX_QOS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_qos SEC(".maps");

/* The class of each DSCP code point in both slots, slot * 64 + dscp:
 * its index + 1 (0: none). Written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_SLOTS * 64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_qos_dscp SEC(".maps");

/* The shares flows without a FlowOpt record are judged in: class index *
 * EDGE_FO_SHARES + a share their keyed hash and direction pick. Written
 * by packets. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_fo_dir);
	__uint(max_entries, EDGE_MAX_QOS * EDGE_FO_SHARES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_fo_shares SEC(".maps");

/* Per class (index) phantom queues, each on a cache line of its own
 * (mmapable: the values start on a page). Written by packets, with
 * atomic operations. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_qos_vq);
	__uint(max_entries, EDGE_MAX_QOS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_qos_vqs SEC(".maps");

/* Each CPU's batch of a class's (index) phantom queue, not yet added to
 * it. Written by packets. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_qos_vq_cpu);
	__uint(max_entries, EDGE_MAX_QOS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_qos_vq_cpu SEC(".maps");

/* Per class (index) counters. Written by packets; read by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_qos_ctr);
	__uint(max_entries, EDGE_MAX_QOS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_qos_stats SEC(".maps");

/* Each CPU's load as the agent judged it, for relief. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_cpu_load);
	__uint(max_entries, EDGE_MAX_CPUS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_cpu_loads SEC(".maps");

/* The CPUs relief hands flows to, each entry running edge_xdp_cpu on its
 * CPU. Written by the agent while relief is on. */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
	__uint(max_entries, EDGE_MAX_CPUS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_cpus SEC(".maps");

/* The user plane's PFCP sessions (gtpu.h). A G-PDU's TEID (edge_teid)
 * and a downlink packet's destination, the UE (edge_ue4), name the
 * session's slot; edge_sess_live[slot] which of its two records in
 * edge_sessions is live (slot * 2 + 0 or 1). The agent writes a session's
 * new record into the other and flips the live one, never writing a
 * record a packet may still read (a grace period after its flip).
 * Sizes: config (sessions; TEIDs and UEs twice that). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __be32);
	__type(value, __u32);
	__uint(max_entries, 2 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_teid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __be32);
	__type(value, __u32);
	__uint(max_entries, 2 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_ue4 SEC(".maps");

/* The GTP-U peers of multi-access sessions' accesses (edge_sess_ma):
 * their liveness and RTT, from the agent's Echo Requests, whose answers
 * XDP times (gtpu.h), by place (a request's sequence number names the
 * place). Agent-written but for the answers' times. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_gtpu_peer);
	__uint(max_entries, EDGE_GTPU_PEERS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_gtpu_peers SEC(".maps");

/* A downlink packet's IPv6 destination's /64 prefix (its 8 bytes as
 * they are), the UE's, names the session's slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u32);
	__uint(max_entries, 2 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_ue6 SEC(".maps");

/* A bit per hash of an IPv4 address (gtpu.h's ue_maybe), set for every
 * UE edge_ue4 holds: a packet whose destination's bit is clear is no
 * UE's and skips the hash. 2^20 bits: at 100,000 UEs about 9 % of other
 * packets look further. Agent-written (a bit set before its UE is
 * added, cleared after the last UE of it is removed). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, EDGE_UE_BITS / 64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_ue_bits SEC(".maps");

/* The record copy + 1 (edge_sessions' index: slot * 2 + copy) live for
 * a session holding a UE whose address has that ue_bit, one UE per
 * entry (the first to take it; the others are found in edge_ue4): the
 * record's own_ue says which. Agent-written, after each flip of the
 * session's live copy, so the downlink reads no live word. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, EDGE_UE_BITS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_ue_dm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_sess_live SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_sess);
	__uint(max_entries, 2 * 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_sessions SEC(".maps");

/* Each session PDR's packets and bytes, per CPU, at slot *
 * EDGE_SESS_PDRS + its counter: what usage reports are made of. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_ctr);
	__uint(max_entries, 1024 * EDGE_SESS_PDRS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_sess_stats SEC(".maps");

/* Each session's maximum bit rate meters (a QER's, per direction), at
 * slot * EDGE_SESS_PDRS + the PDR entry's meter - 1. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_mbr);
	__uint(max_entries, 1024 * EDGE_SESS_PDRS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_sess_mbr SEC(".maps");

/* Downlink packets buffered for idle UEs (a FAR's BUFF), on their way
 * to the agent, which holds them until the session's FAR forwards and
 * reports the first of each to the SMF. Pinned: a restarted agent reads
 * what is left. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_buff SEC(".maps");

#endif
