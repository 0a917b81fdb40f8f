/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The flow cache: a flow's decision (FAR, counters) and its next hop,
 * made once on its first packet and reused until a rules commit (the
 * entry's generation) or a FIB change (its FIB epoch) makes it stale.
 * Flows sit in the flow table (flowtab.h), one entry each; IPv4 flows
 * have a per-CPU exact-match copy in front (edge_emc4, as Open vSwitch's
 * EMC sits in front of its megaflow cache). A decapsulated packet's flow
 * is its own, keyed with the path it came by.
 *
 * A flow decided by a rule enters the table on its second packet, not
 * its first (flow_admit): most flows of a flood, and many real ones (DNS,
 * probes, scans), never send a second, and their first packet then costs
 * the decision alone, not an insert that evicts another flow. A
 * connection to a service, its reply and a steered flow are recorded on
 * their first packet: their next packets must keep the backend, rewrite
 * or member chosen, which deciding again could change. */
#ifndef EDGE_FLOWCACHE_H
#define EDGE_FLOWCACHE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "flowtab.h"
#include "steer.h"
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

/* flow_unpack4 writes the full key of compact IPv4 key k4 into k. */
static __always_inline void flow_unpack4(const struct edge_flow_key4 *k4,
					 struct edge_flow_key *k)
{
	__u64 *w = (__u64 *)k;
	const __u64 *v = (const __u64 *)k4;

	w[0] = (__u32)v[0];
	w[1] = 0;
	w[2] = v[0] >> 32;
	w[3] = 0;
	w[4] = v[1];
	/* sport, dport, proto, dscp as packed; family 4; flags */
	w[5] = (v[2] & 0xffffffffffffull) | 4ull << 48 | (v[2] >> 48 & 0xff) << 56;
	w[6] = v[3];
}

/* emc_flush adds the packets an exact-match cache slot counted to its
 * flow's total in the flow table, before the slot is reused. A flow that
 * left the table meanwhile loses them with the rest of its entry. A
 * global function, verified once on its own. */
__noinline int emc_flush(struct edge_ctx *c, struct edge_emc_slot *e)
{
	if (!c || !e || !e->f.packets)
		return 0;
	flow_unpack4(&e->k, &c->lb.ek);
	edge_ft_use_at(c, &c->lb.ek, e->ft_at, e->f.packets, e->f.bytes);
	e->f.packets = 0;
	e->f.bytes = 0;
	return 0;
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

/* emc_fill makes exact-match slot emc this CPU's copy of entry f for
 * ctx->k4, counting packets and bytes in it (those not yet in the
 * table's total), and notes where the entry is (ctx->ft_bucket and
 * ft_way, as the lookup or the insert left them) and FlowOpt's record
 * (ctx->fo_at, as the packet's stages found it). marked says whether
 * the table's entry is marked used now, after its first packet: if not,
 * the copy's next hit marks it. */
static __always_inline void emc_fill(struct edge_ctx *ctx,
				     struct edge_emc_slot *emc,
				     const struct edge_flow *f, __u64 packets,
				     __u64 bytes, int marked)
{
	emc->k = ctx->k4;
	emc->f = *f;
	emc->f.packets = packets;
	emc->f.bytes = bytes;
	emc->seen = ctx->now - !marked;
	emc->refused = 0;
	emc->ft_at = ctx->ft_way < 0 ? 0 :
		     ctx->ft_bucket * EDGE_FT_WAYS + ctx->ft_way + 1;
	emc->fo_at = ctx->fo_at;
}

/* emc_take tells whether exact-match slot emc may hold ctx->k4's flow:
 * it does already, or is empty, stale or cold (its copy not used this
 * tick), or has refused EDGE_EMC_PRESSURE packets of other flows since
 * its copy was made; a flow it held is flushed first (its counts into
 * the table). Otherwise the slot is left to the copy in use: where more
 * flows are active than the slots hold, a copy made for each packet
 * would be flushed by the next (two more lines and two atomic adds a
 * packet, for a copy never hit), so the flows sharing a slot take it in
 * turns of EDGE_EMC_PRESSURE of the others' packets, or a tick, and are
 * counted in the table meanwhile. */
static __always_inline int emc_take(struct edge_ctx *ctx,
				    struct edge_emc_slot *emc)
{
	if (emc_match(emc, &ctx->k4))
		return 1;
	if (emc->f.gen == ctx->gen && emc->seen == (__u16)ctx->now &&
	    ++emc->refused < EDGE_EMC_PRESSURE)
		return 0;
	if (emc->f.packets)
		emc_flush(ctx, emc);
	return 1;
}

/* flow_find returns the entry of ctx->p's flow when it holds a decision
 * of generation ctx->gen, with the packet counted: this CPU's exact-match
 * copy (IPv4; an entry found in the table is copied into the slot
 * first), or a copy of the table's entry in ctx->nf (IPv6; counted in
 * the table). On a miss it returns NULL with ctx->nf started
 * (flow_fresh), carrying over the counts of a stale entry of the flow (a
 * flow reclassified after a commit keeps them) and, in ctx->rec, the
 * connection it was (edge_ft_lookup). *emcp is this CPU's slot for the
 * flow (IPv4), for flow_record (NULL after a hit in the table whose
 * flow did not get the slot, emc_take). A steered flow whose member left its
 * group's usable set counts as stale (steer_moved): decided again. */
static __always_inline struct edge_flow *flow_find(struct edge_ctx *ctx,
						   struct edge_emc_slot **emcp)
{
	struct edge_pkt *p = &ctx->p;
	struct edge_emc_slot *emc = NULL;
	struct edge_ft_way *e;
	__u64 packets = 0, bytes = 0;
	__u32 slot;
	__u16 now;
	int way;

	if (p->key.family == 4) {
		flow_key4(&p->key, &ctx->k4);
		slot = emc_slot(&ctx->k4);
		emc = bpf_map_lookup_elem(&edge_emc4, &slot);
		*emcp = emc;
		if (emc && emc_match(emc, &ctx->k4)) {
			/* A hit counts the packet in this CPU's copy, and
			 * marks the table's entry used once a tick. */
			if (emc->f.gen == ctx->gen && !steer_moved(&emc->f)) {
				emc->f.packets++;
				emc->f.bytes += p->len;
				now = ctx->now;
				if (emc->seen != now) {
					edge_ft_use_at(ctx, &p->key, emc->ft_at, 0, 0);
					emc->seen = now;
				}
				ctx->fo_at = emc->fo_at;
				return &emc->f;
			}
			/* Stale: what the copy counted goes with the flow. */
			packets = emc->f.packets;
			bytes = emc->f.bytes;
			emc->f.packets = 0;
			emc->f.bytes = 0;
		}
	}
	way = edge_ft_lookup(ctx);
	ctx->ft_nh = ctx->nf.fib_epoch;
	if (way >= 0 && steer_moved(&ctx->nf)) {
		/* Decided again, and recorded over its entry. */
		count(&edge_reasons, EDGE_R_STEER_MOVED, p->len);
		ctx->nf.gen = 0;
	}
	if (way >= 0 && ctx->nf.gen == ctx->gen) {
		if (emc && emc_take(ctx, emc)) {
			emc_fill(ctx, emc, &ctx->nf, packets + 1, bytes + p->len, 1);
			return &emc->f;
		}
		*emcp = NULL; /* another flow's copy: left alone */
		e = ft_way(ctx->ft_bucket, way);
		if (e) {
			__sync_fetch_and_add(&e->f.packets, 1);
			__sync_fetch_and_add(&e->f.bytes, p->len);
		}
		return &ctx->nf;
	}
	if (way >= 0) {
		packets += ctx->nf.packets;
		bytes += ctx->nf.bytes;
	}
	flow_fresh(ctx);
	ctx->nf.packets += packets;
	ctx->nf.bytes += bytes;
	return NULL;
}

/* flow_admit tells whether the entry a miss decided (ctx->nf) goes into
 * the flow table now. A flow decided by a rule is noted in the
 * doorkeeper on its first packet, in the set its tag (the keyed hash's
 * high half, mixed with what tells a connection's flows apart) chooses,
 * and admitted when its next packet comes within
 * EDGE_DK_TICKS ticks and finds the note, its entry then counting the
 * first packet too. A note goes into an empty or expired way, else one
 * the tag picks: a flood of new flows pushes older notes out, so a flow
 * whose second packet comes after EDGE_DK_WAYS flood flows landed in its
 * set loses its note and the first packet's count (its rule counts every
 * packet), and is admitted on its next two. Recorded at once: a
 * connection, its reply and a steered flow; an entry found stale
 * (written over where it is); a miss whose lookup read a bucket being
 * written (the insert counts it busy). Returns 0 (noted, not recorded),
 * 1 (recorded), or 2 (recorded on its first packet). */
static __always_inline int flow_admit(struct edge_ctx *ctx)
{
	const struct edge_flow_key *k = &ctx->p.key;
	/* The tag is the 5-tuple's, shared by the flows of one connection
	 * (other DSCP, ingress, path): mixed with those, so each flow is
	 * noted on its own (not a secret: it places nothing another flow
	 * needs). */
	__u32 tag = ctx->ft_tag ^ (k->path * 0x9e3779b1u) ^
		    (k->ifindex * 0x85ebca77u) ^ ((__u32)k->dscp << 24);
	__u32 set = (tag >> 1) & (EDGE_DK_SETS - 1), i, free = EDGE_DK_WAYS;
	/* A note names its flow by the tag with the bucket (the hash's
	 * other half) mixed into the bits that chose the set, alike in
	 * every note of it: by the tag alone two flows of a set differ in
	 * 19 bits, and a flow whose tag equalled a noted flow's was admitted
	 * on its first packet with the other's counted in (in 2.6 of 1,000
	 * runs of 3,000 flows). The bucket adds up to 12 bits. */
	__u32 id = tag ^ (ctx->ft_bucket << 1);
	__u16 now = ctx->now;
	struct edge_dk_set *s;
	__u64 v;

	if (ctx->nf.flags & (EDGE_FF_CONN | EDGE_FF_REPLY | EDGE_FF_STEERED))
		return ctx->ft_way >= 0 ? 1 : 2;
	if (ctx->ft_way >= 0 || (ctx->ft_seq & 1))
		return 1;
	s = bpf_map_lookup_elem(&edge_dk, &set);
	if (!s)
		return 1;
#pragma unroll
	for (i = 0; i < EDGE_DK_WAYS; i++) {
		v = s->note[i];
		if ((__u16)(now - (__u16)(v >> 16)) > EDGE_DK_TICKS || !v) {
			free = i;
			continue;
		}
		if ((__u32)(v >> 32) == id) {
			s->note[i] = 0;
			ctx->nf.packets++;
			ctx->nf.bytes += (__u16)v;
			return 1;
		}
	}
	if (free >= EDGE_DK_WAYS)
		free = (tag >> 13) & (EDGE_DK_WAYS - 1);
	s->note[free & (EDGE_DK_WAYS - 1)] = (__u64)id << 32 | (__u64)now << 16 |
			  (ctx->p.len > 0xffff ? 0xffff : ctx->p.len);
	count_cache(EDGE_CACHE_FIRST);
	return 0;
}

/* flow_record writes the entry a miss decided (ctx->nf) into the flow
 * table, once admitted (flow_admit), and into this CPU's exact-match
 * slot emc (IPv4; the copy is made even when the table has no room for
 * the flow, counted there). A connection's first packet makes no copy:
 * many connections send one packet each way (DNS, probes, a flood of
 * SYNs), and its second packet, found in the table, makes it. */
static __always_inline void flow_record(struct edge_ctx *ctx,
					struct edge_emc_slot *emc)
{
	int admit = flow_admit(ctx);

	if (!admit)
		return;
	edge_ft_insert(ctx);
	if (admit == 1 && ctx->p.key.family == 4 && emc && emc_take(ctx, emc))
		emc_fill(ctx, emc, &ctx->nf, 0, 0, 0);
}

/* flow_keep writes back what a hit learnt: into the table the next hop
 * an IPv6 hit looked up again (fl: the copy in ctx->nf it was decided
 * from; an IPv4 flow keeps its own in its exact-match copy), and into
 * the IPv4 flow's copy emc where its FlowOpt record now is. */
static __always_inline void flow_keep(struct edge_ctx *ctx,
				      struct edge_emc_slot *emc,
				      const struct edge_flow *fl)
{
	if (emc && emc->fo_at != ctx->fo_at)
		emc->fo_at = ctx->fo_at;
	if (fl == &ctx->nf && !ctx->record && fl->fib_epoch != ctx->ft_nh)
		edge_ft_nexthop(ctx, fl);
}

#endif
