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

/* icmp_allowed takes one ICMP error from this CPU's bucket: refilled at
 * EDGE_ICMP_RATE a second, holding at most EDGE_ICMP_BURST. The clock is
 * read only here, when a packet is to be answered. */
static __always_inline int icmp_allowed(void)
{
	const __u64 cost = 1000000000ull / EDGE_ICMP_RATE;
	struct edge_bucket *b;
	__u32 zero = 0;
	__u64 now;

	b = bpf_map_lookup_elem(&edge_icmp_bucket, &zero);
	if (!b)
		return 0;
	now = bpf_ktime_get_ns();
	b->credit_ns += now - b->last_ns;
	b->last_ns = now;
	if (b->credit_ns > EDGE_ICMP_BURST * cost)
		b->credit_ns = EDGE_ICMP_BURST * cost;
	if (b->credit_ns < cost)
		return 0;
	b->credit_ns -= cost;
	return 1;
}

/* answer_too_big ends the pipeline with the answer: sent back out of the
 * interface the packet came in on, through the devmap rather than
 * XDP_TX. A veth flushes XDP_TX frames to its peer only when the peer
 * runs an XDP program (veth_xdp_flush), so toward a host whose veth has
 * only GRO's NAPI the reply waited for the next frame redirected there; a
 * redirect is flushed at the end of the poll. No answer (mtu below the
 * IPv4 minimum, a packet that must not be answered, or more errors than
 * the rate allows): dropped, counted. */
static __always_inline int answer_too_big(struct xdp_md *ctx,
					  const struct edge_pkt *p, __u32 mtu,
					  __be32 fallback4)
{
	if (mtu < 68)
		return punt(p, EDGE_R_MTU_DROP, XDP_DROP);
	if (!icmp_allowed())
		return punt(p, EDGE_R_ICMP_LIMIT, XDP_DROP);
	if (edge_icmp_too_big(ctx, p, mtu, fallback4))
		return punt(p, EDGE_R_MTU_DROP, XDP_DROP);
	return punt(p, EDGE_R_MTU_ICMP,
		    bpf_redirect_map(&edge_tx, p->key.ifindex, XDP_TX));
}

#endif
