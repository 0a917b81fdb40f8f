/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* L4 load balancing: a connection to a service (VIP, port, protocol) gets a
 * backend from the service's Maglev table (built by the agent) and keeps it
 * in its flow-table entry, across rules generations and backend changes,
 * until the table evicts it (per-connection consistency, as Maglev and
 * Katran do). The balancer runs on flow-table misses only: the entry then
 * holds the backend's FAR like any other decision, and the connection is
 * found by its 5-tuple for its other flows (another DSCP or ingress) and
 * for its replies (NAT), so a new connection costs one entry. A service stands
 * among the PDRs at its precedence: when some PDR at that precedence or a
 * lower one may match its packets (EDGE_SVC_GUARDED, worked out by the
 * agent), the balancer answers EDGE_LB_GUARDED and the pipeline asks the
 * classifier first. */
#ifndef EDGE_BALANCE_H
#define EDGE_BALANCE_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "flowtab.h"
#include "nat.h"
#include "proto.h"
#include "verdict.h"

/* Maglev table entries reserved per service, set by the agent before
 * load (limits.maglev_table; prime); a service's own table may be smaller.
 * maglev_blocks: the edge_maglev elements that many entries take. */
volatile const __u32 maglev_size = 251;
volatile const __u32 maglev_blocks = 4;

/* What edge_balance decided. */
enum edge_lb_verdict {
	EDGE_LB_NONE = 0,       /* not a service's: classify as usual */
	EDGE_LB_HIT = 1,        /* out holds the backend (or reply) FAR */
	EDGE_LB_NO_BACKEND = 2, /* a service's, but it has no backend */
	EDGE_LB_STATELESS = 3,  /* as HIT, for a stateless service: no flow
				 * entry, every packet is balanced again */
	EDGE_LB_ASK = 4,        /* edge_stateless: ask edge_balance */
	EDGE_LB_GUARDED = 5,    /* a guarded service's: classify first, with
				 * the service's precedence in rule.prio's
				 * high half; ask again with EDGE_BAL_UNGUARDED
				 * when no PDR comes before it */
	EDGE_LB_PDR = 6,        /* the pipeline's: a PDR before a guarded
				 * service won; its rule is in ctx->rule */
};

/* edge_balance's flags. */
#define EDGE_BAL_NAT 0x01       /* the slot has NAT services: reverse NAT */
#define EDGE_BAL_STATELESS 0x02 /* decide for stateless services only */
#define EDGE_BAL_UNGUARDED 0x04 /* no PDR comes before the service */

/* guarded tells whether a service's packet must be classified first (and
 * says so in out->prio: the service's precedence, PDRs of it first). */
static __always_inline int guarded(const struct edge_svc *svc, __u32 flags,
				   struct edge_rule *out)
{
	if (!(svc->flags & EDGE_SVC_GUARDED) || (flags & EDGE_BAL_UNGUARDED))
		return 0;
	out->prio = (__u64)svc->prec << 32 | 0xffffffffu;
	return 1;
}

/* lb_hash_words mixes a connection key's five 64-bit words into 32 bits:
 * each word times its own odd constant (independent multiplies, not a
 * chain), summed, then SplitMix64's finaliser, so every bit of every field
 * moves the result. */
static __always_inline __u32 lb_hash_words(__u64 w0, __u64 w1, __u64 w2,
					   __u64 w3, __u64 w4)
{
	__u64 h;

	h = w0 * 0x9e3779b97f4a7c15ull + w1 * 0xbf58476d1ce4e5b9ull +
	    w2 * 0x94d049bb133111ebull + w3 * 0xd6e8feb86659fd93ull +
	    w4 * 0xc2b2ae3d27d4eb4full;
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 29;
	return (__u32)(h >> 32);
}

/* lb_hash is lb_hash_words of a connection key. */
static __always_inline __u32 lb_hash(const struct edge_conn_key *k)
{
	const __u64 *w = (const __u64 *)k;

	return lb_hash_words(w[0], w[1], w[2], w[3], w[4]);
}

/* lb_hash_flow is lb_hash of the connection key conn_key makes of key,
 * read straight from the flow key: the last word as the connection key
 * lays out sport, dport, proto and family (little-endian), pad 0. */
static __always_inline __u32 lb_hash_flow(const struct edge_flow_key *key)
{
	const __u64 *s = (const __u64 *)key->src, *d = (const __u64 *)key->dst;

	return lb_hash_words(s[0], s[1], d[0], d[1],
			     (__u64)key->sport | (__u64)key->dport << 16 |
				     (__u64)key->proto << 32 |
				     (__u64)key->family << 40);
}

/* lb_index maps a 32-bit hash onto 0..size-1 by a multiply and a shift
 * (Lemire's reduction) rather than a division. */
static __always_inline __u32 lb_index(__u32 h, __u32 size)
{
	return (__u32)(((__u64)h * size) >> 32);
}

/* svc_hash is the bucket hash (before masking) of the service key of vip
 * (16 bytes), port, proto and family. The agent computes the same
 * (bpf.SvcIndexHash). */
static __always_inline __u32 svc_hash(const __u8 *vip, __be16 port, __u8 proto,
				      __u8 family)
{
	const __u32 *a = (const __u32 *)vip;
	__u32 h;

	h = a[0] * 0x9e3779b1u ^ a[1] * 0x85ebca77u ^ a[2] * 0xc2b2ae3du ^
	    a[3] * 0x27d4eb2fu ^
	    (((__u32)port << 16) | ((__u32)proto << 8) | family) * 0x165667b1u;
	h ^= h >> 15;
	h *= 0x2c1b3c6du;
	h ^= h >> 12;
	return h;
}

/* sl_bit is the bit of edge_state.stateless_vips a packet to vip (16
 * bytes) and port tests: clear, no stateless service has that address
 * and port. The agent computes the same (bpf.StatelessBit). */
static __always_inline __u32 sl_bit(const __u8 *vip, __be16 port)
{
	const __u32 *a = (const __u32 *)vip;

	return ((a[0] ^ a[1] ^ a[2] ^ a[3] ^ port) * 0x9e3779b1u) >> 26;
}

/* svc_probe looks a service up in slot's index: the bucket of its key and
 * the next EDGE_SVC_PROBES - 1. It returns the service, or NULL with
 * *full 0 when an empty bucket came first (no such service), or with
 * *full 1 when all were taken by others (ask edge_services). */
static __always_inline const struct edge_svc *
svc_probe(const __u8 *vip, __be16 port, __u8 proto, __u8 family, __u32 slot,
	  int *full)
{
	const struct edge_svc_slot *e;
	const __u64 *a = (const __u64 *)vip, *b;
	__u32 h = svc_hash(vip, port, proto, family), i, idx;

	*full = 0;
#pragma unroll
	for (i = 0; i < EDGE_SVC_PROBES; i++) {
		idx = slot * EDGE_SVC_INDEX + ((h + i) & (EDGE_SVC_INDEX - 1));
		e = bpf_map_lookup_elem(&edge_svc_index, &idx);
		if (!e || !e->v.id)
			return NULL;
		b = (const __u64 *)e->k.vip;
		if (a[0] == b[0] && a[1] == b[1] && e->k.port == port &&
		    e->k.proto == proto && e->k.family == family)
			return &e->v;
	}
	*full = 1;
	return NULL;
}

/* svc_find returns the service of key k (whose slot field is slot), or
 * NULL: from the index when it answers, else from edge_services. */
static __always_inline const struct edge_svc *
svc_find(const struct edge_svc_key *k, __u32 slot)
{
	const struct edge_svc *svc;
	int full;

	svc = svc_probe(k->vip, k->port, k->proto, k->family, slot, &full);
	if (svc || !full)
		return svc;
	return bpf_map_lookup_elem(&edge_services, k);
}

/* svc_find_key fills the service key sk (scratch: svc_find's map lookup
 * needs it in memory) from vip, port, proto, family and slot, and returns
 * svc_find's answer. */
static __always_inline const struct edge_svc *
svc_find_key(struct edge_svc_key *sk, const __u8 *vip, __be16 port, __u8 proto,
	     __u8 family, __u32 slot)
{
	__builtin_memcpy(sk->vip, vip, 16);
	sk->port = port;
	sk->proto = proto;
	sk->family = family;
	sk->slot = slot;
	return svc_find(sk, slot);
}

/* maglev_pick returns the backend FAR the Maglev table of service svc
 * (place tag) gives hash h in slot, with its index (*fi) and counter index
 * (*stats); NULL: the entry has no backend. */
static __always_inline const struct edge_far *
maglev_pick(const struct edge_svc *svc, __u32 tag, __u32 slot, __u32 h,
	    __u32 *fi, __u32 *stats)
{
	const struct edge_maglev_blk *blk;
	__u32 size, i, base, idx, *fp;
	__u8 m;

	/* Each table has its own (prime) size within its maglev_size
	 * region. */
	size = svc->size;
	if (!size || size > maglev_size)
		size = maglev_size;
	i = lb_index(h, size);
	base = slot * EDGE_MAX_SERVICES + tag;
	idx = base * maglev_blocks + i / EDGE_MAGLEV_BLOCK;
	blk = bpf_map_lookup_elem(&edge_maglev, &idx);
	if (!blk)
		return NULL;
	m = blk->m[i % EDGE_MAGLEV_BLOCK];
	if (m >= EDGE_MAX_MEMBERS - 1)
		return NULL;
	idx = base * EDGE_MAX_MEMBERS + m;
	fp = bpf_map_lookup_elem(&edge_lb_far, &idx);
	if (!fp || *fp == EDGE_NO_FAR)
		return NULL;
	*fi = *fp;
	*stats = tag * EDGE_MAX_MEMBERS + m;
	return far_get(slot, *fi);
}

/* conn_key fills a connection key from a packet's flow key. */
static __always_inline void conn_key(struct edge_conn_key *ck,
				     const struct edge_flow_key *key)
{
	__builtin_memcpy(ck->src, key->src, 16);
	__builtin_memcpy(ck->dst, key->dst, 16);
	ck->sport = key->sport;
	ck->dport = key->dport;
	ck->proto = key->proto;
	ck->family = key->family;
	ck->pad = 0;
}

/* far_current returns the FAR at index fi of slot if it still is the one
 * with id (an index freed and given to another FAR is not), else NULL. */
static __always_inline const struct edge_far *
far_current(__u32 slot, __u32 fi, __u32 id)
{
	const struct edge_far *far = far_get(slot, fi);

	if (!far || far->id != id)
		return NULL;
	return far;
}

/* addr_eq compares two 16-byte addresses (IPv4: 4 bytes, zeros after). */
static __always_inline int addr_eq(const __u8 *x, const __u8 *y)
{
	const __u64 *a = (const __u64 *)x, *b = (const __u64 *)y;

	return a[0] == b[0] && a[1] == b[1];
}

/* reply_of decides a reply by its service's reply rewrite (FAR unnat,
 * counter stats) and marks the entry made of it a NAT reply of svc. */
static __always_inline int reply_of(struct edge_ctx *c, __u32 svc,
				    __u32 unnat, __u32 stats,
				    struct edge_rule *out)
{
	out->far = unnat;
	out->stats = stats | EDGE_STATS_LB;
	c->nf.flags = EDGE_FF_REPLY;
	c->nf.svc = svc;
	c->nf.far_id = svc; /* a reply rewrite's FAR id is its service's */
	return EDGE_LB_HIT;
}

/* reply_find decides the reply k (backend -> client) of a NAT'd
 * connection: the backend's entry in edge_nat_backends names the NAT
 * services it serves; a stateless one's replies are its own, another's
 * only when the client's connection through it (client -> VIP, to this
 * backend) is in the flow table. EDGE_LB_NONE: no such connection. */
static __always_inline int reply_find(struct edge_ctx *c,
				      const struct edge_conn_key *k,
				      __u32 slot, struct edge_rule *out)
{
	struct edge_lb_scratch *s = &c->lb;
	const struct edge_nat_backend *nb;
	const struct edge_nat_user *u;
	const struct edge_far *far, *bf;
	__u32 i;

	__builtin_memcpy(s->sk.vip, k->src, 16);
	s->sk.port = k->sport;
	s->sk.proto = k->proto;
	s->sk.family = k->family;
	s->sk.slot = slot;
	nb = bpf_map_lookup_elem(&edge_nat_backends, &s->sk);
	if (!nb)
		return EDGE_LB_NONE;
#pragma unroll
	for (i = 0; i < EDGE_NAT_USERS; i++) {
		u = &nb->u[i];
		if (!u->svc)
			break;
		far = far_current(slot, u->unnat, u->svc);
		if (!far || far->action != EDGE_ACT_UNNAT)
			continue;
		if (!(u->flags & EDGE_SVC_STATELESS)) {
			__builtin_memcpy(s->fk.src, k->dst, 16);
			__builtin_memcpy(s->fk.dst, far->addr, 16);
			s->fk.sport = k->dport;
			s->fk.dport = far->port;
			s->fk.proto = k->proto;
			s->fk.family = k->family;
			s->fk.pad = 0;
			if (!edge_ft_conn(c, u->svc))
				continue;
			bf = far_current(slot, c->rec.far, c->rec.far_id);
			if (!bf || bf->action != EDGE_ACT_NAT ||
			    !addr_eq(bf->addr, k->src) || bf->port != k->sport)
				continue;
		}
		return reply_of(c, u->svc, u->unnat, u->stats, out);
	}
	return EDGE_LB_NONE;
}

/* edge_balance decides a flow-table miss that belongs to the balancer: a
 * connection to a service, known (its flow-table entry, or another of its
 * 5-tuple's: ctx->rec) or new (Maglev table), recorded by the entry the
 * flow gets (EDGE_FF_CONN), or the reply of a NAT'd connection (found
 * through the client's connection: reply_find; only with EDGE_BAL_NAT:
 * the slot has services with NAT backends). A stateless service's
 * connections are not recorded: each packet is hashed through the
 * Maglev table again, and the caller records no flow entry or copy
 * (EDGE_LB_STATELESS). With EDGE_BAL_STATELESS only a stateless
 * service's packets are decided (the pipeline asks before it looks in
 * the flow table, which never holds them); anything else is
 * EDGE_LB_NONE. It decides the packet in ctx->p into ctx->rule, in
 * ctx->gen's slot. It is a global function, verified once, and keeps its
 * keys in the per-packet context: map lookups need them in memory. */
__noinline int edge_balance(struct edge_ctx *ctx, __u32 flags)
{
	const struct edge_flow_key *key;
	const struct edge_far *far;
	struct edge_lb_scratch *s;
	const struct edge_svc *svc;
	struct edge_rule *out;
	__u32 slot, tag, stateless, fi = 0, stats = 0, known = 0;
	__u64 *n;

	if (!ctx)
		return EDGE_LB_NONE;
	key = &ctx->p.key;
	out = &ctx->rule;
	s = &ctx->lb;
	slot = ctx->gen & 1;
	if (key->proto != IPPROTO_TCP && key->proto != IPPROTO_UDP)
		return EDGE_LB_NONE;
	if (key->flags & EDGE_KF_FRAG)
		return EDGE_LB_NONE; /* no ports: not balanced */

	svc = svc_find_key(&s->sk, key->dst, key->dport, key->proto,
			   key->family, slot);
	if (flags & EDGE_BAL_STATELESS) {
		if (!svc || !(svc->flags & EDGE_SVC_STATELESS))
			return EDGE_LB_NONE;
	}
	conn_key(&s->ck, key);
	if (!svc) {
		if (!(flags & EDGE_BAL_NAT))
			return EDGE_LB_NONE;
		/* Its own entry, stale: the reply rewrite while it is still
		 * at its place. */
		if (ctx->rec.flags & EDGE_FF_REPLY) {
			far = far_current(slot, ctx->rec.far, ctx->rec.far_id);
			if (far && far->action == EDGE_ACT_UNNAT)
				return reply_of(ctx, ctx->rec.svc, ctx->rec.far,
						ctx->rec.stats & ~EDGE_STATS_LB, out);
		}
		return reply_find(ctx, &s->ck, slot, out);
	}
	if (guarded(svc, flags, out))
		return EDGE_LB_GUARDED;
	tag = svc->tag & (EDGE_MAX_SERVICES - 1);
	stateless = svc->flags & EDGE_SVC_STATELESS;

	/* The connection's backend, kept in the flow table (its own stale
	 * entry, or another flow of its 5-tuple: edge_ft_lookup). */
	far = NULL;
	if (!stateless && (ctx->rec.flags & EDGE_FF_CONN) &&
	    ctx->rec.svc == svc->id) {
		far = far_current(slot, ctx->rec.far, ctx->rec.far_id);
		if (far && far->action != EDGE_ACT_NAT &&
		    far->action != EDGE_ACT_ENCAP)
			far = NULL;
		fi = ctx->rec.far;
		stats = ctx->rec.stats & ~EDGE_STATS_LB;
		known = far != NULL;
	}
	if (!known) {
		far = maglev_pick(svc, tag, slot, lb_hash(&s->ck), &fi, &stats);
		if (!far)
			return EDGE_LB_NO_BACKEND;
	}
	out->far = fi;
	out->stats = stats | EDGE_STATS_LB;

	/* The entry the flow gets records the connection: no table of
	 * its own, and a NAT'd one's replies are found through it. */
	if (!stateless) {
		ctx->nf.flags = EDGE_FF_CONN;
		if (known)
			ctx->nf.flags |= ctx->rec.flags & EDGE_FF_CLOSED;
		ctx->nf.svc = svc->id;
		ctx->nf.far_id = far->id;
		if (!known) {
			n = bpf_map_lookup_elem(&edge_lb_new, &stats);
			if (n)
				(*n)++;
		}
	}
	return stateless ? EDGE_LB_STATELESS : EDGE_LB_HIT;
}

/* edge_stateless decides a packet of a stateless service from the index
 * and the Maglev table alone, reading the flow key in place (edge_balance
 * copies keys into its scratch first): the pipeline asks it before the
 * flow cache. EDGE_LB_NONE: not a stateless service's packet;
 * EDGE_LB_ASK: ask edge_balance (the index left the service out, or the
 * service is guarded). */
__noinline int edge_stateless(struct edge_ctx *ctx)
{
	const struct edge_flow_key *key;
	const struct edge_svc *svc;
	const struct edge_far *far;
	struct edge_rule *out;
	__u32 slot, fi = 0, stats = 0;
	int full;

	if (!ctx)
		return EDGE_LB_NONE;
	key = &ctx->p.key;
	out = &ctx->rule;
	slot = ctx->gen & 1;
	if (key->proto != IPPROTO_TCP && key->proto != IPPROTO_UDP)
		return EDGE_LB_NONE;
	if (key->flags & EDGE_KF_FRAG)
		return EDGE_LB_NONE;
	svc = svc_probe(key->dst, key->dport, key->proto, key->family, slot,
			&full);
	if (!svc)
		return full ? EDGE_LB_ASK : EDGE_LB_NONE;
	if (!(svc->flags & EDGE_SVC_STATELESS))
		return EDGE_LB_NONE;
	/* A guarded service: edge_balance says so. */
	if (svc->flags & EDGE_SVC_GUARDED)
		return EDGE_LB_ASK;
	far = maglev_pick(svc, svc->tag & (EDGE_MAX_SERVICES - 1), slot,
			  lb_hash_flow(key), &fi, &stats);
	if (!far)
		return EDGE_LB_NO_BACKEND;
	out->far = fi;
	out->stats = stats | EDGE_STATS_LB;
	return EDGE_LB_STATELESS;
}

/* edge_conn_close marks the connection of a TCP FIN or RST from the client
 * closed in its flow-table entry: the agent counts the entries not closed
 * as the backend's active connections. The entry stays, so the
 * connection's last packets still reach its backend. Called only for
 * such packets of balanced flows. */
__noinline int edge_conn_close(struct edge_ctx *ctx)
{
	if (!ctx)
		return 0;
	if (ctx->record) /* its entry is written after the packet is sent */
		ctx->nf.flags |= EDGE_FF_CLOSED;
	else
		edge_ft_use(ctx, &ctx->p.key, 0, 0, EDGE_FF_CLOSED);
	return 0;
}

/* edge_nat_icmp finds the connection of a NAT service an ICMP or ICMPv6
 * error (parsed into ctx->p) is about, for edge_nat_icmp_rewrite to
 * translate: toward the VIP (quoting
 * the VIP's reply), the destination and the quoted source become the
 * backend's; toward the client (quoting the packet the backend got), the
 * quoted destination becomes the VIP's, and the source too when the
 * backend itself sent the error. It returns EDGE_LB_HIT with out->far the
 * FAR whose interface the packet leaves by (the backend's, or the reply
 * rewrite's) and out->stats its counter; EDGE_LB_NONE when the packet is
 * not such an error (left as it was). A connection that was never seen is
 * not guessed at: for a stateless service the Maglev table answers, as it
 * does for the connection's own packets. Toward a guarded service's VIP
 * it answers EDGE_LB_GUARDED unless flags has EDGE_BAL_UNGUARDED. */
__noinline int edge_nat_icmp(struct xdp_md *ctx, struct edge_ctx *ec,
			     __u32 flags)
{
	void *data, *data_end;
	const struct edge_far *far;
	const struct edge_svc *svc;
	const struct edge_pkt *p;
	struct edge_lb_scratch *s;
	struct edge_rule *out;
	__u8 *icmp;
	__u32 slot, fi = 0, stats = 0;
	__be16 *ports;

	if (!ec || !ctx)
		return EDGE_LB_NONE;
	p = &ec->p;
	s = &ec->lb;
	out = &ec->rule;
	slot = ec->gen & 1;
	s->l3 = p->l3_off;
	s->l4 = p->l4_off;
	s->family = p->key.family;
	if (s->l4 > 512 || s->l3 > 64)
		return EDGE_LB_NONE;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	icmp = data + s->l4;
	if ((void *)(icmp + 8) > data_end || !icmp_is_error(icmp[0], s->family))
		return EDGE_LB_NONE;
	s->sum = (__u16)~*(__u16 *)(icmp + 2);
	s->il3 = s->l4 + 8;
	if (s->family == 4) {
		struct iphdr *ih = data + s->il3;

		if ((void *)(ih + 1) > data_end || ih->ihl < 5 ||
		    (ih->frag_off & bpf_htons(0x1fff)))
			return EDGE_LB_NONE;
		s->proto = ih->protocol;
		s->il4 = s->il3 + ih->ihl * 4;
		s->off = s->il3 + 12; /* the quote's source, then destination */
	} else {
		struct ipv6hdr *ih = data + s->il3;

		if ((void *)(ih + 1) > data_end)
			return EDGE_LB_NONE;
		s->proto = ih->nexthdr;
		s->il4 = s->il3 + sizeof(*ih);
		s->off = s->il3 + 8;
	}
	if (s->proto != IPPROTO_TCP && s->proto != IPPROTO_UDP)
		return EDGE_LB_NONE;
	if (s->il4 > 640)
		return EDGE_LB_NONE;
	ports = data + s->il4;
	if ((void *)(ports + 2) > data_end)
		return EDGE_LB_NONE;

	/* The quoted packet's connection as the client opened it: toward
	 * the VIP the quote is the reply (VIP -> client), so reversed. */
	__builtin_memset(&s->ck, 0, sizeof(s->ck));
	if (s->family == 4) {
		__u32 *a = data + (s->il3 + 12);

		if ((void *)(a + 2) > data_end)
			return EDGE_LB_NONE;
		*(__u32 *)s->ck.dst = a[0];
		*(__u32 *)s->ck.src = a[1];
	} else {
		__u64 *a = data + (s->il3 + 8);

		if ((void *)(a + 4) > data_end)
			return EDGE_LB_NONE;
		__builtin_memcpy(s->ck.dst, a, 16);
		__builtin_memcpy(s->ck.src, a + 2, 16);
	}
	s->ck.dport = ports[0];
	s->ck.sport = ports[1];
	s->ck.proto = s->proto;
	s->ck.family = s->family;

	/* Toward the VIP: addressed to the quote's source, a NAT service. */
	svc = NULL;
	if (addr_eq(p->key.dst, s->ck.dst)) {
		svc = svc_find_key(&s->sk, s->ck.dst, s->ck.dport, s->proto,
				   s->family, slot);
	}
	s->to_vip = svc && svc->unnat != EDGE_NO_FAR;
	s->from_backend = addr_eq(p->key.src, s->ck.src);
	if (s->to_vip) {
		if (guarded(svc, flags, out))
			return EDGE_LB_GUARDED;
		/* The connection's backend, from the connection table or, for
		 * a stateless service, the Maglev table. */
		far = NULL;
		if (svc->flags & EDGE_SVC_STATELESS) {
			far = maglev_pick(svc, svc->tag & (EDGE_MAX_SERVICES - 1),
					  slot, lb_hash(&s->ck), &fi, &stats);
		} else {
			s->fk = s->ck;
			if (edge_ft_conn(ec, svc->id)) {
				far = far_current(slot, ec->rec.far, ec->rec.far_id);
				fi = ec->rec.far;
				stats = ec->rec.stats & ~EDGE_STATS_LB;
			}
		}
		if (!far || far->action != EDGE_ACT_NAT)
			return EDGE_LB_NONE;
	} else {
		/* Toward the client: the quote is the client's packet as the
		 * backend got it; reversed (ck), the key of its reply in the
		 * reverse-NAT table (backend -> client). */
		return reply_find(ec, &s->ck, slot, out);
	}
	out->far = fi;
	out->stats = stats | EDGE_STATS_LB;
	return EDGE_LB_HIT;
}

#endif
