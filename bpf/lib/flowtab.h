/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The flow table (edge_ft, edge_ft_meta): one entry per flow, whatever
 * its kind, so a new flow costs one write.
 *
 * A flow's 5-tuple and GRE key hash (keyed with the agent's secret,
 * siphash.h: no sender can aim its flows at another's bucket) to a
 * bucket of EDGE_FT_WAYS ways; the bucket's line in edge_ft_meta holds a
 * tag per way (the hash's other half), the tick of the way's last use
 * and whether it was used after its first packet. A lookup reads that
 * line and compares whole keys where the tag matches; the flows of one
 * 5-tuple (other DSCP, ingress, path) share the bucket and the tag, so a
 * connection is found by its 5-tuple alone (per-connection consistency
 * across them, the reply of a NAT'd connection) in the same pass.
 *
 * An insert takes an empty way, else a way whose flow never had a second
 * packet or has gone EDGE_FT_IDLE ticks unused, the least recently used
 * of those, else nothing (counted: EDGE_R_FLOW_FULL): a flood of new
 * flows evicts only one-packet flows and idle ones, never an active
 * connection.
 *
 * Writers lock a bucket by making its seq odd (compare-and-swap) and
 * leave it even and higher; a reader takes what it read only if seq was
 * even and unchanged around the read (a seqlock), else reads again, a
 * few times (edge_ft_reread): a packet that took a bucket being written
 * for a miss would be decided again, and a connection's could leave its
 * backend. A writer that finds
 * the bucket locked, or changed since the lookup the packet was decided
 * by, does not record (EDGE_R_FLOW_BUSY). The ordering the seqlock needs
 * is x86's (loads with loads, stores with stores kept in order), the one
 * target built; compiler barriers keep the program's order. */
#ifndef EDGE_FLOWTAB_H
#define EDGE_FLOWTAB_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "siphash.h"
#include "verdict.h"

/* Buckets of the flow table, set by the agent before load (a power of
 * two: edge_ft's entries / EDGE_FT_WAYS). */
volatile const __u32 ft_buckets = 65536 / EDGE_FT_WAYS;

#define FT_BARRIER() asm volatile("" ::: "memory")

/* ft_hash places flow key k: the keyed hash (siphash.h) of its 5-tuple
 * and GRE key. The agent computes the same (bpf.FTHash). */
static __always_inline __u64 ft_hash(const struct edge_flow_key *k)
{
	const __u64 *s = (const __u64 *)k->src, *d = (const __u64 *)k->dst;

	return sip_tuple(s[0], s[1], d[0], d[1],
			 ((__u32)k->sport | (__u32)k->dport << 16) | k->gre_key,
			 k->proto, k->family);
}

/* ft_place sets c->ft_bucket and c->ft_tag from hash h. */
static __always_inline void ft_place(struct edge_ctx *c, __u64 h)
{
	c->ft_bucket = (__u32)h & (ft_buckets - 1);
	c->ft_tag = (__u32)(h >> 32) | 1;
}

/* ft_place_key places c->p.key's flow. */
static __always_inline void ft_place_key(struct edge_ctx *c)
{
	ft_place(c, ft_hash(&c->p.key));
}

static __always_inline struct edge_ft_way *ft_way(__u32 bucket, __u32 way)
{
	__u32 idx = bucket * EDGE_FT_WAYS + (way & (EDGE_FT_WAYS - 1));

	return bpf_map_lookup_elem(&edge_ft, &idx);
}

static __always_inline int ft_key_eq(const struct edge_flow_key *x,
				     const struct edge_flow_key *y)
{
	const __u64 *a = (const __u64 *)x, *b = (const __u64 *)y;

	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] &&
	       a[4] == b[4] && a[5] == b[5] && a[6] == b[6];
}

/* The ports word of a flow key (sport, dport, proto, dscp, family,
 * flags) with what is not the 5-tuple's masked off. */
#define FT_TUPLE_MASK 0x00ff00ffffffffffull

/* ft_same_tuple tells whether flow keys x and y share their 5-tuple and
 * GRE key (whatever their DSCP, ingress or path): flows of one
 * connection. */
static __always_inline int ft_same_tuple(const struct edge_flow_key *x,
					 const struct edge_flow_key *y)
{
	const __u64 *a = (const __u64 *)x, *b = (const __u64 *)y;

	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] &&
	       (a[4] >> 32) == (b[4] >> 32) &&
	       (a[5] & FT_TUPLE_MASK) == (b[5] & FT_TUPLE_MASK);
}

/* ft_tuple_eq tells whether flow key x has the 5-tuple of connection
 * key ck, GRE key 0. */
static __always_inline int ft_tuple_eq(const struct edge_flow_key *x,
				       const struct edge_conn_key *ck)
{
	const __u64 *a = (const __u64 *)x, *b = (const __u64 *)ck;
	__u64 ports = (__u64)ck->sport | (__u64)ck->dport << 16 |
		      (__u64)ck->proto << 32 | (__u64)ck->family << 48;

	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] &&
	       (a[4] >> 32) == 0 && (a[5] & FT_TUPLE_MASK) == ports;
}

/* ft_rec_from keeps what a recorded connection or reply f says in c->rec,
 * for the balancer to keep its backend (or reply rewrite). */
static __always_inline void ft_rec_from(struct edge_ctx *c,
					const struct edge_flow *f)
{
	c->rec.flags = f->flags;
	c->rec.svc = f->svc;
	c->rec.far = f->far;
	c->rec.far_id = f->far_id;
	c->rec.stats = f->stats;
}

/* ft_mark marks way w of bucket m used now, after its first packet. */
static __always_inline void ft_mark(struct edge_ft_bucket *m, __u32 w, __u16 now)
{
	w &= EDGE_FT_WAYS - 1;
	if (m->seen[w] != now)
		m->seen[w] = now;
	if (!m->hot[w])
		m->hot[w] = 1;
}

/* FT_TORN is what a read of a bucket another CPU was writing returns;
 * FT_TRIES is how many reads a packet makes of a bucket being written
 * before it gives up on it. A writer holds a bucket for a few tens of
 * nanoseconds, and each read that finds it held waits for the bucket's
 * line to come from the writer's CPU. */
#define FT_TORN (-2)
#define FT_TRIES 4

/* ft_read reads bucket m (c->ft_bucket) for c->p.key once: the way holding
 * it (its entry copied into c->nf, the bucket's version in c->ft_seq), -1,
 * or FT_TORN when the bucket was being written (nothing kept). Either way
 * but torn, a connection of the packet's 5-tuple found in the bucket (the
 * key's own stale entry first) is kept in c->rec. */
static __always_inline int ft_read(struct edge_ctx *c, struct edge_ft_bucket *m)
{
	struct edge_ft_way *e;
	__u32 i, seq, tag;
	int found = -1;

	seq = m->seq;
	if (seq & 1)
		return FT_TORN;
	FT_BARRIER();
	c->rec.flags = 0;
	tag = c->ft_tag;
#pragma unroll
	for (i = 0; i < EDGE_FT_WAYS; i++) {
		if (m->tag[i] != tag)
			continue;
		e = ft_way(c->ft_bucket, i);
		if (!e)
			continue;
		if (ft_key_eq(&e->k, &c->p.key)) {
			c->nf = e->f;
			found = i;
			break;
		}
		if ((e->f.flags & EDGE_FF_CONN) && !c->rec.flags &&
		    ft_same_tuple(&e->k, &c->p.key))
			ft_rec_from(c, &e->f);
	}
	FT_BARRIER();
	if (m->seq != seq) {
		c->rec.flags = 0;
		return FT_TORN;
	}
	c->ft_seq = seq;
	return found;
}

/* edge_ft_reread reads c->p.key's bucket again after a read that found it
 * being written, up to FT_TRIES times: a packet of an established
 * connection that took a miss for it would be balanced again, and could
 * go to another backend. A bucket held through every read (a writer
 * stopped while holding it: an agent killed in an upgrade's copy, until
 * the next agent frees it) is counted (EDGE_R_FLOW_LOCKED) and the packet
 * decided as a miss, not recorded (c->ft_seq stays odd). A global
 * function: the verifier explores its reads once, not in each inlined
 * copy of the lookup. */
__noinline int edge_ft_reread(struct edge_ctx *c)
{
	struct edge_ft_bucket *m;
	int i, r;

	if (!c)
		return -1;
	m = bpf_map_lookup_elem(&edge_ft_meta, &c->ft_bucket);
	if (!m)
		return -1;
	for (i = 0; i < FT_TRIES; i++) {
		r = ft_read(c, m);
		if (r != FT_TORN)
			return r;
	}
	c->rec.flags = 0;
	c->ft_seq = 1;
	count(&edge_reasons, EDGE_R_FLOW_LOCKED, c->p.len);
	return -1;
}

/* edge_ft_lookup looks c->p.key up in the flow table, placing it (ft_bucket,
 * ft_tag) and noting the bucket's version (ft_seq; 1, odd, when the bucket
 * could not be read: nothing is then recorded). It returns the way
 * holding the key (its entry copied into c->nf and marked used), or -1.
 * Either way a connection of the packet's 5-tuple found in the bucket
 * (the key's own stale entry first) is kept in c->rec. A bucket being
 * written is read again (edge_ft_reread). Inlined: as a global function
 * its call and return cost ~7.5 ns per miss here (the returns go through
 * SRSO's thunk), and the verifier took more instructions, not fewer. */
static __always_inline int edge_ft_lookup(struct edge_ctx *c)
{
	struct edge_ft_bucket *m;
	int found;

	if (!c)
		return -1;
	ft_place_key(c);
	c->rec.flags = 0;
	c->ft_way = -1;
	c->ft_seq = 1;
	m = bpf_map_lookup_elem(&edge_ft_meta, &c->ft_bucket);
	if (!m)
		return -1;
	found = ft_read(c, m);
	if (found == FT_TORN)
		found = edge_ft_reread(c);
	if (found < 0)
		return -1;
	c->ft_way = found;
	if (c->nf.flags & (EDGE_FF_CONN | EDGE_FF_REPLY))
		ft_rec_from(c, &c->nf);
	ft_mark(m, found, c->now);
	return found;
}

/* edge_ft_conn finds the connection to service svc whose 5-tuple is
 * c->lb.fk (any DSCP, ingress or path) and keeps it in c->rec: 1, or 0
 * when there is none. A bucket being written is read again, as
 * edge_ft_reread does: a reply taken for no connection's would not be
 * translated back. */
__noinline int edge_ft_conn(struct edge_ctx *c, __u32 svc)
{
	const struct edge_conn_key *k;
	struct edge_ft_bucket *m;
	struct edge_ft_way *e;
	const __u64 *w;
	__u32 i, b, seq, tag;
	int found, try;
	__u64 h;

	if (!c)
		return 0;
	k = &c->lb.fk;
	w = (const __u64 *)k;
	/* w[4]: sport, dport, proto, family (struct edge_conn_key) */
	h = sip_tuple(w[0], w[1], w[2], w[3], (__u32)w[4], (__u8)(w[4] >> 32),
		      (__u8)(w[4] >> 40));
	c->lb.fb = (__u32)h & (ft_buckets - 1);
	tag = (__u32)(h >> 32) | 1;
	m = bpf_map_lookup_elem(&edge_ft_meta, &c->lb.fb);
	if (!m)
		return 0;
	b = c->lb.fb;
	for (try = 0; try < FT_TRIES; try++) {
		c->rec.flags = 0;
		seq = m->seq;
		if (seq & 1)
			continue;
		FT_BARRIER();
		found = -1;
#pragma unroll
		for (i = 0; i < EDGE_FT_WAYS; i++) {
			if (m->tag[i] != tag || found >= 0)
				continue;
			e = ft_way(b, i);
			if (e && (e->f.flags & EDGE_FF_CONN) && e->f.svc == svc &&
			    ft_tuple_eq(&e->k, k))
				found = i;
		}
		if (found >= 0) {
			e = ft_way(b, found);
			if (e)
				ft_rec_from(c, &e->f);
		}
		FT_BARRIER();
		if (m->seq == seq)
			return c->rec.flags != 0;
	}
	c->rec.flags = 0;
	count(&edge_reasons, EDGE_R_FLOW_LOCKED, c->p.len);
	return 0;
}

/* edge_ft_use finds key k's entry, adds packets and bytes to it (an
 * exact-match copy's counts, as the copy is replaced) and marks it used
 * now, after its first packet; flags EDGE_FF_CLOSED also marks the
 * connection closed. Returns 1, or 0 when k has no entry. For an
 * exact-match hit once a tick, not per packet. */
__noinline int edge_ft_use(struct edge_ctx *c, const struct edge_flow_key *k,
			   __u64 packets, __u64 bytes, __u32 flags)
{
	struct edge_ft_bucket *m;
	struct edge_ft_way *e;
	__u32 i, b, tag;
	__u64 h;

	if (!c || !k)
		return 0;
	h = ft_hash(k);
	c->lb.fb = (__u32)h & (ft_buckets - 1);
	tag = (__u32)(h >> 32) | 1;
	m = bpf_map_lookup_elem(&edge_ft_meta, &c->lb.fb);
	b = c->lb.fb;
	if (!m)
		return 0;
#pragma unroll
	for (i = 0; i < EDGE_FT_WAYS; i++) {
		if (m->tag[i] != tag)
			continue;
		e = ft_way(b, i);
		if (!e || !ft_key_eq(&e->k, k))
			continue;
		if (packets) {
			__sync_fetch_and_add(&e->f.packets, packets);
			__sync_fetch_and_add(&e->f.bytes, bytes);
		}
		if (flags & EDGE_FF_CLOSED)
			e->f.flags |= EDGE_FF_CLOSED;
		ft_mark(m, i, c->now);
		return 1;
	}
	return 0;
}

/* edge_ft_use_at is edge_ft_use (flags 0) for k's entry last known at
 * index at - 1 of edge_ft (an exact-match copy's note; 0: none): taken
 * there, without hashing k, when the way is still in use and holds k
 * (another flow may have taken it since), else looked up. As
 * edge_ft_use, it reads without the bucket's lock: counts added as
 * the way is written over go with the flow it held. A global
 * function. */
__noinline int edge_ft_use_at(struct edge_ctx *c, const struct edge_flow_key *k,
			      __u32 at, __u64 packets, __u64 bytes)
{
	struct edge_ft_bucket *m;
	struct edge_ft_way *e;
	__u32 i, b;

	if (!c || !k)
		return 0;
	if (at) {
		i = at - 1;
		b = i / EDGE_FT_WAYS;
		e = bpf_map_lookup_elem(&edge_ft, &i);
		m = bpf_map_lookup_elem(&edge_ft_meta, &b);
		if (e && m && m->tag[i & (EDGE_FT_WAYS - 1)] && ft_key_eq(&e->k, k)) {
			if (packets) {
				__sync_fetch_and_add(&e->f.packets, packets);
				__sync_fetch_and_add(&e->f.bytes, bytes);
			}
			ft_mark(m, i, c->now);
			return 1;
		}
	}
	return edge_ft_use(c, k, packets, bytes, 0);
}

/* ft_victim picks the way of bucket m a new flow takes: an empty one,
 * else of those whose flow had one packet or has gone EDGE_FT_IDLE ticks
 * unused the least recently used (a one-packet flow before an idle one
 * of the same age); -1 when every way holds an active flow. Ties go to
 * the first from the bucket's cursor (m->next), which moves past each
 * way taken: within a tick the bucket evicts in the order it filled, so
 * two new flows sharing a bucket do not take each other's way while
 * older one-packet flows stay. */
static __always_inline int ft_victim(const struct edge_ft_bucket *m, __u16 now)
{
	int best = -1, score, top = -1;
	__u32 i, j;
	__u16 age;

#pragma unroll
	for (i = 0; i < EDGE_FT_WAYS; i++) {
		j = (m->next + i) & (EDGE_FT_WAYS - 1);
		if (!m->tag[j])
			return j;
		age = now - m->seen[j];
		if (m->hot[j] && age < EDGE_FT_IDLE)
			continue;
		score = 2 * (int)age + !m->hot[j];
		if (score > top) {
			top = score;
			best = j;
		}
	}
	return best;
}

/* edge_ft_insert writes c->nf as c->p.key's entry into the bucket the
 * lookup placed it in: over its stale entry when the lookup found one
 * (it keeps its standing), else into the way ft_victim picks. Not
 * recorded, and counted, when the bucket changed since the lookup or
 * holds only active flows. Returns the way, or -1. Inlined, as
 * edge_ft_lookup. */
static __always_inline int edge_ft_insert(struct edge_ctx *c)
{
	struct edge_ft_bucket *m;
	struct edge_ft_way *e;
	__u32 seq;
	__u16 now;
	int w;

	if (!c)
		return -1;
	seq = c->ft_seq;
	m = bpf_map_lookup_elem(&edge_ft_meta, &c->ft_bucket);
	if (!m || (seq & 1) || __sync_val_compare_and_swap(&m->seq, seq, seq + 1) != seq) {
		count(&edge_reasons, EDGE_R_FLOW_BUSY, 0);
		return -1;
	}
	now = c->now;
	w = c->ft_way;
	if (w < 0) {
		w = ft_victim(m, now);
		if (w < 0) {
			count(&edge_reasons, EDGE_R_FLOW_FULL, 0);
			FT_BARRIER();
			m->seq = seq + 2;
			return -1;
		}
		w &= EDGE_FT_WAYS - 1;
		if (m->tag[w])
			count(&edge_reasons, m->hot[w] ? EDGE_R_FLOW_EVICT_IDLE :
				      EDGE_R_FLOW_EVICT_COLD, 0);
		m->hot[w] = 0;
		m->next = (w + 1) & (EDGE_FT_WAYS - 1);
	}
	w &= EDGE_FT_WAYS - 1;
	e = ft_way(c->ft_bucket, w);
	if (e) {
		e->k = c->p.key;
		e->f = c->nf;
		m->tag[w] = c->ft_tag;
		m->seen[w] = now;
	}
	FT_BARRIER();
	m->seq = seq + 2;
	c->ft_seq = seq + 2;
	c->ft_way = e ? w : -1; /* for the exact-match copy (emc_fill) */
	return c->ft_way;
}

/* edge_ft_nexthop writes the next hop f holds back into c->p.key's entry
 * (way c->ft_way), unless the bucket is being written: a hit decides
 * from a copy (this CPU's exact-match slot, or c->nf), and a next hop
 * looked up again after a FIB change would otherwise be looked up again
 * by every copy made of the entry after it. */
__noinline int edge_ft_nexthop(struct edge_ctx *c, const struct edge_flow *f)
{
	struct edge_ft_bucket *m;
	struct edge_ft_way *e;
	__u32 seq;

	if (!c || !f || c->ft_way < 0)
		return 0;
	m = bpf_map_lookup_elem(&edge_ft_meta, &c->ft_bucket);
	if (!m)
		return 0;
	seq = m->seq;
	if ((seq & 1) || __sync_val_compare_and_swap(&m->seq, seq, seq + 1) != seq)
		return 0;
	e = ft_way(c->ft_bucket, c->ft_way);
	if (e && ft_key_eq(&e->k, &c->p.key)) {
		e->f.fib_epoch = f->fib_epoch;
		e->f.oif = f->oif;
		e->f.ok_len = f->ok_len;
		__builtin_memcpy(e->f.dmac, f->dmac, 6);
		__builtin_memcpy(e->f.smac, f->smac, 6);
	}
	FT_BARRIER();
	m->seq = seq + 2;
	return 0;
}

#endif
