/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Steering: a FAR of action steer names a group of encap FARs, one per
 * path (an LBR of steering mode); a flow is sent over the member its
 * hash picks from the group's table (or, per packet, a random entry).
 * The agent fills the table from the group's mode and its paths' states
 * (path monitor), so the packet path only reads maps. A flow keeps its
 * member (the member's FAR is what its entry records) until the agent
 * takes the member out of the group's usable set: the flow is then
 * decided again on its next packet (steer_moved). */
#ifndef EDGE_STEER_H
#define EDGE_STEER_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "dup.h"
#include "verdict.h"

/* steer_moved tells whether flow entry f was steered to a member its
 * group no longer lets flows stay on. */
static __always_inline int steer_moved(const struct edge_flow *f)
{
	__u32 g, *ok;

	if (!(f->flags & EDGE_FF_STEERED))
		return 0;
	g = (f->svc >> 8) & (EDGE_MAX_STEER - 1);
	ok = bpf_map_lookup_elem(&edge_steer_ok, &g);
	return !ok || !(*ok >> (f->svc & (EDGE_STEER_MEMBERS - 1)) & 1);
}

/* edge_steer_pick returns the FAR of the member of steering FAR far's
 * group the packet goes over, recording the choice in fl (per flow: the
 * member's FAR, marked EDGE_FF_STEERED; per packet: fl keeps the steer
 * FAR, so every packet picks); the flow's hash is its flow-table tag. A
 * redundant group's packet goes over every usable member: *dup is set to
 * the group's index + 1 and the FAR returned is the first's (dup.h).
 * NULL: the packet is done, *rc its verdict. */
static __always_inline const struct edge_far *
edge_steer_pick(struct xdp_md *ctx, struct edge_ctx *c,
		const struct edge_far *far, struct edge_flow *fl, __u32 epoch,
		__u32 *dup, int *rc)
{
	const struct edge_pkt *p = &c->p;
	const struct edge_steer_group *s;
	const struct edge_far *m;
	__u32 g = far->path & (EDGE_MAX_STEER - 1), gen = c->gen;
	__u32 si = (gen & 1) * EDGE_MAX_STEER + g, i, idx, hash = c->ft_tag >> 1;

	s = bpf_map_lookup_elem(&edge_steer, &si);
	if (!s || !s->n)
		goto none;
	if (s->flags & EDGE_SF_REDUNDANT) {
		*dup = g + 1;
		return edge_dup_first(ctx, c, s, g, epoch, rc);
	}
	if (s->flags & EDGE_SF_PER_PACKET)
		hash = bpf_get_prandom_u32();
	i = s->table[hash & (EDGE_STEER_TABLE - 1)] & (EDGE_STEER_MEMBERS - 1);
	idx = s->far[i];
	m = far_get(gen, idx);
	if (!m || m->action != EDGE_ACT_ENCAP)
		goto none;
	if (!(s->flags & EDGE_SF_PER_PACKET)) {
		fl->far = idx;
		fl->flags |= EDGE_FF_STEERED;
		fl->svc = g << 8 | i;
	}
	return m;
none:
	*rc = punt(p, EDGE_R_STEER_NONE, XDP_DROP);
	return NULL;
}

#endif
