/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* PDR classification by tuple-space search: the agent sorts rules into mask
 * groups (one hash subtable each); a packet key is masked per group and
 * looked up, and the best prio over all groups wins. Cost is one hash
 * lookup per group, independent of the number of rules. */
#ifndef EDGE_CLASSIFY_H
#define EDGE_CLASSIFY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"

/* EDGE_PRIO_ANY bounds nothing: every rule may win. */
#define EDGE_PRIO_ANY (~0ull)

/* edge_classify finds the best rule of ctx->gen's slot for the packet key
 * in ctx->p, among rules whose prio is at most bound (a guarded service's
 * place, or EDGE_PRIO_ANY). Returns 1 and fills ctx->rule on a match, 0
 * otherwise.
 *
 * It is a global function: the verifier checks its group loop once, with
 * arguments it knows nothing about, instead of once for every state the
 * pipeline reaches it in. Inlined, the pipeline verified in ~846,000 of
 * the 1,000,000 instructions the verifier allows, leaving no room for
 * later stages; a call costs a few ns on the miss path only. */
__noinline int edge_classify(struct edge_ctx *ctx, const struct edge_state *st,
			     __u64 bound)
{
	struct edge_rule_key rk = {};
	__u64 *m = (__u64 *)&rk.k;
	struct edge_rule *out;
	const __u64 *k;
	int found = 0;
	__u32 i, n, base;

	if (!ctx || !st)
		return 0;
	k = (const __u64 *)&ctx->p.key;
	out = &ctx->rule;
	n = st->ngroups[ctx->gen & 1];
	base = (ctx->gen & 1) * EDGE_MAX_GROUPS;

	for (i = 0; i < EDGE_MAX_GROUPS; i++) {
		const struct edge_group *g;
		const __u64 *gm;
		struct edge_rule *r;
		__u32 gi = base + i;

		if (i >= n)
			break;
		g = bpf_map_lookup_elem(&edge_groups, &gi);
		if (!g)
			break;
		/* Groups are sorted by min_prio: no later group can win. */
		if (g->min_prio > bound || (found && g->min_prio > out->prio))
			break;
		gm = (const __u64 *)&g->mask;
		m[0] = k[0] & gm[0];
		m[1] = k[1] & gm[1];
		m[2] = k[2] & gm[2];
		m[3] = k[3] & gm[3];
		m[4] = k[4] & gm[4];
		m[5] = k[5] & gm[5];
		m[6] = k[6] & gm[6];
		rk.group = base + (g->tag & (EDGE_MAX_GROUPS - 1));
		r = bpf_map_lookup_elem(&edge_rules, &rk);
		if (r && r->prio <= bound && (!found || r->prio < out->prio)) {
			*out = *r;
			found = 1;
		}
	}
	return found;
}

#endif
