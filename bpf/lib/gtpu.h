/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* GTP-U (3GPP TS 29.281) on N3: what arrives at the user plane's GTP-U
 * address (edge_state.gtpu4, set by the agent when it serves N4) on UDP
 * 2152 is the user plane's, before any rule. An Echo Request is answered
 * here, at the driver hook, with an Echo Response carrying its sequence
 * number and the Recovery IE (XDP_TX): a gNB's path check costs the
 * gateway no trip to the kernel. A G-PDU belongs to a session; with no
 * session kept yet, every G-PDU is dropped, counted. Echo Responses,
 * Error Indications, End Markers and other signalling are dropped,
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
#include "proto.h"
#include "verdict.h"

#define GTPU_PORT 2152

/* Message types (TS 29.281 6.1). */
#define GTPU_ECHO_REQUEST 1
#define GTPU_ECHO_RESPONSE 2
#define GTPU_GPDU 255

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

/* gtpu_for_us tells whether c->p is a datagram to the user plane's
 * GTP-U address (UDP 2152, IPv4, its L4 header in the packet). */
static __always_inline int gtpu_for_us(const struct edge_ctx *c,
				       const struct edge_state *st)
{
	const struct edge_pkt *p = &c->p;

	return st->gtpu4 && p->key.family == 4 && p->key.proto == IPPROTO_UDP &&
	       p->key.dport == bpf_htons(GTPU_PORT) && p->l4_off &&
	       *(const __be32 *)p->key.dst == st->gtpu4;
}

/* gtpu_echo turns Echo Request frame (its IPv4 header, without options,
 * at l3, its UDP header at l4) into the Echo Response to it, in place,
 * and returns XDP_TX; any other verdict when it cannot. */
static __always_inline int gtpu_echo(struct xdp_md *ctx,
				     const struct edge_pkt *p, __u32 l3,
				     __u32 l4, __be16 seq)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *iph;
	struct udphdr *uh;
	struct gtpu_echo *e;
	__be16 port;
	int delta;

	delta = (int)(l4 + sizeof(*uh) + sizeof(*e)) -
		(int)((long)ctx->data_end - (long)ctx->data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return punt(p, EDGE_R_ADJUST, XDP_DROP);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	iph = data + l3;
	uh = data + l4;
	e = data + l4 + sizeof(*uh);
	if ((void *)(eth + 1) > data_end || (void *)(iph + 1) > data_end ||
	    (void *)(e + 1) > data_end)
		return punt(p, EDGE_R_BAD_GTPU, XDP_DROP);
	/* Back where it came from: the addresses swap. */
	reflect4(eth, iph);
	iph->tos = 0;
	iph->tot_len = bpf_htons(sizeof(*iph) + sizeof(*uh) + sizeof(*e));
	iph->id = 0;
	iph->frag_off = IP4_DF;
	iph->ttl = 64;
	iph->check = 0;
	iph->check = ip4_csum_of(iph);
	port = uh->source;
	uh->source = bpf_htons(GTPU_PORT);
	uh->dest = port;
	uh->len = bpf_htons(sizeof(*uh) + sizeof(*e));
	uh->check = 0; /* none, as IPv4 allows */
	e->h.flags = GTPU_V1 | GTPU_PT | GTPU_S;
	e->h.type = GTPU_ECHO_RESPONSE;
	e->h.len = bpf_htons(sizeof(*e) - sizeof(e->h));
	e->h.teid = 0;
	e->seq = seq;
	e->npdu = 0;
	e->next = 0;
	e->ie = GTPU_IE_RECOVERY;
	e->restart = 0;
	return punt(p, EDGE_R_GTPU_ECHO, XDP_TX);
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
	if (l4 != p->l4_off || l3 != p->l3_off || l4 != l3 + sizeof(struct iphdr) ||
	    l3 < sizeof(struct ethhdr))
		return punt(p, EDGE_R_BAD_GTPU, malformed);
	uh = data + l4;
	g = data + l4 + sizeof(*uh);
	if ((void *)(g + 1) > data_end)
		return punt(p, EDGE_R_BAD_GTPU, malformed);
	ulen = bpf_ntohs(uh->len);
	glen = bpf_ntohs(g->len);
	if ((g->flags & 0xf0) != (GTPU_V1 | GTPU_PT) ||
	    sizeof(*uh) + sizeof(*g) + glen > ulen ||
	    data + l4 + ulen > data_end)
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
		return punt(p, EDGE_R_GTPU_NO_SESSION, XDP_DROP);
	}
	return punt(p, EDGE_R_GTPU_SIGNAL, XDP_DROP);
}

#endif
