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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
