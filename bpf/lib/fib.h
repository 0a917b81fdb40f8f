/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Next hops from the kernel's FIB (bpf_fib_lookup), cached per flow until
 * the agent bumps the FIB epoch (it watches route, neighbour, address and
 * link changes over netlink), and the redirect that uses them. The
 * kernel's routes and neighbours stay the source of truth: when XDP
 * cannot finish the job (no neighbour, TTL expiry, MTU) the packet is
 * handed to the kernel, which resolves or answers with ICMP. */
#ifndef EDGE_FIB_H
#define EDGE_FIB_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "csum.h"
#include "proto.h"
#include "verdict.h"

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

/* nh_take copies the next hop flows share in nh (a path's, a
 * destination's) into fl when it was resolved in this FIB epoch for the
 * same key and want_oif and passed the MTU check for len3: a new flow
 * then skips the FIB. Returns 1 when taken. */
/* nh_valid tells whether nh holds the next hop for key and want_oif,
 * resolved in this FIB epoch, that passed the MTU check for len3. */
static __always_inline int nh_valid(const struct edge_nh *nh, const __u64 *key,
				    __u32 want_oif, __u32 epoch, __u32 len3)
{
	return nh && nh->fib_epoch == epoch && nh->key[0] == key[0] &&
	       nh->key[1] == key[1] && nh->key[2] == key[2] &&
	       nh->want_oif == want_oif && len3 <= nh->ok_len;
}

static __always_inline int nh_take(const struct edge_nh *nh, const __u64 *key,
				   __u32 want_oif, __u32 epoch, __u32 len3,
				   struct edge_flow *fl)
{
	if (!nh_valid(nh, key, want_oif, epoch, len3))
		return 0;
	fl->fib_epoch = epoch;
	fl->oif = nh->oif;
	fl->ok_len = nh->ok_len;
	__builtin_memcpy(fl->dmac, nh->dmac, ETH_ALEN);
	__builtin_memcpy(fl->smac, nh->smac, ETH_ALEN);
	return 1;
}

/* nh_keep records the next hop the FIB gave fl in nh, for the flows that
 * share it (nh_take). */
static __always_inline void nh_keep(struct edge_nh *nh, const __u64 *key,
				    __u32 want_oif, __u32 epoch,
				    const struct edge_flow *fl)
{
	nh->fib_epoch = epoch;
	nh->key[0] = key[0];
	nh->key[1] = key[1];
	nh->key[2] = key[2];
	nh->want_oif = want_oif;
	nh->oif = fl->oif;
	nh->ok_len = fl->ok_len;
	__builtin_memcpy(nh->dmac, fl->dmac, ETH_ALEN);
	__builtin_memcpy(nh->smac, fl->smac, ETH_ALEN);
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

/* hide_choice keeps clang from turning later tests of which of two
 * header pointers is set back into tests of the family they were chosen
 * by, read again from memory: the verifier sees two reads of a map value
 * as unrelated, and would follow a path where the family says IPv4 and
 * the IPv4 pointer is NULL. */
#define hide_choice(a, b) asm volatile("" : "+r"(a), "+r"(b))

/* hop_check returns the IP header of a packet of family (4 or 6, as
 * the caller read it once from p) to be routed one hop, after checking
 * it may be: a tagged frame belongs to a VLAN sub-interface, which XDP
 * cannot transmit on, and a TTL or hop limit about to run out needs the
 * kernel's ICMP time exceeded; both go to the kernel. NULL: the packet
 * ended with verdict *rc. */
static __always_inline void *hop_check(struct xdp_md *ctx,
				       const struct edge_pkt *p, __u8 family,
				       int *rc)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + sizeof(struct ethhdr);
	struct ipv6hdr *ip6 = (void *)iph;

	if (p->vlans) {
		*rc = punt(p, EDGE_R_VLAN_FWD, XDP_PASS);
		return NULL;
	}
	if (family == 4) {
		if ((void *)(iph + 1) > data_end) {
			*rc = punt(p, EDGE_R_BAD_IP4, XDP_DROP);
			return NULL;
		}
		if (iph->ttl <= 1) {
			*rc = punt(p, EDGE_R_TTL, XDP_PASS);
			return NULL;
		}
		return iph;
	}
	if ((void *)(ip6 + 1) > data_end) {
		*rc = punt(p, EDGE_R_BAD_IP6, XDP_DROP);
		return NULL;
	}
	if (ip6->hop_limit <= 1) {
		*rc = punt(p, EDGE_R_TTL, XDP_PASS);
		return NULL;
	}
	return ip6;
}

/* dst_nh_slot returns this CPU's slot in edge_dst_nh for key, NULL
 * when the kernel's routes may depend on more than the destination
 * (then every flow asks the FIB). */
static __always_inline struct edge_nh *dst_nh_slot(const __u64 *key)
{
	const struct edge_state *st;
	__u32 zero = 0, slot;
	__u64 h;

	st = bpf_map_lookup_elem(&edge_global, &zero);
	if (!st || !(st->fib_flags & EDGE_FIB_BY_DST))
		return NULL;
	h = (key[0] ^ key[1] ^ key[2]) * 0x9e3779b97f4a7c15ull;
	slot = (__u32)(h >> 32) & (EDGE_DST_NH_SLOTS - 1);
	return bpf_map_lookup_elem(&edge_dst_nh, &slot);
}

/* dst_nh returns this CPU's slot in edge_dst_nh for a packet to the
 * destination in iph or ip6 that came in by iif, with its key in key,
 * or NULL (dst_nh_slot). */
static __always_inline struct edge_nh *dst_nh(const struct iphdr *iph,
					      const struct ipv6hdr *ip6,
					      __u32 iif, __u64 *key)
{
	if (iph) {
		key[0] = iph->daddr;
		key[1] = 0;
		key[2] = iif | 4ull << 32;
	} else if (ip6) {
		__builtin_memcpy(key, &ip6->daddr, 16);
		key[2] = iif | 6ull << 32;
	} else {
		return NULL;
	}
	return dst_nh_slot(key);
}

/* dst_nh4 is dst_nh for a packet to IPv4 address daddr. */
static __always_inline struct edge_nh *dst_nh4(__be32 daddr, __u32 iif,
					       __u64 *key)
{
	key[0] = daddr;
	key[1] = 0;
	key[2] = iif | 4ull << 32;
	return dst_nh_slot(key);
}

/* fib_ask resolves the next hop of the packet in iph or ip6 (one of them
 * set) out of oif into fl (fib_resolve). */
static __always_inline int fib_ask(struct xdp_md *ctx, const struct edge_pkt *p,
				   const struct iphdr *iph,
				   const struct ipv6hdr *ip6, __u32 oif,
				   struct edge_flow *fl, __u32 epoch, __u32 *mtu)
{
	struct bpf_fib_lookup fib = {};

	fib.l4_protocol = p->key.proto;
	fib.sport = p->key.sport;
	fib.dport = p->key.dport;
	fib.tot_len = p->l3_len;
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
	return fib_resolve(ctx, &fib, oif, p->key.ifindex, fl, epoch, mtu);
}

/* redirect_hop forwards the packet out of oif (0: where the route leads)
 * to the next hop cached in fl, or shared by its destination (dst_nh),
 * asking the FIB first when neither has one for this epoch. Returns the
 * verdict, or -reason when the FIB gave no next hop (the packet
 * untouched; on EDGE_R_FRAG_NEEDED *mtu is the route's). */
static __always_inline int redirect_hop(struct xdp_md *ctx,
					const struct edge_pkt *p, __u32 oif,
					struct edge_flow *fl, __u32 epoch,
					__u32 *mtu)
{
	struct ethhdr *eth = (void *)(long)ctx->data;
	struct iphdr *iph = NULL;
	struct ipv6hdr *ip6 = NULL;
	__u32 len3 = p->l3_len; /* as the kernel's MTU check counts it */
	__u8 family = p->key.family;
	struct edge_nh *nh = NULL;
	int rc, reason;
	__u64 key[3];
	void *l3;

	l3 = hop_check(ctx, p, family, &rc);
	if (!l3)
		return rc;
	if (family == 4)
		iph = l3;
	else
		ip6 = l3;
	hide_choice(iph, ip6);
	if (!next_hop_ok(fl, oif, epoch, len3)) {
		nh = dst_nh(iph, ip6, p->key.ifindex, key);
		if (!nh_take(nh, key, oif, epoch, len3, fl)) {
			reason = fib_ask(ctx, p, iph, ip6, oif, fl, epoch, mtu);
			if (reason)
				return -reason;
			if (nh)
				nh_keep(nh, key, oif, epoch, fl);
		}
	}

	if (iph)
		ip4_dec_ttl(iph);
	else if (ip6)
		ip6->hop_limit--;
	__builtin_memcpy(eth->h_dest, fl->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fl->smac, ETH_ALEN);

	if (bpf_redirect_map(&edge_tx, fl->oif, XDP_ABORTED) != XDP_REDIRECT)
		return punt(p, EDGE_R_NO_TX, XDP_DROP);
	return verdict(p, XDP_REDIRECT);
}

/* edge_redirect is redirect_hop, handing the packet to the kernel when the
 * FIB gives no next hop (it resolves the neighbour, or answers ICMP). */
static __always_inline int edge_redirect(struct xdp_md *ctx,
					 const struct edge_pkt *p, __u32 oif,
					 struct edge_flow *fl, __u32 epoch)
{
	__u32 mtu = 0;
	int rc = redirect_hop(ctx, p, oif, fl, epoch, &mtu);

	return rc < 0 ? punt(p, -rc, XDP_PASS) : rc;
}

/* encap_push routes the inner packet of p (its IP header iph or ip6)
 * one hop and makes room in front of it for hlen bytes of outer
 * headers behind an Ethernet header to fl's next hop (IPv4): padding
 * and trailing bytes past the datagram trimmed first (Ethernet pads a
 * short frame to 60 bytes; the kernel's IP input trims what follows a
 * datagram too, pskb_trim_rcsum; the parser checked p->l3_len fits).
 * Returns the outer IP header, or NULL when the frame could not be
 * adjusted. */
static __always_inline struct iphdr *encap_push(struct xdp_md *ctx,
						const struct edge_pkt *p,
						struct iphdr *iph,
						struct ipv6hdr *ip6,
						const struct edge_flow *fl,
						__u32 hlen)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth;
	long pad;

	if (iph)
		ip4_dec_ttl(iph);
	else if (ip6)
		ip6->hop_limit--;
	pad = (long)(data_end - data) - (long)sizeof(*eth) - (long)p->l3_len;
	if (pad > 0 && bpf_xdp_adjust_tail(ctx, -(int)(pad & 0xffff)))
		return NULL;
	if (bpf_xdp_adjust_head(ctx, -(int)hlen))
		return NULL;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) + sizeof(struct iphdr) > data_end)
		return NULL;
	__builtin_memcpy(eth->h_dest, fl->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fl->smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	return (void *)(eth + 1);
}

#endif
