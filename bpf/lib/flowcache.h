/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The flow cache: a flow's decision (FAR, counters) and its next hop,
 * made once on its first packet and reused until a rules commit (the
 * entry's generation) or a FIB change (its FIB epoch) makes it stale.
 * IPv4 flows sit in edge_flows4 under a 32-byte key, with a per-CPU
 * exact-match copy in front (edge_emc4, as Open vSwitch's EMC sits in
 * front of its megaflow cache); IPv6 flows in edge_flows. A decapsulated
 * packet's flow is its own, keyed with the path it came by. */
#ifndef EDGE_FLOWCACHE_H
#define EDGE_FLOWCACHE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "verdict.h"

/* emc_slot hashes a compact key to an exact-match cache slot
 * (multiplicative hashing of the key's words). */
static __always_inline __u32 emc_slot(const struct edge_flow_key4 *k)
{
	const __u32 *w = (const __u32 *)k;
	__u32 h;

	h = w[0] * 0x9e3779b1u;
	h ^= w[1] * 0x85ebca77u;
	h ^= w[2] * 0xc2b2ae3du;
	h ^= w[3] * 0x27d4eb2fu;
	h ^= w[4] * 0x165667b1u;
	h ^= w[5] ^ w[6] * 0x2c1b3c6du;
	h ^= h >> 15;
	return h & (EDGE_EMC_SLOTS - 1);
}

static __always_inline int emc_match(const struct edge_emc_slot *e,
				     const struct edge_flow_key4 *k)
{
	const __u64 *a = (const __u64 *)&e->k, *b = (const __u64 *)k;

	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/* emc_flush adds the packets an exact-match cache slot counted to its
 * flow's total in edge_flows4, before the slot is reused. A flow that
 * left edge_flows4 meanwhile loses them with the rest of its entry. It is
 * a global function, verified once on its own: inlined, its branches
 * multiplied the pipeline's verifier states past the 1M-instruction
 * limit. */
__noinline int emc_flush(struct edge_emc_slot *e)
{
	struct edge_flow *lf;

	if (!e || !e->f.packets)
		return 0;
	lf = bpf_map_lookup_elem(&edge_flows4, &e->k);
	if (lf) {
		__sync_fetch_and_add(&lf->packets, e->f.packets);
		__sync_fetch_and_add(&lf->bytes, e->f.bytes);
	}
	e->f.packets = 0;
	e->f.bytes = 0;
	return 0;
}

/* flow_key4 packs an IPv4 key into the compact flow-cache key, one
 * 64-bit word at a time (little-endian, the only target built: the
 * fields in their struct order). Built from byte and half-word stores, the words that
 * emc_slot, emc_match and the hash table then load would each span
 * several stores, which the CPU cannot forward to a load: the load waits
 * for the stores to retire. */
static __always_inline void flow_key4(const struct edge_flow_key *k,
				      struct edge_flow_key4 *k4)
{
	__u64 *w = (__u64 *)k4;

	w[0] = *(const __u32 *)k->src | (__u64)*(const __u32 *)k->dst << 32;
	w[1] = k->ifindex | (__u64)k->gre_key << 32;
	w[2] = k->sport | (__u32)k->dport << 16 | (__u64)k->proto << 32 |
	       (__u64)k->dscp << 40 | (__u64)k->flags << 48;
	w[3] = k->path;
}

/* flow_fresh starts ctx->nf, the entry a miss decides into, counting the
 * packet in ctx->p. */
static __always_inline void flow_fresh(struct edge_ctx *ctx)
{
	__builtin_memset(&ctx->nf, 0, sizeof(ctx->nf));
	ctx->nf.gen = ctx->gen;
	ctx->nf.packets = 1;
	ctx->nf.bytes = ctx->p.len;
}

/* flow_find returns the entry of ctx->p's flow when it holds a decision
 * of generation ctx->gen, with the packet counted: this CPU's exact-match
 * copy (IPv4; a shared entry found is copied into the slot first), or the
 * shared entry. On a miss it returns NULL with ctx->nf started
 * (flow_fresh), carrying over the counts of a stale entry of the flow: a
 * flow reclassified after a commit keeps them (the slot its copy may sit
 * in is flushed into the shared entry first). *emcp is this CPU's slot
 * for the flow (IPv4), for flow_record. */
static __always_inline struct edge_flow *flow_find(struct edge_ctx *ctx,
						   struct edge_emc_slot **emcp)
{
	struct edge_pkt *p = &ctx->p;
	struct edge_emc_slot *emc = NULL;
	struct edge_flow *fl;
	__u32 slot;

	/* The barriers keep clang from merging the two lookups into one
	 * call with a selected map pointer: the verifier inlines a hash
	 * lookup only where the map is a constant. */
	if (p->key.family == 4) {
		flow_key4(&p->key, &ctx->k4);
		slot = emc_slot(&ctx->k4);
		emc = bpf_map_lookup_elem(&edge_emc4, &slot);
		*emcp = emc;
		/* A hit counts the packet where it is found: an exact-match
		 * copy is this CPU's alone, a shared entry is added to
		 * atomically. */
		if (emc && emc_match(emc, &ctx->k4) && emc->f.gen == ctx->gen) {
			emc->f.packets++;
			emc->f.bytes += p->len;
			return &emc->f;
		}
		fl = bpf_map_lookup_elem(&edge_flows4, &ctx->k4);
		if (emc && fl && fl->gen == ctx->gen) {
			if (emc->f.packets)
				emc_flush(emc);
			emc->k = ctx->k4;
			emc->f = *fl;
			emc->f.packets = 1;
			emc->f.bytes = p->len;
			return &emc->f;
		}
		asm volatile("" ::: "memory");
	} else {
		fl = bpf_map_lookup_elem(&edge_flows, &p->key);
		asm volatile("" ::: "memory");
	}
	if (fl && fl->gen == ctx->gen) {
		__sync_fetch_and_add(&fl->packets, 1);
		__sync_fetch_and_add(&fl->bytes, p->len);
		return fl;
	}
	if (emc && emc->f.packets)
		emc_flush(emc);
	flow_fresh(ctx);
	if (fl) {
		ctx->nf.packets += fl->packets;
		ctx->nf.bytes += fl->bytes;
	}
	return NULL;
}

/* flow_record inserts the entry a miss decided (ctx->nf) into the flow
 * cache, and into this CPU's exact-match slot emc (IPv4). A full cache
 * is counted (EDGE_R_FLOW_FULL): the packet was decided all the same. */
static __always_inline void flow_record(struct edge_ctx *ctx,
					struct edge_emc_slot *emc)
{
	long err;

	if (ctx->p.key.family == 4) {
		err = bpf_map_update_elem(&edge_flows4, &ctx->k4, &ctx->nf,
					  BPF_ANY);
		if (emc) {
			emc->k = ctx->k4;
			emc->f = ctx->nf;
			emc->f.packets = 0; /* the total is in the entry */
			emc->f.bytes = 0;
		}
		asm volatile("" ::: "memory");
	} else {
		err = bpf_map_update_elem(&edge_flows, &ctx->p.key, &ctx->nf,
					  BPF_ANY);
		asm volatile("" ::: "memory");
	}
	if (err)
		count(&edge_reasons, EDGE_R_FLOW_FULL, ctx->p.len);
}

#endif
