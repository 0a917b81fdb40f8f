/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* GRE overlays (RFC 2784, key and sequence numbers of RFC 2890): encap
 * toward a path's remote gateway, and decap of what comes back down to
 * the inner packet, which the pipeline then classifies like any other. */
#ifndef EDGE_GRE_H
#define EDGE_GRE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "../edge_maps.h"
#include "csum.h"
#include "dedup.h"
#include "fib.h"
#include "parse.h"
#include "probe.h"
#include "proto.h"
#include "tcprtt.h"
#include "too_big.h"
#include "verdict.h"

/* ip4_csum_gre is the header checksum of the outer IPv4 header encap
 * writes (no options, DF, protocol GRE), summed from the values
 * rather than read back: 16-bit words as they lie in memory. */
static __always_inline __u16 ip4_csum_gre(__u8 tos, __be16 tot_len, __be16 id,
					  __u8 ttl, __be32 saddr, __be32 daddr)
{
	const union {
		__u8 b[2];
		__u16 w;
	} vt = {.b = {0x45, tos}}, tp = {.b = {ttl, IPPROTO_GRE}};
	__u32 sum;

	sum = vt.w + tot_len + id + IP4_DF + tp.w + (saddr & 0xffff) +
	      (saddr >> 16) + (daddr & 0xffff) + (daddr >> 16);
	return csum_fold(sum);
}

/* path_resolve asks the FIB for the next hop of path's outer packets of
 * olen bytes, as fib_resolve (iif: the packet's ingress), into fl. */
static __always_inline int path_resolve(struct xdp_md *ctx,
					const struct edge_path *path,
					__u32 olen, __u32 iif,
					struct edge_flow *fl, __u32 epoch,
					__u32 *mtu)
{
	struct bpf_fib_lookup fib = {
		.family = AF_INET,
		.l4_protocol = IPPROTO_GRE,
		.tot_len = olen,
		.ipv4_src = path->local,
		.ipv4_dst = path->remote,
	};

	return fib_resolve(ctx, &fib, path->ifindex, iif, fl, epoch, mtu);
}

/* edge_encap puts the packet into GRE toward far's path: outer IPv4 from
 * the path's local to its remote address, TTL from the path, DSCP copied
 * from the inner packet (or fixed by the path) and ECN copied (RFC 6040
 * normal mode), DF set. The inner packet is routed like any other (TTL or
 * hop limit decremented). The outer next hop is cached in the flow. A
 * packet too big for the path is answered with ICMP too-big.
 *
 * dup, when not 0, is a redundant group's index + 1 (dup.h): the packet
 * gets the group's sequence number, the index in the outer IPv4 id, and
 * is broadcast to the group's devmap. */
static __always_inline int edge_encap(struct xdp_md *ctx,
				      const struct edge_pkt *p,
				      const struct edge_far *far,
				      struct edge_flow *fl, __u32 epoch,
				      __u32 dup)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct edge_path *path;
	struct edge_nh *nh = NULL;
	struct ethhdr *eth = data;
	struct iphdr *iph = NULL, *outer;
	struct ipv6hdr *ip6 = NULL;
	__u32 pi, len3 = p->l3_len, olen, hlen = 4, mtu = 0;
	__u8 family = p->key.family, seq_on;
	__u64 nhkey[3];
	void *tx;
	void *l3;
	__be16 inner_proto;
	__be32 *opt;
	__u8 tos;
	int reason;

	pi = (fl->gen & 1) * EDGE_MAX_PATHS + (far->path & (EDGE_MAX_PATHS - 1));
	path = bpf_map_lookup_elem(&edge_paths, &pi);
	if (!path)
		return punt(p, EDGE_R_NO_STATE, XDP_DROP);
	/* TCP: the path's passive RTT sample, while none is in flight. */
	if (p->key.proto == IPPROTO_TCP && p->l4_off)
		edge_tcp_rtt_out(ctx, edge_ctx_of(p), path->stats, path->ifindex);
	l3 = hop_check(ctx, p, family, &reason);
	if (!l3)
		return reason;
	if (family == 4) {
		iph = l3;
		tos = iph->tos;
		inner_proto = bpf_htons(ETH_P_IP);
	} else {
		ip6 = l3;
		tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		inner_proto = bpf_htons(ETH_P_IPV6);
	}
	hide_choice(iph, ip6);
	if (path->flags & EDGE_PF_KEY)
		hlen += 4;
	seq_on = dup || (path->flags & EDGE_PF_SEQ);
	if (seq_on)
		hlen += 4;
	olen = sizeof(struct iphdr) + hlen + len3;

	if (!next_hop_ok(fl, path->ifindex, epoch, olen)) {
		__u32 ni = path->stats & (EDGE_MAX_PATHS - 1);

		/* The path's next hop, resolved by an earlier flow. */
		nhkey[0] = path->local | (__u64)path->remote << 32;
		nhkey[1] = 0;
		nhkey[2] = 0;
		nh = bpf_map_lookup_elem(&edge_path_nh, &ni);
		nh_take(nh, nhkey, path->ifindex, epoch, olen, fl);
	}
	if (!next_hop_ok(fl, path->ifindex, epoch, olen)) {
		reason = path_resolve(ctx, path, olen, p->key.ifindex, fl,
				      epoch, &mtu);
		if (reason == EDGE_R_FRAG_NEEDED) {
			/* The inner packet may be at most the route's MTU
			 * less what encapsulation adds. */
			mtu = mtu > olen - len3 ? mtu - (olen - len3) : 0;
			return answer_too_big(ctx, p, mtu, path->local);
		}
		/* Handing an unencapsulated packet to the kernel would send it
		 * out in the clear: drop, counted. The agent keeps path next
		 * hops resolved. */
		if (reason)
			return punt(p, reason, XDP_DROP);
		if (nh)
			nh_keep(nh, nhkey, path->ifindex, epoch, fl);
	}

	outer = encap_push(ctx, p, iph, ip6, fl, sizeof(struct iphdr) + hlen);
	if (!outer)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	data_end = (void *)(long)ctx->data_end;
	opt = (void *)(outer + 1);
	/* Ethernet + outer IPv4 + the longest GRE header (12 bytes). */
	if ((void *)(opt + 3) > data_end)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);

	outer->version = 4;
	outer->ihl = 5;
	if (path->flags & EDGE_PF_DSCP_FIXED)
		tos = (path->dscp << 2) | (tos & 3);
	outer->tos = tos;
	outer->tot_len = bpf_htons(olen);
	/* 0, or a redundant group's mark (dup.h) */
	outer->id = bpf_htons(dup & 0xffff);
	outer->frag_off = IP4_DF;
	outer->ttl = path->ttl;
	outer->protocol = IPPROTO_GRE;
	outer->saddr = path->local;
	outer->daddr = path->remote;
	outer->check = ip4_csum_gre(tos, bpf_htons(olen), bpf_htons(dup & 0xffff), path->ttl,
				    path->local, path->remote);

	((__be16 *)opt)[0] = ((path->flags & EDGE_PF_KEY) ? GRE_F_KEY : 0) |
			     (seq_on ? GRE_F_SEQ : 0);
	((__be16 *)opt)[1] = inner_proto;
	opt++;
	if (path->flags & EDGE_PF_KEY)
		*opt++ = path->key;
	if (seq_on) {
		__u32 si = path->stats & (EDGE_MAX_PATHS - 1);
		__u32 *seq = dup ? bpf_map_lookup_elem(&edge_dup_seq, &(__u32){(dup - 1) & (EDGE_MAX_STEER - 1)})
				 : bpf_map_lookup_elem(&edge_path_seq, &si);

		if (opt + 1 > (__be32 *)data_end)
			return punt(p, EDGE_R_ADJUST, XDP_DROP);
		*opt = bpf_htonl(seq ? __sync_fetch_and_add(seq, 1) : 0);
	}

	if (dup) {
		/* Each copy is counted with its path as it leaves. */
		tx = bpf_map_lookup_elem(&edge_dup_tx,
					 &(__u32){(dup - 1) & (EDGE_MAX_STEER - 1)});
		if (!tx || bpf_redirect_map(tx, 0, BPF_F_BROADCAST) !=
				   XDP_REDIRECT)
			return punt(p, EDGE_R_NO_TX, XDP_DROP);
		return verdict(p, XDP_REDIRECT);
	}
	count(&edge_path_stats, (path->stats & (EDGE_MAX_PATHS - 1)) * 2,
	      sizeof(*eth) + olen);
	if (bpf_redirect_map(&edge_tx, fl->oif, XDP_ABORTED) != XDP_REDIRECT)
		return punt(p, EDGE_R_NO_TX, XDP_DROP);
	return verdict(p, XDP_REDIRECT);
}

/* decap_path returns the stable index + 1 of the path the GRE packet p
 * belongs to (outer destination and key name a path of the slot, and the
 * outer source is its remote), or 0. The outer addresses and key are
 * p's flow key, so the answer holds for the flow for a generation: the
 * caller keeps it in the flow entry. */
static __always_inline __u32 decap_path(const struct edge_pkt *p, __u32 slot)
{
	struct edge_decap_key dk = {};
	const struct edge_decap *d;

	dk.slot = slot;
	__builtin_memcpy(&dk.local, p->key.dst, 4);
	if (p->key.flags & EDGE_KF_GRE_KEY) {
		dk.key = p->key.gre_key;
		dk.has_key = 1;
	}
	d = bpf_map_lookup_elem(&edge_decaps, &dk);
	if (!d || d->remote != *(const __be32 *)p->key.src)
		return 0;
	return (d->stats & (EDGE_MAX_PATHS - 1)) + 1;
}

/* decap_check tells whether the GRE packet in c->p is addressed to one of
 * our paths (outer destination, key and source must match a path of this
 * generation): it returns the path's stable index + 1, or 0 with the
 * packet dropped and counted. fl is the packet's flow entry: the path is
 * looked up once per flow and generation and kept there. */
static __always_inline __u32 decap_check(struct edge_ctx *c,
					 struct edge_flow *fl, int *rc)
{
	const struct edge_pkt *p = &c->p;
	__u32 path;

	if (p->key.family != 4 || p->key.proto != IPPROTO_GRE ||
	    !p->gre_hlen || p->vlans)
		goto no_path;
	path = fl->path;
	if (!path) {
		path = decap_path(p, c->gen & 1);
		if (!path)
			goto no_path;
		fl->path = path;
	}
	return path;
no_path:
	*rc = punt(p, EDGE_R_GRE_NO_PATH, XDP_DROP);
	return 0;
}

/* edge_decap parses the inner packet of the GRE packet in c->p, which
 * decap_check found to belong to path (stable index + 1), into c->p,
 * marked with the path it came by (key.path), strips Ethernet, outer IPv4
 * and GRE, and puts an Ethernet header back in front of the inner packet
 * for the pipeline to classify. The inner packet is checked as strictly
 * as any packet and must fill the outer datagram exactly, before anything
 * is changed or counted. p->len stays the length of the frame as it was
 * received, which every counter counts. Returns EDGE_GO_ON, or the
 * verdict the packet got. */
static __always_inline int edge_decap(struct xdp_md *ctx, struct edge_ctx *c,
				      __u32 path)
{
	struct edge_pkt *p = &c->p;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 inner_off, len = p->len, ifindex = p->key.ifindex;
	struct hdr_cursor cur;
	struct ethhdr *eth;
	void *outer_end;
	__be16 *gre, proto;
	__u8 macs[2 * ETH_ALEN];
	__u32 seq_at;
	int rc;

	/* GRE's protocol type names the inner packet. */
	gre = data + (p->l4_off & 0xff);
	if ((void *)(gre + 2) > data_end)
		return punt(p, EDGE_R_BAD_GRE, XDP_DROP);
	proto = gre[1];
	inner_off = (p->l4_off & 0xff) + (p->gre_hlen & 0x1f);
	outer_end = data + ((p->l3_off + p->l3_len) & 0xffff);
	if (proto == bpf_htons(EDGE_PROBE_PROTO))
		return edge_probe(ctx, p, c->gen, path, inner_off, outer_end);
	/* Where the GRE sequence number lies, if it has one: its header's
	 * last word, just before the inner packet. De-duplicated once the
	 * inner packet proves well formed. */
	seq_at = (gre[0] & GRE_F_SEQ) ? inner_off - 4 : 0;

	__builtin_memset(p, 0, sizeof(*p));
	p->len = len;
	p->key.ifindex = ifindex;
	cur.pos = data + inner_off;
	cur.end = outer_end;
	rc = parse_l3(&cur, data, data_end, proto, p);
	/* The parsers left cur.end at the inner packet's own end. */
	if (rc || cur.end != outer_end)
		return punt(p, EDGE_R_GRE_INNER, XDP_DROP);
	if (seq_at) {
		/* The number, read again where it lies: one value kept
		 * across the parse, not two. */
		const __be32 *sq = data + (seq_at & 0xff);

		if ((void *)(sq + 1) <= data_end &&
		    edge_dedup_check(c->gen, path, bpf_ntohl(*sq), len))
			return XDP_DROP;
	}
	p->key.path = path;
	count(&edge_path_stats, ((path - 1) & (EDGE_MAX_PATHS - 1)) * 2 + 1,
	      len);

	/* Keep the received Ethernet addresses, so the kernel accepts the
	 * frame if the inner packet is handed to it. */
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return punt(p, EDGE_R_BAD_ETH, XDP_DROP);
	__builtin_memcpy(macs, eth, sizeof(macs));
	inner_off -= sizeof(struct ethhdr);
	if (bpf_xdp_adjust_head(ctx, inner_off))
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	__builtin_memcpy(eth, macs, sizeof(macs));
	eth->h_proto = proto;
	p->l3_off -= inner_off;
	if (p->l4_off)
		p->l4_off -= inner_off;
	return EDGE_GO_ON;
}

#endif
