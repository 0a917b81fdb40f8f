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

/* A sample, or a flow's idle credit, counts at most a second. */
#define FO_MAX_NS 1000000000ull
/* Rate estimate windows: at least 2^26 ns (67 ms). */
#define FO_RATE_NS (1ull << 26)
/* A refill multiplies an elapsed time under 2^FO_MUL_EL ns (16.8 ms) by
 * its class's tok_mul, which the agent keeps under 2^39: the product
 * fits in 64 bits. A flow idle longer divides, once. */
#define FO_MUL_EL 24
/* A CPU whose packets of a class come less than this apart adds them to
 * the class's phantom queue in batches (fo_vq). */
#define FO_VQ_STREAM_NS 2000
/* A CPU whose packets come less than FO_CLOCK_DENSE_NS apart on average
 * reads the fine clock once every FO_CLOCK_EVERY of them (fo_clock). */
#define FO_CLOCK_EVERY 8
#define FO_CLOCK_DENSE_NS 500

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
 * its key, the same from both directions. */
static __always_inline void fo_place(struct fo_where *w)
{
	const struct edge_fo_key *k = &w->k;
	__u64 h;

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

/* fo_idle tells whether a connection last seen at last is idle at now.
 * Signed: a record another CPU stamped a moment later, or stamped by the
 * fine clock where now is coarse (fo_clock), is not idle. */
static __always_inline int fo_idle(__u64 now, __u64 last)
{
	return (__s64)(now - last) > (__s64)EDGE_FO_IDLE_NS;
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
	fo_place(w);
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
		int c0 = e0->packets < EDGE_FO_WARM || fo_idle(now, e0->last_ns);
		int c1 = e1->packets < EDGE_FO_WARM || fo_idle(now, e1->last_ns);

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

/* edge_fo_find places the packet's connection and finds its record,
 * or takes a slot for it (fo_get): c->fo_at is left at the record's
 * slot + 1 (0: none, both slots held), c->fo_check and c->fo_dir at
 * the connection's check and the packet's direction. A global
 * function: the hash and a new connection's choice of slot, for the
 * packets fo_lookup does not find at once. */
__noinline int edge_fo_find(struct edge_ctx *c, __u64 now)
{
	struct fo_where w;

	if (!c)
		return 0;
	fo_get(c, now, &w);
	c->fo_check = w.check;
	c->fo_dir = w.dir;
	return 0;
}

/* fo_holds tells whether record e holds the connection of the packet in
 * p, its whole key, and of which direction the packet is (*dir, as
 * fo_key says). An empty record holds none: a key's ports word carries
 * its family. */
static __always_inline int fo_holds(const struct edge_fo_conn *e,
				    const struct edge_pkt *p, __u32 *dir)
{
	const __u64 *s = (const __u64 *)p->key.src, *d = (const __u64 *)p->key.dst;
	__u64 pf = (__u64)p->key.proto << 32 | (__u64)p->key.family << 40;
	__u64 sp = p->key.sport, dp = p->key.dport;

	if (e->k.a[0] == s[0] && e->k.a[1] == s[1] && e->k.b[0] == d[0] &&
	    e->k.b[1] == d[1] && e->k.ports == (pf | sp | dp << 16)) {
		*dir = 0;
		return 1;
	}
	if (e->k.a[0] == d[0] && e->k.a[1] == d[1] && e->k.b[0] == s[0] &&
	    e->k.b[1] == s[1] && e->k.ports == (pf | dp | sp << 16)) {
		*dir = 1;
		return 1;
	}
	return 0;
}

/* fo_again returns the record at c->fo_at when it still holds the
 * connection placed there for this packet (its check; the key was
 * matched when it was placed), or NULL: none (both of its slots held:
 * judged in its share), or another connection took the slot since
 * (judged in its share this once). */
static __always_inline struct edge_fo_conn *fo_again(struct edge_ctx *c)
{
	struct edge_fo_conn *e;
	__u32 slot;

	if (!c->fo_at)
		return NULL;
	slot = c->fo_at - 1;
	e = bpf_map_lookup_elem(&edge_fo, &slot);
	if (!e || e->check != c->fo_check)
		return NULL;
	return e;
}

/* fo_lookup returns the record of the packet's connection, taking a
 * slot for a new one, or NULL (see fo_get), with the connection's check
 * and the packet's direction in c. An established flow's exact-match
 * copy names the slot (c->fo_at): the record there is taken when it
 * holds the connection's whole key, without hashing; else
 * edge_fo_find places it. */
static __always_inline struct edge_fo_conn *fo_lookup(struct edge_ctx *c,
						      __u64 now)
{
	struct edge_fo_conn *e;
	__u32 slot, dir;

	if (c->fo_at) {
		slot = c->fo_at - 1;
		e = bpf_map_lookup_elem(&edge_fo, &slot);
		if (e && fo_holds(e, &c->p, &dir)) {
			c->fo_check = e->check;
			c->fo_dir = dir;
			return e;
		}
	}
	edge_fo_find(c, now);
	return fo_again(c);
}

/* The time of a packet's FlowOpt stages (fo_clock): ns, CLOCK_MONOTONIC,
 * and whether it is an earlier packet's (stale: read on this CPU at
 * most FO_CLOCK_EVERY - 1 packets before, while they came in dense). */
struct fo_now {
	__u64 ns;
	__u32 stale;
};

/* fo_clock sets *t to the time of the packet's FlowOpt stages: to the
 * ns while fairness is on (its tokens and phantom queue drain by it),
 * else the coarse clock (a tick's precision, for a fraction of the
 * cost: the records' ages and rate windows are counted in ms and s;
 * the probe reads the fine clock for the few packets it times,
 * fo_fine). The fine clock (bpf_ktime_get_ns: ~25 ns on these VMs,
 * half of what FlowOpt costs an established flow's packet) is read once
 * every FO_CLOCK_EVERY packets of a CPU while they come less than
 * FO_CLOCK_DENSE_NS apart on average (a NAPI poll's burst, a flood:
 * the packets whose cost adds up), and the packets between take the
 * time read before them, marked stale: fairness judges on it only what
 * a later time could not change (fo_fresh: a mark, a drop, a flow
 * using its share, a batch's start are judged on the packet's own
 * time), and the probe times no sample by it. Kept per CPU in the
 * context (fo_t, fo_reuse, fo_count: the one part of it kept between
 * packets). */
static __always_inline void fo_clock(struct edge_ctx *c, __u32 fo,
				     struct fo_now *t)
{
	__u64 ns, reuse;

	t->stale = 0;
	if (!(fo & EDGE_FO_FAIR)) {
		t->ns = bpf_ktime_get_coarse_ns();
		return;
	}
	/* stale: reuse != 0, without a branch: the verifier then goes
	 * through what follows once, not once for each. */
	reuse = c->fo_reuse;
	t->stale = (__u32)(-reuse >> 63);
	if (reuse) {
		c->fo_reuse--;
		c->fo_count++;
		t->ns = c->fo_t;
		return;
	}
	ns = bpf_ktime_get_ns();
	c->fo_reuse = ns - c->fo_t < (__u64)(c->fo_count + 1) * FO_CLOCK_DENSE_NS ?
			      FO_CLOCK_EVERY - 1 : 0;
	c->fo_count = 0;
	c->fo_t = ns;
	t->ns = ns;
}

/* fo_fresh returns the packet's own time, reading the fine clock when
 * *t is an earlier packet's (and keeping it for the packets after). */
static __always_inline __u64 fo_fresh(struct edge_ctx *c, struct fo_now *t)
{
	if (t->stale) {
		t->ns = bpf_ktime_get_ns();
		t->stale = 0;
		c->fo_t = t->ns;
		c->fo_count = 0;
	}
	return t->ns;
}

/* fo_fine returns the fine clock, read once (*fine; 0: not yet). */
static __always_inline __u64 fo_fine(__u64 *fine)
{
	if (!*fine)
		*fine = bpf_ktime_get_ns();
	return *fine;
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
 * other) into its connection's RTT samples, timed by the fine clock
 * (*fine, read when first needed). A packet ends the other
 * direction's sample only when it arrived where that direction leaves
 * (there): an answer forged from elsewhere (a WAN sender faking the
 * SYN-ACK or an echo, to set the minimum and with it the hint) is not
 * looked at, and neither ends nor gives up a sample. */
static __always_inline void fo_probe(struct xdp_md *ctx, struct edge_ctx *c,
				     struct edge_fo_conn *e,
				     struct edge_fo_dir *me,
				     struct edge_fo_dir *other, __u64 now,
				     __u64 *fine, __u32 k16)
{
	__u8 fl = c->p.tcp_flags & (TCP_F_SYN | TCP_F_ACK);
	int there = other->oif && other->oif == c->p.key.ifindex;
	__u32 dir = c->fo_dir;

	/* The handshake: each of its answers ends the other direction's
	 * sample (SYN to SYN-ACK, SYN-ACK to ACK). */
	if (fl == TCP_F_SYN) {
		e->syn_ns = fo_fine(fine);
		e->syn_dir = dir;
		e->hs = 1;
	} else if (fl == (TCP_F_SYN | TCP_F_ACK)) {
		if (e->hs == 1 && e->syn_dir != dir && there) {
			fo_sample(other, fo_fine(fine) - e->syn_ns, k16);
			e->syn_ns = *fine;
			e->hs = 2;
		}
	} else if (e->hs == 2 && e->syn_dir == dir && fl == TCP_F_ACK && there) {
		fo_sample(other, fo_fine(fine) - e->syn_ns, k16);
		e->hs = 3;
	}
	if (!tcp_ts(ctx, c))
		return;
	if (other->sent_ns && there) {
		if (c->tsecr == other->tsval) {
			fo_sample(other, fo_fine(fine) - other->sent_ns, k16);
			other->sent_ns = 0;
		} else if ((__s32)(c->tsecr - other->tsval) > 0) {
			other->sent_ns = 0; /* echoed past: never timed */
		}
	}
	/* The first segment with a new TSval (segments of one clock tick
	 * share it; the first one's echo comes first). A sample in flight
	 * is given up after a second (by either clock: a tick late at
	 * most). */
	if (c->tsval != me->last_tsval &&
	    (!me->sent_ns || (__s64)(now - me->sent_ns) > (__s64)FO_MAX_NS) &&
	    tcp_payload(ctx, &c->p)) {
		me->tsval = c->tsval;
		me->sent_ns = fo_fine(fine);
	}
	me->last_tsval = c->tsval;
}

/* edge_fo_probe takes the TCP packet in c->p into the RTT samples of
 * its connection's record (c->fo_at, fo_check, fo_dir: as found for
 * it), timed by the fine clock (now when it is, fine: read for this
 * packet, fo_clock). A global function: the options' walk, verified
 * once. */
__noinline int edge_fo_probe(struct xdp_md *ctx, struct edge_ctx *c,
			     __u64 now, __u32 fine, __u32 k16)
{
	struct edge_fo_conn *e;
	__u64 t = fine ? now : 0;

	if (!c)
		return 0;
	e = fo_again(c);
	if (!e)
		return 0;
	if (c->fo_dir)
		fo_probe(ctx, c, e, &e->d[1], &e->d[0], now, &t, k16);
	else
		fo_probe(ctx, c, e, &e->d[0], &e->d[1], now, &t, k16);
	return 0;
}

/* edge_fo_mark marks the packet in c->p Congestion Experienced (RFC
 * 3168) when it is ECN-capable (c->p.ecn, as parsed): 1, or 0 when it
 * is not. A global function: the header's rewrite, for the few packets
 * marked (fo_mark asks it only for an ECN-capable one). */
__noinline int edge_fo_mark(struct xdp_md *ctx, struct edge_ctx *c)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct edge_pkt *p;
	void *l3;
	__u16 old;

	if (!c)
		return 0;
	p = &c->p;
	if (!p->ecn)
		return 0;
	if (p->ecn == 3)
		return 1;
	l3 = data + (p->l3_off & 0x3ff);
	if (p->key.family == 4) {
		struct iphdr *iph = l3;

		if ((void *)(iph + 1) > data_end)
			return 0;
		old = *(__u16 *)iph;
		iph->tos |= 3;
		iph->check = csum_replace2(iph->check, old, *(__u16 *)iph);
	} else {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		ip6->flow_lbl[0] |= 0x30;
	}
	p->ecn = 3;
	return 1;
}

/* fo_mark marks the packet in c->p CE when it is ECN-capable: 1, or 0
 * when it is not. */
static __always_inline int fo_mark(struct xdp_md *ctx, struct edge_ctx *c)
{
	return c->p.ecn && edge_fo_mark(ctx, c);
}

/* Verdicts of a class's phantom queue on a packet. */
#define FO_VQ_PASS 0
#define FO_VQ_MARK 1 /* congested: to be ECN-marked (CE) */
#define FO_VQ_DROP 2

/* fo_vq_add adds a CPU's batch pc to its class's phantom queue vq: from
 * when its first packet came when the queue had drained by then (as
 * if each packet had been added as it came), else on top. Two atomic
 * operations at most, no lock: another CPU's add between them at worst
 * counts the batch from a little earlier. */
static __always_inline void fo_vq_add(struct edge_qos_vq *vq,
				      struct edge_qos_vq_cpu *pc)
{
	__u64 t = *(volatile __u64 *)&vq->tail, pend = pc->pend;

	pc->pend = 0;
	if (t < pc->since &&
	    __sync_val_compare_and_swap(&vq->tail, t, pc->since + pend) == t)
		return;
	__sync_fetch_and_add(&vq->tail, pend);
}

/* fo_vq judges a packet of len bytes of class idx by the class's phantom
 * queue, which drains at its rate: past depth of backlog a packet is to
 * be marked (in a drop class, a busy flow's dropped); past twice the
 * depth a busy flow's (one using its share: its tokens under half the
 * depth) dropped, past four times any. Flows under their share are not
 * dropped before the queue is past four depths: the losses fall on the
 * flows that make them. A packet dropped is not counted into the
 * backlog. The backlog is judged in time (ns of drain, tail - now: no
 * division), as this CPU sees it: the class's tail and this CPU's batch
 * not yet added to it. A CPU adds its packets at once, except while they
 * stream in (less than FO_VQ_STREAM_NS apart): then in batches of up
 * to an eighth of the depth, so CPUs sending at once meet on the tail's
 * cache line once a batch, not at every packet, and each misses at
 * most a batch of each other's. A batch left when a CPU's packets stop
 * is added with its next packet, from when it began (fo_vq_add): what
 * drained meanwhile is not counted again. */
static __always_inline int fo_vq(struct edge_ctx *c, __u32 idx,
				 const struct edge_qos_class *q, __u32 len,
				 int busy, struct fo_now *tn)
{
	__u64 d = q->depth_ns, t, b, now = tn->ns;
	struct edge_qos_vq_cpu *pc;
	struct edge_qos_vq *vq;
	int v = FO_VQ_PASS, stream;

	vq = bpf_map_lookup_elem(&edge_qos_vqs, &idx);
	pc = bpf_map_lookup_elem(&edge_qos_vq_cpu, &idx);
	if (!vq || !pc)
		return FO_VQ_PASS;
	t = *(volatile __u64 *)&vq->tail;
	if (pc->pend)
		t = (t > pc->since ? t : pc->since) + pc->pend;
	/* On an earlier packet's time the backlog is never less: a batch's
	 * start, or a backlog past the depth, is judged on the packet's
	 * own. */
	if (tn->stale & ((pc->pend == 0) | (t > now + d)))
		now = fo_fresh(c, tn);
	b = t > now ? t - now : 0;
	if (b > 4 * d || (busy && (b > 2 * d || (b > d && (q->flags & EDGE_QF_DROP)))))
		return FO_VQ_DROP;
	if (b > d && !(q->flags & EDGE_QF_DROP))
		v = FO_VQ_MARK;
	stream = now - pc->last < FO_VQ_STREAM_NS;
	pc->last = now;
	if (!pc->pend)
		pc->since = now;
	pc->pend += (__u64)len * q->ns_byte >> EDGE_FO_NSB_SHIFT;
	if (!stream || pc->pend > d >> 3)
		fo_vq_add(vq, pc);
	return v;
}

/* fo_refill adds to d the tokens a flow of class q earned in el ns:
 * quantum a round, multiplied by the class's tok_mul, or divided when
 * el is too long to multiply (a flow idle for milliseconds), at most a
 * second's. */
static __always_inline void fo_refill(struct edge_fo_dir *d,
				      const struct edge_qos_class *q, __u64 el)
{
	if (!(el >> FO_MUL_EL) && q->tok_mul) {
		d->tokens += (__s64)(el * q->tok_mul >> EDGE_FO_MUL_SHIFT);
		return;
	}
	if (el > FO_MAX_NS)
		el = FO_MAX_NS;
	d->tokens += (__s64)((el * q->quantum << EDGE_FO_TOKEN_SHIFT) / q->round_ns);
}

/* fo_refill_to refills d's tokens (fo_refill) up to now, at most depth.
 * Signed: another CPU (the connection's other direction shares no
 * tokens, but a share does) may have stamped them later than now (an
 * earlier packet's time, fo_clock, or a moment later): they are not
 * refilled, nor their stamp moved back (which would refill the time
 * between twice). */
static __always_inline void fo_refill_to(struct edge_fo_dir *d,
					 const struct edge_qos_class *q,
					 __u64 now, __s64 depth)
{
	if ((__s64)(now - d->refill_ns) > 0) {
		fo_refill(d, q, now - d->refill_ns);
		d->refill_ns = now;
	}
	if (d->tokens > depth)
		d->tokens = depth;
}

/* fo_fair serves the packet in c->p of flow direction d, in class q (index
 * idx, its counters qc): 1 when it is to be dropped, else 0 (perhaps
 * marked). */
static __always_inline int fo_fair(struct xdp_md *ctx, struct edge_ctx *c,
				   struct edge_fo_dir *d, const struct edge_qos_class *q,
				   __u32 idx, struct edge_qos_ctr *qc, struct fo_now *t)
{
	__s64 len = (__s64)c->p.len << EDGE_FO_TOKEN_SHIFT;
	__s64 depth = (__s64)q->depth << EDGE_FO_TOKEN_SHIFT;
	__u16 period = (__u16)(t->ns >> EDGE_FO_PERIOD_SHIFT);
	int busy = 1, vq;

	if (d->period != period) {
		d->period = period;
		qc->flows++;
	}
	if (c->p.ecn && !(d->flags & EDGE_FOD_ECN))
		d->flags |= EDGE_FOD_ECN;
	if (d->flags & EDGE_FOD_HINT)
		qc->hinted++;
	if (q->flags & EDGE_QF_URLLC)
		goto pass;
	if (q->round_ns) {
		/* Judged on an earlier packet's time (fo_clock) only while
		 * that could not make it busy: its tokens before they are
		 * refilled left over half the depth after the packet (a new
		 * flow has none yet: its quantum from its first packet's own
		 * time). */
		if (t->stale & (d->tokens - len < depth / 2))
			fo_fresh(c, t);
		if (!d->refill_ns) {
			d->tokens = (__s64)q->quantum << EDGE_FO_TOKEN_SHIFT;
			d->refill_ns = t->ns;
		}
		fo_refill_to(d, q, t->ns, depth);
		d->tokens -= len;
		busy = d->tokens < depth / 2;
	}
	vq = q->rate ? fo_vq(c, idx, q, c->p.len, busy, t) : FO_VQ_PASS;
	if (vq == FO_VQ_DROP)
		goto drop_congested;
	if (vq == FO_VQ_MARK && fo_mark(ctx, c))
		qc->congested++;
	else
		vq = FO_VQ_PASS;
	if (!q->round_ns || d->tokens >= 0) {
		if ((d->flags & EDGE_FOD_HINT) && vq == FO_VQ_PASS && !(q->flags & EDGE_QF_DROP) &&
		    fo_mark(ctx, c))
			qc->congested++;
		goto pass;
	}
	/* Over its share: marked, or when the packet is not ECN-capable
	 * but its flow is (a retransmission: RFC 3168 sends them not
	 * ECN-capable), passed in debt; dropped a whole depth in debt. */
	if (!(q->flags & EDGE_QF_DROP) && d->tokens >= -depth) {
		if (vq == FO_VQ_MARK || fo_mark(ctx, c)) {
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

/* edge_fo_egress notes oif, the interface the packet the probe just took
 * left by (c->fo_at: its connection's record; 0: none), as its
 * direction's: the other direction's answers end its samples only when
 * they come in there. A flow entry knows where its packets leave only
 * once one is sent (a new flow's first packet, the handshake's SYN), so
 * the pipeline calls this after act, when the interface is not the one
 * the record holds. A packet that left by none (dropped, or handed to the
 * kernel) leaves it as it was: a forged packet of the direction cannot
 * unlearn it. A global function: called a few times a connection. */
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

/* edge_fo_place_cpu places direction dir of record c->fo_at (a new
 * flow's, arrived on cpu) on a CPU when the agent found cpu hot: the
 * cooler of two of the ncpus drawn at random (power of two choices).
 * A global function: a few times a flow at most. */
__noinline int edge_fo_place_cpu(struct edge_ctx *c, __u32 ncpus, __u32 cpu)
{
	struct edge_cpu_load *here, *la, *lb;
	struct edge_fo_conn *e;
	struct edge_fo_dir *d;
	__u32 a, b;

	if (!c || !ncpus)
		return 0;
	e = fo_again(c);
	here = bpf_map_lookup_elem(&edge_cpu_loads, &cpu);
	if (!e || !here || !here->hot)
		return 0;
	d = c->fo_dir ? &e->d[1] : &e->d[0];
	a = bpf_get_prandom_u32() % ncpus;
	b = bpf_get_prandom_u32() % ncpus;
	la = bpf_map_lookup_elem(&edge_cpu_loads, &a);
	lb = bpf_map_lookup_elem(&edge_cpu_loads, &b);
	if (!la || !lb)
		return 0;
	d->cpu = (la->pps <= lb->pps ? a : b) + 1;
	return 0;
}

/* fo_relief places the flow of the packet in c->p (its connection's
 * record e) on a CPU when it is new and arrived on a CPU the agent found
 * hot (edge_fo_place_cpu), and hands the packet to its flow's CPU when
 * that is another: XDP_REDIRECT (counted EDGE_R_CPU_MOVED), else
 * EDGE_GO_ON. ncpus: the CPUs flows may go to. */
static __always_inline int fo_relief(struct edge_ctx *c, struct edge_fo_conn *e,
				     __u32 ncpus)
{
	struct edge_fo_dir *d = c->fo_dir ? &e->d[1] : &e->d[0];
	__u32 cpu = bpf_get_smp_processor_id();

	if (!d->cpu) {
		/* Only a new flow is placed: never split once under way. */
		if (e->packets > EDGE_FO_WARM)
			return EDGE_GO_ON;
		edge_fo_place_cpu(c, ncpus, cpu);
		if (!d->cpu)
			return EDGE_GO_ON;
	}
	if (d->cpu - 1 == cpu)
		return EDGE_GO_ON;
	if (bpf_redirect_map(&edge_cpus, d->cpu - 1, 0) != XDP_REDIRECT) {
		d->cpu = 0; /* no such CPU in the map: not placed */
		return EDGE_GO_ON;
	}
	return punt(&c->p, EDGE_R_CPU_MOVED, XDP_REDIRECT);
}

/* edge_flowopt runs FlowOpt's stages that st has on (its fo_flags, of
 * the packet's generation) on the packet in c->p, of a flow in class cls
 * (index + 1; 0: none), once a packet, with one clock read and one look
 * for the connection's record: relief (when relief is 1: not for a
 * packet relief already handed over, nor a decapsulated one), then the
 * probe and fairness. It returns
 * XDP_REDIRECT when relief hands the packet to its flow's CPU, else
 * EDGE_GO_ON, with the verdict of a packet over its share in c->fo_rc
 * (EDGE_GO_ON: none): the pipeline calls it once the flow is decided,
 * before the packet is counted (a packet handed over is counted on its
 * flow's CPU), and drops at act (a packet dropped is counted with its
 * rule first). A flow whose connection has no record (both of its
 * slots held by active connections) is judged in one of its class's
 * shares (edge_fo_shares, by its keyed hash and direction) beside the
 * other flows there: held to a flow's share, never let through
 * unjudged. The probe leaves the record's place in c (fo_at, fo_check,
 * fo_dir, fo_oif) for edge_fo_egress. A global function: verified once,
 * called once. */
__noinline int edge_flowopt(struct xdp_md *ctx, struct edge_ctx *c,
			    const struct edge_state *st, __u32 relief, __u32 cls)
{
	const struct edge_qos_class *q = NULL;
	struct edge_fo_dir *me = NULL;
	__u32 k, share, reason, fo, k16, ncpus;
	struct edge_qos_ctr *qc;
	struct edge_fo_conn *e;
	struct fo_now t;
	int rc, judge;
	__u64 now;

	if (!c || !st)
		return EDGE_GO_ON;
	fo = st->fo_flags[c->gen & 1];
	k16 = st->fo_k16[c->gen & 1];
	ncpus = relief ? st->ncpus : 0;
	c->fo_done = 1;
	c->fo_rc = EDGE_GO_ON;
	c->fo_oif = 0;
	if (cls) {
		k = (c->gen & 1) * EDGE_MAX_QOS + ((cls - 1) & (EDGE_MAX_QOS - 1));
		q = bpf_map_lookup_elem(&edge_qos, &k);
	}
	/* Relief: never a GRE packet from a peer (its inner flows are not
	 * known yet) or a URLLC flow. */
	if (!(fo & EDGE_FO_RELIEF) || ncpus < 2 || c->p.key.proto == IPPROTO_GRE ||
	    (q && (q->flags & EDGE_QF_URLLC)))
		ncpus = 0;
	judge = (fo & EDGE_FO_PROBE) || (q && (fo & EDGE_FO_FAIR));
	if (!ncpus && !judge)
		return EDGE_GO_ON;
	fo_clock(c, fo, &t);
	now = t.ns;
	e = fo_lookup(c, now);
	if (e) {
		/* The connection's packets counted: first when relief is
		 * alone, else after relief (which places flows by them). */
		if (!judge) {
			e->last_ns = now;
			if (e->packets < 0xffffffffu)
				e->packets++;
		}
		if (ncpus) {
			rc = fo_relief(c, e, ncpus);
			if (rc != EDGE_GO_ON || !judge)
				return rc;
		}
		e->last_ns = now;
		if (e->packets < 0xffffffffu)
			e->packets++;
		me = c->fo_dir ? &e->d[1] : &e->d[0];
		if (fo & EDGE_FO_PROBE) {
			fo_rate(me, c->p.len, now);
			if (c->p.key.proto == IPPROTO_TCP && c->p.l4_off &&
			    !(c->p.key.flags & EDGE_KF_FRAG))
				edge_fo_probe(ctx, c, now, (fo & EDGE_FO_FAIR) && !t.stale, k16);
			c->fo_oif = me->oif;
		}
	}
	if (!q || !(fo & EDGE_FO_FAIR))
		return EDGE_GO_ON;
	k = (cls - 1) & (EDGE_MAX_QOS - 1);
	qc = bpf_map_lookup_elem(&edge_qos_stats, &k);
	if (!qc)
		return EDGE_GO_ON;
	reason = EDGE_R_FO_DROP;
	if (!me) {
		/* check's low bit is always set: its next three pick a pair
		 * of shares, the direction one of them. */
		share = k * EDGE_FO_SHARES +
			((c->fo_check & (EDGE_FO_SHARES - 2)) | (c->fo_dir & 1));
		me = bpf_map_lookup_elem(&edge_fo_shares, &share);
		reason = EDGE_R_FO_SHARE_DROP;
	}
	if (!me || fo_fair(ctx, c, me, q, k, qc, &t))
		c->fo_rc = punt(&c->p, reason, XDP_DROP);
	return EDGE_GO_ON;
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
