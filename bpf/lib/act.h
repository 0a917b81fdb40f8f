/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* FAR execution: what a packet's decision says is done to it. Decap is
 * not among the actions here: the pipeline strips the outer headers and
 * decides the inner packet before it acts (pipeline.h). */
#ifndef EDGE_ACT_H
#define EDGE_ACT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "fib.h"
#include "gre.h"
#include "nat.h"
#include "too_big.h"
#include "verdict.h"

/* act_nat rewrites a balanced packet toward its backend (nat) or a reply
 * back from the VIP (unnat) and forwards it. A new connection to a
 * backend shares the backend's next hop with the earlier ones (edge_dst_nh)
 * while the kernel routes by destination alone. */
static __always_inline int act_nat(struct xdp_md *ctx, const struct edge_pkt *p,
				   const struct edge_far *far,
				   struct edge_flow *fl, __u32 epoch)
{
	int reason, src, rc;
	__u32 mtu = 0;

	/* XDP cannot send on a VLAN sub-interface; the kernel would not
	 * know the VIP: drop, counted. */
	if (p->vlans)
		return punt(p, EDGE_R_VLAN_FWD, XDP_DROP);
	/* A packet whose TTL runs out here goes to the kernel as it came, so
	 * its time-exceeded quotes what the client sent. */
	if (ttl_expires(ctx, p))
		return punt(p, EDGE_R_TTL, XDP_PASS);
	src = far->action == EDGE_ACT_UNNAT;
	reason = edge_nat_rewrite(ctx, p, far->addr, far->port, src);
	if (reason)
		return punt(p, reason, XDP_DROP);
	rc = redirect_hop(ctx, p, far->ifindex, fl, epoch, &mtu);
	if (rc != -EDGE_R_FRAG_NEEDED)
		return rc < 0 ? punt(p, -rc, XDP_PASS) : rc;
	/* Too big for the route out: the kernel, handed the rewritten packet,
	 * would tell its new address (the VIP, or the backend), not its
	 * sender. Put it back as it came and answer the sender from here. */
	if (edge_nat_rewrite(ctx, p, src ? p->key.src : p->key.dst,
			     src ? p->key.sport : p->key.dport, src))
		return punt(p, EDGE_R_MTU_DROP, XDP_DROP);
	return answer_too_big(ctx, p, mtu, 0);
}

/* edge_act carries out FAR far on the packet, with fl the flow's entry
 * (its next hop cache); dup: redundant group index + 1 (dup.h), or 0. */
static __always_inline int edge_act(struct xdp_md *ctx, const struct edge_pkt *p,
				    const struct edge_far *far,
				    struct edge_flow *fl, __u32 epoch, __u32 dup)
{
	switch (far->action) {
	case EDGE_ACT_PASS:
		return verdict(p, XDP_PASS);
	case EDGE_ACT_REDIRECT:
		return edge_redirect(ctx, p, far->ifindex, fl, epoch);
	case EDGE_ACT_ENCAP:
		return edge_encap(ctx, p, far, fl, epoch, dup);
	case EDGE_ACT_NAT:
	case EDGE_ACT_UNNAT:
		return act_nat(ctx, p, far, fl, epoch);
	case EDGE_ACT_DROP:
	default:
		return verdict(p, XDP_DROP);
	}
}

#endif
