/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Path probes, sent, answered and timed at the driver hook. The agent
 * hands each probe request (struct edge_probe inside GRE, protocol type
 * EDGE_PROBE_PROTO) to edge_probe_send through BPF_PROG_TEST_RUN with
 * live frames, every probe interval per path: the sender stamps it with
 * bpf_ktime_get_ns, keeps the stamp in the path's record, signs it and
 * redirects it out of the path's interface, so the time it left is the
 * dataplane's, however late the agent ran. The peer's decap stage hands
 * it to edge_probe, which checks its MAC and sends it straight back out
 * of the interface it came in by (send_back) with the outer addresses and
 * MACs swapped and the answer signed: no userspace on the probe's way.
 * The answer reaches the sender's decap stage in turn, which checks its
 * MAC and times it against the stamp it kept, into edge_path_probe for
 * the agent's monitor.
 *
 * Only packets of a path of ours (outer source its remote) get here,
 * and GRE's addresses and key are no secret: with a path secret the MAC
 * (SipHash-2-4, a PRF on short inputs: Aumasson and Bernstein, 2012)
 * is what tells the peer's probes from anyone's, so no one else can use
 * a gateway as a reflector, answer its probes for a dead path, or make
 * one look alive or fast. Without one (a path configured insecure), the
 * record still takes only an answer to a probe in flight that carries
 * the exact time it was sent. */
#ifndef EDGE_PROBE_H
#define EDGE_PROBE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "proto.h"
#include "siphash.h"
#include "verdict.h"

/* sip24_words is SipHash-2-4 under key (k0, k1) of the message whose
 * n whole 8-byte words (little-endian) are m and whose last block is
 * last (the message's length << 56 | its last length % 8 bytes). n is a
 * constant where it is inlined: the loop unrolls. */
static __always_inline __u64 sip24_words(__u64 k0, __u64 k1, const __u64 *m,
					 int n, __u64 last)
{
	struct sip s;
	int i;

	sip_init_key(&s, k0, k1);
	for (i = 0; i < n; i++)
		sip24_word(&s, m[i]);
	return sip24_final(&s, last);
}

/* probe_mac is a probe's MAC under a's secret: SipHash-2-4 of its first
 * 24 bytes as they lie in the packet (three whole words, so the last
 * block is the length alone). */
static __always_inline __u64 probe_mac(const struct edge_probe_secret *a,
				       const struct edge_probe *pr)
{
	__u64 m[3];

	__builtin_memcpy(m, pr, sizeof(m));
	return sip24_words(a->k0, a->k1, m, 3, 24ull << 56);
}

/* probe_auth returns path idx's secret in slot, or NULL when it has none
 * (a path configured insecure: its probes carry no MAC). */
static __always_inline const struct edge_probe_secret *probe_auth(__u32 slot,
							       __u32 idx)
{
	__u32 k = (slot & 1) * EDGE_MAX_PATHS + (idx & (EDGE_MAX_PATHS - 1));
	const struct edge_probe_secret *a = bpf_map_lookup_elem(&edge_path_auth, &k);

	return a && (a->flags & EDGE_PA_MAC) ? a : NULL;
}

/* RTTs above this are no answer to a probe of ours: 10 s. */
#define PROBE_MAX_RTT 10000000000ull

/* probe_record times the answer pr to one of path idx's probes, received
 * at now, against the stamp the path's record kept for it, and adds it
 * to the record; it returns 0, or the reason to refuse it: a probe not
 * in flight (never sent, answered already, older than the ring) or
 * whose send time is not the one kept. */
static __always_inline int probe_record(struct edge_probe_rec *r,
					const struct edge_probe *pr, __u64 now)
{
	__u32 seq = bpf_ntohl(pr->seq), i = seq & (EDGE_PROBE_RING - 1);
	__u64 sent, rtt, err;
	__s32 d;
	int rc = EDGE_R_PROBE_STALE;

	bpf_spin_lock(&r->lock);
	d = (__s32)(r->sent_seq - seq);
	sent = r->sent_ns[i];
	if (!r->sent || d < 0 || d >= EDGE_PROBE_RING || !sent ||
	    sent != pr->sent_ns || sent > now || now - sent > PROBE_MAX_RTT)
		goto out;
	r->sent_ns[i] = 0;
	rtt = now - sent;
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
	rc = 0;
out:
	bpf_spin_unlock(&r->lock);
	return rc;
}

/* edge_probe answers or records the probe in the GRE packet p of path
 * (stable index + 1) in slot, whose body starts inner_off bytes into the
 * frame and whose outer datagram ends at outer_end. Returns the
 * verdict. */
static __always_inline int edge_probe(struct xdp_md *ctx,
				      const struct edge_pkt *p, __u32 slot,
				      __u32 path, __u32 inner_off,
				      void *outer_end)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + sizeof(*eth);
	struct edge_probe *pr = data + (inner_off & 0xff);
	const struct edge_probe_secret *auth;
	struct edge_probe_rec *r;
	__u32 idx = (path - 1) & (EDGE_MAX_PATHS - 1);
	int rc;

	if ((void *)(iph + 1) > data_end || (void *)(pr + 1) > data_end ||
	    (void *)(pr + 1) > outer_end ||
	    pr->magic != bpf_htonl(EDGE_PROBE_MAGIC))
		return punt(p, EDGE_R_BAD_PROBE, XDP_DROP);
	auth = probe_auth(slot, idx);
	if (pr->kind == EDGE_PROBE_REQUEST) {
		/* The peer's: it asked from the path's remote end (decap
		 * checked the outer source is that). */
		if (pr->origin != iph->saddr)
			return punt(p, EDGE_R_BAD_PROBE, XDP_DROP);
		if (auth && pr->mac != probe_mac(auth, pr))
			return punt(p, EDGE_R_PROBE_BAD_MAC, XDP_DROP);
		/* Back the way it came: the addresses swap, the checksum
		 * stays. */
		reflect4(eth, iph);
		pr->kind = EDGE_PROBE_REPLY;
		pr->mac = auth ? probe_mac(auth, pr) : 0;
		return punt(p, EDGE_R_PROBE_REFLECT, send_back(p));
	}
	/* An answer: to a probe this end sent over this path. */
	if (pr->kind != EDGE_PROBE_REPLY || bpf_ntohs(pr->path) != idx ||
	    pr->origin != iph->daddr)
		return punt(p, EDGE_R_BAD_PROBE, XDP_DROP);
	if (auth && pr->mac != probe_mac(auth, pr))
		return punt(p, EDGE_R_PROBE_BAD_MAC, XDP_DROP);
	r = bpf_map_lookup_elem(&edge_path_probe, &idx);
	if (!r)
		return punt(p, EDGE_R_NO_STATE, XDP_DROP);
	/* The one clock read of the pipeline: probes only, never data. */
	rc = probe_record(r, pr, bpf_ktime_get_ns());
	if (rc)
		return punt(p, rc, XDP_DROP);
	return punt(p, EDGE_R_PROBE_REPLY, XDP_DROP);
}

/* edge_probe_send sends the probe request in ctx over its path: a frame
 * the agent built (Ethernet, IPv4 without options from the path's local
 * to its remote address, GRE as the path's with protocol type
 * EDGE_PROBE_PROTO, struct edge_probe with its path index and sequence
 * number), run through BPF_PROG_TEST_RUN with live frames. It fills in
 * the next hop's MACs from the FIB (out of the path's interface, as the
 * kernel would send it), the time it leaves (kept in the path's record
 * for the answer to be timed against), the origin and the MAC, and
 * redirects it out of the path's interface. A probe that cannot leave
 * (no path of that index in the live slot, no route or neighbour) is
 * dropped without a stamp, counted under its reason: the agent sees
 * the record's sent_seq stay behind. */
static __always_inline int edge_probe_send(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + sizeof(*eth);
	__be16 *gre = (void *)(iph + 1);
	struct bpf_fib_lookup fib = {};
	const struct edge_probe_secret *auth;
	const struct edge_path *path;
	const struct edge_state *st;
	struct edge_probe_rec *r;
	struct edge_probe *pr;
	__u32 zero = 0, idx, slot, k, hlen = 4, seq, len;
	__u64 now;
	long rc;

	if ((void *)(gre + 2) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    iph->ihl != 5 || iph->protocol != IPPROTO_GRE ||
	    gre[1] != bpf_htons(EDGE_PROBE_PROTO))
		return XDP_ABORTED;
	if (gre[0] & GRE_F_KEY)
		hlen += 4;
	if (gre[0] & GRE_F_SEQ)
		hlen += 4;
	pr = (void *)gre + hlen;
	if ((void *)(pr + 1) > data_end)
		return XDP_ABORTED;
	len = data_end - data;
	st = bpf_map_lookup_elem(&edge_global, &zero);
	if (!st || !st->gen)
		goto drop_state;
	slot = st->gen & 1;
	idx = bpf_ntohs(pr->path) & (EDGE_MAX_PATHS - 1);
	k = slot * EDGE_MAX_PATHS + idx;
	path = bpf_map_lookup_elem(&edge_paths, &k);
	r = bpf_map_lookup_elem(&edge_path_probe, &idx);
	if (!path || !r || !path->id || path->local != iph->saddr ||
	    path->remote != iph->daddr)
		goto drop_state;

	fib.family = AF_INET;
	fib.l4_protocol = IPPROTO_GRE;
	fib.tot_len = bpf_ntohs(iph->tot_len);
	fib.ipv4_src = path->local;
	fib.ipv4_dst = path->remote;
	fib.ifindex = path->ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), BPF_FIB_LOOKUP_OUTPUT);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || fib.ifindex != path->ifindex) {
		k = rc == BPF_FIB_LKUP_RET_NO_NEIGH ? EDGE_R_NO_NEIGH :
		    rc == BPF_FIB_LKUP_RET_SUCCESS ? EDGE_R_ROUTE_MISMATCH :
						     EDGE_R_FIB_FAIL;
		count(&edge_reasons, k, len);
		count(&edge_verdicts, XDP_DROP, len);
		return XDP_DROP;
	}
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);

	pr->magic = bpf_htonl(EDGE_PROBE_MAGIC);
	pr->kind = EDGE_PROBE_REQUEST;
	pr->origin = path->local;
	seq = bpf_ntohl(pr->seq);
	now = bpf_ktime_get_ns();
	pr->sent_ns = now;
	bpf_spin_lock(&r->lock);
	r->sent_seq = seq;
	r->sent++;
	r->sent_ns[seq & (EDGE_PROBE_RING - 1)] = now;
	bpf_spin_unlock(&r->lock);
	auth = probe_auth(slot, idx);
	pr->mac = auth ? probe_mac(auth, pr) : 0;
	return bpf_redirect_map(&edge_tx, path->ifindex, XDP_DROP);

drop_state:
	count(&edge_reasons, EDGE_R_NO_STATE, len);
	count(&edge_verdicts, XDP_DROP, len);
	return XDP_DROP;
}

#endif
