// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Traffic generator and sink for the end-to-end benchmark: generator ->
 * gateway namespace -> sink, over veths.
 *
 * bench_gen runs under BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES
 * and redirects every frame into the veth toward the gateway. Live frames
 * recycle their pages without copying the packet in again, and the
 * gateway rewrites them in place (routing decrements the TTL; GRE encap
 * writes its outer headers over the headroom and the first 14 bytes of
 * the frame), so the generator stamps the whole frame from a template on
 * every run.
 *
 * bench_sink counts what reaches it, by kind, and drops it. It also drops
 * ARP: the gateway holds a static neighbour entry for the sink. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define GEN_LEN 64 /* frame bytes the generator stamps (a multiple of 8) */

/* Set from Go before load. */
volatile const __u32 gen_ifindex;            /* veth toward the gateway */
volatile const __u64 gen_frame[GEN_LEN / 8]; /* the frame every run sends */
volatile const __be32 sink_gre_remote;       /* outer destination of our GRE */

/* Sink counters (index enum sink_kind); per CPU, summed in Go. */
enum sink_kind {
	SINK_ALL,
	SINK_GRE,   /* IPv4 GRE toward sink_gre_remote: through our encap */
	SINK_UDP,   /* plain IPv4 UDP: forwarded by the kernel, or dropped on
		     * the gateway's LAN side by the floor run */
	SINK_OTHER,
	SINK_KINDS,
};

/* Written by bench_sink, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, SINK_KINDS);
} sink_count SEC(".maps");

/* Runs of bench_gen; written by bench_gen, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} gen_count SEC(".maps");

static __always_inline void bump(void *map, __u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(map, &idx);

	if (c)
		(*c)++;
}

SEC("xdp")
int bench_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 *w = data;
	int i;

	if ((void *)(w + GEN_LEN / 8) > data_end)
		return XDP_ABORTED;
#pragma unroll
	for (i = 0; i < GEN_LEN / 8; i++)
		w[i] = gen_frame[i];
	bump(&gen_count, 0);
	return bpf_redirect(gen_ifindex, 0);
}

SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	__u32 kind = SINK_OTHER;

	bump(&sink_count, SINK_ALL);
	if ((void *)(iph + 1) <= data_end &&
	    eth->h_proto == bpf_htons(ETH_P_IP)) {
		if (iph->protocol == IPPROTO_GRE &&
		    iph->daddr == sink_gre_remote)
			kind = SINK_GRE;
		else if (iph->protocol == IPPROTO_UDP)
			kind = SINK_UDP;
	}
	bump(&sink_count, kind);
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
