/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* PDR classification by tuple-space search: the agent sorts rules into mask
 * groups (one hash subtable each); a packet key is masked per group and
 * looked up, and the best prio over all groups wins. Cost is one hash
 * lookup per group, independent of the number of rules. */
#ifndef EDGE_CLASSIFY_H
#define EDGE_CLASSIFY_H

#include "../edge_maps.h"
#include "parse.h"

/* edge_classify finds the best rule for key in slot (gen & 1). Returns 1
 * and fills *out on a match, 0 otherwise.
 *
 * It is a global function: the verifier checks its group loop once, with
 * arguments it knows nothing about, instead of once for every state the
 * pipeline reaches it in. Inlined, the pipeline verified in ~846,000 of
 * the 1,000,000 instructions the verifier allows, leaving no room for
 * later stages; a call costs a few ns on the miss path only. */
__noinline int edge_classify(const struct edge_flow_key *key,
			     const struct edge_state *st, __u32 slot,
			     struct edge_rule *out)
{
	struct edge_rule_key rk = {};
	__u64 *m = (__u64 *)&rk.k;
	const __u64 *k;
	int found = 0;
	__u32 i, n, base;

	if (!key || !st || !out)
		return 0;
	k = (const __u64 *)key;
	n = st->ngroups[slot & 1];
	base = (slot & 1) * EDGE_MAX_GROUPS;

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
		if (found && g->min_prio > out->prio)
			break;
		gm = (const __u64 *)&g->mask;
		m[0] = k[0] & gm[0];
		m[1] = k[1] & gm[1];
		m[2] = k[2] & gm[2];
		m[3] = k[3] & gm[3];
		m[4] = k[4] & gm[4];
		m[5] = k[5] & gm[5];
		rk.group = base + (g->tag & (EDGE_MAX_GROUPS - 1));
		r = bpf_map_lookup_elem(&edge_rules, &rk);
		if (r && (!found || r->prio < out->prio)) {
			*out = *r;
			found = 1;
		}
	}
	return found;
}

#endif
