// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Benchmark wrappers around the pipeline, for BPF_PROG_TEST_RUN with
 * repeat. With repeat N the program sees its own output from the second
 * run on. The redirect path rewrites the MACs (the same bytes every run,
 * and the pipeline does not read them) and decrements the TTL, which would
 * run out after 63 runs: each wrapper puts TTL and header checksum back
 * after the pipeline (two 16-bit stores), and bench_wrap_* time the
 * wrappers alone in the same run so they can be subtracted. Frames are
 * Ethernet + IPv4 without options + UDP. Never attached to an interface. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lib/pipeline.h"

/* Per-run counter the miss wrappers turn into a new flow. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} bench_seq SEC(".maps");

struct ttl_save {
	__u16 ttl_proto; /* offset 22: TTL and protocol */
	__u16 check;     /* offset 24: IPv4 header checksum */
};

static __always_inline int save_ttl(struct xdp_md *ctx, struct ttl_save *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *w = data + 22;

	if ((void *)(w + 2) > data_end)
		return -1;
	s->ttl_proto = w[0];
	s->check = w[1];
	return 0;
}

static __always_inline void restore_ttl(struct xdp_md *ctx,
					const struct ttl_save *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *w = data + 22;

	if ((void *)(w + 2) > data_end)
		return;
	w[0] = s->ttl_proto;
	w[1] = s->check;
}

/* next_flow makes the frame a new flow: UDP source port from the low 16
 * bits of a per-CPU counter and the low half of the IPv4 source address
 * from the high 16, with the header checksum patched, so flows do not
 * repeat within 2^32 runs and every run misses the flow cache. */
static __always_inline int next_flow(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *w = data;
	__u32 zero = 0, *seq;
	__u16 nsrc;

	if ((void *)(w + 18) > data_end) /* up to the UDP source port */
		return -1;
	seq = bpf_map_lookup_elem(&bench_seq, &zero);
	if (!seq)
		return -1;
	(*seq)++;
	w[17] = bpf_htons((__u16)*seq); /* UDP source port, offset 34 */
	nsrc = bpf_htons((__u16)(*seq >> 16));
	w[12] = csum_replace2(w[12], w[14], nsrc); /* checksum at 24 */
	w[14] = nsrc; /* low half of the source address, offset 28 */
	return 0;
}

SEC("xdp")
int bench_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int bench_wrap_pass(struct xdp_md *ctx)
{
	struct ttl_save s;

	if (save_ttl(ctx, &s))
		return XDP_ABORTED;
	restore_ttl(ctx, &s);
	return XDP_PASS;
}

SEC("xdp")
int bench_hit(struct xdp_md *ctx)
{
	struct ttl_save s;
	int rc;

	if (save_ttl(ctx, &s))
		return XDP_ABORTED;
	rc = edge_pipeline(ctx);
	restore_ttl(ctx, &s);
	return rc;
}

/* bench_miss turns the frame into the next new flow after the pipeline
 * ran, not before: packet writes in front of the pipeline multiply its
 * verifier states past the 1M-instruction limit. */
SEC("xdp")
int bench_miss(struct xdp_md *ctx)
{
	struct ttl_save s;
	int rc;

	if (save_ttl(ctx, &s))
		return XDP_ABORTED;
	rc = edge_pipeline(ctx);
	restore_ttl(ctx, &s);
	if (next_flow(ctx))
		return XDP_ABORTED;
	return rc;
}

/* bench_wrap_miss is bench_miss without the pipeline. */
SEC("xdp")
int bench_wrap_miss(struct xdp_md *ctx)
{
	struct ttl_save s;

	if (save_ttl(ctx, &s))
		return XDP_ABORTED;
	restore_ttl(ctx, &s);
	if (next_flow(ctx))
		return XDP_ABORTED;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
