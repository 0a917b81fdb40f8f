/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* ICMP "fragmentation needed" (RFC 792, next-hop MTU of RFC 1191) and
 * ICMPv6 "packet too big" (RFC 4443 section 3.2) sent from XDP, so a packet
 * too big for the path is answered instead of lost silently. The reply is
 * built in place: the head grows by the new IP and ICMP headers, the
 * original packet behind them becomes the quoted datagram, and the tail is
 * cut to the quote. Nothing is copied but the Ethernet addresses.
 *
 * edge_icmp_too_big4/6 are global BPF functions, not inlined: the verifier
 * checks a global function once, with arguments it knows nothing about,
 * instead of once for every state its caller reaches it in. Inlined, they
 * pushed the dataplane (some 830,000 verified instructions) past the
 * verifier's limit of 1,000,000; as global functions they cost it about
 * 4,000. A caller sees only the int returned and must derive its packet
 * pointers again after the call: the functions move the packet (the
 * verifier invalidates the caller's pointers from Linux 6.13 on).
 *
 * Depends on kernel headers, csum.h and proto.h only, so it can be tested
 * alone (internal/bpf/icmptest/testdata/test_icmp.bpf.c). */
#ifndef EDGE_ICMP_H
#define EDGE_ICMP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/icmpv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "csum.h"
#include "proto.h"

/* edge_icmp4_frag is an ICMP destination unreachable header with the
 * next-hop MTU of RFC 1191 (struct icmphdr's un.frag). */
struct edge_icmp4_frag {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be16 unused;
	__be16 mtu;
};

/* IPv6 extension headers walked to find whether a packet is an ICMPv6
 * error or a non-first fragment; a longer chain is not answered. */
#ifndef EDGE_ICMP_MAX_IP6_EXT
#ifdef EDGE_MAX_IP6_EXT
#define EDGE_ICMP_MAX_IP6_EXT EDGE_MAX_IP6_EXT
#else
#define EDGE_ICMP_MAX_IP6_EXT 8
#endif
#endif

/* TTL / hop limit of the replies (the kernel's default, sysctl
 * net.ipv4.ip_default_ttl). */
#ifndef EDGE_ICMP_TTL
#define EDGE_ICMP_TTL 64
#endif

/* Smallest MTU an IPv4 link may have (RFC 791): a smaller next-hop MTU is
 * nonsense and not advertised. */
#define EDGE_ICMP4_MIN_MTU 68
/* The IPv6 minimum link MTU (RFC 8200 section 5). RFC 8201 section 4 has
 * hosts discard a packet too big below it, so none is sent. */
#define EDGE_ICMP6_MIN_MTU 1280

/* Bytes of the original datagram an ICMP error quotes after its IP header
 * (RFC 792). */
#define EDGE_ICMP4_QUOTE_DATA 8
/* The most of the original packet an ICMPv6 error quotes: all that keeps
 * the error within the minimum MTU (RFC 4443 section 2.4 (c)). */
#define EDGE_ICMP6_QUOTE_MAX                                                   \
	(EDGE_ICMP6_MIN_MTU - sizeof(struct ipv6hdr) - sizeof(struct icmp6hdr))

/* Offset bits of the IPv6 fragment header's second word (RFC 8200 4.5). */
#define EDGE_IP6_OFFSET bpf_htons(0xfff8)

/* ICMP types that are not errors and may be answered: echo reply and
 * request, timestamp, information and address mask request/reply. Others,
 * unassigned ones included, are treated as errors, as the kernel's
 * icmp_pointers table does (RFC 1122 3.2.2: no error about an error). */
#define EDGE_ICMP4_INFO_TYPES                                                  \
	((1u << ICMP_ECHOREPLY) | (1u << ICMP_ECHO) | (1u << ICMP_TIMESTAMP) | \
	 (1u << ICMP_TIMESTAMPREPLY) | (1u << ICMP_INFO_REQUEST) |            \
	 (1u << ICMP_INFO_REPLY) | (1u << ICMP_ADDRESS) |                      \
	 (1u << ICMP_ADDRESSREPLY))

/* Longest run icmp_csum_pkt sums: the largest ICMP(v6) message sent here
 * is 1240 bytes (an ICMPv6 error of 1280 bytes less its IPv6 header). */
#define EDGE_ICMP_CSUM_MAX 2047

/* icmp_csum_chunk adds the n bytes at data + off to *sum; n is a
 * compile-time constant (the verifier checks the helper's size argument
 * against the packet bounds), a multiple of 4 and at most 512
 * (bpf_csum_diff's limits; before Linux 6.13 it copied through a 512-byte
 * scratch buffer). */
static __always_inline int icmp_csum_chunk(void *data, void *data_end,
					   __u32 off, __u32 n, __u32 *sum)
{
	void *p = data + off;

	/* Keep clang from turning the bounds check into arithmetic on
	 * data_end - data, which the verifier cannot follow. */
	asm volatile("" : "+r"(p));
	if (p + n > data_end)
		return -1;
	*sum = bpf_csum_diff(NULL, 0, p, n, *sum);
	return 0;
}

/* icmp_csum_bit adds the chunk of n bytes (a power of two, 4 to 512) that
 * bit n of len stands for, when set: chunks run from the largest, so this
 * one starts after all the larger ones, at len with bit n and the bits
 * below it cleared. Computing the offset from len, not by adding up the
 * chunks taken, leaves the verifier the same state whichever were taken,
 * so it prunes instead of walking every combination. */
static __always_inline int icmp_csum_bit(void *data, void *data_end,
					 __u32 off, __u32 len, __u32 n,
					 __u32 *sum)
{
	if (!(len & n))
		return 0;
	return icmp_csum_chunk(data, data_end, off + (len & ~(2 * n - 1)), n,
			       sum);
}

/* icmp_csum_pkt adds the len bytes at offset off of the frame in ctx (len
 * <= EDGE_ICMP_CSUM_MAX) to the one's-complement sum *sum, an odd last
 * byte padded with zero (RFC 1071). The sum is kept in memory order, as
 * csum_fold expects. Power-of-two chunks give every bpf_csum_diff call a
 * constant size whatever len is. */
static __always_inline int icmp_csum_pkt(struct xdp_md *ctx, __u32 off,
					 __u32 len, __u32 *sum)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 w = 0;
	__u8 *b, *wb = (__u8 *)&w;

	if (len > EDGE_ICMP_CSUM_MAX)
		return -1;
	/* Mask as well, behind a barrier so clang cannot drop the mask as
	 * redundant: clang may have bounds-checked a copy of len, and the
	 * verifier gives a packet pointer whose offset it cannot bound below
	 * 64 KiB no range from the checks that follow. */
	asm volatile("" : "+r"(len));
	len &= EDGE_ICMP_CSUM_MAX;
	if (len & 1024) {
		if (icmp_csum_chunk(data, data_end, off, 512, sum) ||
		    icmp_csum_chunk(data, data_end, off + 512, 512, sum))
			return -1;
	}
	if (icmp_csum_bit(data, data_end, off, len, 512, sum) ||
	    icmp_csum_bit(data, data_end, off, len, 256, sum) ||
	    icmp_csum_bit(data, data_end, off, len, 128, sum) ||
	    icmp_csum_bit(data, data_end, off, len, 64, sum) ||
	    icmp_csum_bit(data, data_end, off, len, 32, sum) ||
	    icmp_csum_bit(data, data_end, off, len, 16, sum) ||
	    icmp_csum_bit(data, data_end, off, len, 8, sum) ||
	    icmp_csum_bit(data, data_end, off, len, 4, sum))
		return -1;
	if (!(len & 3))
		return 0;
	/* One to three bytes left: copy them into a zeroed word, which pads
	 * the message to a multiple of 16 bits for the sum. */
	b = data + off + (len & ~3);
	asm volatile("" : "+r"(b));
	if ((void *)(b + 1) > data_end)
		return -1;
	wb[0] = b[0];
	if ((len & 3) > 1) {
		if ((void *)(b + 2) > data_end)
			return -1;
		wb[1] = b[1];
	}
	if ((len & 3) > 2) {
		if ((void *)(b + 3) > data_end)
			return -1;
		wb[2] = b[2];
	}
	*sum = bpf_csum_diff(NULL, 0, &w, sizeof(w), *sum);
	return 0;
}

/* icmp_write_eth writes the Ethernet header at the front of the frame in
 * ctx. */
static __always_inline int icmp_write_eth(struct xdp_md *ctx,
					  const __u8 *dst, const __u8 *src,
					  __be16 proto)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = proto;
	return 0;
}

/* icmp_frame_len is the length of the frame in ctx. The subtraction is
 * kept 64-bit: with alu32 (-mcpu=v3) clang would do it on the low halves
 * when only those are used, and the verifier refuses 32-bit arithmetic on
 * packet pointers. */
static __always_inline __u64 icmp_frame_len(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;

	asm volatile("" : "+r"(len));
	return len;
}

/* icmp_reshape grows the head of the frame in ctx by hdrs bytes and cuts
 * its tail so that qlen bytes of the original IP packet (which started
 * right after the Ethernet header) remain behind the new headers. The
 * caller has checked that the frame holds at least qlen bytes after the
 * Ethernet header. Pointers into the frame are invalid afterwards. */
static __always_inline int icmp_reshape(struct xdp_md *ctx, __u32 hdrs,
					__u32 qlen)
{
	__u64 flen = icmp_frame_len(ctx), keep = sizeof(struct ethhdr) + qlen;
	int cut;

	if (flen < keep)
		return -1;
	cut = flen - keep;
	/* Fails without hdrs bytes of headroom (XDP gives 256, less any
	 * metadata). */
	if (bpf_xdp_adjust_head(ctx, -(int)hdrs))
		return -1;
	if (cut && bpf_xdp_adjust_tail(ctx, -cut))
		return -1;
	if (icmp_frame_len(ctx) != keep + hdrs)
		return -1;
	return 0;
}

/* ip4_may_answer tells whether an ICMP error may be sent about a packet
 * from src to dst (both network order). RFC 1122 3.2.2 and RFC 1812
 * 4.3.2.7: never to a source that does not name one host (0/8 "this
 * network", 127/8 loopback, 224/4 multicast, 240/4 reserved including the
 * limited broadcast), nor about a packet sent to a multicast or the limited
 * broadcast address. A directed broadcast cannot be told apart here. */
static __always_inline int ip4_may_answer(__be32 src, __be32 dst)
{
	__u32 s = bpf_ntohl(src), d = bpf_ntohl(dst);

	if ((s >> 24) == 0 || (s >> 24) == 127 || (s >> 28) >= 0xe)
		return 0;
	if ((d >> 28) == 0xe || d == 0xffffffff)
		return 0;
	return 1;
}

/* edge_icmp_too_big4 turns the frame in ctx (Ethernet, then an IPv4 packet
 * at offset 14, no VLAN tags) into an ICMP destination unreachable /
 * fragmentation needed (type 3 code 4) to its sender, advertising mtu (the
 * largest IPv4 packet the path takes, host order, clamped to 65535) in the
 * next-hop MTU field of RFC 1191, from src4 (network order), with the
 * Ethernet addresses swapped. The quote is the original IP header and the
 * first 8 bytes of its payload (RFC 792). Needs 28 bytes of headroom.
 * Returns 0 when the frame is ready for XDP_TX, -1 when the packet must not
 * be answered (an ICMP error, a non-first fragment, a source that is not
 * one host, a multicast/broadcast destination, a malformed or truncated
 * packet, mtu < 68, src4 == 0); the frame may have been changed then and
 * must be dropped. The DF bit is not looked at: whether a packet without
 * it is answered or fragmented is the caller's choice. */
__noinline int edge_icmp_too_big4(struct xdp_md *ctx, __u32 mtu, __be32 src4)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + sizeof(*eth);
	struct edge_icmp4_frag *ic;
	__u8 dmac[ETH_ALEN], smac[ETH_ALEN];
	__u32 ihl, tot, qlen, sum;
	__be32 saddr;

	if (mtu < EDGE_ICMP4_MIN_MTU || src4 == 0)
		return -1;
	if (mtu > 0xffff)
		mtu = 0xffff;
	if ((void *)(iph + 1) > data_end)
		return -1;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || iph->version != 4)
		return -1;
	/* RFC 1122 3.2.2: nor about a link-layer broadcast or multicast. */
	if (eth->h_dest[0] & 1)
		return -1;
	ihl = iph->ihl * 4;
	tot = bpf_ntohs(iph->tot_len);
	if (ihl < sizeof(*iph) || tot < ihl || (void *)iph + tot > data_end)
		return -1;
	/* A non-first fragment quotes no transport header for the sender to
	 * find its socket by, and RFC 1122 3.2.2 forbids answering it. */
	if (iph->frag_off & IP4_OFFSET)
		return -1;
	saddr = iph->saddr;
	if (!ip4_may_answer(saddr, iph->daddr))
		return -1;
	if (iph->protocol == IPPROTO_ICMP) {
		__u8 *type = (void *)iph + ihl;

		if ((void *)(type + 1) > data_end || tot < ihl + 1)
			return -1;
		if (*type >= 32 || !((1u << *type) & EDGE_ICMP4_INFO_TYPES))
			return -1;
	}
	qlen = tot - ihl < EDGE_ICMP4_QUOTE_DATA ? tot :
						   ihl + EDGE_ICMP4_QUOTE_DATA;
	__builtin_memcpy(dmac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(smac, eth->h_dest, ETH_ALEN);

	if (icmp_reshape(ctx, sizeof(*iph) + sizeof(*ic), qlen))
		return -1;
	if (icmp_write_eth(ctx, dmac, smac, bpf_htons(ETH_P_IP)))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	iph = data + sizeof(struct ethhdr);
	ic = (void *)(iph + 1);
	if ((void *)(ic + 1) > data_end)
		return -1;

	/* Internetwork control precedence, as the kernel's icmp_send uses
	 * for errors (RFC 1812 4.3.2.5); DF clear and id 0 (RFC 6864: an
	 * atomic datagram needs no id). */
	iph->version = 4;
	iph->ihl = 5;
	iph->tos = 0xc0;
	iph->tot_len = bpf_htons(sizeof(*iph) + sizeof(*ic) + qlen);
	iph->id = 0;
	iph->frag_off = 0;
	iph->ttl = EDGE_ICMP_TTL;
	iph->protocol = IPPROTO_ICMP;
	iph->check = 0;
	iph->saddr = src4;
	iph->daddr = saddr;
	sum = bpf_csum_diff(NULL, 0, (void *)iph, sizeof(*iph), 0);
	iph->check = csum_fold(sum);

	ic->type = ICMP_DEST_UNREACH;
	ic->code = ICMP_FRAG_NEEDED;
	ic->checksum = 0;
	ic->unused = 0;
	ic->mtu = bpf_htons(mtu);
	sum = 0;
	if (icmp_csum_pkt(ctx, sizeof(struct ethhdr) + sizeof(*iph),
			  sizeof(*ic) + qlen, &sum))
		return -1;
	/* bpf_csum_diff leaves the packet alone: ic is still valid. */
	ic->checksum = csum_fold(sum);
	return 0;
}

/* ip6_may_answer tells whether an ICMPv6 error may be sent to src: not to
 * the unspecified, loopback or a multicast address, which name no single
 * node (RFC 4443 2.4 (e), (f)). A multicast destination is fine: packet too
 * big is the one error sent about those, for path MTU discovery (2.4 (e.2)). */
static __always_inline int ip6_may_answer(const struct in6_addr *src)
{
	__u32 w0 = src->in6_u.u6_addr32[0], w1 = src->in6_u.u6_addr32[1];
	__u32 w2 = src->in6_u.u6_addr32[2], w3 = src->in6_u.u6_addr32[3];

	if (src->in6_u.u6_addr8[0] == 0xff)
		return 0;
	if ((w0 | w1 | w2) == 0 && (w3 == 0 || w3 == bpf_htonl(1)))
		return 0;
	return 1;
}

/* Largest offset into an IPv6 packet the extension header walk reaches: an
 * XDP frame's linear part is at most a page, far below it. */
#define EDGE_ICMP_IP6_OFF_MASK 0x7ffc

/* edge_icmp6_may_answer walks the extension headers of the IPv6 packet at
 * offset 14 of the frame in ctx, from offset off of the packet (40, the end
 * of its fixed header) to end (40 + payload length, checked by the caller
 * to lie in the frame), and tells whether it may be answered: not when it
 * is a non-first fragment, an ICMPv6 error (type < 128, RFC 4443 2.4
 * (e.1)), truncated, or has more than EDGE_ICMP_MAX_IP6_EXT extension
 * headers. A global function for the verifier's sake: checked once with an
 * offset it knows nothing about, the walk costs it some 1,000 instructions;
 * inlined, starting from the constant 40, it tracked every combination of
 * header kinds and offsets (20,000-50,000). */
__noinline int edge_icmp6_may_answer(struct xdp_md *ctx, __u32 off, __u32 end)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct {
		__u8 nexthdr;
		__u8 hdrlen;
		__be16 frag_off; /* fragment header: offset and M flag */
	} *o;
	__u8 nh, *type;
	int i;

	if ((void *)(ip6 + 1) > data_end)
		return 0;
	nh = ip6->nexthdr;

	for (i = 0; i <= EDGE_ICMP_MAX_IP6_EXT; i++) {
		/* Every header length is a multiple of 4, so the mask
		 * changes nothing but what the verifier knows: the same
		 * offset state whichever headers came before, which lets it
		 * prune. The barrier keeps clang from dropping the mask. */
		if (off > EDGE_ICMP_IP6_OFF_MASK)
			return 0;
		asm volatile("" : "+r"(off));
		off &= EDGE_ICMP_IP6_OFF_MASK;
		o = (void *)ip6 + off;
		switch (nh) {
		case NEXTHDR_HOP:
		case NEXTHDR_ROUTING:
		case NEXTHDR_DEST:
		case NEXTHDR_AUTH:
		case NEXTHDR_FRAGMENT:
			if (i == EDGE_ICMP_MAX_IP6_EXT)
				return 0;
			if ((void *)(o + 1) > data_end ||
			    off + sizeof(*o) > end)
				return 0;
			if (nh == NEXTHDR_FRAGMENT) {
				if (o->frag_off & EDGE_IP6_OFFSET)
					return 0;
				off += 8;
			} else if (nh == NEXTHDR_AUTH) {
				off += (o->hdrlen + 2) * 4; /* RFC 4302 */
			} else {
				off += (o->hdrlen + 1) * 8;
			}
			nh = o->nexthdr;
			if (off > end)
				return 0;
			break;
		case IPPROTO_ICMPV6:
			type = (__u8 *)o;
			if ((void *)(type + 1) > data_end || off + 1 > end)
				return 0;
			return *type >= 128;
		default:
			return 1;
		}
	}
	return 0;
}

/* edge_icmp_too_big6 turns the frame in ctx (Ethernet, then an IPv6 packet
 * at offset 14, no VLAN tags) into an ICMPv6 packet too big (type 2 code 0,
 * RFC 4443 3.2) to its sender, advertising mtu (the largest IPv6 packet the
 * path takes, host order) from src6, with the Ethernet addresses swapped.
 * The quote is as much of the original packet as keeps the reply within
 * 1280 bytes of IPv6 (1232 bytes at most). Needs 48 bytes of headroom.
 * Returns 0 when the frame is ready for XDP_TX, -1 when the packet must not
 * be answered (an ICMPv6 error, a non-first fragment, a source that is not
 * one node, a malformed or truncated packet, a jumbogram, mtu < 1280, src6
 * NULL or unspecified); the frame may have been changed then and must be
 * dropped. */
__noinline int edge_icmp_too_big6(struct xdp_md *ctx, __u32 mtu,
				  const struct in6_addr *src6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + sizeof(*eth);
	struct icmp6hdr *ic;
	struct in6_addr saddr;
	__u8 dmac[ETH_ALEN], smac[ETH_ALEN];
	__u32 plen, qlen, sum;
	__be32 pseudo[2];

	if (mtu < EDGE_ICMP6_MIN_MTU || !src6 || !ip6_may_answer(src6))
		return -1;
	if ((void *)(ip6 + 1) > data_end)
		return -1;
	if (eth->h_proto != bpf_htons(ETH_P_IPV6) || ip6->version != 6)
		return -1;
	plen = bpf_ntohs(ip6->payload_len);
	/* payload_len 0 is a jumbogram (RFC 2675), never on these links. */
	if (plen == 0 || (void *)(ip6 + 1) + plen > data_end)
		return -1;
	__builtin_memcpy(&saddr, &ip6->saddr, sizeof(saddr));
	if (!ip6_may_answer(&saddr))
		return -1;
	if (!edge_icmp6_may_answer(ctx, sizeof(*ip6), sizeof(*ip6) + plen))
		return -1;
	qlen = sizeof(*ip6) + plen;
	if (qlen > EDGE_ICMP6_QUOTE_MAX)
		qlen = EDGE_ICMP6_QUOTE_MAX;
	__builtin_memcpy(dmac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(smac, eth->h_dest, ETH_ALEN);

	if (icmp_reshape(ctx, sizeof(*ip6) + sizeof(*ic), qlen))
		return -1;
	if (icmp_write_eth(ctx, dmac, smac, bpf_htons(ETH_P_IPV6)))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ip6 = data + sizeof(struct ethhdr);
	ic = (void *)(ip6 + 1);
	if ((void *)(ic + 1) > data_end)
		return -1;

	/* Version 6, traffic class and flow label 0. */
	*(__be32 *)ip6 = bpf_htonl(0x60000000);
	ip6->payload_len = bpf_htons(sizeof(*ic) + qlen);
	ip6->nexthdr = IPPROTO_ICMPV6;
	ip6->hop_limit = EDGE_ICMP_TTL;
	__builtin_memcpy(&ip6->saddr, src6, sizeof(ip6->saddr));
	__builtin_memcpy(&ip6->daddr, &saddr, sizeof(ip6->daddr));

	ic->icmp6_type = ICMPV6_PKT_TOOBIG;
	ic->icmp6_code = 0;
	ic->icmp6_cksum = 0;
	ic->icmp6_mtu = bpf_htonl(mtu);

	/* The pseudo-header (RFC 8200 8.1): both addresses, the upper-layer
	 * length and the next header, each as a 32-bit word. */
	sum = bpf_csum_diff(NULL, 0, (void *)&ip6->saddr,
			    2 * sizeof(struct in6_addr), 0);
	pseudo[0] = bpf_htonl(sizeof(*ic) + qlen);
	pseudo[1] = bpf_htonl(IPPROTO_ICMPV6);
	sum = bpf_csum_diff(NULL, 0, pseudo, sizeof(pseudo), sum);
	if (icmp_csum_pkt(ctx, sizeof(struct ethhdr) + sizeof(*ip6),
			  sizeof(*ic) + qlen, &sum))
		return -1;
	ic->icmp6_cksum = csum_fold(sum);
	return 0;
}

#endif
