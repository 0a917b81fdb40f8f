/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Bounds-checked header parsing into struct edge_pkt (edge_ctx.h). Every
 * helper checks the header lies inside [data, data_end) before touching
 * it, advances the cursor, and returns what comes next or a negative
 * edge_reason. */
#ifndef EDGE_PARSE_H
#define EDGE_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "../edge_consts.h"
#include "../edge_ctx.h"
#include "proto.h"

/* Returned by parse_ip4/6 for a non-first fragment: no L4 header. */
#define EDGE_NO_L4 (-1000)

struct hdr_cursor {
	void *pos;
	/* End of the IP datagram (tot_len / payload_len), never past the
	 * frame: Ethernet padding after it is not part of the packet. Checks
	 * compare against data_end too, which is what the verifier follows. */
	void *end;
};

/* past_end is true when len bytes at ptr run past the frame or past the
 * IP datagram. */
#define past_end(c, ptr, len, data_end)                                        \
	((void *)(ptr) + (len) > (data_end) || (void *)(ptr) + (len) > (c)->end)

/* parse_eth returns the EtherType after up to EDGE_MAX_VLANS tags, in
 * network byte order, or -EDGE_R_*. */
static __always_inline int parse_eth(struct hdr_cursor *c, void *data_end,
				     struct edge_pkt *p)
{
	struct ethhdr *eth = c->pos;
	struct vlan_hdr {
		__be16 tci;
		__be16 proto;
	} *vh;
	__be16 proto;
	int i;

	if ((void *)(eth + 1) > data_end)
		return -EDGE_R_BAD_ETH;
	c->pos = eth + 1;
	proto = eth->h_proto;

#pragma unroll
	for (i = 0; i < EDGE_MAX_VLANS + 1; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) &&
		    proto != bpf_htons(ETH_P_8021AD))
			return proto;
		if (i == EDGE_MAX_VLANS)
			return -EDGE_R_VLAN_DEPTH;
		vh = c->pos;
		if ((void *)(vh + 1) > data_end)
			return -EDGE_R_BAD_VLAN;
		c->pos = vh + 1;
		proto = vh->proto;
		p->vlans++;
	}
	return proto;
}

/* ip4_csum_ok verifies the IPv4 header checksum (RFC 1071) over ihl words;
 * the caller has checked that ihl * 4 bytes are inside the packet. */
static __always_inline int ip4_csum_ok(struct iphdr *iph, void *data_end,
				       __u32 ihl)
{
	__u16 *w = (__u16 *)iph;
	__u32 *opt = (__u32 *)(iph + 1);
	__u32 sum = 0;
	int i;

	/* The fixed 20 bytes: the caller checked iph + 1 <= data_end. */
#pragma unroll
	for (i = 0; i < 10; i++)
		sum += w[i];
	/* Options, one 32-bit word at a time (at most 10 words). */
	for (i = 0; i < 10; i++) {
		if (i >= (int)ihl - 5)
			break;
		/* Keep clang from folding the per-word bounds checks into one
		 * subtraction the verifier cannot follow. */
		asm volatile("" : "+r"(opt));
		if ((void *)(opt + 1) > data_end)
			return 0;
		sum += *opt & 0xffff;
		sum += *opt >> 16;
		opt++;
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

/* parse_ip4 fills addresses, proto and DSCP (network order as on the wire)
 * and returns the L4 protocol number, or -EDGE_R_*. Checks version, ihl >=
 * 5 (an ihl below 5 would put L4 inside the IP header), that the options
 * and tot_len fit the frame, and the header checksum. */
static __always_inline int parse_ip4(struct hdr_cursor *c, void *data,
				     void *data_end, struct edge_pkt *p)
{
	struct iphdr *iph = c->pos;
	__u32 ihl, tot;

	if ((void *)(iph + 1) > data_end)
		return -EDGE_R_BAD_IP4;
	if (iph->version != 4)
		return -EDGE_R_BAD_IP4;
	ihl = iph->ihl;
	if (ihl < 5)
		return -EDGE_R_BAD_IHL;
	if ((void *)iph + ihl * 4 > data_end)
		return -EDGE_R_BAD_IHL;
	tot = bpf_ntohs(iph->tot_len);
	if (tot < ihl * 4 || (void *)iph + tot > data_end)
		return -EDGE_R_BAD_IP4;
	if (!ip4_csum_ok(iph, data_end, ihl))
		return -EDGE_R_BAD_IP4_CSUM;

	p->key.family = 4;
	__builtin_memcpy(p->key.src, &iph->saddr, 4);
	__builtin_memcpy(p->key.dst, &iph->daddr, 4);
	p->key.proto = iph->protocol;
	p->key.dscp = iph->tos >> 2;
	p->ecn = iph->tos & 3;
	c->pos = (void *)iph + ihl * 4;
	c->end = (void *)iph + tot;
	/* Non-first fragments carry no L4 header (RFC 791 fragment offset). */
	p->l3_len = tot;
	if (iph->frag_off & IP4_OFFSET) {
		p->key.flags |= EDGE_KF_FRAG;
		return EDGE_NO_L4;
	}
	if (iph->frag_off & IP4_MF)
		p->first_frag = 1;
	return iph->protocol;
}

/* parse_ip6 walks up to EDGE_MAX_IP6_EXT extension headers and returns the
 * upper-layer protocol, or -EDGE_R_*. Extension headers must lie inside
 * payload_len. */
static __always_inline int parse_ip6(struct hdr_cursor *c, void *data_end,
				     struct edge_pkt *p)
{
	struct ipv6hdr *ip6 = c->pos;
	struct opt {
		__u8 nexthdr;
		__u8 hdrlen;
		__be16 frag_off; /* fragment header: offset + M flag */
	} *o;
	__u8 nh;
	int i;

	if ((void *)(ip6 + 1) > data_end)
		return -EDGE_R_BAD_IP6;
	if (ip6->version != 6)
		return -EDGE_R_BAD_IP6;
	/* payload_len 0 means a jumbogram (RFC 2675), never valid on links
	 * whose MTU is below 64 KiB; treat as malformed. */
	if (ip6->payload_len == 0 ||
	    (void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len) > data_end)
		return -EDGE_R_BAD_IP6;

	p->key.family = 6;
	p->l3_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	__builtin_memcpy(p->key.src, &ip6->saddr, 16);
	__builtin_memcpy(p->key.dst, &ip6->daddr, 16);
	p->key.dscp = ((ip6->priority << 4) | (ip6->flow_lbl[0] >> 4)) >> 2;
	p->ecn = (ip6->flow_lbl[0] >> 4) & 3;
	c->pos = ip6 + 1;
	c->end = (void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len);
	nh = ip6->nexthdr;

	/* Up to EDGE_MAX_IP6_EXT extension headers, then the upper layer. */
	for (i = 0; i <= EDGE_MAX_IP6_EXT; i++) {
		o = c->pos;
		switch (nh) {
		case NEXTHDR_HOP:
		case NEXTHDR_ROUTING:
		case NEXTHDR_DEST:
			if (i == EDGE_MAX_IP6_EXT || past_end(c, o, sizeof(*o), data_end))
				return -EDGE_R_BAD_IP6_EXT;
			if (past_end(c, c->pos, (o->hdrlen + 1) * 8, data_end))
				return -EDGE_R_BAD_IP6_EXT;
			c->pos += (o->hdrlen + 1) * 8;
			nh = o->nexthdr;
			break;
		case NEXTHDR_AUTH:
			if (i == EDGE_MAX_IP6_EXT || past_end(c, o, sizeof(*o), data_end))
				return -EDGE_R_BAD_IP6_EXT;
			if (past_end(c, c->pos, (o->hdrlen + 2) * 4, data_end))
				return -EDGE_R_BAD_IP6_EXT;
			c->pos += (o->hdrlen + 2) * 4;
			nh = o->nexthdr;
			break;
		case NEXTHDR_FRAGMENT:
			if (i == EDGE_MAX_IP6_EXT || past_end(c, c->pos, 8, data_end))
				return -EDGE_R_BAD_IP6_EXT;
			c->pos += 8;
			nh = o->nexthdr;
			if (o->frag_off & bpf_htons(0xfff8)) {
				p->key.proto = nh;
				p->key.flags |= EDGE_KF_FRAG;
				return EDGE_NO_L4;
			}
			if (o->frag_off & bpf_htons(0x0001)) /* M */
				p->first_frag = 1;
			break;
		default:
			p->key.proto = nh;
			return nh;
		}
	}
	return -EDGE_R_BAD_IP6_EXT;
}

/* parse_gre reads the GRE header (RFC 2784, key and sequence of RFC 2890);
 * the key lands in p->key.gre_key in network order. A version other than
 * 0, or any of the RFC 1701 bits RFC 2784 has receivers discard on
 * (routing, strict source route, recursion's high bit), is malformed. */
static __always_inline int parse_gre(struct hdr_cursor *c, void *data_end,
				     struct edge_pkt *p)
{
	__be16 *h = c->pos;
	__be16 flags;
	__u32 len = 4;

	if (past_end(c, h, 4, data_end))
		return -EDGE_R_BAD_GRE;
	flags = h[0];
	if (flags & (GRE_F_VERSION | GRE_F_ROUTING | GRE_F_STRICT |
		     GRE_F_RECUR_HI))
		return -EDGE_R_BAD_GRE;
	if (flags & GRE_F_CSUM)
		len += 4;
	if (flags & GRE_F_KEY) {
		__be32 *key = c->pos + len;

		if (past_end(c, key, 4, data_end))
			return -EDGE_R_BAD_GRE;
		p->key.gre_key = *key;
		p->key.flags |= EDGE_KF_GRE_KEY;
		len += 4;
	}
	if (flags & GRE_F_SEQ)
		len += 4;
	if (past_end(c, c->pos, len, data_end))
		return -EDGE_R_BAD_GRE;
	p->gre_hlen = len;
	c->pos += len;
	return 0;
}

/* parse_l4 reads ports (network order) for TCP, UDP and SCTP and checks
 * that ICMP, ICMPv6 and GRE headers are complete. */
static __always_inline int parse_l4(struct hdr_cursor *c, void *data_end,
				    struct edge_pkt *p, int proto)
{
	switch (proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = c->pos;

		if (past_end(c, th, sizeof(*th), data_end))
			return -EDGE_R_BAD_L4;
		if (th->doff < 5 || past_end(c, c->pos, th->doff * 4, data_end))
			return -EDGE_R_BAD_L4;
		p->key.sport = th->source;
		p->key.dport = th->dest;
		p->tcp_flags = ((__u8 *)th)[13];
		return 0;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = c->pos;

		if (past_end(c, uh, sizeof(*uh), data_end))
			return -EDGE_R_BAD_L4;
		/* The UDP length covers the whole datagram: a first fragment
		 * holds only part of it. */
		if (bpf_ntohs(uh->len) < sizeof(*uh) ||
		    (!p->first_frag &&
		     past_end(c, c->pos, bpf_ntohs(uh->len), data_end)))
			return -EDGE_R_BAD_L4;
		p->key.sport = uh->source;
		p->key.dport = uh->dest;
		return 0;
	}
	case IPPROTO_SCTP: {
		__be16 *ports = c->pos;

		/* Common header: ports, verification tag, checksum. */
		if (past_end(c, c->pos, 12, data_end))
			return -EDGE_R_BAD_L4;
		p->key.sport = ports[0];
		p->key.dport = ports[1];
		return 0;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		/* Type, code, checksum and the 4-byte rest of header. */
		if (past_end(c, c->pos, 8, data_end))
			return -EDGE_R_BAD_L4;
		return 0;
	case IPPROTO_GRE:
		return parse_gre(c, data_end, p);
	}
	return 0;
}

/* parse_l3 parses the IP packet at the cursor, of EtherType proto
 * (network order), into p: offsets from data. Returns 0, EDGE_R_NON_IP
 * for another EtherType, or -EDGE_R_* when malformed. */
static __always_inline int parse_l3(struct hdr_cursor *c, void *data,
				    void *data_end, __be16 proto,
				    struct edge_pkt *p)
{
	int l4;

	p->l3_off = c->pos - data;
	if (proto == bpf_htons(ETH_P_IP))
		l4 = parse_ip4(c, data, data_end, p);
	else if (proto == bpf_htons(ETH_P_IPV6))
		l4 = parse_ip6(c, data_end, p);
	else
		return EDGE_R_NON_IP;
	if (l4 == EDGE_NO_L4)
		return 0; /* non-first fragment: classify on L3 only */
	if (l4 < 0)
		return l4;
	p->l4_off = c->pos - data;
	return parse_l4(c, data_end, p, l4);
}

/* edge_parse parses a frame into p, which it clears first. Returns 0 for
 * an IP packet ready to classify, EDGE_R_NON_IP for other EtherTypes, or
 * -EDGE_R_* when malformed (EDGE_R_VLAN_DEPTH: too many tags to classify). */
static __always_inline int edge_parse(struct xdp_md *ctx, struct edge_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct hdr_cursor c = {.pos = data, .end = data_end};
	int proto;

	__builtin_memset(p, 0, sizeof(*p));
	p->len = data_end - data;
	p->key.ifindex = ctx->ingress_ifindex;
	proto = parse_eth(&c, data_end, p);
	if (proto < 0)
		return proto;
	return parse_l3(&c, data, data_end, proto, p);
}

#endif
