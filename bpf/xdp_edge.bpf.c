// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* edgeplane XDP entry: the pipeline of lib/pipeline.h on every interface. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lib/pipeline.h"

SEC("xdp")
int edge_xdp(struct xdp_md *ctx)
{
	return edge_pipeline(ctx);
}

/* Run by the kernel on each copy of a redundant group's packet as it
 * leaves by one of the group's interfaces (lib/dup.h). */
SEC("xdp/devmap")
int edge_xdp_dup(struct xdp_md *ctx)
{
	return edge_dup_out(ctx, ctx->egress_ifindex);
}

/* Run by the kernel on a packet relief handed to another CPU (edge_cpus,
 * lib/flowopt.h): the pipeline, there. A cpumap program cannot send a
 * packet back out of its interface with XDP_TX: it redirects it there. */
SEC("xdp/cpumap")
int edge_xdp_cpu(struct xdp_md *ctx)
{
	int rc = edge_pipeline_on(ctx, 1);

	if (rc == XDP_TX)
		return bpf_redirect(ctx->ingress_ifindex, 0);
	return rc;
}

/* Run by the agent, never attached: each path probe it sends, through
 * BPF_PROG_TEST_RUN with live frames (lib/probe.h). */
SEC("xdp")
int edge_xdp_probe(struct xdp_md *ctx)
{
	return edge_probe_send(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
