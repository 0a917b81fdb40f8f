/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* GRE overlays (RFC 2784, key and sequence numbers of RFC 2890): encap
 * toward a path's remote gateway, decap of what comes back. Included by
 * forward.h, whose punt/count/fib_resolve it uses. */
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
#include "parse.h"
#include "icmp.h"

#define GRE_IP4_DF bpf_htons(0x4000)

/* edge_icmp_too_big answers the packet in ctx with ICMP fragmentation
 * needed / ICMPv6 packet too big advertising mtu, from the address of the
 * interface it arrived on (written by the agent into edge_ifaddrs; for
 * IPv4, fallback is the path's local address). Returns 0 when the reply is
 * ready to be sent back out of the interface it came in on. */
static __always_inline int edge_icmp_too_big(struct xdp_md *ctx,
					     struct edge_pkt *p, __u32 mtu,
					     __be32 fallback4)
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

/* ip4_csum_gre is the header checksum of the outer IPv4 header encap
 * writes (no options, id 0, DF, protocol GRE), summed from the values
 * rather than read back: 16-bit words as they lie in memory. */
static __always_inline __u16 ip4_csum_gre(__u8 tos, __be16 tot_len, __u8 ttl,
					  __be32 saddr, __be32 daddr)
{
	const union {
		__u8 b[2];
		__u16 w;
	} vt = {.b = {0x45, tos}}, tp = {.b = {ttl, IPPROTO_GRE}};
	__u32 sum;

	sum = vt.w + tot_len + GRE_IP4_DF + tp.w + (saddr & 0xffff) +
	      (saddr >> 16) + (daddr & 0xffff) + (daddr >> 16);
	return csum_fold(sum);
}

/* edge_encap puts the packet into GRE toward far's path: outer IPv4 from
 * the path's local to its remote address, TTL from the path, DSCP copied
 * from the inner packet (or fixed by the path) and ECN copied (RFC 6040
 * normal mode), DF set. The inner packet is routed like any other (TTL or
 * hop limit decremented). The outer next hop is cached in the flow. A
 * packet too big for the path is answered with ICMP too-big. */
static __always_inline int edge_encap(struct xdp_md *ctx, struct edge_pkt *p,
				      const struct edge_far *far,
				      struct edge_flow *fl, __u32 epoch)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct edge_path *path;
	struct edge_path_nh *nh = NULL;
	struct ethhdr *eth = data;
	struct iphdr *iph = NULL, *outer;
	struct ipv6hdr *ip6 = NULL;
	__u32 pi, len3, olen, hlen = 4, mtu = 0;
	__be16 inner_proto;
	__be32 *opt;
	__u8 tos;
	int reason;
	long pad;

	pi = (fl->gen & 1) * EDGE_MAX_PATHS + (far->path & (EDGE_MAX_PATHS - 1));
	path = bpf_map_lookup_elem(&edge_paths, &pi);
	if (!path)
		return punt(p, EDGE_R_NO_STATE, XDP_DROP);
	if (p->vlans)
		return punt(p, EDGE_R_VLAN_FWD, XDP_PASS);
	if (p->key.family == 4) {
		iph = data + sizeof(*eth);
		if ((void *)(iph + 1) > data_end)
			return punt(p, EDGE_R_BAD_IP4, XDP_DROP);
		if (iph->ttl <= 1)
			return punt(p, EDGE_R_TTL, XDP_PASS);
		len3 = bpf_ntohs(iph->tot_len);
		tos = iph->tos;
		inner_proto = bpf_htons(ETH_P_IP);
	} else {
		ip6 = data + sizeof(*eth);
		if ((void *)(ip6 + 1) > data_end)
			return punt(p, EDGE_R_BAD_IP6, XDP_DROP);
		if (ip6->hop_limit <= 1)
			return punt(p, EDGE_R_TTL, XDP_PASS);
		len3 = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		inner_proto = bpf_htons(ETH_P_IPV6);
	}
	if (path->flags & EDGE_PF_KEY)
		hlen += 4;
	if (path->flags & EDGE_PF_SEQ)
		hlen += 4;
	olen = sizeof(struct iphdr) + hlen + len3;

	if (!next_hop_ok(fl, path->ifindex, epoch, olen)) {
		__u32 ni = path->stats & (EDGE_MAX_PATHS - 1);

		nh = bpf_map_lookup_elem(&edge_path_nh, &ni);
		if (nh && nh->fib_epoch == epoch && nh->local == path->local &&
		    nh->remote == path->remote &&
		    nh->want_oif == path->ifindex && olen <= nh->ok_len) {
			/* The path's next hop, resolved by an earlier flow. */
			fl->fib_epoch = epoch;
			fl->oif = nh->oif;
			fl->ok_len = nh->ok_len;
			__builtin_memcpy(fl->dmac, nh->dmac, ETH_ALEN);
			__builtin_memcpy(fl->smac, nh->smac, ETH_ALEN);
		}
	}
	if (!next_hop_ok(fl, path->ifindex, epoch, olen)) {
		struct bpf_fib_lookup fib = {
			.family = AF_INET,
			.l4_protocol = IPPROTO_GRE,
			.tot_len = olen,
			.ipv4_src = path->local,
			.ipv4_dst = path->remote,
		};

		reason = fib_resolve(ctx, &fib, path->ifindex, p->key.ifindex,
				     fl, epoch, &mtu);
		if (reason == EDGE_R_FRAG_NEEDED) {
			/* The inner packet may be at most the route's MTU
			 * less what encapsulation adds. */
			mtu = mtu > olen - len3 ? mtu - (olen - len3) : 0;
			/* The reply leaves by the interface the packet came
			 * in on, through the devmap rather than XDP_TX: a
			 * veth flushes XDP_TX frames to its peer only when
			 * the peer runs an XDP program (veth_xdp_flush), so
			 * toward a host whose veth has only GRO's NAPI the
			 * reply waited for the next frame redirected there.
			 * A redirect is flushed at the end of the poll. */
			if (mtu >= 68 &&
			    edge_icmp_too_big(ctx, p, mtu, path->local) == 0)
				return punt(p, EDGE_R_MTU_ICMP,
					    bpf_redirect_map(&edge_tx,
							     p->key.ifindex,
							     XDP_TX));
			return punt(p, EDGE_R_MTU_DROP, XDP_DROP);
		}
		/* Handing an unencapsulated packet to the kernel would send it
		 * out in the clear: drop, counted. The agent keeps path next
		 * hops resolved. */
		if (reason)
			return punt(p, reason, XDP_DROP);
		if (nh) {
			nh->fib_epoch = epoch;
			nh->local = path->local;
			nh->remote = path->remote;
			nh->want_oif = path->ifindex;
			nh->oif = fl->oif;
			nh->ok_len = fl->ok_len;
			__builtin_memcpy(nh->dmac, fl->dmac, ETH_ALEN);
			__builtin_memcpy(nh->smac, fl->smac, ETH_ALEN);
		}
	}

	/* Route the inner packet: one hop. */
	if (iph)
		ip4_dec_ttl(iph);
	else if (ip6)
		ip6->hop_limit--;

	/* Ethernet pads a short frame to 60 bytes; the padding is no part of
	 * the inner packet and must not ride behind it in the tunnel. The
	 * parser checked len3 fits in the frame. */
	pad = (long)(data_end - data) - (long)sizeof(*eth) - (long)len3;
	if (pad > 0 && bpf_xdp_adjust_tail(ctx, -(int)(pad & 0xff)))
		return punt(p, EDGE_R_ADJUST, XDP_DROP);

	if (bpf_xdp_adjust_head(ctx, -(int)(sizeof(struct iphdr) + hlen)))
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	outer = data + sizeof(*eth);
	opt = (void *)(outer + 1);
	/* Ethernet + outer IPv4 + the longest GRE header (12 bytes). */
	if ((void *)(opt + 3) > data_end)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);

	__builtin_memcpy(eth->h_dest, fl->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fl->smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	outer->version = 4;
	outer->ihl = 5;
	if (path->flags & EDGE_PF_DSCP_FIXED)
		tos = (path->dscp << 2) | (tos & 3);
	outer->tos = tos;
	outer->tot_len = bpf_htons(olen);
	outer->id = 0;
	outer->frag_off = GRE_IP4_DF;
	outer->ttl = path->ttl;
	outer->protocol = IPPROTO_GRE;
	outer->saddr = path->local;
	outer->daddr = path->remote;
	outer->check = ip4_csum_gre(tos, bpf_htons(olen), path->ttl,
				    path->local, path->remote);

	((__be16 *)opt)[0] = ((path->flags & EDGE_PF_KEY) ? GRE_F_KEY : 0) |
			     ((path->flags & EDGE_PF_SEQ) ? GRE_F_SEQ : 0);
	((__be16 *)opt)[1] = inner_proto;
	opt++;
	if (path->flags & EDGE_PF_KEY)
		*opt++ = path->key;
	if (path->flags & EDGE_PF_SEQ) {
		__u32 si = path->stats & (EDGE_MAX_PATHS - 1);
		__u32 *seq = bpf_map_lookup_elem(&edge_path_seq, &si);

		if (opt + 1 > (__be32 *)data_end)
			return punt(p, EDGE_R_ADJUST, XDP_DROP);
		*opt = bpf_htonl(seq ? __sync_fetch_and_add(seq, 1) : 0);
	}

	count(&edge_path_stats, (path->stats & (EDGE_MAX_PATHS - 1)) * 2,
	      sizeof(*eth) + olen);
	if (bpf_redirect_map(&edge_tx, fl->oif, XDP_ABORTED) != XDP_REDIRECT)
		return punt(p, EDGE_R_NO_TX, XDP_DROP);
	count(&edge_verdicts, XDP_REDIRECT, p->len);
	return XDP_REDIRECT;
}

/* fib_reason is the edge_reason a failed bpf_fib_lookup punts with. The
 * kernel, handed the packet, resolves the neighbour, answers ICMP
 * fragmentation needed / packet too big, or drops it with its own count. */
static __always_inline int fib_reason(long rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return EDGE_R_NO_NEIGH;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return EDGE_R_FRAG_NEEDED;
	default:
		return EDGE_R_FIB_FAIL;
	}
}

/* edge_decap takes a GRE packet addressed to one of our paths (outer
 * destination, key and source must match a path of this generation), checks
 * the inner packet is well formed, strips the outer headers and forwards the
 * inner packet by the kernel's FIB (or hands it to the kernel when XDP
 * cannot finish). GRE for no path is dropped and counted. */
static __always_inline int edge_decap(struct xdp_md *ctx, struct edge_pkt *p,
				      __u32 slot)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	struct edge_decap_key dk = {};
	const struct edge_decap *d;
	struct edge_pkt in = {};
	struct hdr_cursor c;
	void *outer_end;
	struct ethhdr *eth;
	struct iphdr *outer = data + sizeof(struct ethhdr);
	__be16 *gre;
	__u8 macs[2 * ETH_ALEN];
	__u32 inner_off, stats;
	int rc;

	if (p->key.family != 4 || p->key.proto != IPPROTO_GRE || !p->gre_hlen ||
	    p->vlans)
		return punt(p, EDGE_R_GRE_NO_PATH, XDP_DROP);
	if ((void *)(outer + 1) > data_end)
		return punt(p, EDGE_R_BAD_IP4, XDP_DROP);
	dk.slot = slot;
	dk.local = outer->daddr;
	if (p->key.flags & EDGE_KF_GRE_KEY) {
		dk.key = p->key.gre_key;
		dk.has_key = 1;
	}
	d = bpf_map_lookup_elem(&edge_decaps, &dk);
	if (!d || d->remote != outer->saddr)
		return punt(p, EDGE_R_GRE_NO_PATH, XDP_DROP);
	stats = d->stats;

	/* The inner packet: GRE protocol type, then its own headers checked
	 * as strictly as any packet we forward, within the outer datagram. */
	gre = data + (p->l4_off & 0xff);
	if ((void *)(gre + 2) > data_end)
		return punt(p, EDGE_R_BAD_GRE, XDP_DROP);
	inner_off = (p->l4_off & 0xff) + (p->gre_hlen & 0x1f);
	c.pos = data + inner_off;
	c.end = (void *)outer + bpf_ntohs(outer->tot_len);
	if (c.end > data_end)
		return punt(p, EDGE_R_BAD_IP4, XDP_DROP);
	outer_end = c.end;
	if (gre[1] == bpf_htons(ETH_P_IP))
		rc = parse_ip4(&c, data, data_end, &in);
	else if (gre[1] == bpf_htons(ETH_P_IPV6))
		rc = parse_ip6(&c, data_end, &in);
	else
		rc = -EDGE_R_GRE_INNER;
	if (rc >= 0)
		rc = parse_l4(&c, data_end, &in, rc);
	if (rc < 0 && rc != EDGE_NO_L4)
		return punt(p, EDGE_R_GRE_INNER, XDP_DROP);
	/* The inner packet must fill the outer datagram exactly: the parsers
	 * left c.end at the inner packet's own end. */
	if (c.end != outer_end)
		return punt(p, EDGE_R_GRE_INNER, XDP_DROP);

	count(&edge_path_stats, (stats & (EDGE_MAX_PATHS - 1)) * 2 + 1, p->len);

	/* Strip Ethernet + outer IPv4 + GRE, then put an Ethernet header
	 * back in front of the inner packet, keeping the received addresses
	 * so the kernel accepts the frame if we hand it over. */
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return punt(p, EDGE_R_BAD_ETH, XDP_DROP);
	__builtin_memcpy(macs, eth, sizeof(macs));
	if (bpf_xdp_adjust_head(ctx, inner_off - sizeof(struct ethhdr)))
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	__builtin_memcpy(eth, macs, sizeof(macs));
	eth->h_proto = in.key.family == 4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);

	/* Forward the inner packet: one routing hop. */
	fib.ifindex = p->key.ifindex;
	if (in.key.family == 4) {
		struct iphdr *iph = data + sizeof(*eth);

		if ((void *)(iph + 1) > data_end)
			return punt(p, EDGE_R_GRE_INNER, XDP_DROP);
		if (iph->ttl <= 1)
			return punt(p, EDGE_R_TTL, XDP_PASS);
		fib.family = AF_INET;
		fib.tos = iph->tos;
		fib.l4_protocol = iph->protocol;
		fib.tot_len = bpf_ntohs(iph->tot_len);
		fib.ipv4_src = iph->saddr;
		fib.ipv4_dst = iph->daddr;
		rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS)
			return punt(p, fib_reason(rc), XDP_PASS);
		ip4_dec_ttl(iph);
	} else {
		struct ipv6hdr *ip6 = data + sizeof(*eth);

		if ((void *)(ip6 + 1) > data_end)
			return punt(p, EDGE_R_GRE_INNER, XDP_DROP);
		if (ip6->hop_limit <= 1)
			return punt(p, EDGE_R_TTL, XDP_PASS);
		fib.family = AF_INET6;
		fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
		fib.l4_protocol = ip6->nexthdr;
		fib.tot_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
		rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS)
			return punt(p, fib_reason(rc), XDP_PASS);
		ip6->hop_limit--;
	}
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	if (bpf_redirect_map(&edge_tx, fib.ifindex, XDP_ABORTED) != XDP_REDIRECT)
		return punt(p, EDGE_R_NO_TX, XDP_DROP);
	count(&edge_verdicts, XDP_REDIRECT, p->len);
	return XDP_REDIRECT;
}

#endif
