/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* What every stage stands on: the per-packet context, the FAR table,
 * counters and verdicts. Every packet leaves the pipeline through punt or verdict, so
 * operators see every punt and drop (edge_reasons, edge_verdicts).
 * Per-CPU counters, no atomics, summed by the agent. */
#ifndef EDGE_VERDICT_H
#define EDGE_VERDICT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"

/* edge_ctx_get returns this CPU's per-packet context (edge_ctx.h). */
static __always_inline struct edge_ctx *edge_ctx_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&edge_ctx, &zero);
}

/* edge_ctx_of returns the context whose packet p is (p is its first
 * member): a stage given only the packet reaches its context without
 * another map lookup. */
static __always_inline struct edge_ctx *edge_ctx_of(const struct edge_pkt *p)
{
	_Static_assert(__builtin_offsetof(struct edge_ctx, p) == 0,
		       "edge_ctx_of: p is edge_ctx's first member");
	return (struct edge_ctx *)p;
}

/* FAR slot stride (limits.rules), set by the agent before load: FAR i of
 * slot s is edge_fars[s * far_stride + i]. */
volatile const __u32 far_stride = 65536;

/* far_get returns FAR index fi of slot (0 or 1), or NULL. */
static __always_inline const struct edge_far *far_get(__u32 slot, __u32 fi)
{
	__u32 k = (slot & 1) * far_stride + fi;

	return bpf_map_lookup_elem(&edge_fars, &k);
}

/* EDGE_GO_ON is what a stage returns when the packet goes on to the next
 * one; any other value is the XDP verdict it ended with. */
#define EDGE_GO_ON (-1)

/* count adds one packet of len bytes to a per-CPU counter array. */
static __always_inline void count(void *map, __u32 idx, __u32 len)
{
	struct edge_ctr *c = bpf_map_lookup_elem(map, &idx);

	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

/* punt ends the pipeline with verdict, counting reason. */
static __always_inline int punt(const struct edge_pkt *p,
				enum edge_reason reason, int verdict)
{
	count(&edge_reasons, reason, p->len);
	count(&edge_verdicts, verdict, p->len);
	return verdict;
}

/* verdict ends the pipeline with verdict, its FAR's own (no reason). */
static __always_inline int verdict(const struct edge_pkt *p, int verdict)
{
	count(&edge_verdicts, verdict, p->len);
	return verdict;
}

/* count_cache counts a flow-cache hit or miss, or a first packet. */
static __always_inline void count_cache(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&edge_cache_stats, &idx);

	if (c)
		(*c)++;
}

/* send_back is the verdict of an answer XDP made in place of the packet
 * p: back out of the interface it came in by, through the devmap
 * (edge_tx) rather than XDP_TX. A veth flushes XDP_TX frames to its peer
 * only when the peer runs an XDP program (veth_xdp_flush), so toward a
 * host whose veth has only GRO's NAPI (a lab host, a container) an
 * answer waited for the next frame sent there, a second or more; a
 * redirect is flushed at the end of the poll. An interface the devmap
 * lacks: XDP_TX. */
static __always_inline int send_back(const struct edge_pkt *p)
{
	return bpf_redirect_map(&edge_tx, p->key.ifindex, XDP_TX);
}

#endif
