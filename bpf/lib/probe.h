/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Path probes, answered and timed at the driver hook. The agent sends a
 * request (struct edge_probe inside GRE, protocol type EDGE_PROBE_PROTO)
 * over each path every probe interval; the peer's decap stage hands it
 * here, and it goes straight back out of the interface it came in by
 * (XDP_TX) with the outer addresses and MACs swapped: no userspace on the
 * probe's way. The answer reaches the sender's decap stage in turn, which
 * records its round-trip time, from the timestamp it carries, in
 * edge_path_probe for the agent's monitor. Only packets of a path of ours
 * (outer source its remote) get here: no one else can use a gateway as a
 * reflector. */
#ifndef EDGE_PROBE_H
#define EDGE_PROBE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "verdict.h"

/* RTTs above this are no answer to a probe of ours (a clock from another
 * boot, a forged timestamp): 10 s. */
#define PROBE_MAX_RTT 10000000000ull

/* probe_record adds an answer's sequence number and RTT to the path's
 * record. */
static __always_inline void probe_record(struct edge_probe_rec *r, __u32 seq,
					 __u64 rtt, __u64 now)
{
	__s32 d;
	__u64 err;

	bpf_spin_lock(&r->lock);
	d = (__s32)(seq - r->hi_seq);
	if (!r->replies || d >= 64) {
		r->seen = 1;
		r->hi_seq = seq;
	} else if (d > 0) {
		r->seen = r->seen << d | 1;
		r->hi_seq = seq;
	} else if (d > -64) {
		r->seen |= 1ull << -d;
	}
	if (!r->replies) {
		r->srtt_ns = rtt;
		r->rttvar_ns = rtt / 2;
	} else {
		err = rtt > r->srtt_ns ? rtt - r->srtt_ns : r->srtt_ns - rtt;
		r->rttvar_ns = r->rttvar_ns - r->rttvar_ns / 4 + err / 4;
		r->srtt_ns = r->srtt_ns - r->srtt_ns / 8 + rtt / 8;
	}
	if (!r->min_ns || rtt < r->min_ns)
		r->min_ns = rtt;
	r->last_rtt_ns = rtt;
	r->last_ns = now;
	r->replies++;
	bpf_spin_unlock(&r->lock);
}

/* edge_probe answers or records the probe in the GRE packet p of path
 * (stable index + 1), whose body starts inner_off bytes into the frame
 * and whose outer datagram ends at outer_end. Returns the verdict. */
static __always_inline int edge_probe(struct xdp_md *ctx,
				      const struct edge_pkt *p, __u32 path,
				      __u32 inner_off, void *outer_end)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + sizeof(*eth);
	struct edge_probe *pr = data + (inner_off & 0xff);
	struct edge_probe_rec *r;
	__u8 mac[ETH_ALEN];
	__u32 idx = (path - 1) & (EDGE_MAX_PATHS - 1);
	__u64 now, rtt;
	__be32 a;

	if ((void *)(iph + 1) > data_end || (void *)(pr + 1) > data_end ||
	    (void *)(pr + 1) > outer_end ||
	    pr->magic != bpf_htonl(EDGE_PROBE_MAGIC))
		return punt(p, EDGE_R_BAD_PROBE, XDP_DROP);
	if (pr->kind == EDGE_PROBE_REQUEST) {
		/* Back the way it came: the addresses swap, the checksum
		 * stays. */
		__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
		__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
		__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
		a = iph->saddr;
		iph->saddr = iph->daddr;
		iph->daddr = a;
		pr->kind = EDGE_PROBE_REPLY;
		return punt(p, EDGE_R_PROBE_REFLECT, XDP_TX);
	}
	if (pr->kind != EDGE_PROBE_REPLY || bpf_ntohs(pr->path) != idx)
		return punt(p, EDGE_R_BAD_PROBE, XDP_DROP);
	/* The one clock read of the pipeline: probes only, never data. */
	now = bpf_ktime_get_ns();
	rtt = now - pr->sent_ns;
	if (pr->sent_ns > now || rtt > PROBE_MAX_RTT)
		return punt(p, EDGE_R_BAD_PROBE, XDP_DROP);
	r = bpf_map_lookup_elem(&edge_path_probe, &idx);
	if (!r)
		return punt(p, EDGE_R_NO_STATE, XDP_DROP);
	probe_record(r, bpf_ntohl(pr->seq), rtt, now);
	return punt(p, EDGE_R_PROBE_REPLY, XDP_DROP);
}

#endif
