/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Redundant steering (3GPP ATSSS's redundant mode, HELIOS's FAR
 * "duplicate"): every packet of a redundant group goes over each of its
 * usable members, one copy per path.
 *
 * XDP cannot clone a frame, but a devmap broadcast can: the packet is
 * encapsulated once, for the first usable member, with the group's
 * sequence number and its index in the outer IPv4 id, and redirected
 * with BPF_F_BROADCAST to the group's devmap, which holds each member's
 * egress interface. The kernel copies the frame for every interface and
 * runs edge_dup_out on each copy before it is sent: it finds the member
 * that leaves by that interface and rewrites the outer headers for its
 * path (addresses, key, TTL, DSCP, Ethernet next hop). Members must
 * leave by different interfaces (the config says so).
 *
 * Next hops: before the broadcast, the members' next hops are made fresh
 * in this CPU's edge_path_nh; the copies are sent from this CPU's devmap
 * queue, so edge_dup_out finds them there. */
#ifndef EDGE_DUP_H
#define EDGE_DUP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "../edge_maps.h"
#include "fib.h"
#include "gre.h"
#include "verdict.h"

/* dup_path returns member far index fi's path in slot gen & 1, or NULL
 * when it is no encap FAR. */
static __always_inline const struct edge_path *dup_path(__u32 gen, __u32 fi)
{
	const struct edge_far *m = far_get(gen, fi);
	__u32 pi;

	if (!m || m->action != EDGE_ACT_ENCAP)
		return NULL;
	pi = (gen & 1) * EDGE_MAX_PATHS + (m->path & (EDGE_MAX_PATHS - 1));
	return bpf_map_lookup_elem(&edge_paths, &pi);
}

/* dup_hop_fresh tells whether nh is path's next hop for this FIB epoch
 * and an outer packet of olen bytes (nh_valid, keyed as encap keys a
 * path's next hop). */
static __always_inline int dup_hop_fresh(const struct edge_nh *nh,
					 const struct edge_path *path,
					 __u32 epoch, __u32 olen)
{
	__u64 key[3] = {path->local | (__u64)path->remote << 32, 0, 0};

	return nh_valid(nh, key, path->ifindex, epoch, olen);
}

/* edge_dup_hops makes the next hop of each member in ok of redundant
 * group g (slot c->gen & 1) fresh in this CPU's edge_path_nh (asking the
 * FIB where it is not), for outer packets of olen bytes; c->hop is
 * scratch. A member whose next hop the FIB does not give is left stale:
 * edge_dup_out drops its copy. A global function: verified once, not at
 * every place the pipeline may reach it. Returns 0. */
__noinline int edge_dup_hops(struct xdp_md *ctx, struct edge_ctx *c, __u32 g,
			     __u32 ok, __u32 olen)
{
	const struct edge_steer_group *s;
	const struct edge_state *st;
	const struct edge_path *path;
	struct edge_nh *nh;
	__u32 i, ni, mtu, si, zero = 0;
	__u64 key[3] = {};

	if (!c)
		return 0;
	st = bpf_map_lookup_elem(&edge_global, &zero);
	si = (c->gen & 1) * EDGE_MAX_STEER + (g & (EDGE_MAX_STEER - 1));
	s = bpf_map_lookup_elem(&edge_steer, &si);
	if (!st || !s)
		return 0;
	for (i = 0; i < EDGE_STEER_MEMBERS; i++) {
		if (i >= s->n)
			break;
		if (!(ok >> i & 1))
			continue;
		path = dup_path(c->gen, s->far[i]);
		if (!path)
			continue;
		ni = path->stats & (EDGE_MAX_PATHS - 1);
		nh = bpf_map_lookup_elem(&edge_path_nh, &ni);
		if (!nh || dup_hop_fresh(nh, path, st->fib_epoch, olen))
			continue;
		if (path_resolve(ctx, path, olen, c->p.key.ifindex, &c->hop,
				 st->fib_epoch, &mtu))
			continue;
		key[0] = path->local | (__u64)path->remote << 32;
		nh_keep(nh, key, path->ifindex, st->fib_epoch, &c->hop);
	}
	return 0;
}

/* edge_dup_first returns the FAR of redundant group s's (index g) first
 * usable member, for the packet to be encapsulated for and broadcast (see
 * above), with every usable member's next hop made fresh. NULL: the
 * packet is done, *rc its verdict. */
static __always_inline const struct edge_far *
edge_dup_first(struct xdp_md *ctx, struct edge_ctx *c,
	       const struct edge_steer_group *s, __u32 g, __u32 epoch, int *rc)
{
	const struct edge_path *first;
	const struct edge_far *far;
	__u32 *okp, ok, i, olen, n = s->n;

	okp = bpf_map_lookup_elem(&edge_steer_ok, &g);
	ok = okp ? *okp : 0;
	if (n < EDGE_STEER_MEMBERS)
		ok &= (1U << n) - 1;
	if (!ok)
		goto none;
	for (i = 0; i < EDGE_STEER_MEMBERS - 1; i++)
		if (ok >> i & 1)
			break;
	far = far_get(c->gen, s->far[i]);
	first = dup_path(c->gen, s->far[i]);
	if (!far || !first)
		goto none;
	/* Outer IPv4 + GRE with sequence number (and key: every member has
	 * one or none) + the inner packet. */
	olen = sizeof(struct iphdr) + 8 + (first->flags & EDGE_PF_KEY ? 4 : 0) +
	       c->p.l3_len;
	edge_dup_hops(ctx, c, g, ok, olen);
	return far;
none:
	*rc = punt(&c->p, EDGE_R_STEER_NONE, XDP_DROP);
	return NULL;
}

/* edge_dup_out turns the broadcast copy in ctx into the one for the
 * member of its group that leaves by interface oif: the outer headers
 * rewritten for that member's path, its next hop from this CPU's
 * edge_path_nh. Returns the verdict (XDP_PASS sends it). */
static __always_inline int edge_dup_out(struct xdp_md *ctx, __u32 oif)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + sizeof(*eth);
	const struct edge_steer_group *s;
	const struct edge_path *path = NULL, *pt;
	const struct edge_state *st;
	struct edge_nh *nh;
	__u32 zero = 0, g, si, i, ni, *okp;
	__be32 *opt = (void *)(iph + 1);
	__u8 tos;

	if ((void *)(opt + 2) > data_end || iph->protocol != IPPROTO_GRE ||
	    !iph->id)
		return XDP_PASS;
	g = (bpf_ntohs(iph->id) - 1) & (EDGE_MAX_STEER - 1);
	st = bpf_map_lookup_elem(&edge_global, &zero);
	okp = bpf_map_lookup_elem(&edge_steer_ok, &g);
	if (!st || !okp)
		goto drop;
	si = (st->gen & 1) * EDGE_MAX_STEER + g;
	s = bpf_map_lookup_elem(&edge_steer, &si);
	if (!s)
		goto drop;
	for (i = 0; i < EDGE_STEER_MEMBERS; i++) {
		if (i >= s->n)
			break;
		pt = dup_path(st->gen, s->far[i]);
		if (pt && pt->ifindex == oif) {
			path = pt;
			break;
		}
	}
	if (!path || !(*okp >> i & 1))
		goto drop;
	ni = path->stats & (EDGE_MAX_PATHS - 1);
	nh = bpf_map_lookup_elem(&edge_path_nh, &ni);
	if (!dup_hop_fresh(nh, path, st->fib_epoch, bpf_ntohs(iph->tot_len)))
		goto drop;

	__builtin_memcpy(eth->h_dest, nh->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, nh->smac, ETH_ALEN);
	tos = iph->tos;
	if (path->flags & EDGE_PF_DSCP_FIXED)
		tos = (path->dscp << 2) | (tos & 3);
	iph->tos = tos;
	iph->id = 0;
	iph->ttl = path->ttl;
	iph->saddr = path->local;
	iph->daddr = path->remote;
	iph->check = ip4_csum_gre(tos, iph->tot_len, 0, path->ttl, path->local,
				  path->remote);
	if (path->flags & EDGE_PF_KEY)
		opt[1] = path->key;
	count(&edge_path_stats, ni * 2, (__u32)(data_end - data));
	return XDP_PASS;
drop:
	count(&edge_reasons, EDGE_R_DUP_NO_COPY, (__u32)(data_end - data));
	return XDP_DROP;
}

#endif
