// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* edgeplane XDP entry: parse -> flow cache -> (miss) classify -> act.
 * Stages live in lib/; this file only wires them. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "edge_consts.h"
#include "edge_types.h"
#include "edge_maps.h"
#include "lib/parse.h"
#include "lib/classify.h"
#include "lib/forward.h"

/* FAR slot stride (limits.rules), set by the agent before load. */
volatile const __u32 far_stride = 65536;

static __always_inline void count_cache(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&edge_cache_stats, &idx);

	if (c)
		(*c)++;
}

SEC("xdp")
int edge_xdp(struct xdp_md *ctx)
{
	struct edge_pkt p = {};
	struct edge_flow *fl, nf;
	const struct edge_state *st;
	const struct edge_far *far;
	struct edge_rule rule;
	__u32 zero = 0, slot, fi;
	int rc;

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

	nf.gen = st->gen;
	slot = nf.gen & 1;
	fl = bpf_map_lookup_elem(&edge_flows, &p.key);
	if (fl && fl->gen == nf.gen) {
		count_cache(0);
		nf = *fl;
	} else {
		count_cache(1);
		if (edge_classify(&p.key, st, slot, &rule)) {
			nf.far = rule.far;
			nf.stats = rule.stats;
		} else {
			nf.far = EDGE_NO_FAR;
			nf.stats = EDGE_NO_PDR;
		}
		nf.pad = 0;
		if (bpf_map_update_elem(&edge_flows, &p.key, &nf, BPF_ANY))
			count(&edge_reasons, EDGE_R_FLOW_FULL, p.len);
	}

	if (nf.far == EDGE_NO_FAR)
		return punt(&p, EDGE_R_NO_MATCH, st->nomatch_verdict);
	count(&edge_pdr_stats, nf.stats, p.len);
	fi = slot * far_stride + nf.far;
	far = bpf_map_lookup_elem(&edge_fars, &fi);
	if (!far)
		return punt(&p, EDGE_R_NO_STATE, XDP_PASS);
	return edge_act(ctx, &p, far);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
