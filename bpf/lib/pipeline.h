/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The per-packet pipeline: parse -> flow cache -> (miss) classify -> act. */
#ifndef EDGE_PIPELINE_H
#define EDGE_PIPELINE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_consts.h"
#include "../edge_types.h"
#include "../edge_maps.h"
#include "parse.h"
#include "classify.h"
#include "forward.h"

/* FAR slot stride (limits.rules), set by the agent before load. */
volatile const __u32 far_stride = 65536;

static __always_inline void count_cache(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&edge_cache_stats, &idx);

	if (c)
		(*c)++;
}

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
	h ^= w[5];
	h ^= h >> 15;
	return h & (EDGE_EMC_SLOTS - 1);
}

static __always_inline int emc_match(const struct edge_emc4 *e,
				     const struct edge_flow_key4 *k)
{
	const __u64 *a = (const __u64 *)&e->k, *b = (const __u64 *)k;

	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
}

/* emc_flush adds the packets an exact-match cache slot counted to its
 * flow's total in edge_flows4, before the slot is reused. A flow that
 * left edge_flows4 meanwhile loses them with the rest of its entry. It is
 * a global function, verified once on its own: inlined, its branches
 * multiplied the pipeline's verifier states past the 1M-instruction
 * limit. */
__noinline int emc_flush(struct edge_emc4 *e)
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

/* flow_key4 packs an IPv4 key into the compact flow-cache key. */
static __always_inline void flow_key4(const struct edge_flow_key *k,
				      struct edge_flow_key4 *k4)
{
	__builtin_memcpy(&k4->src, k->src, 4);
	__builtin_memcpy(&k4->dst, k->dst, 4);
	k4->ifindex = k->ifindex;
	k4->gre_key = k->gre_key;
	k4->sport = k->sport;
	k4->dport = k->dport;
	k4->proto = k->proto;
	k4->dscp = k->dscp;
	k4->flags = k->flags;
	k4->pad = 0;
}

/* stateless decides a packet of a stateless service: edge_stateless, or
 * when it cannot, edge_balance with EDGE_BAL_STATELESS. */
static __always_inline int stateless(const struct edge_flow_key *key,
				     __u32 gen, __u32 bal,
				     struct edge_rule *rule)
{
	int lb = edge_stateless(key, gen & 1, far_stride, rule);

	if (lb == EDGE_LB_ASK)
		lb = edge_balance(key, gen & 1, far_stride,
				  bal | EDGE_BAL_STATELESS, rule);
	return lb;
}

/* nat_icmp_forward sends an ICMP error edge_nat_icmp translated out of
 * the interface of the FAR it chose, by the FIB (next hop into nf, not
 * kept), counted with the connection's backend. */
static __always_inline int nat_icmp_forward(struct xdp_md *ctx,
					    struct edge_pkt *p,
					    const struct edge_state *st,
					    const struct edge_rule *rule,
					    struct edge_flow *nf)
{
	const struct edge_far *far;
	__u32 fi = (st->gen & 1) * far_stride + rule->far;

	far = bpf_map_lookup_elem(&edge_fars, &fi);
	if (!far)
		return punt(p, EDGE_R_NO_STATE, XDP_DROP);
	count(&edge_lb_stats, rule->stats & ~EDGE_STATS_LB, p->len);
	count(&edge_reasons, EDGE_R_NAT_ICMP, p->len);
	__builtin_memset(nf, 0, sizeof(*nf));
	nf->gen = st->gen;
	return edge_redirect(ctx, p, far, nf, st->fib_epoch);
}

/* edge_pipeline is the whole per-packet path; entry programs (and the
 * benchmark wrappers) call it. */
static __always_inline int edge_pipeline(struct xdp_md *ctx)
{
	struct edge_pkt p = {};
	struct edge_flow *fl, nf;
	struct edge_flow_key4 k4;
	struct edge_emc4 *emc = NULL;
	const struct edge_state *st;
	const struct edge_far *far;
	struct edge_rule rule;
	__u32 zero = 0, fi, slot;
	int rc, insert = 0, lb = EDGE_LB_NONE;
	__u32 bal = 0;
	__u64 vips;

	st = bpf_map_lookup_elem(&edge_global, &zero);
	rc = edge_parse(ctx, &p);
	if (rc == EDGE_R_NON_IP)
		return punt(&p, EDGE_R_NON_IP, XDP_PASS);
	if (!st)
		return punt(&p, EDGE_R_NO_STATE, XDP_PASS);
	if (rc == -EDGE_R_VLAN_DEPTH)
		return punt(&p, EDGE_R_VLAN_DEPTH, XDP_PASS);
	if (rc < 0)
		return punt(&p, -rc, st->malformed_verdict);
	if (st->gen == 0)
		return punt(&p, EDGE_R_NO_STATE, XDP_PASS);
	if (st->nnat[st->gen & 1])
		bal = EDGE_BAL_NAT;

	/* The barriers keep clang from merging the two lookups into one call
	 * with a selected map pointer: the verifier inlines a hash lookup only
	 * where the map is a constant. */
	/* An ICMP error about a NAT'd connection is translated and sent on,
	 * never cached: the flow cache keys it by its own addresses, not by
	 * the connection it quotes. */
	if (bal && (p.key.proto == IPPROTO_ICMP ||
		    p.key.proto == IPPROTO_ICMPV6) && p.l4_off &&
	    edge_nat_icmp(ctx, &p, st->gen & 1, far_stride, &rule) ==
		    EDGE_LB_HIT) {
		if (edge_nat_icmp_rewrite(ctx, st->gen & 1, far_stride,
					  rule.far))
			return punt(&p, EDGE_R_NAT_L4, XDP_DROP);
		return nat_icmp_forward(ctx, &p, st, &rule, &nf);
	}
	/* A stateless service's packets are decided before any cache: they
	 * are never in edge_flows, and exact-match copies of them would let a
	 * flood of its flows evict every other flow's copy. Other packets
	 * pay one multiply and a bit test (sl_bit), or nothing when the
	 * slot has no stateless service. */
	vips = st->stateless_vips[st->gen & 1];
	if (vips && (vips >> sl_bit(p.key.dst, p.key.dport) & 1))
		lb = stateless(&p.key, st->gen, bal, &rule);
	if (lb != EDGE_LB_NONE) {
		fl = NULL;
	} else if (p.key.family == 4) {
		flow_key4(&p.key, &k4);
		slot = emc_slot(&k4);
		emc = bpf_map_lookup_elem(&edge_emc4, &slot);
		/* A hit counts the packet where it is found: an exact-match
		 * copy is this CPU's alone, a shared entry is added to
		 * atomically. */
		if (emc && emc_match(emc, &k4) && emc->f.gen == st->gen) {
			fl = &emc->f;
			fl->packets++;
			fl->bytes += p.len;
		} else {
			fl = bpf_map_lookup_elem(&edge_flows4, &k4);
			if (emc && fl && fl->gen == st->gen) {
				if (emc->f.packets)
					emc_flush(emc);
				emc->k = k4;
				emc->f = *fl;
				emc->f.packets = 1;
				emc->f.bytes = p.len;
				fl = &emc->f;
			} else if (fl && fl->gen == st->gen) {
				__sync_fetch_and_add(&fl->packets, 1);
				__sync_fetch_and_add(&fl->bytes, p.len);
			}
		}
		asm volatile("" ::: "memory");
	} else {
		fl = bpf_map_lookup_elem(&edge_flows, &p.key);
		if (fl && fl->gen == st->gen) {
			__sync_fetch_and_add(&fl->packets, 1);
			__sync_fetch_and_add(&fl->bytes, p.len);
		}
		asm volatile("" ::: "memory");
	}
	if (fl && fl->gen == st->gen) {
		count_cache(0);
	} else {
		/* Miss or stale generation: classify into a fresh entry on the
		 * stack, act (which may fill its next hop), then insert it. A
		 * flow reclassified after a commit keeps its count: the slot
		 * this flow's copy may sit in is flushed into the shared
		 * entry first, then that total carried over. A stateless
		 * service's packet was never looked for: not counted a miss. */
		if (lb != EDGE_LB_STATELESS)
			count_cache(1);
		__builtin_memset(&nf, 0, sizeof(nf));
		if (p.key.family == 4 && emc && emc->f.packets)
			emc_flush(emc);
		if (fl) {
			nf.packets = fl->packets;
			nf.bytes = fl->bytes;
		}
		nf.packets++;
		nf.bytes += p.len;
		nf.gen = st->gen;
		if (lb == EDGE_LB_NONE && st->nservices[nf.gen & 1])
			lb = edge_balance(&p.key, nf.gen & 1, far_stride, bal,
					  &rule);
		if (lb == EDGE_LB_NO_BACKEND)
			return punt(&p, EDGE_R_LB_NO_BACKEND, XDP_DROP);
		if (lb == EDGE_LB_HIT || lb == EDGE_LB_STATELESS ||
		    edge_classify(&p.key, st, nf.gen & 1, &rule)) {
			nf.far = rule.far;
			nf.stats = rule.stats;
		} else {
			nf.far = EDGE_NO_FAR;
			nf.stats = EDGE_NO_PDR;
		}
		fl = &nf;
		/* A stateless service's flow is recorded nowhere. */
		insert = lb != EDGE_LB_STATELESS;
	}

	if (fl->far == EDGE_NO_FAR) {
		rc = punt(&p, EDGE_R_NO_MATCH, st->nomatch_verdict);
	} else {
		if (fl->stats & EDGE_STATS_LB) {
			count(&edge_lb_stats, fl->stats & ~EDGE_STATS_LB, p.len);
			if (p.tcp_flags & (0x01 | 0x04)) /* FIN, RST */
				edge_conn_close(&p.key);
		} else
			count(&edge_pdr_stats, fl->stats, p.len);
		fi = (fl->gen & 1) * far_stride + fl->far;
		far = bpf_map_lookup_elem(&edge_fars, &fi);
		if (far)
			rc = edge_act(ctx, &p, far, fl, st->fib_epoch);
		else
			rc = punt(&p, EDGE_R_NO_STATE, XDP_PASS);
	}
	if (insert) {
		long err = 0;

		if (p.key.family == 4) {
			err = bpf_map_update_elem(&edge_flows4, &k4, &nf,
						  BPF_ANY);
			if (emc) {
				emc->k = k4;
				emc->f = nf;
				emc->f.packets = 0; /* the total is in nf */
				emc->f.bytes = 0;
			}
			asm volatile("" ::: "memory");
		} else {
			err = bpf_map_update_elem(&edge_flows, &p.key, &nf, BPF_ANY);
			asm volatile("" ::: "memory");
		}
		if (err)
			count(&edge_reasons, EDGE_R_FLOW_FULL, p.len);
	}
	return rc;
}

#endif
