/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Answering a packet too big for the route out (encap's path MTU, a NAT'd
 * packet's next hop) from XDP, so its sender learns the path MTU instead
 * of losing the packet silently: the ICMP builders of icmp.h, sent from
 * the address of the interface the packet came in on. */
#ifndef EDGE_TOO_BIG_H
#define EDGE_TOO_BIG_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "icmp.h"
#include "verdict.h"

/* edge_icmp_too_big answers the packet in ctx with ICMP fragmentation
 * needed / ICMPv6 packet too big advertising mtu, from the address of the
 * interface it arrived on (written by the agent into edge_ifaddrs; for
 * IPv4, fallback is used when it has none). Returns 0 when the reply is
 * ready to be sent back out of the interface it came in on. */
static __always_inline int edge_icmp_too_big(struct xdp_md *ctx,
					     const struct edge_pkt *p,
					     __u32 mtu, __be32 fallback4)
{
	const struct edge_ifaddr *a;
	__u32 idx = p->key.ifindex;

	a = bpf_map_lookup_elem(&edge_ifaddrs, &idx);
	if (p->key.family == 4)
		return edge_icmp_too_big4(ctx, mtu, a && a->v4 ? a->v4 : fallback4);
	if (!a || !a->has_v6)
		return -1;
	return edge_icmp_too_big6(ctx, mtu, (const struct in6_addr *)a->v6);
}

/* bucket_take takes one error of cost ns from bucket b (holding at most
 * burst ns of credit, refilled at one ns a ns) at now: 1, or 0 when it
 * has too little. */
static __always_inline int bucket_take(struct edge_bucket *b, __u64 now,
				       __u64 cost, __u64 burst)
{
	__u64 credit = b->credit_ns + (now - b->last_ns);

	b->last_ns = now;
	if (credit > burst)
		credit = burst;
	if (credit < cost) {
		b->credit_ns = credit;
		return 0;
	}
	b->credit_ns = credit - cost;
	return 1;
}

/* icmp_src_allowed takes one ICMP error from the share of p's source (an
 * IPv4 address, an IPv6 /64): refilled at EDGE_ICMP_SRC_RATE a second,
 * holding at most EDGE_ICMP_SRC_BURST. A source not seen yet starts with
 * a full one. Two CPUs answering one source at once may both take from
 * its share: it lends a few errors at most, never another source's. */
static __always_inline int icmp_src_allowed(const struct edge_pkt *p, __u64 now)
{
	const __u64 cost = 1000000000ull / EDGE_ICMP_SRC_RATE;
	struct edge_icmp_src_key k = {};
	struct edge_bucket *b, nb;

	if (p->key.family == 4)
		__builtin_memcpy(k.addr, p->key.src, 4);
	else
		__builtin_memcpy(k.addr, p->key.src, 8);
	k.family = p->key.family;
	b = bpf_map_lookup_elem(&edge_icmp_src, &k);
	if (b)
		return bucket_take(b, now, cost, EDGE_ICMP_SRC_BURST * cost);
	nb.last_ns = now;
	nb.credit_ns = (EDGE_ICMP_SRC_BURST - 1) * cost;
	bpf_map_update_elem(&edge_icmp_src, &k, &nb, BPF_NOEXIST);
	return 1;
}

/* icmp_allowed takes one ICMP error for the packet in p: from its
 * source's share first (a source over its share is refused without
 * spending the CPU's), then from this CPU's bucket, refilled at
 * EDGE_ICMP_RATE a second, holding at most EDGE_ICMP_BURST: what all
 * sources together get, however many a flood spoofs. *reason: why not
 * (EDGE_R_ICMP_SRC_LIMIT, EDGE_R_ICMP_LIMIT). The clock is read only
 * here, when a packet is to be answered. */
static __always_inline int icmp_allowed(const struct edge_pkt *p, int *reason)
{
	const __u64 cost = 1000000000ull / EDGE_ICMP_RATE;
	struct edge_bucket *b;
	__u32 zero = 0;
	__u64 now;

	now = bpf_ktime_get_ns();
	*reason = EDGE_R_ICMP_SRC_LIMIT;
	if (!icmp_src_allowed(p, now))
		return 0;
	*reason = EDGE_R_ICMP_LIMIT;
	b = bpf_map_lookup_elem(&edge_icmp_bucket, &zero);
	return b && bucket_take(b, now, cost, EDGE_ICMP_BURST * cost);
}

/* answer_too_big ends the pipeline with the answer, sent back out of the
 * interface the packet came in on (send_back). No answer (mtu below the
 * IPv4 minimum, a packet that must not be answered, or more errors than
 * the rate allows): dropped, counted. */
static __always_inline int answer_too_big(struct xdp_md *ctx,
					  const struct edge_pkt *p, __u32 mtu,
					  __be32 fallback4)
{
	int reason;

	if (mtu < 68)
		return punt(p, EDGE_R_MTU_DROP, XDP_DROP);
	if (!icmp_allowed(p, &reason))
		return punt(p, reason, XDP_DROP);
	if (edge_icmp_too_big(ctx, p, mtu, fallback4))
		return punt(p, EDGE_R_MTU_DROP, XDP_DROP);
	return punt(p, EDGE_R_MTU_ICMP, send_back(p));
}

#endif
