/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* GTP-U (3GPP TS 29.281) on N3: what arrives at the user plane's GTP-U
 * address (edge_state.gtpu4, set by the agent when it serves N4) on UDP
 * 2152 is the user plane's, before any rule. An Echo Request is answered
 * here, at the driver hook, with an Echo Response carrying its sequence
 * number and the Recovery IE (send_back): a gNB's path check costs the
 * gateway no trip to the kernel. A G-PDU belongs to the session its
 * TEID names (edge_teid): its inner packet is detected by the session's
 * PDRs and goes where their FAR says (sess_act), decapsulated toward N6
 * by the FIB, or encapsulated again toward another GTP-U peer; one for
 * no session is dropped, counted. A packet from N6 to a UE a session
 * holds (edge_ue4) is detected by the session's downlink PDRs and
 * encapsulated toward its gNB (edge_gtpu_dl), or, when a multi-access
 * rule steers it, toward the gNB or the N3IWF it picks (ma_pick). An
 * Echo Response to the agent's latest Echo Request to a peer it tracks
 * is timed here (gtpu_echo_resp); End Markers go to the agent; other
 * Echo Responses, Error Indications and signalling are dropped,
 * counted; a header that is not GTP-U version 1 or whose length does not
 * fit the datagram is malformed (defaults.malformed). */
#ifndef EDGE_GTPU_H
#define EDGE_GTPU_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "csum.h"
#include "fib.h"
#include "flowtab.h"
#include "proto.h"
#include "too_big.h"
#include "verdict.h"

#define GTPU_PORT 2152

/* Message types (TS 29.281 6.1). */
#define GTPU_ECHO_REQUEST 1
#define GTPU_ECHO_RESPONSE 2
#define GTPU_GPDU 255
#define GTPU_END_MARKER 254

/* Extension headers (TS 29.281 5.2.1): the PDU Session Container of TS
 * 38.415 carries the QoS flow (QFI, 6 bits of its second octet, in
 * either direction's form). A G-PDU's chain is walked this far. */
#define GTPU_EXT_PDU_SESSION 0x85
#define GTPU_MAX_EXT 4
#define GTPU_E 0x04

/* What edge_gtpu and edge_gtpu_dl return for a packet too big for the
 * route to its GTP-U peer once encapsulated, untouched: the pipeline
 * answers it with ICMP (gtpu_too_big), the inner packet's largest size
 * in edge_ctx.gtpu_mtu. */
#define EDGE_GTPU_TOO_BIG (-2)
/* What edge_gtpu and edge_gtpu_dl return for a packet to encapsulate
 * toward an IPv6 peer (edge_gtpu_encap6 does, c->gtpu_mtu naming the
 * session's slot << 3 | the PDR's place). */
#define EDGE_GTPU_ENCAP6 (-3)

/* The flags octet: version 1, protocol type GTP; E, S and PN say the
 * sequence number, N-PDU number and next extension header octets
 * follow the mandatory header. */
#define GTPU_V1 0x20
#define GTPU_PT 0x10
#define GTPU_OPT 0x07
#define GTPU_S 0x02

/* The Recovery IE (TS 29.281 8.2): type 14, the restart counter, 0 in
 * GTP-U. */
#define GTPU_IE_RECOVERY 14

struct gtpu_hdr {
	__u8 flags;
	__u8 type;
	__be16 len; /* octets after the mandatory 8 */
	__be32 teid;
};

/* An Echo Response as the gateway sends it: the mandatory header, the
 * sequence number (S set), N-PDU number and next extension type, and
 * the Recovery IE. */
struct gtpu_echo {
	struct gtpu_hdr h;
	__be16 seq;
	__u8 npdu;
	__u8 next;
	__u8 ie;
	__u8 restart;
} __attribute__((packed));

/* ip4_csum_of is the header checksum of a 20-byte IPv4 header whose
 * check field is 0. */
static __always_inline __u16 ip4_csum_of(const struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u32 sum = 0;
	int i;

#pragma unroll
	for (i = 0; i < 10; i++)
		sum += w[i];
	return csum_fold(sum);
}

/* gtpu_for_us tells whether c->p is a datagram to one of the user
 * plane's GTP-U addresses (UDP 2152, IPv4 or IPv6, its L4 header in the
 * packet). */
static __always_inline int gtpu_for_us(const struct edge_ctx *c,
				       const struct edge_state *st)
{
	const struct edge_pkt *p = &c->p;
	const __u64 *a = (const __u64 *)p->key.dst, *g6 = (const __u64 *)st->gtpu6;

	if (p->key.family == 4)
		return st->gtpu4 && p->key.proto == IPPROTO_UDP &&
		       p->key.dport == bpf_htons(GTPU_PORT) && p->l4_off &&
		       *(const __be32 *)p->key.dst == st->gtpu4;
	return p->key.family == 6 && p->key.proto == IPPROTO_UDP &&
	       p->key.dport == bpf_htons(GTPU_PORT) && p->l4_off &&
	       (g6[0] | g6[1]) && a[0] == g6[0] && a[1] == g6[1];
}

/* gtpu_csum6 fills in the UDP checksum of the IPv6 datagram whose IPv6
 * header is at l3 and UDP header at l4, of ulen octets (IPv6 requires
 * one, RFC 8200 8.1): the pseudo-header's sum, then the datagram's. 0,
 * or -1 when the datagram does not lie in the frame. */
static __always_inline int gtpu_csum6(struct xdp_md *ctx, __u32 l3, __u32 l4,
				      __u32 ulen)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + (l3 & 0xff);
	struct udphdr *uh;
	__u32 sum = 0;
	__u64 s64;
	__u16 check;

	if ((void *)(ip6 + 1) > data_end)
		return -1;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&ip6->saddr, 32, 0);
	if (icmp_csum_pkt(ctx, l4, ulen, &sum))
		return -1;
	s64 = (__u64)sum + bpf_htonl(ulen) + bpf_htonl(IPPROTO_UDP);
	s64 = (s64 & 0xffffffff) + (s64 >> 32);
	s64 = (s64 & 0xffffffff) + (s64 >> 32);
	check = csum_fold((__u32)s64);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	uh = data + (l4 & 0xff);
	if ((void *)(uh + 1) > data_end)
		return -1;
	/* 0 means none, which IPv6 does not allow: sent as all ones. */
	uh->check = check ? check : 0xffff;
	return 0;
}

/* An Error Indication as the gateway sends it (TS 29.281 7.3.1): the
 * mandatory header (TEID 0), the sequence number, the Tunnel Endpoint
 * Identifier Data I IE with the TEID no session has, and the GTP-U Peer
 * Address IE with the user plane's address. */
struct gtpu_err_ind {
	struct gtpu_hdr h;
	__be16 seq;
	__u8 npdu;
	__u8 next;
	__u8 ie_teid;
	__be32 teid;
	__u8 ie_peer;
	__be16 peer_len;
	__u8 peer[16]; /* IPv4: the first 4 octets, the answer cut after them */
} __attribute__((packed));

#define GTPU_ERROR_IND 26
#define GTPU_IE_TEID_DATA_I 16
#define GTPU_IE_PEER_ADDR 133

/* gtpu_answer turns the GTP-U frame in ctx (its IPv4 header, without
 * options, at l3, its UDP header at l4) into an answer of glen octets
 * of GTP-U back to its sender's port dport, from port 2152: the frame
 * cut to size, MACs and addresses swapped, the IPv4 and UDP headers
 * written. Returns the GTP-U octets to fill in (the caller checks its
 * glen of them lie in the frame), NULL when it cannot (the frame may be
 * cut short: drop it). Answers are a reflection vector
 * (a forged source), so each takes from the error budget XDP's ICMP
 * answers share (icmp_allowed): *reason says why not. */
static __always_inline void *gtpu_answer(struct xdp_md *ctx,
					 const struct edge_pkt *p, __u32 l3,
					 __u32 l4, __u32 glen, __be16 dport,
					 int *reason)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *iph;
	struct ipv6hdr *ip6;
	struct udphdr *uh;
	int delta;

	if (!icmp_allowed(p, reason))
		return NULL;
	*reason = EDGE_R_ADJUST;
	delta = (int)(l4 + sizeof(*uh) + glen) - (int)((long)ctx->data_end - (long)ctx->data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return NULL;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	iph = data + l3;
	ip6 = data + l3;
	uh = data + l4;
	if ((void *)(eth + 1) > data_end || (void *)(iph + 1) > data_end ||
	    (void *)(uh + 1) > data_end)
		return NULL;
	if (p->key.family == 6) {
		/* The checksum, which IPv6 requires, is the caller's
		 * (gtpu_csum6), once the answer is written. */
		if ((void *)(ip6 + 1) > data_end)
			return NULL;
		reflect6(eth, ip6);
		ip6->priority = 0;
		ip6->flow_lbl[0] = 0;
		ip6->flow_lbl[1] = 0;
		ip6->flow_lbl[2] = 0;
		ip6->payload_len = bpf_htons(sizeof(*uh) + glen);
		ip6->nexthdr = IPPROTO_UDP;
		ip6->hop_limit = 64;
		uh->source = bpf_htons(GTPU_PORT);
		uh->dest = dport;
		uh->len = bpf_htons(sizeof(*uh) + glen);
		uh->check = 0;
		return uh + 1;
	}
	/* Back where it came from: the addresses swap. */
	reflect4(eth, iph);
	iph->tos = 0;
	iph->tot_len = bpf_htons(sizeof(*iph) + sizeof(*uh) + glen);
	iph->id = 0;
	iph->frag_off = IP4_DF;
	iph->ttl = 64;
	iph->check = 0;
	iph->check = ip4_csum_of(iph);
	uh->source = bpf_htons(GTPU_PORT);
	uh->dest = dport;
	uh->len = bpf_htons(sizeof(*uh) + glen);
	uh->check = 0; /* none, as IPv4 allows */
	return uh + 1;
}

/* gtpu_echo answers an Echo Request with its Echo Response (send_back). */
static __always_inline int gtpu_echo(struct xdp_md *ctx,
				     const struct edge_pkt *p, __u32 l3,
				     __u32 l4, __be16 seq)
{
	const struct udphdr *uh = (void *)(long)ctx->data + l4;
	struct gtpu_echo *e;
	int reason;

	if ((void *)(uh + 1) > (void *)(long)ctx->data_end)
		return punt(p, EDGE_R_BAD_GTPU, XDP_DROP);
	e = gtpu_answer(ctx, p, l3, l4, sizeof(*e), uh->source, &reason);
	if (!e)
		return punt(p, reason, XDP_DROP);
	if ((void *)(e + 1) > (void *)(long)ctx->data_end)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	e->h.flags = GTPU_V1 | GTPU_PT | GTPU_S;
	e->h.type = GTPU_ECHO_RESPONSE;
	e->h.len = bpf_htons(sizeof(*e) - sizeof(e->h));
	e->h.teid = 0;
	e->seq = seq;
	e->npdu = 0;
	e->next = 0;
	e->ie = GTPU_IE_RECOVERY;
	e->restart = 0;
	if (p->key.family == 6 && gtpu_csum6(ctx, l3, l4, sizeof(struct udphdr) + sizeof(*e)))
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	return punt(p, EDGE_R_GTPU_ECHO, send_back(p));
}

/* gtpu_unknown answers a G-PDU to TEID teid, which no session has, with
 * an Error Indication to the sender's port 2152 (send_back), so the gNB
 * tears the tunnel down; over the budget, dropped. */
static __always_inline int gtpu_unknown(struct xdp_md *ctx,
					const struct edge_pkt *p, __u32 l3,
					__u32 l4, __be32 teid,
					const struct edge_state *st)
{
	struct gtpu_err_ind *e;
	__u32 glen = sizeof(*e);
	int reason, v6 = p->key.family == 6;

	if (!v6)
		glen -= 12;
	e = gtpu_answer(ctx, p, l3, l4, glen, bpf_htons(GTPU_PORT), &reason);
	/* What both families write: all but the IPv6 address's last 12
	 * octets. */
	if (e && (void *)e + sizeof(*e) - 12 > (void *)(long)ctx->data_end) {
		e = NULL;
		reason = EDGE_R_ADJUST;
	}
	if (!e) {
		count(&edge_reasons, reason, p->len);
		return punt(p, EDGE_R_GTPU_NO_SESSION, XDP_DROP);
	}
	e->h.flags = GTPU_V1 | GTPU_PT | GTPU_S;
	e->h.type = GTPU_ERROR_IND;
	e->h.len = bpf_htons(glen - sizeof(e->h));
	e->h.teid = 0;
	e->seq = 0;
	e->npdu = 0;
	e->next = 0;
	e->ie_teid = GTPU_IE_TEID_DATA_I;
	e->teid = teid;
	e->ie_peer = GTPU_IE_PEER_ADDR;
	if (v6) {
		if ((void *)(e + 1) > (void *)(long)ctx->data_end) {
			count(&edge_reasons, EDGE_R_ADJUST, p->len);
			return punt(p, EDGE_R_GTPU_NO_SESSION, XDP_DROP);
		}
		e->peer_len = bpf_htons(16);
		__builtin_memcpy(e->peer, st->gtpu6, 16);
		if (gtpu_csum6(ctx, l3, l4, sizeof(struct udphdr) + glen)) {
			count(&edge_reasons, EDGE_R_ADJUST, p->len);
			return punt(p, EDGE_R_GTPU_NO_SESSION, XDP_DROP);
		}
	} else {
		e->peer_len = bpf_htons(4);
		*(__be32 *)e->peer = st->gtpu4;
	}
	return punt(p, EDGE_R_GTPU_ERROR_IND, send_back(p));
}

/* The slot bits of a TEID the user plane chose (the power of two at or
 * above limits.sessions, less one), set by the agent before load. */
volatile const __u32 sess_mask = 1023;

/* ue_bit is the bit of edge_ue_bits for IPv4 address a (the agent
 * computes the same: commit.UEBit). */
static __always_inline __u32 ue_bit(__be32 a)
{
	return (__u32)(((__u64)a * 0x9e3779b97f4a7c15ull) >> 44) & (EDGE_UE_BITS - 1);
}

/* ue6_key is what stands for IPv6 /64 prefix x in edge_ue_bits (the
 * agent computes the same: commit.UEBit of an IPv6 address). */
static __always_inline __be32 ue6_key(__u64 x)
{
	return (__be32)(x ^ x >> 32) ^ 0x5bd1e995;
}

/* ue_maybe tells whether a UE may have address a (an IPv6 prefix's:
 * ue6_key): its bit is set. */
static __always_inline int ue_maybe(__be32 a)
{
	__u32 b = ue_bit(a), w = b >> 6;
	__u64 *v = bpf_map_lookup_elem(&edge_ue_bits, &w);

	return v && (*v >> (b & 63) & 1);
}

/* sess_copy returns record copy i of edge_sessions (slot i >> 1) when a
 * session holds that slot (NULL: none): a direct entry names the copy
 * its flip made live, so the downlink reads no live word. The copy it
 * names may be the one just retired, which stays whole until a grace
 * period after the entry moved on. */
static __always_inline const struct edge_sess *sess_copy(__u32 i)
{
	const struct edge_sess *s = bpf_map_lookup_elem(&edge_sessions, &i);

	return s && s->id == (i >> 1) + 1 ? s : NULL;
}

/* sess_get returns the live record of the session in slot (NULL:
 * none): the copy its live word names. */
static __always_inline const struct edge_sess *sess_get(__u32 slot)
{
	__u32 *live = bpf_map_lookup_elem(&edge_sess_live, &slot);

	return live ? sess_copy(slot * 2 + (*live & 1)) : NULL;
}

/* pdr_detects tells whether PDR r detects the packet described by sp. */
static __always_inline int pdr_detects(const struct edge_sess_pdr *r,
				       const struct edge_sess_pkt *sp)
{
	if ((r->flags & EDGE_SP_UL) != sp->ul)
		return 0;
	if (sp->ul && r->teid != sp->teid)
		return 0;
	/* A PDR with UE addresses detects a packet of either family its
	 * address matches. */
	if ((r->flags & (EDGE_SP_UEIP | EDGE_SP_UE6)) &&
	    (sp->v6 ? !(r->flags & EDGE_SP_UE6) || (__u32)r->ue6 != sp->ue6[0] ||
			  (__u32)(r->ue6 >> 32) != sp->ue6[1]
		    : !(r->flags & EDGE_SP_UEIP) || r->ueip != sp->ueip))
		return 0;
	if ((r->flags & EDGE_SP_QFI) && r->qfi != sp->qfi)
		return 0;
	if (r->flags & EDGE_SP_MATCH)
		return 1;
	/* SDF remote addresses are IPv4: an IPv6 packet (remote: its
	 * prefix's second half) only meets a filter whose remote is any. */
	if (sp->v6 && r->rmask)
		return 0;
	return (!r->proto || r->proto == sp->proto) &&
	       (sp->v6 || (sp->remote & r->rmask) == r->remote) &&
	       sp->rport >= r->rport_lo && sp->rport <= r->rport_hi &&
	       sp->lport >= r->lport_lo && sp->lport <= r->lport_hi;
}

/* gtpu_gpdu writes the 16 octets of a G-PDU's GTP-U header at g for an
 * inner packet of len3 octets, as PDR r says: flags (version 1, GTP,
 * E), G-PDU, the length after the mandatory 8 octets, the TEID;
 * sequence 0, N-PDU 0, next: the PDU Session Container (one 4-octet
 * unit: DL PDU type 0, the QFI, no next). */
static __always_inline void gtpu_gpdu(__be32 *g, __u32 len3,
				      const struct edge_sess_pdr *r)
{
	g[0] = bpf_htonl((GTPU_V1 | GTPU_PT | GTPU_E) << 24 | GTPU_GPDU << 16 |
			 ((len3 + 8) & 0xffff));
	g[1] = r->ohc_teid;
	g[2] = bpf_htonl(GTPU_EXT_PDU_SESSION);
	g[3] = bpf_htonl(1 << 24 | (__u32)(r->qfi & 0x3f) << 8);
}

/* gtpu_encap puts the IP packet of c->p (behind an Ethernet header)
 * into GTP-U/UDP/IPv4 (or IPv6, toward the session s's peer r->ohc6
 * names) from the user plane's address toward r's peer and TEID, with
 * a PDU Session Container naming r's QFI (downlink form), and sends it
 * to the next hop the FIB gives the peer. The inner packet is routed
 * one hop. Too big for the route: the ICMP answer, as GRE's encap
 * gives. */
static __always_inline int gtpu_encap(struct xdp_md *ctx, struct edge_ctx *c,
				      const struct edge_state *st,
				      const struct edge_sess *s,
				      const struct edge_sess_pdr *r, const int v6)
{
	/* v6, a constant in each caller's copy, leaves the IPv4 copy
	 * without a branch of the IPv6 one. */
	const __u8 *peer6 = v6 ? s->peer6[(r->ohc6 - 1) & (EDGE_SESS_PEERS6 - 1)] : NULL;
	const __u32 hlen = (peer6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr)) +
			   sizeof(struct udphdr) + 16;
	struct edge_pkt *p = &c->p;
	struct edge_flow *fl = &c->nf;
	struct bpf_fib_lookup *fib = &c->fib;
	void *data_end;
	struct iphdr *iph = NULL, *outer;
	struct ipv6hdr *ip6 = NULL, *o6;
	struct udphdr *uh;
	struct edge_nh *nh;
	__u32 len3 = p->l3_len, olen, mtu = 0;
	__u8 family = p->key.family, tos;
	__be32 *g;
	__u64 *key = c->nhkey;
	void *l3;
	int reason;

	reason = XDP_DROP;
	l3 = hop_check(ctx, p, family, &reason);
	/* Opaque to clang: it would otherwise fold the test into what it
	 * knows of hop_check's paths, and the verifier, which does not know
	 * a packet pointer is never NULL, would follow a return of no
	 * verdict. */
	asm volatile("" : "+r"(l3));
	if (!l3)
		return reason;
	if (family == 4) {
		iph = l3;
		tos = iph->tos;
	} else {
		ip6 = l3;
		tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	}
	hide_choice(iph, ip6);
	if (r->flags & EDGE_SP_TOS)
		tos = r->tos;
	olen = hlen + len3;
	/* The peer's next hop: shared by every packet to it (edge_dst_nh),
	 * or the FIB's. */
	fl->fib_epoch = 0;
	if (peer6) {
		__builtin_memcpy(key, peer6, 16);
		key[2] = p->key.ifindex | 6ull << 32;
		nh = dst_nh_slot(key);
	} else {
		nh = dst_nh4(r->ohc_addr, p->key.ifindex, key);
	}
	if (!nh_take(nh, key, 0, st->fib_epoch, olen, fl)) {
		__builtin_memset(fib, 0, sizeof(*fib));
		fib->l4_protocol = IPPROTO_UDP;
		fib->sport = bpf_htons(GTPU_PORT);
		fib->dport = bpf_htons(GTPU_PORT);
		fib->tot_len = olen;
		if (peer6) {
			fib->family = AF_INET6;
			__builtin_memcpy(fib->ipv6_src, st->gtpu6, 16);
			__builtin_memcpy(fib->ipv6_dst, peer6, 16);
		} else {
			fib->family = AF_INET;
			fib->tos = tos;
			fib->ipv4_src = st->gtpu4;
			fib->ipv4_dst = r->ohc_addr;
		}
		reason = fib_resolve(ctx, fib, 0, p->key.ifindex, fl,
				     st->fib_epoch, &mtu);
		if (reason == EDGE_R_FRAG_NEEDED) {
			/* The pipeline answers (gtpu_too_big): its stack
			 * and the ICMP stage's leave no room for this
			 * function's between them. */
			c->gtpu_mtu = mtu > hlen ? mtu - hlen : 0;
			return EDGE_GTPU_TOO_BIG;
		}
		/* Sent unencapsulated, the packet would leave in the clear:
		 * dropped, counted. */
		if (reason)
			return punt(p, reason, XDP_DROP);
		if (nh)
			nh_keep(nh, key, 0, st->fib_epoch, fl);
	}
	outer = encap_push(ctx, p, iph, ip6, fl, hlen);
	if (!outer)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	data_end = (void *)(long)ctx->data_end;
	if (peer6) {
		o6 = (void *)outer;
		uh = (void *)(o6 + 1);
		g = (void *)(uh + 1);
		if ((void *)(g + 4) > data_end)
			return punt(p, EDGE_R_ADJUST, XDP_DROP);
		((struct ethhdr *)o6 - 1)->h_proto = bpf_htons(ETH_P_IPV6);
		*(__be32 *)o6 = bpf_htonl(6 << 28 | (__u32)tos << 20);
		o6->payload_len = bpf_htons(olen - sizeof(*o6));
		o6->nexthdr = IPPROTO_UDP;
		o6->hop_limit = 64;
		__builtin_memcpy(&o6->saddr, st->gtpu6, 16);
		__builtin_memcpy(&o6->daddr, peer6, 16);
		uh->source = bpf_htons(GTPU_PORT);
		uh->dest = bpf_htons(GTPU_PORT);
		uh->len = o6->payload_len;
		uh->check = 0;
		gtpu_gpdu(g, len3, r);
		/* IPv6 requires the checksum (RFC 8200 8.1), over the
		 * whole datagram. */
		if (gtpu_csum6(ctx, sizeof(struct ethhdr), sizeof(struct ethhdr) + sizeof(*o6),
			       olen - sizeof(*o6)))
			return punt(p, EDGE_R_ADJUST, XDP_DROP);
		if (bpf_redirect_map(&edge_tx, fl->oif, XDP_ABORTED) != XDP_REDIRECT)
			return punt(p, EDGE_R_NO_TX, XDP_DROP);
		return verdict(p, XDP_REDIRECT);
	}
	uh = (void *)(outer + 1);
	g = (void *)(uh + 1);
	if ((void *)(g + 4) > data_end)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	outer->version = 4;
	outer->ihl = 5;
	outer->tos = tos;
	outer->tot_len = bpf_htons(olen);
	outer->id = 0;
	outer->frag_off = IP4_DF;
	outer->ttl = 64;
	outer->protocol = IPPROTO_UDP;
	outer->check = 0;
	outer->saddr = st->gtpu4;
	outer->daddr = r->ohc_addr;
	outer->check = ip4_csum_of(outer);
	uh->source = bpf_htons(GTPU_PORT);
	uh->dest = bpf_htons(GTPU_PORT);
	uh->len = bpf_htons(olen - sizeof(struct iphdr));
	uh->check = 0; /* none, as IPv4 allows (TS 29.281 4.4.2.0) */
	gtpu_gpdu(g, len3, r);
	if (bpf_redirect_map(&edge_tx, fl->oif, XDP_ABORTED) != XDP_REDIRECT)
		return punt(p, EDGE_R_NO_TX, XDP_DROP);
	return verdict(p, XDP_REDIRECT);
}

/* gtpu_buffer hands the frame to the agent (edge_buff) as a record of
 * kind (EDGE_BUFF_*) with slot and cnt: dropped here, counted done; no
 * room in the ring (or too long a frame): dropped, counted. A packet of
 * session slot to hold, detected by the PDR of counter cnt; an End
 * Marker, slot its TEID. */
static __always_inline int gtpu_buffer(struct xdp_md *ctx,
				       const struct edge_pkt *p, __u32 slot,
				       __u8 cnt, __u8 kind, int done)
{
	struct edge_buff_rec *b;
	__u32 len = (__u32)(ctx->data_end - ctx->data);

	if (len > EDGE_BUFF_FRAME || len < sizeof(struct ethhdr))
		return punt(p, EDGE_R_GTPU_BUFF_FULL, XDP_DROP);
	b = bpf_ringbuf_reserve(&edge_buff, sizeof(*b), 0);
	if (!b)
		return punt(p, EDGE_R_GTPU_BUFF_FULL, XDP_DROP);
	b->slot = slot;
	b->ifindex = ctx->ingress_ifindex;
	b->len = len;
	b->cnt = cnt;
	b->kind = kind;
	b->pad2 = 0;
	/* Bounded where the verifier sees it: 1..2047, and no more than
	 * the record holds (checked above). */
	asm volatile("%0 &= 0x7ff" : "+r"(len));
	if (len < sizeof(struct ethhdr) || len > EDGE_BUFF_FRAME ||
	    bpf_xdp_load_bytes(ctx, 0, b->frame, len)) {
		bpf_ringbuf_discard(b, 0);
		return punt(p, EDGE_R_GTPU_BUFF_FULL, XDP_DROP);
	}
	bpf_ringbuf_submit(b, 0);
	return punt(p, done, XDP_DROP);
}

/* gtpu_end_marker hands an End Marker to TEID teid (TS 29.281 7.3.2: the
 * last packet of a path being switched away) to the agent. Anyone can
 * send one (a forged source): each takes from the error budget the
 * answers share, so a flood costs the agent bounded work. */
static __always_inline int gtpu_end_marker(struct xdp_md *ctx,
					   const struct edge_pkt *p, __be32 teid)
{
	int reason;

	if (!icmp_allowed(p, &reason))
		return punt(p, reason, XDP_DROP);
	return gtpu_buffer(ctx, p, teid, 0, EDGE_BUFF_END_MARKER,
			   EDGE_R_GTPU_END_MARKER);
}

/* gtpu_echo_resp times an Echo Response (its sequence number seq) from
 * a peer the agent probes, when it answers the agent's latest request:
 * the peer's echo_ns and echo_seq, from which the agent tells its
 * liveness and RTT. The sequence number names the peer's place; an
 * answer from another address than the peer's, to an older request, or
 * a second one, is dropped as other signalling, timing nothing. */
static __always_inline int gtpu_echo_resp(struct edge_pkt *p, __be16 seq)
{
	__u32 s = bpf_ntohs(seq), i = s >> EDGE_GTPU_SEQ_ROUND;
	struct edge_gtpu_peer *e;

	e = bpf_map_lookup_elem(&edge_gtpu_peers, &i);
	if (!e || p->key.family != 4 || !e->addr || e->addr != *(const __be32 *)p->key.src ||
	    e->want_seq != s || e->echo_seq == s)
		return punt(p, EDGE_R_GTPU_SIGNAL, XDP_DROP);
	e->echo_ns = bpf_ktime_get_ns();
	e->echo_seq = s;
	return punt(p, EDGE_R_GTPU_ECHO_RESP, XDP_DROP);
}

/* mbr_over tells whether a packet of len bytes is over the maximum bit
 * rate of meter m (1-based) of slot, taking its tokens if not. */
static __always_inline int mbr_over(__u32 slot, __u8 m, __u32 len)
{
	__u32 k = slot * EDGE_SESS_PDRS + ((m - 1) & (EDGE_SESS_PDRS - 1));
	struct edge_mbr *b = bpf_map_lookup_elem(&edge_sess_mbr, &k);
	__u64 now, el, tok, need = (__u64)len * 1000000000ull;
	int over;

	if (!b || !b->rate)
		return 0;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&b->lock);
	el = now - b->last;
	if ((__s64)el < 0)
		el = 0;
	/* A bucket idle for a second is full whatever its rate: the
	 * product stays far from overflow (rate < 2^34 bytes a second). */
	if (el > 1000000000ull)
		el = 1000000000ull;
	tok = b->tokens + el * b->rate;
	if (tok > b->burst)
		tok = b->burst;
	over = tok < need;
	if (!over)
		tok -= need;
	b->tokens = tok;
	b->last = now;
	bpf_spin_unlock(&b->lock);
	return over;
}

/* ma_peer is the state of access peer i (edge_gtpu_peers index + 1;
 * NULL: not tracked). */
static __always_inline const struct edge_gtpu_peer *ma_peer(__u16 i)
{
	__u32 k = i - 1;

	return i ? bpf_map_lookup_elem(&edge_gtpu_peers, &k) : NULL;
}

/* ma_flow_hash mixes the 5-tuple of flow key k (murmur3's finalizer
 * over the words): which access a flow takes under load balancing.
 * Not keyed: it places nothing another flow needs (no table to aim at),
 * and a sender choosing its ports only chooses its own flow's access. */
static __always_inline __u32 ma_flow_hash(const struct edge_flow_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u32 h;

	/* src, dst (IPv4 in the first word of each, IPv6 in all four),
	 * the ports, the protocol (struct edge_flow_key's words). */
	h = w[0] ^ w[1] * 0x9e3779b1u ^ w[2] * 0x85ebca77u ^ w[3] * 0xc2b2ae3du;
	h ^= w[4] * 0x27d4eb2fu ^ w[5] * 0x165667b1u ^ w[6] * 0x9e3779b1u ^ w[7] * 0x85ebca6bu;
	h ^= w[10] * 0xc2b2ae35u ^ (w[11] & 0xff) * 0x27d4eb2fu;
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* edge_ma_pick tells which access multi-access rule m sends c->p over:
 * 0 the first (3GPP), 1 the second. Active-standby and priority-based:
 * the preferred one; smallest delay: the one whose peer answers echoes
 * sooner (the preferred one until both have an RTT); load balancing:
 * by the flow's hash against the first access's weight, so a flow keeps
 * its access while the weights do. Whatever the mode, an access whose
 * peer stopped answering gives way to the other while that one answers.
 * A global function: the sessions' code around it stays as it was. */
static __always_inline int edge_ma_pick(struct edge_ctx *c, const struct edge_sess_ma *m)
{
	const struct edge_gtpu_peer *a, *b;
	int pick, down1, down2;

	a = ma_peer(m->peer1);
	b = ma_peer(m->peer2);
	pick = (m->mode & EDGE_MA_PREFER2) ? 1 : 0;
	down1 = a && a->down;
	down2 = b && b->down;

	switch (m->mode & EDGE_MA_MODE) {
	case EDGE_MA_SMALLEST_DELAY:
		if (a && b && a->rtt_us && b->rtt_us && a->rtt_us != b->rtt_us)
			pick = b->rtt_us < a->rtt_us;
		break;
	case EDGE_MA_LOAD_BALANCING:
		pick = ma_flow_hash(&c->p.key) % 100 >= m->weight1;
		break;
	}
	if (pick ? down2 && !down1 : down1 && !down2)
		pick = !pick;
	return pick;
}

/* sess_act carries out what session s (in slot) does with the packet sp
 * describes, c->p: the first PDR by precedence that detects it, its
 * QER's gate, its counters, its FAR (drop; buffer; forward: by the FIB,
 * encapsulated when it creates an outer header). An uplink packet comes
 * decapsulated. */
static __always_inline int sess_act(struct xdp_md *ctx, struct edge_ctx *c,
				    const struct edge_state *st,
				    const struct edge_sess *s, __u32 slot,
				    const struct edge_sess_pkt *sp, const int dl)
{
	const struct edge_sess_pdr *r = NULL;
	struct edge_pkt *p = &c->p;
	__u32 i, n = s->npdr, ci;

	for (i = 0; i < EDGE_SESS_PDRS; i++) {
		if (i >= n)
			break;
		if (pdr_detects(&s->pdr[i], sp)) {
			r = &s->pdr[i];
			break;
		}
	}
	if (!r)
		return punt(p, EDGE_R_GTPU_NO_PDR, XDP_DROP);
	if (r->gate)
		return punt(p, EDGE_R_GTPU_GATE, XDP_DROP);
	if (r->meter && mbr_over(slot, r->meter, p->l3_len))
		return punt(p, EDGE_R_GTPU_MBR, XDP_DROP);
	ci = slot * EDGE_SESS_PDRS + (r->cnt & (EDGE_SESS_PDRS - 1));
	count(&edge_sess_stats, ci, p->l3_len);
	switch (r->action) {
	case EDGE_SA_FORW:
		break;
	case EDGE_SA_BUFF:
		return gtpu_buffer(ctx, p, slot, r->cnt, EDGE_BUFF_PACKET,
				   EDGE_R_GTPU_BUFFER);
	default:
		return punt(p, EDGE_R_GTPU_FAR_DROP, XDP_DROP);
	}
	if (dl && r->ma) {
		/* Steered: over the second access, the PDR as its FAR
		 * makes it (never toward an IPv6 peer). */
		const struct edge_sess_ma *m = &s->ma[(r->ma - 1) & (EDGE_SESS_MAS - 1)];

		if (edge_ma_pick(c, m))
			r = &m->alt;
	}
	if ((r->flags & EDGE_SP_OHC) && r->ohc6) {
		/* Toward an IPv6 peer: the pipeline calls edge_gtpu_encap6,
		 * so neither this function's code nor its stack grows. */
		c->gtpu_mtu = slot << 3 | (i & (EDGE_SESS_PDRS - 1));
		return EDGE_GTPU_ENCAP6;
	}
	if (r->flags & EDGE_SP_OHC)
		return gtpu_encap(ctx, c, st, s, r, 0);
	c->nf.fib_epoch = 0;
	return edge_redirect(ctx, p, 0, &c->nf, st->fib_epoch);
}

/* gtpu_inner reads the G-PDU's inner packet, at off in the frame, into
 * c->p and sp: an IPv4 or IPv6 header that fits what the GTP-U header
 * says follows, and its ports when the packet has them. 0, or the
 * reason it cannot be read. */
static __always_inline int gtpu_inner(struct xdp_md *ctx, struct edge_ctx *c,
				      __u32 off, __u32 end,
				      struct edge_sess_pkt *sp)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct edge_pkt *p = &c->p;
	const struct iphdr *iph = data + off;
	const struct ipv6hdr *ip6 = data + off;
	const __be16 *ports;
	__u32 l4 = 0, len3, ver;

	if ((void *)(ip6 + 1) > data_end && (void *)(iph + 1) > data_end)
		return EDGE_R_GTPU_INNER;
	if ((void *)(iph + 1) > data_end)
		return EDGE_R_GTPU_INNER;
	ver = iph->version;
	__builtin_memset(&p->key, 0, sizeof(p->key));
	p->key.ifindex = ctx->ingress_ifindex;
	if (ver == 4) {
		len3 = bpf_ntohs(iph->tot_len);
		if (iph->ihl < 5 || len3 < (__u32)iph->ihl * 4 || off + len3 > end)
			return EDGE_R_GTPU_INNER;
		p->key.family = 4;
		p->key.proto = iph->protocol;
		*(__be32 *)p->key.src = iph->saddr;
		*(__be32 *)p->key.dst = iph->daddr;
		if (!(iph->frag_off & bpf_htons(0x1fff)))
			l4 = off + (__u32)iph->ihl * 4;
	} else if (ver == 6) {
		if ((void *)(ip6 + 1) > data_end)
			return EDGE_R_GTPU_INNER;
		len3 = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		if (off + len3 > end)
			return EDGE_R_GTPU_INNER;
		p->key.family = 6;
		p->key.proto = ip6->nexthdr;
		__builtin_memcpy(p->key.src, &ip6->saddr, 16);
		__builtin_memcpy(p->key.dst, &ip6->daddr, 16);
		l4 = off + sizeof(*ip6);
	} else {
		return EDGE_R_GTPU_INNER;
	}
	p->l3_len = len3;
	sp->proto = p->key.proto;
	sp->v6 = ver == 6;
	if (sp->v6) {
		sp->ue6[0] = *(const __u32 *)p->key.src;
		sp->ue6[1] = *(const __u32 *)(p->key.src + 4);
	} else {
		sp->ueip = *(const __be32 *)p->key.src;
		sp->remote = *(const __be32 *)p->key.dst;
	}
	sp->rport = 0;
	sp->lport = 0;
	l4 &= 0x3ff;
	ports = data + l4;
	if (l4 && (p->key.proto == IPPROTO_TCP || p->key.proto == IPPROTO_UDP) &&
	    (void *)(ports + 2) <= data_end) {
		p->key.sport = ports[0];
		p->key.dport = ports[1];
		sp->lport = bpf_ntohs(ports[0]);
		sp->rport = bpf_ntohs(ports[1]);
	}
	return 0;
}

/* gtpu_uplink decides a G-PDU (its UDP header at l4, glen octets after
 * the mandatory GTP-U header, checked to lie in the datagram): the
 * session its TEID names, its QFI from a PDU Session Container, its
 * inner packet detected by the session's uplink PDRs; forwarded
 * decapsulated (outer header removal) as the FAR says. */
static __always_inline int gtpu_uplink(struct xdp_md *ctx, struct edge_ctx *c,
				       const struct edge_state *st, __u32 l4,
				       __u32 glen)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct edge_pkt *p = &c->p;
	const struct gtpu_hdr *g = data + l4 + sizeof(struct udphdr);
	const struct edge_sess *s;
	const __u8 *x;
	struct edge_sess_pkt *sp = &c->sp;
	struct ethhdr *eth;
	__u32 *slot, off, end, i, len, guess;
	__u8 next = 0;
	int reason;

	if ((void *)(g + 1) > data_end)
		return punt(p, EDGE_R_BAD_GTPU, XDP_DROP);
	sp->ul = EDGE_SP_UL;
	sp->qfi = 0;
	sp->teid = g->teid;
	/* A TEID the user plane chose names its session's slot; another
	 * (the SMF's) is looked up. */
	guess = bpf_ntohl(sp->teid) & sess_mask;
	s = sess_get(guess);
	if (s && s->own == sp->teid) {
		slot = &guess;
	} else {
		slot = bpf_map_lookup_elem(&edge_teid, &sp->teid);
		s = slot ? sess_get(*slot) : NULL;
	}
	if (!s)
		return gtpu_unknown(ctx, p, p->l3_off & 0x7f, l4, sp->teid, st);
	off = l4 + sizeof(struct udphdr) + sizeof(*g);
	end = off + glen;
	if (g->flags & GTPU_OPT) {
		x = data + (off & 0x1ff);
		if ((void *)(x + 4) > data_end)
			return punt(p, EDGE_R_BAD_GTPU, XDP_DROP);
		if (g->flags & GTPU_E)
			next = x[3];
		off += 4;
	}
	/* The extension header chain: each a length in 4-octet units, its
	 * content, the next one's type. */
	for (i = 0; i < GTPU_MAX_EXT; i++) {
		if (!next)
			break;
		x = data + (off & 0x1ff);
		if ((void *)(x + 4) > data_end)
			return punt(p, EDGE_R_BAD_GTPU, XDP_DROP);
		len = (__u32)x[0] * 4;
		if (!len || off + len > end)
			return punt(p, EDGE_R_BAD_GTPU, XDP_DROP);
		if (next == GTPU_EXT_PDU_SESSION)
			sp->qfi = x[2] & 0x3f;
		off += len;
		x = data + ((off - 1) & 0x1ff);
		if ((void *)(x + 1) > data_end)
			return punt(p, EDGE_R_BAD_GTPU, XDP_DROP);
		next = x[0];
	}
	if (next)
		return punt(p, EDGE_R_BAD_GTPU, XDP_DROP);
	off &= 0x1ff;
	end &= 0xffff;
	reason = gtpu_inner(ctx, c, off, end, sp);
	if (reason)
		return punt(p, reason, XDP_DROP);
	/* Outer header removal: the inner packet behind the Ethernet header
	 * the outer one had, padding and anything past it trimmed. */
	if (bpf_xdp_adjust_head(ctx, (int)off - (int)sizeof(struct ethhdr)))
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	len = (__u32)(data_end - data);
	if (len > sizeof(struct ethhdr) + p->l3_len &&
	    bpf_xdp_adjust_tail(ctx, -(int)((len - sizeof(struct ethhdr) - p->l3_len) & 0xffff)))
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	eth->h_proto = bpf_htons(p->key.family == 4 ? ETH_P_IP : ETH_P_IPV6);
	p->l3_off = sizeof(struct ethhdr);
	p->l4_off = 0;
	p->vlans = 0;
	p->len = p->l3_len + sizeof(struct ethhdr);
	return sess_act(ctx, c, st, s, *slot, sp, 0);
}

/* edge_gtpu decides a datagram to the user plane's GTP-U address
 * (gtpu_for_us): its verdict. A global function, verified once, called
 * with what the pipeline has in registers anyway: passing it the
 * malformed verdict as well cost every classifier miss 10-15 ns (the
 * pipeline's code around the call compiled otherwise). */
__noinline int edge_gtpu(struct xdp_md *ctx, struct edge_ctx *c)
{
	const struct edge_state *st;
	__u32 zero = 0, malformed;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct gtpu_hdr *g;
	const struct udphdr *uh;
	struct edge_pkt *p;
	__u32 l3, l4, ulen, glen;
	__be16 seq = 0;

	if (!c || !ctx)
		return XDP_DROP;
	st = bpf_map_lookup_elem(&edge_global, &zero);
	malformed = st ? st->malformed_verdict : XDP_DROP;
	p = &c->p;
	/* Masked, so the verifier knows the bound whatever order the
	 * compiler gives the checks; no IPv4 options: the answer is built
	 * behind a 20-byte header. */
	l3 = p->l3_off & 0x7f;
	l4 = p->l4_off & 0xff;
	if (l4 != p->l4_off || l3 != p->l3_off || l3 < sizeof(struct ethhdr) ||
	    l4 != l3 + (p->key.family == 6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr)))
		return punt(p, EDGE_R_BAD_GTPU, malformed);
	uh = data + l4;
	g = data + l4 + sizeof(*uh);
	if ((void *)(g + 1) > data_end)
		return punt(p, EDGE_R_BAD_GTPU, malformed);
	ulen = bpf_ntohs(uh->len);
	glen = bpf_ntohs(g->len);
	/* Over IPv6 a zero UDP checksum is none, which IPv6 does not allow
	 * (RFC 8200 8.1; a receiving host's stack drops it): malformed. */
	if ((g->flags & 0xf0) != (GTPU_V1 | GTPU_PT) ||
	    sizeof(*uh) + sizeof(*g) + glen > ulen ||
	    data + l4 + ulen > data_end ||
	    (p->key.family == 6 && !uh->check))
		return punt(p, EDGE_R_BAD_GTPU, malformed);
	if (g->flags & GTPU_OPT) {
		/* The sequence number, N-PDU number and next extension
		 * type come as one, inside the length. */
		if (glen < 4 || (void *)g + sizeof(*g) + 4 > data_end)
			return punt(p, EDGE_R_BAD_GTPU, malformed);
		if (g->flags & GTPU_S)
			seq = *(const __be16 *)(g + 1);
	}
	switch (g->type) {
	case GTPU_ECHO_REQUEST:
		return gtpu_echo(ctx, p, l3, l4, seq);
	case GTPU_GPDU:
		return gtpu_uplink(ctx, c, st, l4, glen);
	case GTPU_END_MARKER:
		return gtpu_end_marker(ctx, p, g->teid);
	case GTPU_ECHO_RESPONSE:
		return gtpu_echo_resp(p, seq);
	}
	return punt(p, EDGE_R_GTPU_SIGNAL, XDP_DROP);
}

/* edge_gtpu_dl decides a packet from N6 when its destination is a UE a
 * session holds: the session's verdict; EDGE_GO_ON for any other
 * packet, which the rules decide. Global, as edge_gtpu. */
__noinline int edge_gtpu_dl(struct xdp_md *ctx, struct edge_ctx *c)
{
	const struct edge_state *st;
	const struct edge_sess *s;
	struct edge_pkt *p;
	struct edge_sess_pkt *sp;
	__u32 zero = 0, *slot, b;
	__be32 dst = 0;
	__u64 pfx = 0;

	if (!c || !ctx)
		return XDP_DROP;
	p = &c->p;
	if (p->key.family == 6) {
		/* The UE's /64 prefix. */
		pfx = *(const __u64 *)p->key.dst;
		slot = bpf_map_lookup_elem(&edge_ue6, &pfx);
		if (!slot)
			return EDGE_GO_ON;
		s = sess_get(*slot);
	} else if (p->key.family == 4) {
		/* The session whose own UE this is, by its bit (the entry
		 * names the record's copy + 1), else the hash. */
		dst = *(const __be32 *)p->key.dst;
		b = ue_bit(dst);
		slot = bpf_map_lookup_elem(&edge_ue_dm, &b);
		b = slot ? *slot : 0;
		s = b ? sess_copy(b - 1) : NULL;
		if (s && s->own_ue == dst) {
			b = (b - 1) >> 1;
			slot = &b;
		} else {
			slot = bpf_map_lookup_elem(&edge_ue4, &dst);
			if (!slot)
				return EDGE_GO_ON;
			s = sess_get(*slot);
		}
	} else {
		return EDGE_GO_ON;
	}
	st = bpf_map_lookup_elem(&edge_global, &zero);
	if (!st || !s)
		return EDGE_GO_ON;
	sp = &c->sp;
	sp->ul = 0;
	sp->teid = 0;
	sp->qfi = 0;
	sp->v6 = p->key.family == 6;
	if (sp->v6) {
		sp->ue6[0] = (__u32)pfx;
		sp->ue6[1] = (__u32)(pfx >> 32);
	} else {
		sp->ueip = dst;
		sp->remote = *(const __be32 *)p->key.src;
	}
	sp->proto = p->key.proto;
	sp->rport = bpf_ntohs(p->key.sport);
	sp->lport = bpf_ntohs(p->key.dport);
	return sess_act(ctx, c, st, s, *slot, sp, 1);
}

/* edge_gtpu_encap6 encapsulates c->p toward the IPv6 peer of the PDR
 * c->gtpu_mtu names (EDGE_GTPU_ENCAP6), as gtpu_encap does; a record
 * flipped meanwhile is read as it now is, the PDR at that place taken
 * only if it still creates an outer header over IPv6. A global
 * function, called from the pipeline: the IPv4 path's code and the
 * stack under the sessions' functions stay as they were. */
__noinline int edge_gtpu_encap6(struct xdp_md *ctx, struct edge_ctx *c)
{
	const struct edge_sess_pdr *r;
	const struct edge_state *st;
	const struct edge_sess *s;
	__u32 zero = 0;

	if (!ctx || !c)
		return XDP_DROP;
	st = bpf_map_lookup_elem(&edge_global, &zero);
	s = sess_get(c->gtpu_mtu >> 3);
	if (!st || !s)
		return punt(&c->p, EDGE_R_GTPU_NO_SESSION, XDP_DROP);
	r = &s->pdr[c->gtpu_mtu & (EDGE_SESS_PDRS - 1)];
	if (!(r->flags & EDGE_SP_OHC) || !r->ohc6)
		return punt(&c->p, EDGE_R_GTPU_NO_PDR, XDP_DROP);
	return gtpu_encap(ctx, c, st, s, r, 1);
}

/* gtpu_too_big ends a packet edge_gtpu or edge_gtpu_dl returned rc
 * for: rc; for EDGE_GTPU_ENCAP6, what edge_gtpu_encap6 does; for
 * EDGE_GTPU_TOO_BIG (from either), the ICMP answer. */
static __always_inline int gtpu_too_big(struct xdp_md *ctx, struct edge_ctx *c,
					const struct edge_state *st, int rc)
{
	if (rc == EDGE_GTPU_ENCAP6)
		rc = edge_gtpu_encap6(ctx, c);
	if (rc != EDGE_GTPU_TOO_BIG)
		return rc;
	return answer_too_big(ctx, &c->p, c->gtpu_mtu, st->gtpu4);
}

#endif
