/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Checksum helpers: incremental updates per RFC 1624. */
#ifndef EDGE_CSUM_H
#define EDGE_CSUM_H

#include <linux/ip.h>
#include <bpf/bpf_endian.h>

/* csum_fold folds a 32-bit one's-complement sum to 16 bits. */
static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* ip4_dec_ttl decrements the TTL and patches the header checksum:
 * HC' = ~(~HC + ~m + m') with m the 16-bit word holding TTL (RFC 1624
 * eqn. 3); the TTL is the high byte of that word in network order. */
static __always_inline void ip4_dec_ttl(struct iphdr *iph)
{
	__u32 sum = (__u16)~iph->check;

	sum += (__u16)~bpf_htons(iph->ttl << 8);
	iph->ttl--;
	sum += bpf_htons(iph->ttl << 8);
	iph->check = csum_fold(sum);
}

/* csum_replace2 returns checksum check updated for one 16-bit word
 * changing from old to new (RFC 1624 eqn. 3); all in network order. */
static __always_inline __u16 csum_replace2(__u16 check, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~old;
	sum += new;
	return csum_fold(sum);
}

#endif
