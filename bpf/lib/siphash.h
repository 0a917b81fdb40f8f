/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The keyed hash that places flows (the flow table's buckets, FlowOpt's
 * slots): SipHash-1-3 (Aumasson and Bernstein, "SipHash: a fast
 * short-input PRF", 2012; one compression round a word, three to
 * finish), the variant Linux's hsiphash uses for its hash tables on
 * 64-bit machines. Its key is a secret the agent draws from crypto/rand
 * when it first creates the pinned maps (edge_secret) and sets here
 * before every load, so it stays the same across restarts and upgrades
 * and a flow keeps its place. A sender who does not hold the key cannot
 * choose tuples that land where another flow sits: the unkeyed hash
 * before it (sums of words times constants, then an invertible
 * finaliser) let one compute a tuple sharing a victim's FlowOpt record,
 * or a bucket's worth of tuples filling the bucket a victim's flow
 * needs. The agent computes the same (bpf.SipHash13). */
#ifndef EDGE_SIPHASH_H
#define EDGE_SIPHASH_H

#include <linux/types.h>

/* The secret (edge_secret), set by the agent before load. Zero only in
 * objects loaded without an agent (header tests). */
volatile const __u64 hash_k0 = 0;
volatile const __u64 hash_k1 = 0;

struct sip {
	__u64 v0, v1, v2, v3;
};

#define SIP_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static __always_inline void sip_round(struct sip *s)
{
	s->v0 += s->v1;
	s->v1 = SIP_ROTL(s->v1, 13);
	s->v1 ^= s->v0;
	s->v0 = SIP_ROTL(s->v0, 32);
	s->v2 += s->v3;
	s->v3 = SIP_ROTL(s->v3, 16);
	s->v3 ^= s->v2;
	s->v0 += s->v3;
	s->v3 = SIP_ROTL(s->v3, 21);
	s->v3 ^= s->v0;
	s->v2 += s->v1;
	s->v1 = SIP_ROTL(s->v1, 17);
	s->v1 ^= s->v2;
	s->v2 = SIP_ROTL(s->v2, 32);
}

/* sip_init_key starts a hash under the key (k0, k1). */
static __always_inline void sip_init_key(struct sip *s, __u64 k0, __u64 k1)
{
	s->v0 = k0 ^ 0x736f6d6570736575ull;
	s->v1 = k1 ^ 0x646f72616e646f6dull;
	s->v2 = k0 ^ 0x6c7967656e657261ull;
	s->v3 = k1 ^ 0x7465646279746573ull;
}

/* sip_init starts a hash under the flow secret. */
static __always_inline void sip_init(struct sip *s)
{
	sip_init_key(s, hash_k0, hash_k1);
}

/* sip_word takes one 8-byte word of the message (little-endian). */
static __always_inline void sip_word(struct sip *s, __u64 m)
{
	s->v3 ^= m;
	sip_round(s);
	s->v0 ^= m;
}

/* sip_final takes the last block (the message's length in bytes << 56,
 * or'ed with its last len % 8 bytes) and returns the hash. */
static __always_inline __u64 sip_final(struct sip *s, __u64 b)
{
	sip_word(s, b);
	s->v2 ^= 0xff;
	sip_round(s);
	sip_round(s);
	sip_round(s);
	return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

/* sip24_word and sip24_final are sip_word and sip_final for SipHash-2-4
 * (two compression rounds a word, four to finish): the MAC that signs
 * path probes under each path's own secret (lib/probe.h), where the
 * inputs are chosen by whoever sends them and the margin is worth its
 * few rounds more. */
static __always_inline void sip24_word(struct sip *s, __u64 m)
{
	s->v3 ^= m;
	sip_round(s);
	sip_round(s);
	s->v0 ^= m;
}

static __always_inline __u64 sip24_final(struct sip *s, __u64 b)
{
	sip24_word(s, b);
	s->v2 ^= 0xff;
	sip_round(s);
	sip_round(s);
	sip_round(s);
	sip_round(s);
	return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

/* sip_tuple hashes a 5-tuple and GRE key: addresses as the 64-bit
 * words they fill in a flow key (an IPv4 address is the low half of its
 * first word, the rest zero); pg the ports, sport | dport << 16, or'ed
 * with the GRE key, as they sit in the key (network order). Ports and a
 * GRE key share those four bytes: the parser sets ports for TCP, UDP and
 * SCTP only and a GRE key for GRE only, and proto is in the message
 * beside them. The message is the addresses (IPv4: both in one word),
 * then pg's four bytes and proto: 13 bytes for IPv4, 37 for IPv6, so the
 * two families never share an input, and an IPv4 tuple costs two
 * compression rounds. */
static __always_inline __u64 sip_tuple(__u64 s0, __u64 s1, __u64 d0, __u64 d1,
				       __u32 pg, __u8 proto, __u8 family)
{
	__u64 tail = (__u64)pg | (__u64)proto << 32;
	struct sip s;

	sip_init(&s);
	if (family == 4) {
		sip_word(&s, s0 | d0 << 32);
		return sip_final(&s, 13ull << 56 | tail);
	}
	sip_word(&s, s0);
	sip_word(&s, s1);
	sip_word(&s, d0);
	sip_word(&s, d1);
	return sip_final(&s, 37ull << 56 | tail);
}

#endif
