// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Traffic generator and sink for the end-to-end benchmark: generator ->
 * gateway namespace -> sink, over veths.
 *
 * bench_gen runs under BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES
 * and redirects every frame into the veth toward the gateway. Live frames
 * recycle their pages without copying the packet in again, and the
 * gateway rewrites them in place (routing decrements the TTL; GRE encap
 * writes its outer headers over the headroom and the first 14 bytes of
 * the frame), so the generator stamps the whole frame from a template on
 * every run.
 *
 * bench_gen_new does the same and makes every frame a new flow;
 * bench_gen_cpu sends a frame of each CPU's own; bench_gen_mix a mix of
 * bulk flows and URLLC frames that bench_sink_lat times.
 *
 * bench_sink counts what reaches it, by kind, and drops it. It also drops
 * ARP: the gateway holds a static neighbour entry for the sink.
 *
 * bench_fwd is the least an XDP forwarder can do, the ceiling of every
 * forwarding figure: parse Ethernet and IPv4, bpf_fib_lookup, rewrite the
 * MACs, decrement the TTL, bpf_redirect. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lib/csum.h"

#define GEN_LEN 64 /* frame bytes the generator stamps (a multiple of 8) */

/* The relief figures' URLLC frames: UDP from URLLC_SPORT to URLLC_DPORT,
 * the time they were made (bpf_ktime_get_ns) first in their payload. */
#define URLLC_SPORT 7050
#define URLLC_DPORT 7000

/* Set from Go before load. */
volatile const __u32 gen_ifindex;            /* veth toward the gateway */
/* The frame every run sends; set from Go before each run (a global in
 * memory Go maps, so each figure sends its own frame). */
volatile __u64 gen_frame[GEN_LEN / 8];
volatile const __be32 sink_gre_remote;       /* outer destination of our GRE */
volatile const __be32 sink_gre_remote2;      /* and of a redundant group's second path */
volatile const __u32 sink_ifindex1;          /* the sink's veth from wan1 */

/* Sink counters (index enum sink_kind); per CPU, summed in Go. */
enum sink_kind {
	SINK_ALL,
	SINK_GRE,   /* IPv4 GRE toward sink_gre_remote(2): through our encap */
	SINK_UDP,   /* plain IPv4 UDP: forwarded by the kernel, or dropped on
		     * the gateway's LAN side by the floor run */
	SINK_OTHER,
	SINK_SECOND, /* any frame that came in on sink_ifindex1 (wan1's
		      * peer): the second copy of a duplicated packet */
	SINK_GTPU,  /* IPv4 UDP to port 2152: through our GTP-U encap */
	SINK_KINDS,
};

/* Written by bench_sink, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, SINK_KINDS);
} sink_count SEC(".maps");

/* Runs of bench_gen; written by bench_gen, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} gen_count SEC(".maps");

static __always_inline void bump(void *map, __u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(map, &idx);

	if (c)
		(*c)++;
}

/* gen_stamp_from writes template tmpl over the frame and counts the run. */
static __always_inline int gen_stamp_from(struct xdp_md *ctx,
					  volatile __u64 *tmpl)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 *w = data;
	int i;

	if ((void *)(w + GEN_LEN / 8) > data_end)
		return -1;
#pragma unroll
	for (i = 0; i < GEN_LEN / 8; i++)
		w[i] = tmpl[i];
	bump(&gen_count, 0);
	return 0;
}

/* gen_stamp writes the template over the frame and counts the run. */
static __always_inline int gen_stamp(struct xdp_md *ctx)
{
	return gen_stamp_from(ctx, gen_frame);
}

SEC("xdp")
int bench_gen(struct xdp_md *ctx)
{
	if (gen_stamp(ctx))
		return XDP_ABORTED;
	return bpf_redirect(gen_ifindex, 0);
}

#define GEN_LONG 128 /* bytes bench_gen_long stamps (a multiple of 8) */

/* bench_gen_long's frame; set from Go before each run. */
volatile __u64 gen_frame_long[GEN_LONG / 8];

/* bench_gen_long is bench_gen for a frame of up to GEN_LONG bytes whose
 * every byte a gateway may change (a tunnel's inner header: a G-PDU
 * decapsulated has its inner TTL past the first 64 bytes). */
SEC("xdp")
int bench_gen_long(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 *w = data;
	int i;

#pragma unroll
	for (i = 0; i < GEN_LONG / 8; i++) {
		if ((void *)(w + i + 1) > data_end)
			break;
		w[i] = gen_frame_long[i];
	}
	bump(&gen_count, 0);
	return bpf_redirect(gen_ifindex, 0);
}

/* Set from Go before each relief run: bulk flows cycled (a power of
 * two), the first one's UDP source port, and one frame in how many is a
 * URLLC one (a power of two). */
volatile __u32 gen_flows = 1;
volatile __u32 gen_sport_base = 40000;
volatile __u32 gen_urllc_every = 64;

#define GEN_CPUS 2 /* a power of two */

/* A frame for each CPU; set from Go before each run. */
volatile __u64 gen_frame_cpu[GEN_CPUS][GEN_LEN / 8];

/* bench_gen_cpu is bench_gen sending the frame of its CPU (modulo
 * GEN_CPUS): senders pinned one to a CPU send flows of their own, as a
 * NIC's RSS spreads flows, not packets of one flow, over its queues. */
SEC("xdp")
int bench_gen_cpu(struct xdp_md *ctx)
{
	__u32 cpu = bpf_get_smp_processor_id() & (GEN_CPUS - 1);

	if (gen_stamp_from(ctx, gen_frame_cpu[cpu]))
		return XDP_ABORTED;
	return bpf_redirect(gen_ifindex, 0);
}

/* Per-CPU run counter of bench_gen_new and bench_gen_mix. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} gen_seq SEC(".maps");

/* gen_next stamps the template, counts the run in gen_seq (*n: the
 * count) and returns the frame's UDP header, or NULL when the frame ends
 * before it and extra bytes after it. */
static __always_inline struct udphdr *gen_next(struct xdp_md *ctx, __u32 *n,
					       __u32 extra)
{
	void *data, *data_end;
	struct udphdr *udp;
	__u32 zero = 0, *seq;

	if (gen_stamp(ctx))
		return NULL;
	seq = bpf_map_lookup_elem(&gen_seq, &zero);
	if (!seq)
		return NULL;
	*n = ++(*seq);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	udp = data + sizeof(struct ethhdr) + sizeof(struct iphdr);
	if ((void *)(udp + 1) + extra > data_end)
		return NULL;
	return udp;
}

/* bench_gen_new sends the template as a new flow every run: UDP source
 * port from the low 16 bits of a per-CPU counter, destination port from
 * the next 15 and the CPU, so flows repeat neither within 2^31 runs nor
 * across CPUs. Only ports change, so routing, the gateway's rule and the
 * kernel's forwarding see the same packet as bench_gen's; the UDP
 * checksum is patched (RFC 1624), as a sender would have it right. The
 * work is the sender's: the gateway runs unchanged. */
SEC("xdp")
int bench_gen_new(struct xdp_md *ctx)
{
	struct udphdr *udp;
	__be16 sport, dport;
	__u32 n;

	udp = gen_next(ctx, &n, 0);
	if (!udp)
		return XDP_ABORTED;
	sport = bpf_htons((__u16)n);
	dport = bpf_htons((__u16)(n >> 16 & 0x7fff) |
			  (__u16)(bpf_get_smp_processor_id() << 15));
	if (udp->check) {
		udp->check = csum_replace2(udp->check, udp->source, sport);
		udp->check = csum_replace2(udp->check, udp->dest, dport);
		if (!udp->check)
			udp->check = 0xffff; /* 0 means none (RFC 768) */
	}
	udp->source = sport;
	udp->dest = dport;
	return bpf_redirect(gen_ifindex, 0);
}

/* bench_gen_mix sends the template (a UDP checksum of 0: none) as the
 * relief figures' mix: every gen_urllc_every-th frame a URLLC one, made
 * at the time it carries, the others cycling through gen_flows bulk
 * flows by UDP source port. */
SEC("xdp")
int bench_gen_mix(struct xdp_md *ctx)
{
	struct udphdr *udp;
	__u64 now;
	__u32 n;

	udp = gen_next(ctx, &n, sizeof(now));
	if (!udp)
		return XDP_ABORTED;
	udp->check = 0;
	if (!(n & (gen_urllc_every - 1))) {
		udp->source = bpf_htons(URLLC_SPORT);
		udp->dest = bpf_htons(URLLC_DPORT);
		now = bpf_ktime_get_ns();
		__builtin_memcpy(udp + 1, &now, sizeof(now));
	} else {
		udp->source = bpf_htons((__u16)(gen_sport_base + (n & (gen_flows - 1))));
	}
	return bpf_redirect(gen_ifindex, 0);
}

/* Latency buckets of bench_sink_lat, 1 us each; the last holds
 * LAT_BUCKETS - 1 us and more. */
#define LAT_BUCKETS 4096

/* URLLC frames by latency; written by bench_sink_lat, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LAT_BUCKETS);
} sink_lat SEC(".maps");

/* sink_frame counts the frame by kind and, when lat, a URLLC frame's
 * latency from its making; it drops the frame. */
static __always_inline int sink_frame(struct xdp_md *ctx, int lat)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	struct udphdr *udp = (void *)(iph + 1);
	__u32 kind = SINK_OTHER, bucket;
	__u64 made, d;

	bump(&sink_count, SINK_ALL);
	if (ctx->ingress_ifindex == sink_ifindex1)
		bump(&sink_count, SINK_SECOND);
	if ((void *)(iph + 1) <= data_end &&
	    eth->h_proto == bpf_htons(ETH_P_IP)) {
		if (iph->protocol == IPPROTO_GRE &&
		    (iph->daddr == sink_gre_remote ||
		     iph->daddr == sink_gre_remote2))
			kind = SINK_GRE;
		else if (iph->protocol == IPPROTO_UDP)
			kind = iph->ihl == 5 && (void *)(udp + 1) <= data_end &&
			       udp->dest == bpf_htons(2152) ? SINK_GTPU : SINK_UDP;
	}
	bump(&sink_count, kind);
	if (lat && kind == SINK_UDP && iph->ihl == 5 &&
	    (void *)(udp + 1) + sizeof(made) <= data_end &&
	    udp->dest == bpf_htons(URLLC_DPORT)) {
		__builtin_memcpy(&made, udp + 1, sizeof(made));
		d = (bpf_ktime_get_ns() - made) / 1000;
		bucket = d < LAT_BUCKETS - 1 ? d : LAT_BUCKETS - 1;
		bump(&sink_lat, bucket);
	}
	return XDP_DROP;
}

SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	return sink_frame(ctx, 0);
}

/* bench_sink_lat is bench_sink timing URLLC frames too. */
SEC("xdp")
int bench_sink_lat(struct xdp_md *ctx)
{
	return sink_frame(ctx, 1);
}

/* Frames bench_fwd left to the kernel; written by bench_fwd, read by Go,
 * which fails the figure if they are more than noise (the kernel would
 * forward them: the figure would time the kernel). Only the pass path
 * counts, so the forwarding path stays minimal. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} fwd_pass SEC(".maps");

/* bench_fwd forwards IPv4 as the kernel would and nothing more: what
 * bpf_fib_lookup cannot forward (no route, no neighbour, TTL running out,
 * anything not IPv4 without options) goes to the kernel. */
SEC("xdp")
int bench_fwd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);

	if ((void *)(iph + 1) > data_end ||
	    eth->h_proto != bpf_htons(ETH_P_IP) || iph->ihl != 5 ||
	    iph->ttl <= 1)
		goto pass;
	fib.family = 2; /* AF_INET */
	fib.tos = iph->tos;
	fib.l4_protocol = iph->protocol;
	fib.tot_len = bpf_ntohs(iph->tot_len);
	fib.ipv4_src = iph->saddr;
	fib.ipv4_dst = iph->daddr;
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) !=
	    BPF_FIB_LKUP_RET_SUCCESS)
		goto pass;
	ip4_dec_ttl(iph);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return bpf_redirect(fib.ifindex, 0);
pass:
	bump(&fwd_pass, 0);
	return XDP_PASS;
}

/* The two ways to send a packet out of two interfaces, timed bare (no
 * encap, no rules) for redundant steering's choice: a devmap broadcast
 * from XDP (the kernel copies the xdp_frame per interface), or TC's
 * bpf_clone_redirect on the skb the kernel built (an skb clone, then the
 * original redirected). Each sends the frame as it came to wan0 and wan1;
 * the sink counts both copies. */
volatile const __u32 dup_if0; /* wan0 */
volatile const __u32 dup_if1; /* wan1 */

/* The broadcast's interfaces (wan0 and wan1), written by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 2);
} dup_tx SEC(".maps");

SEC("xdp")
int bench_dup_bcast(struct xdp_md *ctx)
{
	return bpf_redirect_map(&dup_tx, 0, BPF_F_BROADCAST);
}

SEC("tc")
int bench_dup_clone(struct __sk_buff *skb)
{
	if (bpf_clone_redirect(skb, dup_if1, 0))
		return 2; /* TC_ACT_SHOT */
	return bpf_redirect(dup_if0, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
