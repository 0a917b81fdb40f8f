// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Test-only XDP programs for lib/icmp.h, run through BPF_PROG_TEST_RUN by
 * internal/bpf/icmptest: each answers the frame it is given with an ICMP
 * too-big (XDP_TX) or drops it when lib/icmp.h refuses. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lib/icmp.h"

/* Advertised MTU and reply sources, set from Go before load. */
volatile const __u32 icmp_mtu = 1400;
volatile const __be32 icmp_src4 = 0;
volatile const __be32 icmp_src6[4] = {};

SEC("xdp")
int test_too_big4(struct xdp_md *ctx)
{
	return edge_icmp_too_big4(ctx, icmp_mtu, icmp_src4) ? XDP_DROP : XDP_TX;
}

SEC("xdp")
int test_too_big6(struct xdp_md *ctx)
{
	struct in6_addr src;

	/* Volatile reads: the rodata values are only known at load time. */
	src.in6_u.u6_addr32[0] = icmp_src6[0];
	src.in6_u.u6_addr32[1] = icmp_src6[1];
	src.in6_u.u6_addr32[2] = icmp_src6[2];
	src.in6_u.u6_addr32[3] = icmp_src6[3];
	return edge_icmp_too_big6(ctx, icmp_mtu, &src) ? XDP_DROP : XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
