/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* FAR execution: pass, drop, redirect with the next hop from the kernel's
 * FIB, cached per flow until the agent bumps the FIB epoch (it watches
 * route, neighbour, address and link changes over netlink). The kernel's
 * routes and neighbours stay the source of truth; when
 * XDP cannot finish the job (no neighbour, TTL expiry, MTU) the packet is
 * handed to the kernel, which resolves or answers with ICMP. */
#ifndef EDGE_FORWARD_H
#define EDGE_FORWARD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "csum.h"
#include "parse.h"

#ifndef AF_INET
#define AF_INET 2
#define AF_INET6 10
#endif

/* count adds one packet of len bytes to a per-CPU counter array. */
static __always_inline void count(void *map, __u32 idx, __u32 len)
{
	struct edge_ctr *c = bpf_map_lookup_elem(map, &idx);

	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

/* punt ends the pipeline with verdict, counting reason. */
static __always_inline int punt(struct edge_pkt *p, enum edge_reason reason,
				int verdict)
{
	count(&edge_reasons, reason, p->len);
	count(&edge_verdicts, verdict, p->len);
	return verdict;
}

/* fib_resolve asks the kernel's FIB for the next hop described by fib
 * (family, addresses, tot_len filled by the caller) out of interface oif
 * and caches it in fl. The lookup is done as output on oif
 * (BPF_FIB_LOOKUP_OUTPUT), so only routes through that interface are
 * candidates; oif 0 takes whichever interface the route leaves by, as the
 * kernel would route the packet from iif. Returns 0 on success or the
 * edge_reason to punt with; on EDGE_R_FRAG_NEEDED *mtu is the largest L3
 * length the route takes. */
static __always_inline int fib_resolve(struct xdp_md *ctx,
				       struct bpf_fib_lookup *fib, __u32 oif,
				       __u32 iif, struct edge_flow *fl,
				       __u32 epoch, __u32 *mtu)
{
	__u16 len3 = fib->tot_len;
	long rc;

	fib->ifindex = oif ? oif : iif;
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib),
			    oif ? BPF_FIB_LOOKUP_OUTPUT : 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return EDGE_R_NO_NEIGH;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		*mtu = fib->mtu_result;
		return EDGE_R_FRAG_NEEDED;
	default:
		if (!oif)
			return EDGE_R_FIB_FAIL;
		/* IPv4 output lookups skip next hops on other interfaces
		 * (fib_lookup_good_nhc), so "no route via oif" looks like no
		 * route at all: ask again as the kernel would route it, to
		 * tell the operator which. */
		fib->ifindex = iif;
		if (bpf_fib_lookup(ctx, fib, sizeof(*fib), 0) ==
			    BPF_FIB_LKUP_RET_SUCCESS &&
		    fib->ifindex != oif)
			return EDGE_R_ROUTE_MISMATCH;
		return EDGE_R_FIB_FAIL;
	}
	if (!oif)
		oif = fib->ifindex;
	if (fib->ifindex != oif)
		return EDGE_R_ROUTE_MISMATCH;
	/* A flow keeps its cached next hop for lengths up to the largest the
	 * kernel's MTU check has passed; a longer packet asks again. */
	if (fl->fib_epoch != epoch || fl->oif != oif)
		fl->ok_len = 0;
	if (len3 > fl->ok_len)
		fl->ok_len = len3;
	fl->oif = oif;
	__builtin_memcpy(fl->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(fl->smac, fib->smac, ETH_ALEN);
	fl->fib_epoch = epoch;
	return 0;
}

/* next_hop_ok tells whether fl holds a next hop out of oif (any, for 0),
 * valid in this FIB epoch, for an L3 packet of len3 bytes. */
static __always_inline int next_hop_ok(const struct edge_flow *fl, __u32 oif,
				       __u32 epoch, __u32 len3)
{
	return fl->fib_epoch == epoch && (!oif || fl->oif == oif) &&
	       len3 <= fl->ok_len;
}

/* ttl_expires tells whether forwarding the packet would take its TTL or
 * hop limit to 0 (a header too short counts as not: the caller checks). */
static __always_inline int ttl_expires(struct xdp_md *ctx,
				       const struct edge_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + (p->l3_off & 0x7f);
	struct ipv6hdr *ip6 = (void *)iph;

	if (p->key.family == 4)
		return (void *)(iph + 1) <= data_end && iph->ttl <= 1;
	return (void *)(ip6 + 1) <= data_end && ip6->hop_limit <= 1;
}

/* redirect_hop forwards the packet out of far->ifindex to the next hop
 * cached in fl, asking the FIB first when fl has none for this epoch.
 * Returns the verdict, or -reason when the FIB gave no next hop (the
 * packet untouched; on EDGE_R_FRAG_NEEDED *mtu is the route's). */
static __always_inline int redirect_hop(struct xdp_md *ctx, struct edge_pkt *p,
					const struct edge_far *far,
					struct edge_flow *fl, __u32 epoch,
					__u32 *mtu)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = NULL;
	struct ipv6hdr *ip6 = NULL;
	__u32 len3; /* IP length, as the kernel's MTU check counts it */
	int reason;

	/* A tagged frame belongs to a VLAN sub-interface, which XDP cannot
	 * transmit on: the kernel routes it. */
	if (p->vlans)
		return punt(p, EDGE_R_VLAN_FWD, XDP_PASS);
	if (p->key.family == 4) {
		iph = data + sizeof(*eth);
		if ((void *)(iph + 1) > data_end)
			return punt(p, EDGE_R_BAD_IP4, XDP_DROP);
		if (iph->ttl <= 1)
			return punt(p, EDGE_R_TTL, XDP_PASS);
		len3 = bpf_ntohs(iph->tot_len);
	} else {
		ip6 = data + sizeof(*eth);
		if ((void *)(ip6 + 1) > data_end)
			return punt(p, EDGE_R_BAD_IP6, XDP_DROP);
		if (ip6->hop_limit <= 1)
			return punt(p, EDGE_R_TTL, XDP_PASS);
		len3 = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	}

	if (!next_hop_ok(fl, far->ifindex, epoch, len3)) {
		struct bpf_fib_lookup fib = {};

		fib.l4_protocol = p->key.proto;
		fib.sport = p->key.sport;
		fib.dport = p->key.dport;
		fib.tot_len = len3;
		if (iph) {
			fib.family = AF_INET;
			fib.tos = iph->tos;
			fib.ipv4_src = iph->saddr;
			fib.ipv4_dst = iph->daddr;
		} else if (ip6) {
			fib.family = AF_INET6;
			fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
			__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
			__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
		}
		reason = fib_resolve(ctx, &fib, far->ifindex, p->key.ifindex,
				     fl, epoch, mtu);
		if (reason)
			return -reason;
	}

	if (iph)
		ip4_dec_ttl(iph);
	else if (ip6)
		ip6->hop_limit--;
	__builtin_memcpy(eth->h_dest, fl->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fl->smac, ETH_ALEN);

	if (bpf_redirect_map(&edge_tx, fl->oif, XDP_ABORTED) != XDP_REDIRECT)
		return punt(p, EDGE_R_NO_TX, XDP_DROP);
	count(&edge_verdicts, XDP_REDIRECT, p->len);
	return XDP_REDIRECT;
}

/* edge_redirect is redirect_hop, handing the packet to the kernel when the
 * FIB gives no next hop (it resolves the neighbour, or answers ICMP). */
static __always_inline int edge_redirect(struct xdp_md *ctx, struct edge_pkt *p,
					 const struct edge_far *far,
					 struct edge_flow *fl, __u32 epoch)
{
	__u32 mtu = 0;
	int rc = redirect_hop(ctx, p, far, fl, epoch, &mtu);

	return rc < 0 ? punt(p, -rc, XDP_PASS) : rc;
}

#include "gre.h"
#include "balance.h"

/* edge_act carries out a FAR. */
static __always_inline int edge_act(struct xdp_md *ctx, struct edge_pkt *p,
				    const struct edge_far *far,
				    struct edge_flow *fl, __u32 epoch)
{
	switch (far->action) {
	case EDGE_ACT_PASS:
		count(&edge_verdicts, XDP_PASS, p->len);
		return XDP_PASS;
	case EDGE_ACT_REDIRECT:
		return edge_redirect(ctx, p, far, fl, epoch);
	case EDGE_ACT_ENCAP:
		return edge_encap(ctx, p, far, fl, epoch);
	case EDGE_ACT_DECAP:
		return edge_decap(ctx, p, fl->gen & 1);
	case EDGE_ACT_NAT:
	case EDGE_ACT_UNNAT: {
		int reason, src, rc;
		__u32 mtu = 0;

		/* XDP cannot send on a VLAN sub-interface; the kernel would
		 * not know the VIP: drop, counted. */
		if (p->vlans)
			return punt(p, EDGE_R_VLAN_FWD, XDP_DROP);
		/* A packet whose TTL runs out here goes to the kernel as it
		 * came, so its time-exceeded quotes what the client sent. */
		if (ttl_expires(ctx, p))
			return punt(p, EDGE_R_TTL, XDP_PASS);
		src = far->action == EDGE_ACT_UNNAT;
		reason = edge_nat_rewrite(ctx, p, far->addr, far->port, src);
		if (reason)
			return punt(p, reason, XDP_DROP);
		rc = redirect_hop(ctx, p, far, fl, epoch, &mtu);
		if (rc != -EDGE_R_FRAG_NEEDED)
			return rc < 0 ? punt(p, -rc, XDP_PASS) : rc;
		/* Too big for the route out: the kernel, handed the rewritten
		 * packet, would tell its new address (the VIP, or the
		 * backend), not its sender. Put it back as it came and answer
		 * the sender from here, out of the interface it came in on
		 * (a redirect, flushed at the end of the poll, as edge_encap
		 * does). */
		if (edge_nat_rewrite(ctx, p, src ? p->key.src : p->key.dst,
				     src ? p->key.sport : p->key.dport, src) ||
		    mtu < 68 || edge_icmp_too_big(ctx, p, mtu, 0))
			return punt(p, EDGE_R_MTU_DROP, XDP_DROP);
		return punt(p, EDGE_R_MTU_ICMP,
			    bpf_redirect_map(&edge_tx, p->key.ifindex, XDP_TX));
	}
	case EDGE_ACT_DROP:
	default:
		count(&edge_verdicts, XDP_DROP, p->len);
		return XDP_DROP;
	}
}

#endif
