/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* FlowOpt: three stages for mixed 5G traffic, each switched on and off
 * with the rules (edge_state.fo_flags, per slot), sharing one record per
 * connection (edge_fo):
 *
 *   relief   (after decide, before the packet is counted): a new flow
 *            arriving on a CPU the agent found hot is placed on the less
 *            loaded of two CPUs drawn at random (power of two choices) and
 *            handed to it through a cpumap (edge_cpus), where edge_xdp_cpu
 *            runs the pipeline; every later packet of the flow follows it
 *            there, so a placed flow is never split over two CPUs (never
 *            reordered by it). Flows that start while their CPU is not
 *            hot are not placed, and are never moved: a handover costs a
 *            wake-up of the cpumap's kthread, which under load is
 *            milliseconds. URLLC flows are never placed. XDP cannot move a
 *            packet to another RX queue; a cpumap moves the work after
 *            the flow lookup. GRE packets from a peer are not placed:
 *            their inner flows are not known yet.
 *   probe    (before act): passive RTT of both directions of a TCP
 *            connection, from the handshake (SYN to SYN-ACK, SYN-ACK to
 *            ACK) and from TCP timestamps (RFC 7323) as pping takes them:
 *            a segment of one direction with a new TSval is the sample,
 *            the first packet of the other direction echoing it ends it,
 *            if it came in by the interface the sampled direction leaves
 *            by (learnt after act: edge_fo_egress); answers from
 *            anywhere else are not looked at. A sample is given up when
 *            an echo goes past it (a
 *            retransmission or a delayed ACK: never timed from the wrong
 *            segment); TSvals compare by serial arithmetic, so their wrap
 *            does not matter. Per direction: smoothed and minimum RTT,
 *            a rate estimate, and a congestion hint while the latest
 *            sample is over k × the minimum (edge_state.fo_k16): a queue
 *            building beyond the gateway now (the smoothed RTT would say
 *            so eight round trips late).
 *   fairness (before act): a class with a rate has a phantom queue (HULL,
 *            Alizadeh et al., NSDI 2012): the class's bytes counted into a
 *            backlog that drains at the rate. Past the class's depth its
 *            ECN-capable packets are marked CE (others pass: SYNs and
 *            retransmissions are not ECN-capable), past twice the depth
 *            those of flows using their share are dropped, past four
 *            times every packet: the class's
 *            aggregate is held to its rate with a burst of one depth, so
 *            set a little under a bottleneck beyond the gateway it keeps
 *            that bottleneck's queue, which URLLC waits in, short; the
 *            per-flow tokens alone let every flow burst at once.
 *            Within it, each flow of a QoS class earns its class's
 *            quantum of bytes every round (DRR's quantum, as a token
 *            bucket refilled at quantum / round), up to the class's
 *            depth. A packet that finds too few tokens is over its share:
 *            ECN-marked (CE) when ECN-capable; a packet that is not
 *            ECN-capable of a flow that is (a retransmission) passes in
 *            debt; others are dropped (and every packet when the class
 *            says drop, or the flow is a whole depth in debt: marks it
 *            ignores). With the probe on, a flow with the
 *            congestion hint has its ECN-capable packets marked even
 *            within its share: the queue beyond the gateway is told to
 *            its senders, which the gateway's own tokens cannot see (a
 *            bottleneck slower than the class's rate, or bursts within
 *            it). The agent sets the round from the class's
 *            rate and its active flows and keeps adjusting it. A urllc
 *            class is never held back; a new connection starts with one
 *            quantum, so a burst of new mMTC sources takes no more than
 *            one each.
 *
 * The record sits at the pair of slots (a two-way bucket) the
 * connection's direction-free hash names, keyed with the agent's secret
 * (siphash.h), and holds the connection's whole key: both directions
 * find it, so a TCP echo finds its sample without a second flow-table
 * lookup, and no other connection does, whatever its hash. A new
 * connection takes an empty slot of the pair, else one whose connection
 * is cold (fewer than EDGE_FO_WARM packets) or idle for EDGE_FO_IDLE_NS,
 * else none (counted EDGE_R_FO_FULL): a flood of new flows cannot evict
 * an established one's state. A flow without a record is judged in one
 * of its class's shares (edge_fo_shares) with the others there: never
 * let through unjudged. Two CPUs may write one record at once (the two
 * directions of a connection); a lost update costs a sample or a few
 * tokens, never a wrong verdict on another flow. */
#ifndef EDGE_FLOWOPT_H
#define EDGE_FLOWOPT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "csum.h"
#include "flowtab.h"
#include "proto.h"
#include "tcprtt.h"
#include "verdict.h"

/* Slots of edge_fo, set by the agent before load (a power of two). */
volatile const __u32 fo_slots = 65536;

/* Tokens are kept in 1/1024 bytes, so a refill between two packets a few
 * microseconds apart is not rounded away. */
#define FO_TOKEN_SHIFT 10
/* A sample, or a flow's idle credit, counts at most a second. */
#define FO_MAX_NS 1000000000ull
/* Rate estimate windows: at least 2^26 ns (67 ms). */
#define FO_RATE_NS (1ull << 26)

/* Where a connection sits in edge_fo (fo_place): its key, the first of
 * its pair of slots (even), its check (the hash's high half | 1), the
 * packet's direction (0: from the lower endpoint), and (fo_get) the
 * slot its record holds. */
struct fo_where {
	struct edge_fo_key k;
	__u32 idx;
	__u32 check;
	__u32 dir;
	__u32 slot;
};

/* fo_key_eq tells whether connection keys x and y are the same. */
static __always_inline int fo_key_eq(const struct edge_fo_key *x,
				     const struct edge_fo_key *y)
{
	return x->a[0] == y->a[0] && x->a[1] == y->a[1] && x->b[0] == y->b[0] &&
	       x->b[1] == y->b[1] && x->ports == y->ports;
}

/* fo_key sets w's key and direction: the packet's connection, its
 * endpoints in a fixed order, so both directions key it alike. */
static __always_inline void fo_key(const struct edge_pkt *p, struct fo_where *w)
{
	const __u64 *s = (const __u64 *)p->key.src, *d = (const __u64 *)p->key.dst;
	__u64 a0 = s[0], a1 = s[1], b0 = d[0], b1 = d[1], t;
	__u16 ap = p->key.sport, bp = p->key.dport, tp;

	w->dir = 0;
	if (a0 > b0 || (a0 == b0 && (a1 > b1 || (a1 == b1 && ap > bp)))) {
		t = a0, a0 = b0, b0 = t;
		t = a1, a1 = b1, b1 = t;
		tp = ap, ap = bp, bp = tp;
		w->dir = 1;
	}
	w->k.a[0] = a0;
	w->k.a[1] = a1;
	w->k.b[0] = b0;
	w->k.b[1] = b1;
	w->k.ports = (__u64)ap | (__u64)bp << 16 | (__u64)p->key.proto << 32 |
		     (__u64)p->key.family << 40;
}

/* fo_place places w's connection (fo_key): the keyed hash (siphash.h) of
 * its key, the same from both directions. Where relief placed the same
 * connection (c->fo_hint) is taken instead of hashing it again, and
 * taken once. */
static __always_inline void fo_place(struct edge_ctx *c, struct fo_where *w)
{
	const struct edge_fo_key *k = &w->k;
	__u64 h;

	if (c->fo_hint_ok && fo_key_eq(&c->fo_hint_k, k)) {
		c->fo_hint_ok = 0;
		w->idx = c->fo_hint_idx;
		w->check = c->fo_hint_check;
		return;
	}
	h = sip_tuple(k->a[0], k->a[1], k->b[0], k->b[1], (__u32)k->ports,
		      (__u8)(k->ports >> 32), (__u8)(k->ports >> 40));
	w->idx = (__u32)h & (fo_slots - 1) & ~1u;
	w->check = (__u32)(h >> 32) | 1;
}

/* fo_is tells whether record e is the connection w places: its check,
 * then its whole key (a check is 32 bits of a hash: two connections may
 * share one, never a record). */
static __always_inline int fo_is(const struct edge_fo_conn *e,
				 const struct fo_where *w)
{
	return e->check == w->check && fo_key_eq(&e->k, &w->k);
}

/* fo_get returns the record of the packet's connection (placed in *w),
 * taking a slot for a new one (see above), or NULL: both slots hold
 * active connections (counted EDGE_R_FO_FULL). The slot where it was
 * last found (c->fo_at) is looked at first: a record holding the
 * connection's key is its own wherever it sits, and a packet that finds
 * it there neither hashes nor reads the pair. c->fo_at is left at the
 * record's slot + 1, or 0. */
static __always_inline struct edge_fo_conn *fo_get(struct edge_ctx *c,
						   __u64 now,
						   struct fo_where *w)
{
	struct edge_fo_conn *e0, *e1, *v;
	__u32 idx, idx1;

	fo_key(&c->p, w);
	if (c->fo_at) {
		idx = c->fo_at - 1;
		v = bpf_map_lookup_elem(&edge_fo, &idx);
		if (v && v->check && fo_key_eq(&v->k, &w->k)) {
			w->slot = idx;
			w->idx = idx & ~1u;
			w->check = v->check;
			return v;
		}
	}
	c->fo_at = 0;
	fo_place(c, w);
	idx = w->idx;
	idx1 = idx + 1;
	e0 = bpf_map_lookup_elem(&edge_fo, &idx);
	e1 = bpf_map_lookup_elem(&edge_fo, &idx1);
	if (!e0 || !e1)
		return NULL;
	w->slot = idx;
	c->fo_at = idx + 1;
	if (fo_is(e0, w))
		return e0;
	w->slot = idx1;
	c->fo_at = idx1 + 1;
	if (fo_is(e1, w))
		return e1;
	/* A new connection: an empty slot, else the older of the cold or
	 * idle ones. */
	if (!e0->check) {
		v = e0;
		w->slot = idx;
		c->fo_at = idx + 1;
	} else if (!e1->check) {
		v = e1;
	} else {
		int c0 = e0->packets < EDGE_FO_WARM || now - e0->last_ns > EDGE_FO_IDLE_NS;
		int c1 = e1->packets < EDGE_FO_WARM || now - e1->last_ns > EDGE_FO_IDLE_NS;

		if (c0 && (!c1 || e0->last_ns <= e1->last_ns)) {
			v = e0;
			w->slot = idx;
			c->fo_at = idx + 1;
		} else if (c1) {
			v = e1;
		} else {
			c->fo_at = 0;
			count(&edge_reasons, EDGE_R_FO_FULL, c->p.len);
			return NULL;
		}
		count(&edge_reasons, EDGE_R_FO_EVICT, c->p.len);
	}
	__builtin_memset(v, 0, sizeof(*v));
	v->check = w->check;
	v->k = w->k;
	v->last_ns = now;
	return v;
}

/* fo_sample adds an RTT sample of rtt_ns to direction d and judges its
 * congestion hint (k16: k in 1/16; 0: none). */
static __always_inline void fo_sample(struct edge_fo_dir *d, __u64 rtt_ns,
				      __u32 k16)
{
	__u32 us;

	if (rtt_ns > FO_MAX_NS)
		return;
	us = (__u32)(rtt_ns / 1000) | 1;
	d->samples++;
	if (!d->min_us || us < d->min_us)
		d->min_us = us;
	d->srtt_us = d->srtt_us ? d->srtt_us - (d->srtt_us >> 3) + (us >> 3) : us;
	if (k16 && (__u64)us * 16 > (__u64)d->min_us * k16)
		d->flags |= EDGE_FOD_HINT;
	else
		d->flags &= ~EDGE_FOD_HINT;
}

/* fo_rate counts len bytes into d's rate estimate. */
static __always_inline void fo_rate(struct edge_fo_dir *d, __u32 len, __u64 now)
{
	__u64 el = now - d->rate_ns, r;

	if (!d->rate_ns || el > FO_MAX_NS * 4) {
		d->rate_ns = now;
		d->rate_bytes = len;
		return;
	}
	if (el < FO_RATE_NS) {
		d->rate_bytes += len;
		return;
	}
	r = (__u64)d->rate_bytes * 1000000000ull / el;
	d->rate = d->rate ? (__u32)((3 * (__u64)d->rate + r) >> 2) : (__u32)r;
	d->rate_ns = now;
	d->rate_bytes = len;
}

/* tcp_payload tells whether the TCP segment in c->p carries data or a
 * FIN: what its receiver answers at once (a pure ACK's TSval may wait
 * long for the next data to echo it; a SYN's and a SYN-ACK's are timed
 * by the handshake). */
static __always_inline int tcp_payload(struct xdp_md *ctx, const struct edge_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tcphdr *th = data + (p->l4_off & 0x3ff);

	if (p->tcp_flags & TCP_F_SYN)
		return 0;
	if (p->tcp_flags & TCP_F_FIN)
		return 1;
	if ((void *)(th + 1) > data_end)
		return 0;
	return p->l3_len > (__u32)(p->l4_off - p->l3_off) + th->doff * 4;
}

/* fo_probe takes the TCP packet in c->p (direction me, the other one
 * other) into its connection's RTT samples. A packet ends the other
 * direction's sample only when it arrived where that direction leaves
 * (there): an answer forged from elsewhere (a WAN sender faking the
 * SYN-ACK or an echo, to set the minimum and with it the hint) is not
 * looked at, and neither ends nor gives up a sample. */
static __always_inline void fo_probe(struct xdp_md *ctx, struct edge_ctx *c,
				     struct edge_fo_conn *e, __u32 dir,
				     struct edge_fo_dir *me,
				     struct edge_fo_dir *other, __u64 now,
				     __u32 k16)
{
	__u8 fl = c->p.tcp_flags & (TCP_F_SYN | TCP_F_ACK);
	int there = other->oif && other->oif == c->p.key.ifindex;

	/* The handshake: each of its answers ends the other direction's
	 * sample (SYN to SYN-ACK, SYN-ACK to ACK). */
	if (fl == TCP_F_SYN) {
		e->syn_ns = now;
		e->syn_dir = dir;
		e->hs = 1;
	} else if (fl == (TCP_F_SYN | TCP_F_ACK)) {
		if (e->hs == 1 && e->syn_dir != dir && there) {
			fo_sample(other, now - e->syn_ns, k16);
			e->syn_ns = now;
			e->hs = 2;
		}
	} else if (e->hs == 2 && e->syn_dir == dir && fl == TCP_F_ACK && there) {
		fo_sample(other, now - e->syn_ns, k16);
		e->hs = 3;
	}
	if (!tcp_ts(ctx, c))
		return;
	if (other->sent_ns && there) {
		if (c->tsecr == other->tsval) {
			fo_sample(other, now - other->sent_ns, k16);
			other->sent_ns = 0;
		} else if ((__s32)(c->tsecr - other->tsval) > 0) {
			other->sent_ns = 0; /* echoed past: never timed */
		}
	}
	/* The first segment with a new TSval (segments of one clock tick
	 * share it; the first one's echo comes first). */
	if (c->tsval != me->last_tsval && (!me->sent_ns || now - me->sent_ns > FO_MAX_NS) &&
	    tcp_payload(ctx, &c->p)) {
		me->tsval = c->tsval;
		me->sent_ns = now;
	}
	me->last_tsval = c->tsval;
}

/* fo_ect tells whether the packet in c->p is ECN-capable (ECT or CE). */
static __always_inline int fo_ect(struct xdp_md *ctx, const struct edge_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *l3 = data + (p->l3_off & 0x3ff);

	if (p->key.family == 4) {
		struct iphdr *iph = l3;

		return (void *)(iph + 1) <= data_end && (iph->tos & 3);
	}
	{
		struct ipv6hdr *ip6 = l3;

		return (void *)(ip6 + 1) <= data_end && (ip6->flow_lbl[0] & 0x30);
	}
}

/* fo_ecn_mark marks the packet in c->p Congestion Experienced when it is
 * ECN-capable (RFC 3168): 1, or 0 when it is not. */
static __always_inline int fo_ecn_mark(struct xdp_md *ctx, const struct edge_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *l3 = data + (p->l3_off & 0x3ff);
	__u16 old;

	if (p->key.family == 4) {
		struct iphdr *iph = l3;

		if ((void *)(iph + 1) > data_end || !(iph->tos & 3))
			return 0;
		if ((iph->tos & 3) == 3)
			return 1;
		old = *(__u16 *)iph;
		iph->tos |= 3;
		iph->check = csum_replace2(iph->check, old, *(__u16 *)iph);
		return 1;
	}
	{
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end || !(ip6->flow_lbl[0] & 0x30))
			return 0;
		ip6->flow_lbl[0] |= 0x30;
		return 1;
	}
}

/* Verdicts of a class's phantom queue on a packet. */
#define FO_VQ_PASS 0
#define FO_VQ_MARK 1 /* congested: to be ECN-marked (CE) */
#define FO_VQ_DROP 2

/* fo_vq judges a packet of len bytes of class idx by the class's phantom
 * queue, which drains at rate bytes a second: past depth bytes of
 * backlog a packet is to be marked (in a drop class, a busy flow's
 * dropped); past twice the depth a busy flow's (one using its share:
 * its tokens under half the depth) dropped, past four times any. Flows
 * under their share are not dropped before the queue is past four
 * depths: the losses fall on the flows that make them. A packet dropped
 * is not counted into the backlog. */
static __always_inline int fo_vq(__u32 idx, const struct edge_qos_class *q,
				 __u32 len, int busy, __u64 now)
{
	__u64 el, drain, b, d = q->depth;
	struct edge_qos_vq *vq;
	int v = FO_VQ_PASS;

	vq = bpf_map_lookup_elem(&edge_qos_vqs, &idx);
	if (!vq)
		return FO_VQ_PASS;
	bpf_spin_lock(&vq->lock);
	el = now > vq->last_ns ? now - vq->last_ns : 0;
	if (el > FO_MAX_NS)
		el = FO_MAX_NS;
	vq->last_ns = now;
	drain = el * q->rate / 1000000000ull;
	b = vq->backlog > drain ? vq->backlog - drain : 0;
	if (b > 4 * d || (busy && (b > 2 * d || (b > d && (q->flags & EDGE_QF_DROP)))))
		v = FO_VQ_DROP;
	else if (b > d && !(q->flags & EDGE_QF_DROP))
		v = FO_VQ_MARK;
	vq->backlog = v == FO_VQ_DROP ? b : b + len;
	bpf_spin_unlock(&vq->lock);
	return v;
}

/* fo_fair serves the packet in c->p of flow direction d, in class q (index
 * idx, its counters qc): 1 when it is to be dropped, else 0 (perhaps
 * marked). */
static __always_inline int fo_fair(struct xdp_md *ctx, struct edge_ctx *c,
				   struct edge_fo_dir *d, const struct edge_qos_class *q,
				   __u32 idx, struct edge_qos_ctr *qc, __u64 now)
{
	__s64 len = (__s64)c->p.len << FO_TOKEN_SHIFT;
	__s64 depth = (__s64)q->depth << FO_TOKEN_SHIFT;
	__u16 period = (__u16)(now >> EDGE_FO_PERIOD_SHIFT);
	int busy = 1, vq;
	__u64 el;

	if (d->period != period) {
		d->period = period;
		qc->flows++;
	}
	if (!(d->flags & EDGE_FOD_ECN) && fo_ect(ctx, &c->p))
		d->flags |= EDGE_FOD_ECN;
	if (d->flags & EDGE_FOD_HINT)
		qc->hinted++;
	if (q->flags & EDGE_QF_URLLC)
		goto pass;
	if (q->round_ns) {
		if (!d->refill_ns) {
			d->tokens = (__s64)q->quantum << FO_TOKEN_SHIFT;
			d->refill_ns = now;
		}
		el = now - d->refill_ns;
		if (el > FO_MAX_NS)
			el = FO_MAX_NS;
		d->refill_ns = now;
		d->tokens += (__s64)((el * q->quantum << FO_TOKEN_SHIFT) / q->round_ns);
		if (d->tokens > depth)
			d->tokens = depth;
		d->tokens -= len;
		busy = d->tokens < depth / 2;
	}
	vq = q->rate ? fo_vq(idx, q, c->p.len, busy, now) : FO_VQ_PASS;
	if (vq == FO_VQ_DROP)
		goto drop_congested;
	if (vq == FO_VQ_MARK && fo_ecn_mark(ctx, &c->p))
		qc->congested++;
	else
		vq = FO_VQ_PASS;
	if (!q->round_ns || d->tokens >= 0) {
		if ((d->flags & EDGE_FOD_HINT) && vq == FO_VQ_PASS && !(q->flags & EDGE_QF_DROP) &&
		    fo_ecn_mark(ctx, &c->p))
			qc->congested++;
		goto pass;
	}
	/* Over its share: marked, or when the packet is not ECN-capable
	 * but its flow is (a retransmission: RFC 3168 sends them not
	 * ECN-capable), passed in debt; dropped a whole depth in debt. */
	if (!(q->flags & EDGE_QF_DROP) && d->tokens >= -depth) {
		if (vq == FO_VQ_MARK || fo_ecn_mark(ctx, &c->p)) {
			qc->marked++;
			goto pass;
		}
		if (d->flags & EDGE_FOD_ECN)
			goto pass;
	}
	d->tokens += len; /* a dropped packet costs nothing */
	qc->dropped++;
	return 1;
drop_congested:
	if (q->round_ns)
		d->tokens += len;
	qc->congested++;
	qc->dropped++;
	return 1;
pass:
	qc->packets++;
	qc->bytes += c->p.len;
	return 0;
}

/* edge_fo_act runs the probe and fairness stages (those st's fo_flags
 * has on) on the packet in c->p, of a flow in class cls (index + 1; 0:
 * none): EDGE_GO_ON, or the verdict of a packet over its share. A flow
 * whose connection has no record (both of its slots held by active
 * connections) is judged in one of its class's shares (edge_fo_shares,
 * by its keyed hash and direction) beside the other flows there: held
 * to a flow's share, never let through unjudged. The probe leaves the
 * record's place in c (fo_at, fo_check) for edge_fo_egress. A global
 * function: verified once. */
__noinline int edge_fo_act(struct xdp_md *ctx, struct edge_ctx *c, __u32 fo,
			   __u32 k16, __u32 cls)
{
	struct edge_fo_dir *me = NULL, *other;
	struct edge_qos_ctr *qc;
	const struct edge_qos_class *q;
	struct edge_fo_conn *e;
	struct fo_where w;
	__u32 k, share;
	__u64 now;

	if (!c)
		return EDGE_GO_ON;
	c->fo_oif = 0;
	if (!(fo & EDGE_FO_PROBE) && !(cls && (fo & EDGE_FO_FAIR)))
		return EDGE_GO_ON;
	now = bpf_ktime_get_ns();
	e = fo_get(c, now, &w);
	if (e) {
		e->last_ns = now;
		if (e->packets < 0xffffffffu)
			e->packets++;
		if (w.dir) {
			me = &e->d[1];
			other = &e->d[0];
		} else {
			me = &e->d[0];
			other = &e->d[1];
		}
		if (fo & EDGE_FO_PROBE) {
			fo_rate(me, c->p.len, now);
			if (c->p.key.proto == IPPROTO_TCP && c->p.l4_off &&
			    !(c->p.key.flags & EDGE_KF_FRAG))
				fo_probe(ctx, c, e, w.dir, me, other, now, k16);
			c->fo_check = w.check;
			c->fo_dir = w.dir;
			c->fo_oif = me->oif;
		}
	}
	if (!cls || !(fo & EDGE_FO_FAIR))
		return EDGE_GO_ON;
	k = (c->gen & 1) * EDGE_MAX_QOS + ((cls - 1) & (EDGE_MAX_QOS - 1));
	q = bpf_map_lookup_elem(&edge_qos, &k);
	k = (cls - 1) & (EDGE_MAX_QOS - 1);
	qc = bpf_map_lookup_elem(&edge_qos_stats, &k);
	if (!q || !qc)
		return EDGE_GO_ON;
	if (!me) {
		/* check's low bit is always set: its next three pick a pair
		 * of shares, the direction one of them. */
		share = k * EDGE_FO_SHARES +
			((w.check & (EDGE_FO_SHARES - 2)) | (w.dir & 1));
		me = bpf_map_lookup_elem(&edge_fo_shares, &share);
		if (!me)
			return punt(&c->p, EDGE_R_FO_SHARE_DROP, XDP_DROP);
		if (fo_fair(ctx, c, me, q, k, qc, now))
			return punt(&c->p, EDGE_R_FO_SHARE_DROP, XDP_DROP);
		return EDGE_GO_ON;
	}
	if (fo_fair(ctx, c, me, q, k, qc, now))
		return punt(&c->p, EDGE_R_FO_DROP, XDP_DROP);
	return EDGE_GO_ON;
}

/* edge_fo_egress notes oif, the interface the packet the probe just took
 * left by (c->fo_at: its connection's record; 0: none), as its
 * direction's: the other direction's answers end its samples only when
 * they come in there. A flow entry knows where its packets leave only
 * once one is sent (a new flow's first packet, the handshake's SYN), so
 * the pipeline calls this after act, when the interface is not the one
 * the record holds. A packet that left by none (dropped, or handed to the
 * kernel) leaves it as it was: a forged packet of the direction cannot
 * unlearn it. A global function. */
__noinline int edge_fo_egress(struct edge_ctx *c, __u32 oif)
{
	struct edge_fo_conn *e;
	__u32 slot;

	if (!c || !c->fo_at || !oif)
		return 0;
	slot = c->fo_at - 1;
	e = bpf_map_lookup_elem(&edge_fo, &slot);
	if (!e || e->check != c->fo_check)
		return 0;
	if (c->fo_dir & 1)
		e->d[1].oif = oif;
	else
		e->d[0].oif = oif;
	return 0;
}

/* edge_fo_relief places the flow of the packet in c->p, of class cls
 * (index + 1; 0: none), on a CPU when it is new and arrived on a CPU the
 * agent found hot (the cooler of two drawn at random), and hands the
 * packet to its flow's CPU when that is another: XDP_REDIRECT (counted
 * EDGE_R_CPU_MOVED), else EDGE_GO_ON. ncpus: the CPUs flows may go to;
 * alone: no other FlowOpt stage counts the connection's packets. A
 * global function. */
__noinline int edge_fo_relief(struct edge_ctx *c, __u32 ncpus, __u32 cls,
			      __u32 alone)
{
	struct edge_cpu_load *here, *la, *lb;
	const struct edge_qos_class *q;
	struct edge_fo_conn *e;
	struct edge_fo_dir *d;
	struct fo_where w;
	__u32 cpu, a, b, k;
	__u64 now;

	if (!c || c->p.key.proto == IPPROTO_GRE || ncpus < 2)
		return EDGE_GO_ON;
	if (cls) {
		k = (c->gen & 1) * EDGE_MAX_QOS + ((cls - 1) & (EDGE_MAX_QOS - 1));
		q = bpf_map_lookup_elem(&edge_qos, &k);
		if (q && (q->flags & EDGE_QF_URLLC))
			return EDGE_GO_ON;
	}
	now = bpf_ktime_get_ns();
	e = fo_get(c, now, &w);
	if (!e) {
		/* For the probe and fairness stages, after act (a record
		 * found is found again at c->fo_at). */
		c->fo_hint_k = w.k;
		c->fo_hint_idx = w.idx;
		c->fo_hint_check = w.check;
		c->fo_hint_ok = 1;
		return EDGE_GO_ON;
	}
	if (alone) {
		e->last_ns = now;
		if (e->packets < 0xffffffffu)
			e->packets++;
	}
	d = w.dir ? &e->d[1] : &e->d[0];
	cpu = bpf_get_smp_processor_id();
	if (!d->cpu) {
		here = bpf_map_lookup_elem(&edge_cpu_loads, &cpu);
		if (!here || !here->hot || e->packets > EDGE_FO_WARM)
			return EDGE_GO_ON;
		a = bpf_get_prandom_u32() % ncpus;
		b = bpf_get_prandom_u32() % ncpus;
		la = bpf_map_lookup_elem(&edge_cpu_loads, &a);
		lb = bpf_map_lookup_elem(&edge_cpu_loads, &b);
		if (!la || !lb)
			return EDGE_GO_ON;
		d->cpu = (la->pps <= lb->pps ? a : b) + 1;
	}
	if (d->cpu - 1 == cpu)
		return EDGE_GO_ON;
	if (bpf_redirect_map(&edge_cpus, d->cpu - 1, 0) != XDP_REDIRECT) {
		d->cpu = 0; /* no such CPU in the map: not placed */
		return EDGE_GO_ON;
	}
	return punt(&c->p, EDGE_R_CPU_MOVED, XDP_REDIRECT);
}

/* fo_class is the class (index + 1, 0: none) of the flow decided into
 * c->nf: its PDR's (qos, 0 when it has none or a service decided it),
 * else its DSCP's. */
static __always_inline __u32 fo_class(const struct edge_ctx *c, __u32 qos)
{
	__u32 k = (c->gen & 1) * 64 + (c->p.key.dscp & 63), *v;

	if (qos)
		return qos;
	v = bpf_map_lookup_elem(&edge_qos_dscp, &k);
	return v ? *v : 0;
}

#endif
