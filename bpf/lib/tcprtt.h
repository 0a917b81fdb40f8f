/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Passive RTT of a path from the TCP timestamps (RFC 7323) of the flows it
 * carries, as pping and ePPing take it: a TCP packet encapsulated onto the
 * path is a sample, its TSval noted with the time it left; the first TCP
 * packet of the same flow coming back over the path whose TSecr echoes
 * that TSval ends it. The RTT covers both directions of the path and the
 * far end's host (its delayed ACKs included), as the flows see it.
 *
 * One sample is in flight per path at a time, so the packet path pays
 * for the option walk and the clock about once a round trip, not per
 * packet: an encapsulated TCP packet only looks whether the path's slot
 * is free, a decapsulated one whether it is of the sampled flow. A
 * sample is given up when an echo of the flow goes past its TSval (the
 * receiver echoed an earlier segment's for it), and one whose echo never
 * comes (the flow ended, the echo came back over another path) after two
 * of the agent's ticks. Timestamps
 * are compared for equality, so their wrap does not matter; a
 * retransmission cannot start a sample while one is in flight, and one
 * carrying a newer TSval is timed from its own sending. */
#ifndef EDGE_TCPRTT_H
#define EDGE_TCPRTT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "../edge_maps.h"
#include "verdict.h"

/* Ticks (about seconds) a sample may wait for its echo. */
#define TCPRTT_STALE 2

/* TCPOPT_* of RFC 793 and 7323. */
#define TCP_OPT_EOL 0
#define TCP_OPT_NOP 1
#define TCP_OPT_TS 8
#define TCP_OPT_TS_LEN 10

/* tcp_ts reads the timestamps option of the TCP packet in c->p into
 * c->tsval and c->tsecr (host order): 1, or 0 when it has none. At most
 * 10 options are walked (Linux sends 3 or 4). */
static __always_inline int tcp_ts(struct xdp_md *ctx, struct edge_ctx *c)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tcphdr *th = data + (c->p.l4_off & 0x3ff);
	__u8 *opt, *end;
	__u32 v[2];
	int i;

	if ((void *)(th + 1) > data_end)
		return 0;
	opt = (__u8 *)(th + 1);
	end = (__u8 *)th + th->doff * 4;
	for (i = 0; i < 10; i++) {
		if (opt + 2 > end || (void *)(opt + 2) > data_end)
			return 0;
		if (opt[0] == TCP_OPT_EOL)
			return 0;
		if (opt[0] == TCP_OPT_NOP) {
			opt++;
			continue;
		}
		if (opt[0] == TCP_OPT_TS && opt[1] == TCP_OPT_TS_LEN) {
			if (opt + TCP_OPT_TS_LEN > end ||
			    (void *)(opt + TCP_OPT_TS_LEN) > data_end)
				return 0;
			__builtin_memcpy(v, opt + 2, sizeof(v));
			c->tsval = bpf_ntohl(v[0]);
			c->tsecr = bpf_ntohl(v[1]);
			return 1;
		}
		if (opt[1] < 2)
			return 0;
		opt += opt[1];
	}
	return 0;
}

/* tcp_flow is the direction-free part of the packet's flow: the xor of
 * its addresses' words. */
static __always_inline __u32 tcp_flow(const struct edge_pkt *p)
{
	const __u32 *s = (const void *)p->key.src, *d = (const void *)p->key.dst;

	return s[0] ^ s[1] ^ s[2] ^ s[3] ^ d[0] ^ d[1] ^ d[2] ^ d[3];
}

/* edge_tcp_rtt_out takes the TCP packet in c->p, about to be encapsulated
 * onto path (stable index) and sent out of interface oif, as the path's
 * sample when none is in flight and it has timestamps. A global
 * function: verified once. Returns 0. */
__noinline int edge_tcp_rtt_out(struct xdp_md *ctx, struct edge_ctx *c,
				__u32 path, __u32 oif)
{
	struct edge_tcp_rtt *r;
	__u64 now;

	if (!c)
		return 0;
	path &= EDGE_MAX_PATHS - 1;
	r = bpf_map_lookup_elem(&edge_path_tcp_rtt, &path);
	/* A plain read first: a sample in flight is the common case. */
	if (!r || (r->taken && c->now + 1 - r->taken < TCPRTT_STALE) ||
	    !tcp_ts(ctx, c))
		return 0;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&r->lock);
	if (!r->taken || c->now + 1 - r->taken >= TCPRTT_STALE) {
		r->tsval = c->tsval;
		r->flow = tcp_flow(&c->p);
		r->ports = bpf_ntohs(c->p.key.sport) << 16 |
			   bpf_ntohs(c->p.key.dport);
		r->taken = c->now + 1;
		r->oif = oif;
		r->sent_ns = now;
	}
	bpf_spin_unlock(&r->lock);
	return 0;
}

/* edge_tcp_rtt_in ends path's (stable index) sample when the TCP packet
 * in c->p, decapsulated from it, is of the sampled flow coming back,
 * came in by the interface the sample left by (a packet naming the
 * path's outer addresses from anywhere else is no echo of it), and
 * echoes the sample's TSval. A global function. Returns 0. */
__noinline int edge_tcp_rtt_in(struct xdp_md *ctx, struct edge_ctx *c,
			       __u32 path)
{
	struct edge_tcp_rtt *r;
	__u64 now, rtt;

	if (!c)
		return 0;
	path &= EDGE_MAX_PATHS - 1;
	r = bpf_map_lookup_elem(&edge_path_tcp_rtt, &path);
	if (!r || !r->taken || r->oif != c->p.key.ifindex ||
	    r->flow != tcp_flow(&c->p) ||
	    r->ports != (__u32)(bpf_ntohs(c->p.key.dport) << 16 |
				bpf_ntohs(c->p.key.sport)) ||
	    !tcp_ts(ctx, c) || (__s32)(c->tsecr - r->tsval) < 0)
		return 0;
	if (c->tsecr != r->tsval) {
		/* An echo past the sample: the receiver echoed an earlier
		 * segment's TSval for it (delayed ACKs echo the first they
		 * cover), so it will never be echoed: give it up now. */
		bpf_spin_lock(&r->lock);
		if (r->taken && (__s32)(c->tsecr - r->tsval) > 0)
			r->taken = 0;
		bpf_spin_unlock(&r->lock);
		return 0;
	}
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&r->lock);
	if (r->taken && r->tsval == c->tsecr && now > r->sent_ns) {
		rtt = now - r->sent_ns;
		r->taken = 0;
		r->samples++;
		r->last_ns = rtt;
		if (!r->min_ns || rtt < r->min_ns)
			r->min_ns = rtt;
		r->srtt_ns = r->srtt_ns ? r->srtt_ns - (r->srtt_ns >> 3) + (rtt >> 3) : rtt;
	}
	bpf_spin_unlock(&r->lock);
	return 0;
}

#endif
