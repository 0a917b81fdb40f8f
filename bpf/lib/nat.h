/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* NAT rewrites: a balanced packet's destination to its backend (nat) or a
 * reply's source back to the VIP (unnat), and ICMP errors about NAT'd
 * connections translated both ways. Checksums are patched incrementally
 * (RFC 1624). Which connection a packet belongs to is the balancer's
 * business (balance.h); this header only rewrites. */
#ifndef EDGE_NAT_H
#define EDGE_NAT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "csum.h"
#include "proto.h"
#include "verdict.h"

/* csum_add_diff adds to a one's-complement sum the change of n 32-bit
 * words from old to new (RFC 1624: ~m + m' per word, in 16-bit halves). */
static __always_inline __u32 csum_add_diff(__u32 sum, const __u32 *old,
					   const __u32 *new, int n)
{
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		if (i >= n)
			break;
		sum += (__u16)~(old[i] & 0xffff);
		sum += (__u16)~(old[i] >> 16);
		sum += new[i] & 0xffff;
		sum += new[i] >> 16;
	}
	return sum;
}

/* sum_diff16 adds to a one's-complement sum the change of a 16-bit word. */
static __always_inline __u32 sum_diff16(__u32 sum, __u16 old, __u16 new)
{
	return sum + (__u16)~old + new;
}

/* edge_nat_rewrite rewrites the destination (nat) or source (unnat)
 * address and port of a TCP/UDP packet to addr and port, with
 * the IPv4 header checksum and the L4 checksum (whose pseudo-header holds
 * the addresses) patched incrementally. Returns 0 or the edge_reason to
 * drop with. */
static __always_inline int edge_nat_rewrite(struct xdp_md *ctx,
					    const struct edge_pkt *p,
					    const __u8 *addr, __be16 port,
					    int src)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__be16 *l4, *ck, oldp;
	__u32 sum, l3off = p->l3_off, l4off = p->l4_off;
	__u16 ck0;

	if (!l4off || (p->key.flags & EDGE_KF_FRAG) || l3off > 64 || l4off > 1024)
		return EDGE_R_NAT_L4;
	l4 = data + l4off;
	if (p->key.proto == IPPROTO_TCP) {
		if ((void *)(l4 + 9) > data_end) /* through the checksum */
			return EDGE_R_NAT_L4;
		ck = l4 + 8;
	} else {
		if ((void *)(l4 + 4) > data_end)
			return EDGE_R_NAT_L4;
		ck = l4 + 3;
	}
	ck0 = *ck;

	if (p->key.family == 4) {
		struct iphdr *iph = data + l3off;
		__u32 *a;

		if ((void *)(iph + 1) > data_end)
			return EDGE_R_BAD_IP4;
		a = src ? &iph->saddr : &iph->daddr;
		sum = (__u16)~iph->check;
		sum = csum_add_diff(sum, a, (const __u32 *)addr, 1);
		iph->check = csum_fold(sum);
		sum = (__u16)~ck0;
		sum = csum_add_diff(sum, a, (const __u32 *)addr, 1);
		*a = *(const __u32 *)addr;
	} else {
		struct ipv6hdr *ip6 = data + l3off;
		__u32 *a;

		if ((void *)(ip6 + 1) > data_end)
			return EDGE_R_BAD_IP6;
		a = src ? (__u32 *)&ip6->saddr : (__u32 *)&ip6->daddr;
		sum = (__u16)~ck0;
		sum = csum_add_diff(sum, a, (const __u32 *)addr, 4);
		__builtin_memcpy(a, addr, 16);
	}
	oldp = src ? l4[0] : l4[1];
	sum = sum_diff16(sum, oldp, port);
	if (src)
		l4[0] = port;
	else
		l4[1] = port;
	/* A UDP checksum of 0 over IPv4 means "none": leave it so. A computed
	 * 0 goes out as 0xffff (RFC 768). */
	if (p->key.proto == IPPROTO_UDP && p->key.family == 4 && ck0 == 0)
		return 0;
	*ck = csum_fold(sum);
	if (p->key.proto == IPPROTO_UDP && *ck == 0)
		*ck = 0xffff;
	return 0;
}


/* ICMP errors about NAT'd connections. A router on either side may answer
 * a NAT'd packet with an error (fragmentation needed, packet too big,
 * unreachable, time exceeded) that quotes the packet as it saw it: toward
 * the VIP, quoting the VIP's reply to the client; or toward the client,
 * quoting the client's packet to the backend. Passed on untranslated,
 * neither end can match it to its connection, and path MTU discovery
 * through the service fails (large replies black-holed). edge_nat_icmp
 * translates both, as a NAT must (RFC 5508 section 4). */

/* icmp_is_error tells whether an ICMP (family 4) or ICMPv6 type is an
 * error message that quotes the packet it is about. */
static __always_inline int icmp_is_error(__u8 type, __u8 family)
{
	if (family == 4)
		return type == 3 || type == 11 || type == 12;
	return type >= 1 && type <= 4;
}

/* nat_icmp_inner rewrites the quoted packet's address (at a_off, 4 or 16
 * bytes) and port (at port_off) to addr and port, with the quote's IPv4
 * header checksum and its TCP/UDP checksum when the quote holds it (an
 * IPv4 UDP checksum of 0 means none); every change is added to s->sum,
 * the ICMP checksum's sum. Offsets and family are in s. */
static __always_inline int nat_icmp_inner(struct xdp_md *ctx,
					  struct edge_lb_scratch *s, __u32 a_off,
					  __u32 port_off, const __u8 *addr,
					  __be16 port)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 *a = data + (a_off & 0x3ff), d;
	__be16 *pp = data + (port_off & 0x3ff), *ck;
	__u16 old;

	if ((void *)(pp + 1) > data_end)
		return -1;
	if (s->family == 4) {
		struct iphdr *ih = data + (s->il3 & 0x3ff);

		if ((void *)(a + 1) > data_end || (void *)(ih + 1) > data_end)
			return -1;
		d = csum_add_diff(0, a, (const __u32 *)addr, 1);
		old = ih->check;
		ih->check = csum_fold((__u16)~old + d);
		s->sum = sum_diff16(s->sum, old, ih->check);
		*a = *(const __u32 *)addr;
	} else {
		if ((void *)(a + 4) > data_end)
			return -1;
		d = csum_add_diff(0, a, (const __u32 *)addr, 4);
		__builtin_memcpy(a, addr, 16);
	}
	d = sum_diff16(d, *pp, port);
	*pp = port;
	ck = data + ((s->il4 + (s->proto == IPPROTO_TCP ? 16 : 6)) & 0x3ff);
	if ((void *)(ck + 1) <= data_end &&
	    !(s->proto == IPPROTO_UDP && s->family == 4 && *ck == 0)) {
		old = *ck;
		*ck = csum_fold((__u16)~old + d);
		if (s->proto == IPPROTO_UDP && *ck == 0)
			*ck = 0xffff;
		s->sum = sum_diff16(s->sum, old, *ck);
	}
	s->sum += d;
	return 0;
}

/* nat_icmp_outer rewrites the outer address at a_off (the destination
 * toward the backend, the source toward the client) to addr: with the
 * IPv4 header checksum, or for ICMPv6 in the checksum's pseudo-header
 * (s->sum). */
static __always_inline int nat_icmp_outer(struct xdp_md *ctx,
					  struct edge_lb_scratch *s, __u32 a_off,
					  const __u8 *addr)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 *a = data + (a_off & 0x3ff);

	if (s->family == 4) {
		struct iphdr *iph = data + (s->l3 & 0x3ff);

		if ((void *)(a + 1) > data_end || (void *)(iph + 1) > data_end)
			return -1;
		iph->check = csum_fold((__u16)~iph->check +
				       csum_add_diff(0, a, (const __u32 *)addr, 1));
		*a = *(const __u32 *)addr;
	} else {
		if ((void *)(a + 4) > data_end)
			return -1;
		s->sum = csum_add_diff(s->sum, a, (const __u32 *)addr, 4);
		__builtin_memcpy(a, addr, 16);
	}
	return 0;
}

/* edge_nat_icmp_rewrite translates the ICMP error edge_nat_icmp found a
 * connection for (its offsets in c->lb), with FAR fi of the packet's slot:
 * toward the VIP the quote's source and port, and the destination, become
 * the backend's (the NAT FAR's); toward the client the quote's
 * destination and port become the VIP's (the reply rewrite's), and the
 * source too when the backend itself sent the error (a router's own
 * address stays). Returns 0, or -1 when the packet is left half done
 * (drop it). A global function of its own: the pipeline's stack leaves
 * little room for the two together. */
__noinline int edge_nat_icmp_rewrite(struct xdp_md *ctx, struct edge_ctx *c,
				     __u32 fi)
{
	const struct edge_far *far;
	struct edge_lb_scratch *s;
	void *data, *data_end;
	__u8 *icmp;

	if (!ctx || !c)
		return -1;
	s = &c->lb;
	far = far_get(c->gen, fi);
	if (!far)
		return -1;
	if (s->to_vip) {
		if (nat_icmp_inner(ctx, s, s->off, s->il4, far->addr, far->port) ||
		    nat_icmp_outer(ctx, s, s->l3 + (s->family == 4 ? 16 : 24),
				   far->addr))
			return -1;
	} else {
		if (nat_icmp_inner(ctx, s, s->off + (s->family == 4 ? 4 : 16),
				   s->il4 + 2, far->addr, far->port))
			return -1;
		if (s->from_backend &&
		    nat_icmp_outer(ctx, s, s->l3 + (s->family == 4 ? 12 : 8),
				   far->addr))
			return -1;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	icmp = data + (s->l4 & 0x3ff);
	if ((void *)(icmp + 8) > data_end)
		return -1;
	*(__u16 *)(icmp + 2) = csum_fold(s->sum);
	return 0;
}

#endif
