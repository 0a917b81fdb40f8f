// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Benchmark wrappers around the pipeline, for BPF_PROG_TEST_RUN with
 * repeat. With repeat N the program sees its own output from the second
 * run on. The redirect path rewrites the MACs (the same bytes every run,
 * and the pipeline does not read them) and decrements the TTL, which would
 * run out after 63 runs: each wrapper puts TTL and header checksum back
 * after the pipeline (two 16-bit stores), and bench_wrap_* time the
 * wrappers alone in the same run so they can be subtracted. Frames are
 * Ethernet + IPv4 without options + UDP, or that inside IPv4 + GRE with
 * key for the resize wrappers (encap and decap, below). Never attached to
 * an interface. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lib/pipeline.h"

/* Paths that resize the frame (GRE encap grows it by the outer IPv4 and
 * GRE headers, decap shrinks it by as much) leave data moved and bytes
 * rewritten. The resize wrappers save the first BENCH_SAVE bytes (every
 * byte either path writes in a frame of the shape benchmarked: Ethernet,
 * IPv4 and GRE with key, then the inner IPv4 header up to its checksum;
 * BENCH_SAVE_MORE for GTP-U's longer outer headers),
 * run the pipeline, move data back by however much the frame's length
 * changed, and write the saved bytes back, so every run starts from the
 * same frame. The wrappers alone time that undo: it makes one
 * bpf_xdp_adjust_head call, which without the pipeline cannot be made
 * without first making the opposite one, so bench_wrap_resize times the
 * undo with no call and bench_wrap_grow / bench_wrap_shrink with the pair;
 * the helper does the same work in both directions (a bounds check and
 * two pointer updates; no metadata here), so the undo is the mean of the
 * two. */
#define BENCH_SAVE 56
/* GTP-U's decap also rewrites the inner TTL and checksum of a frame
 * 44 bytes of outer headers long: the next 16 bytes are saved too when
 * the frame has them. */
#define BENCH_SAVE_MORE 16
/* Over IPv6 the outer headers are 64 bytes: its inner TTL and checksum
 * lie in the BENCH_SAVE_V6 bytes after those, saved when the frame has
 * them. */
#define BENCH_SAVE_V6 24
#define BENCH_SAVE_ALL (BENCH_SAVE + BENCH_SAVE_MORE + BENCH_SAVE_V6)
#define BENCH_GRE_OUTER (20 + 8) /* outer IPv4 + GRE with key */

struct frame_save {
	__u64 w[BENCH_SAVE_ALL / 8];
	__u32 more; /* the frame had the BENCH_SAVE_MORE bytes */
	__u32 more6; /* and the BENCH_SAVE_V6 bytes */
	/* The per-run counter the miss wrappers turn into a new flow
	 * (bench_seq_of): here rather than in a map of its own, which took
	 * the wrappers past 64 maps. */
	__u32 seq;
	__u32 pad;
};

/* The saved bytes live in a per-CPU slot, not on the stack: the pipeline
 * and the ICMP functions it calls leave less than BENCH_SAVE bytes of the
 * verifier's 512-byte combined stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct frame_save);
	__uint(max_entries, 1);
} bench_front SEC(".maps");

/* bench_seq_of is this CPU's per-run counter (frame_save.seq), NULL
 * never in practice. */
static __always_inline __u32 *bench_seq_of(void)
{
	__u32 zero = 0;
	struct frame_save *f = bpf_map_lookup_elem(&bench_front, &zero);

	return f ? &f->seq : NULL;
}

/* bench_cycle[0], when not 0, masks the counter: the wrappers then cycle
 * through mask + 1 flows instead of making every run a new one, in the
 * order the counter times bench_cycle[1] (odd; 0: 1) gives, so a cycle
 * can visit its flows in another order than the one they were made in.
 * bench_cycle[2] is what next_session stamps (a map of its own would
 * take the wrapper past 64 maps). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 3);
} bench_cycle SEC(".maps");

struct ttl_save {
	__u16 ttl_proto; /* offset 22: TTL and protocol */
	__u16 check;     /* offset 24: IPv4 header checksum */
};

static __always_inline int save_ttl(struct xdp_md *ctx, struct ttl_save *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *w = data + 22;

	if ((void *)(w + 2) > data_end)
		return -1;
	s->ttl_proto = w[0];
	s->check = w[1];
	return 0;
}

static __always_inline void restore_ttl(struct xdp_md *ctx,
					const struct ttl_save *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *w = data + 22;

	if ((void *)(w + 2) > data_end)
		return;
	w[0] = s->ttl_proto;
	w[1] = s->check;
}

/* stamp_flow makes the frame flow n: UDP source port from the low 16 bits
 * of n and the low half of the IPv4 source address from the high 16, with
 * the header checksum patched. */
static __always_inline int stamp_flow(struct xdp_md *ctx, __u32 n)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *w = data;
	__u16 nsrc;

	if ((void *)(w + 18) > data_end) /* up to the UDP source port */
		return -1;
	w[17] = bpf_htons((__u16)n); /* UDP source port, offset 34 */
	nsrc = bpf_htons((__u16)(n >> 16));
	w[12] = csum_replace2(w[12], w[14], nsrc); /* checksum at 24 */
	w[14] = nsrc; /* low half of the source address, offset 28 */
	return 0;
}

/* next_flow makes the frame a new flow (stamp_flow) from a per-CPU
 * counter, so flows do not repeat within 2^32 runs and every run misses
 * the flow cache (or, with bench_cycle set, repeat every mask + 1 runs).
 * It is a global function, verified once on its own: inlined after the
 * pipeline, its map lookup and packet writes were explored again for
 * every state the pipeline ends in, past the verifier's 1M-instruction
 * limit. */
__noinline int next_flow(struct xdp_md *ctx)
{
	__u32 zero = 0, one = 1, *seq, *mask, *stride, n;

	seq = bench_seq_of();
	if (!seq)
		return -1;
	n = ++(*seq);
	mask = bpf_map_lookup_elem(&bench_cycle, &zero);
	stride = bpf_map_lookup_elem(&bench_cycle, &one);
	if (mask && *mask)
		n = ((n * (stride && *stride ? *stride : 1)) & *mask) + 1;
	return stamp_flow(ctx, n);
}

/* The flood's flow counter: one for every CPU, added to atomically, so
 * flood flows never repeat whichever CPU runs them (a per-CPU counter
 * would make the same flows again on another CPU: hits, not new flows).
 * Written by next_flood only. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} bench_flood_seq SEC(".maps");

/* next_flood makes the frame the flood's next new flow; the frame's
 * source address keeps its high half, so a flood sent from another /16
 * than the flows it floods never makes one of theirs. Global for the
 * same reason as next_flow. */
__noinline int next_flood(struct xdp_md *ctx)
{
	__u32 zero = 0, *seq;

	seq = bpf_map_lookup_elem(&bench_flood_seq, &zero);
	if (!seq)
		return -1;
	return stamp_flow(ctx, __sync_fetch_and_add(seq, 1) + 1);
}

SEC("xdp")
int bench_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int bench_wrap_pass(struct xdp_md *ctx)
{
	struct ttl_save s;

	if (save_ttl(ctx, &s))
		return XDP_ABORTED;
	asm volatile("" ::: "memory"); /* keep the restore (see wrap_resize) */
	restore_ttl(ctx, &s);
	return XDP_PASS;
}

SEC("xdp")
int bench_hit(struct xdp_md *ctx)
{
	struct ttl_save s;
	int rc;

	if (save_ttl(ctx, &s))
		return XDP_ABORTED;
	rc = edge_pipeline(ctx);
	restore_ttl(ctx, &s);
	return rc;
}

/* bench_miss turns the frame into the next new flow after the pipeline
 * ran, not before: packet writes in front of the pipeline multiply its
 * verifier states past the 1M-instruction limit. */
SEC("xdp")
int bench_miss(struct xdp_md *ctx)
{
	struct ttl_save s;
	int rc;

	if (save_ttl(ctx, &s))
		return XDP_ABORTED;
	rc = edge_pipeline(ctx);
	restore_ttl(ctx, &s);
	if (next_flow(ctx))
		return XDP_ABORTED;
	return rc;
}

/* bench_wrap_miss is bench_miss without the pipeline. */
SEC("xdp")
int bench_wrap_miss(struct xdp_md *ctx)
{
	struct ttl_save s;

	if (save_ttl(ctx, &s))
		return XDP_ABORTED;
	asm volatile("" ::: "memory"); /* keep the restore (see wrap_resize) */
	restore_ttl(ctx, &s);
	if (next_flow(ctx))
		return XDP_ABORTED;
	return XDP_PASS;
}


static __always_inline long frame_len(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	return data_end - data;
}

static __always_inline int save_front(struct xdp_md *ctx, struct frame_save *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 *w = data;
	int i;

	if ((void *)(w + BENCH_SAVE / 8) > data_end)
		return -1;
#pragma unroll
	for (i = 0; i < BENCH_SAVE / 8; i++)
		s->w[i] = w[i];
	s->more = (void *)(w + (BENCH_SAVE + BENCH_SAVE_MORE) / 8) <= data_end;
	if (s->more) {
		s->w[BENCH_SAVE / 8] = w[BENCH_SAVE / 8];
		s->w[BENCH_SAVE / 8 + 1] = w[BENCH_SAVE / 8 + 1];
	}
	s->more6 = (void *)(w + BENCH_SAVE_ALL / 8) <= data_end;
	if (s->more6) {
#pragma unroll
		for (i = (BENCH_SAVE + BENCH_SAVE_MORE) / 8; i < BENCH_SAVE_ALL / 8; i++)
			s->w[i] = w[i];
	}
	return 0;
}

static __always_inline int restore_front(struct xdp_md *ctx,
					 const struct frame_save *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 *w = data;
	int i;

	if ((void *)(w + BENCH_SAVE / 8) > data_end)
		return -1;
#pragma unroll
	for (i = 0; i < BENCH_SAVE / 8; i++)
		w[i] = s->w[i];
	if (s->more) {
		if ((void *)(w + (BENCH_SAVE + BENCH_SAVE_MORE) / 8) > data_end)
			return -1;
		w[BENCH_SAVE / 8] = s->w[BENCH_SAVE / 8];
		w[BENCH_SAVE / 8 + 1] = s->w[BENCH_SAVE / 8 + 1];
	}
	if (s->more6) {
		if ((void *)(w + BENCH_SAVE_ALL / 8) > data_end)
			return -1;
#pragma unroll
		for (i = (BENCH_SAVE + BENCH_SAVE_MORE) / 8; i < BENCH_SAVE_ALL / 8; i++)
			w[i] = s->w[i];
	}
	return 0;
}

/* The minimal established-flow baseline at scale: what an XDP balancer
 * does at the least for a packet of a known connection. It parses
 * Ethernet, IPv4 without options and the UDP or TCP ports, looks the
 * 5-tuple up in a plain LRU hash (bench_lru_ring, sized by the bench as
 * the flow table it is set against; a miss picks a backend from the
 * flow's hash and inserts it, counted in bench_lru_miss), and sends the
 * packet to the backend as the dsr-gre service does: inner TTL
 * decremented, outer Ethernet, IPv4 and GRE with key, redirected out of
 * the backend's interface. No counters, no rules, no generation. */
struct lru_ring_key {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u32 proto;
};

/* A backend as the baseline keeps it: tunnel remote and key, and where
 * its packets go (interface and MACs), as Katran's reals array does. */
struct lru_backend {
	__be32 remote;
	__be32 key;
	__u32 ifindex;
	__u8 dmac[6];
	__u8 smac[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lru_ring_key);
	__type(value, __u32); /* the backend's index */
	__uint(max_entries, 65536);
} bench_lru_ring SEC(".maps");

#define LRU_BACKENDS 16

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lru_backend);
	__uint(max_entries, LRU_BACKENDS);
} bench_lru_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} bench_lru_miss SEC(".maps");

/* The outer source of the baseline's tunnels, as the bench's paths. */
#define LRU_LOCAL 0x0a040001 /* 10.4.0.1 */

/* bare_outer writes the baselines' outer Ethernet and IPv4 headers (tot
 * octets, protocol proto, from local to remote, don't fragment). */
static __always_inline void bare_outer(struct ethhdr *eth, struct iphdr *o,
				       const __u8 *dmac, const __u8 *smac,
				       __u16 tot, __u8 proto, __be32 local,
				       __be32 remote)
{
	__u32 sum = 0;

	__builtin_memcpy(eth->h_dest, dmac, 6);
	__builtin_memcpy(eth->h_source, smac, 6);
	eth->h_proto = bpf_htons(ETH_P_IP);
	o->version = 4;
	o->ihl = 5;
	o->tos = 0;
	o->tot_len = bpf_htons(tot);
	o->id = 0;
	o->frag_off = bpf_htons(0x4000);
	o->ttl = 64;
	o->protocol = proto;
	o->saddr = local;
	o->daddr = remote;
	o->check = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += ((__u16 *)o)[i];
	o->check = csum_fold(sum);
}

static __always_inline int lru_encap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth), *o;
	struct lru_ring_key k = {};
	struct lru_backend *be;
	__u32 zero = 0, idx, *at, *gre;
	__u64 *miss;
	__u16 *ports, tot;

	if ((void *)(ip + 1) + 4 > data_end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->ihl != 5 || (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP))
		return XDP_PASS;
	ports = (void *)(ip + 1);
	k.src = ip->saddr;
	k.dst = ip->daddr;
	k.sport = ports[0];
	k.dport = ports[1];
	k.proto = ip->protocol;
	at = bpf_map_lookup_elem(&bench_lru_ring, &k);
	if (at) {
		idx = *at;
	} else {
		idx = (k.src ^ k.dst ^ ((__u32)k.sport << 16 | k.dport)) * 0x9e3779b1u;
		idx = (idx >> 16) % 10;
		bpf_map_update_elem(&bench_lru_ring, &k, &idx, BPF_ANY);
		miss = bpf_map_lookup_elem(&bench_lru_miss, &zero);
		if (miss)
			(*miss)++;
	}
	be = bpf_map_lookup_elem(&bench_lru_backends, &idx);
	if (!be)
		return XDP_DROP;
	ip4_dec_ttl(ip);
	tot = bpf_ntohs(ip->tot_len) + BENCH_GRE_OUTER;
	if (bpf_xdp_adjust_head(ctx, -BENCH_GRE_OUTER))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	o = data + sizeof(*eth);
	gre = (void *)(o + 1);
	if ((void *)(gre + 2) > data_end)
		return XDP_DROP;
	bare_outer(eth, o, be->dmac, be->smac, tot, IPPROTO_GRE, bpf_htonl(LRU_LOCAL),
		   be->remote);
	gre[0] = bpf_htonl(0x20000000 | ETH_P_IP); /* K bit, IPv4 */
	gre[1] = be->key;
	return bpf_redirect(be->ifindex, 0);
}

/* The minimal downlink baseline of the user plane: what an XDP UPF does
 * at the least for a packet to one of its UEs, as eBPF UPFs keyed by
 * the UE's address do. It parses Ethernet and IPv4 without options,
 * looks the destination up in a plain hash (bench_ue_bare, filled by
 * the bench with the UEs of the sessions it holds), decrements the
 * inner TTL and puts the packet into GTP-U/UDP/IPv4 with a PDU Session
 * Container naming the QFI, toward the gNB and TEID the entry names,
 * redirected. No rules, counters, gates or meters. */
struct ue_bare {
	__be32 local; /* the user plane's N3 address */
	__be32 peer;
	__be32 teid;
	__u32 ifindex;
	__u8 qfi;
	__u8 dmac[6];
	__u8 smac[6];
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __be32);
	__type(value, struct ue_bare);
	__uint(max_entries, 131072);
} bench_ue_bare SEC(".maps");

/* Outer IPv4, UDP and the 16 octets of GTP-U with its container. */
#define BENCH_GTPU_OUTER (20 + 8 + 16)

static __always_inline int ue_encap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth), *o;
	struct ue_bare *ue;
	struct udphdr *uh;
	__be32 *g;
	__u16 len3;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->ihl != 5)
		return XDP_PASS;
	ue = bpf_map_lookup_elem(&bench_ue_bare, &ip->daddr);
	if (!ue)
		return XDP_PASS;
	ip4_dec_ttl(ip);
	len3 = bpf_ntohs(ip->tot_len);
	if (bpf_xdp_adjust_head(ctx, -BENCH_GTPU_OUTER))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	o = data + sizeof(*eth);
	uh = (void *)(o + 1);
	g = (void *)(uh + 1);
	if ((void *)(g + 4) > data_end)
		return XDP_DROP;
	bare_outer(eth, o, ue->dmac, ue->smac, len3 + BENCH_GTPU_OUTER, IPPROTO_UDP, ue->local,
		   ue->peer);
	uh->source = bpf_htons(GTPU_PORT);
	uh->dest = bpf_htons(GTPU_PORT);
	uh->len = bpf_htons(len3 + BENCH_GTPU_OUTER - 20);
	uh->check = 0;
	g[0] = bpf_htonl((GTPU_V1 | GTPU_PT | GTPU_E) << 24 | GTPU_GPDU << 16 | ((len3 + 8) & 0xffff));
	g[1] = ue->teid;
	g[2] = bpf_htonl(GTPU_EXT_PDU_SESSION);
	g[3] = bpf_htonl(1 << 24 | (__u32)(ue->qfi & 0x3f) << 8);
	return bpf_redirect(ue->ifindex, 0);
}

/* What wrap_resize runs: nothing (the wrapper alone), the pipeline, or
 * a minimal baseline (flows', the user plane's downlink). */
#define WRAP_NONE 0
#define WRAP_PIPELINE 1
#define WRAP_LRU 2
#define WRAP_UE 3

/* wrap_resize runs the pipeline or the baseline (run) or, for the
 * wrapper alone, moves data by shift and lets the undo move it back;
 * either way it leaves the frame as it found it. */
static __always_inline int wrap_resize(struct xdp_md *ctx, int run, int shift)
{
	struct frame_save *s;
	__u32 zero = 0;
	long len, delta;
	int rc = XDP_PASS;

	s = bpf_map_lookup_elem(&bench_front, &zero);
	if (!s || save_front(ctx, s))
		return XDP_ABORTED;
	len = frame_len(ctx);
	if (run == WRAP_PIPELINE)
		rc = edge_pipeline(ctx);
	else if (run == WRAP_LRU)
		rc = lru_encap(ctx);
	else if (run == WRAP_UE)
		rc = ue_encap(ctx);
	else if (shift && bpf_xdp_adjust_head(ctx, shift))
		return XDP_ABORTED;
	/* Alone, the restore would write back what was just read and the
	 * compiler would drop it: make it real, as after the pipeline. */
	asm volatile("" ::: "memory");
	delta = frame_len(ctx) - len;
	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return XDP_ABORTED;
	if (restore_front(ctx, s))
		return XDP_ABORTED;
	return rc;
}

/* bench_resize runs the pipeline on a path that resizes the frame. */
SEC("xdp")
int bench_resize(struct xdp_md *ctx)
{
	return wrap_resize(ctx, WRAP_PIPELINE, 0);
}

/* What next_session stamps (bench_cycle[2], set from Go): 0 nothing (one
 * session's packets), 1 a downlink frame's destination's low half
 * (session n's UE, 10.46.0.0/16 + n), 2 a G-PDU's TEID (n << 20 | n - 1:
 * the TEID the user plane chose for session n - 1, which holds slot
 * n - 1). */
#define SESS_KIND 2

/* next_session makes the frame the next session's of a ring of
 * bench_cycle[0] + 1 sessions (1 to mask + 1), in the order the counter
 * times bench_cycle[1] gives: many UEs active at once, their records
 * and keys out of the caches. Global, as next_flow. */
__noinline int next_session(struct xdp_md *ctx)
{
	__u32 zero = 0, one = 1, two = SESS_KIND, *seq, *mask, *stride, *kind, n;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *w = data, lo;

	seq = bench_seq_of();
	mask = bpf_map_lookup_elem(&bench_cycle, &zero);
	stride = bpf_map_lookup_elem(&bench_cycle, &one);
	kind = bpf_map_lookup_elem(&bench_cycle, &two);
	if (!seq || !mask || !stride || !kind)
		return -1;
	n = (((++(*seq)) * (*stride ? *stride : 1)) & *mask) + 1;
	if (*kind == 0)
		return 0;
	if (*kind == 2) {
		if (data + 50 > data_end)
			return -1;
		*(__be32 *)(data + 46) = bpf_htonl(n << 20 | (n - 1));
		return 0;
	}
	if ((void *)(w + 17) > data_end) /* up to the destination */
		return -1;
	lo = bpf_htons((__u16)n);
	w[12] = csum_replace2(w[12], w[16], lo); /* checksum at 24 */
	w[16] = lo; /* low half of the destination, offset 32 */
	return 0;
}

/* bench_resize_sess is bench_resize, then the frame becomes the ring's
 * next session's (next_session). */
SEC("xdp")
int bench_resize_sess(struct xdp_md *ctx)
{
	int rc = wrap_resize(ctx, WRAP_PIPELINE, 0);

	if (rc == XDP_ABORTED || next_session(ctx))
		return XDP_ABORTED;
	return rc;
}

/* bench_ue_ring_run is bench_resize_sess with the downlink baseline
 * (ue_encap) in the pipeline's place. */
SEC("xdp")
int bench_ue_ring_run(struct xdp_md *ctx)
{
	int rc = wrap_resize(ctx, WRAP_UE, 0);

	if (rc == XDP_ABORTED || next_session(ctx))
		return XDP_ABORTED;
	return rc;
}

/* bench_ue_bare_once is the downlink baseline alone, unwrapped: what it
 * sends, to set beside the pipeline's. */
SEC("xdp")
int bench_ue_bare_once(struct xdp_md *ctx)
{
	return ue_encap(ctx);
}

/* bench_wrap_resize_sess is bench_resize_sess without the pipeline. */
SEC("xdp")
int bench_wrap_resize_sess(struct xdp_md *ctx)
{
	int rc = wrap_resize(ctx, WRAP_NONE, 0);

	if (rc == XDP_ABORTED || next_session(ctx))
		return XDP_ABORTED;
	return rc;
}

/* bench_wrap_resize is bench_resize's save and restore, without a resize. */
SEC("xdp")
int bench_wrap_resize(struct xdp_md *ctx)
{
	return wrap_resize(ctx, WRAP_NONE, 0);
}

/* bench_wrap_grow and bench_wrap_shrink add the pair of adjust_head calls:
 * grow and undo as encap leaves it, shrink and undo as decap leaves it. */
SEC("xdp")
int bench_wrap_grow(struct xdp_md *ctx)
{
	return wrap_resize(ctx, WRAP_NONE, -BENCH_GRE_OUTER);
}

SEC("xdp")
int bench_wrap_shrink(struct xdp_md *ctx)
{
	return wrap_resize(ctx, WRAP_NONE, BENCH_GRE_OUTER);
}

/* bench_resize_miss is bench_resize, then the frame becomes the next new
 * flow (next_flow): every run a new connection through paths that rewrite
 * or resize the frame (the balancer's NAT and dsr-gre). */
SEC("xdp")
int bench_resize_miss(struct xdp_md *ctx)
{
	int rc = wrap_resize(ctx, WRAP_PIPELINE, 0);

	if (rc == XDP_ABORTED || next_flow(ctx))
		return XDP_ABORTED;
	return rc;
}

/* bench_wrap_resize_miss is bench_resize_miss without the pipeline. */
SEC("xdp")
int bench_wrap_resize_miss(struct xdp_md *ctx)
{
	int rc = wrap_resize(ctx, WRAP_NONE, 0);

	if (rc == XDP_ABORTED || next_flow(ctx))
		return XDP_ABORTED;
	return rc;
}

/* bench_resize_flood is bench_resize_miss with the flood's flows
 * (next_flood): the flood that the established ring is timed between. */
SEC("xdp")
int bench_resize_flood(struct xdp_md *ctx)
{
	int rc = wrap_resize(ctx, WRAP_PIPELINE, 0);

	if (rc == XDP_ABORTED || next_flood(ctx))
		return XDP_ABORTED;
	return rc;
}

/* The bare insert: what recording a new flow costs at the least, one
 * insert of a fresh key into a full LRU hash shaped as the dataplane's
 * IPv4 flow cache (edge_flows4: the same key and value, 65,536 entries,
 * per-CPU LRU lists). Its own table, so no figure of the pipeline sees
 * its entries. Written by bench_flow_insert only (and filled by it before
 * timing, so every insert evicts). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct edge_flow_key4);
	__type(value, struct edge_flow);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
} bench_lru SEC(".maps");

/* insert_make makes the bare insert's key and value. The key is fresh:
 * its source address is the per-CPU counter, its ingress ifindex the CPU
 * (so no two CPUs make the same key), written a 64-bit word at a time as
 * the pipeline's flow_key4 writes it. The value is a new entry as
 * flow_fresh starts it. */
static __always_inline int insert_make(struct edge_flow_key4 *k,
				       struct edge_flow *v)
{
	__u64 *w = (__u64 *)k;
	__u32 *seq;

	seq = bench_seq_of();
	if (!seq)
		return -1;
	w[0] = ++(*seq) | (__u64)bpf_htonl(0xcb00710a) << 32; /* to 203.0.113.10 */
	w[1] = bpf_get_smp_processor_id();
	w[2] = bpf_htons(40000) | (__u32)bpf_htons(80) << 16 |
	       (__u64)IPPROTO_UDP << 32;
	w[3] = 0;
	__builtin_memset(v, 0, sizeof(*v));
	v->packets = 1;
	v->bytes = 64;
	return 0;
}

SEC("xdp")
int bench_flow_insert(struct xdp_md *ctx)
{
	struct edge_flow_key4 k;
	struct edge_flow v;

	if (insert_make(&k, &v) ||
	    bpf_map_update_elem(&bench_lru, &k, &v, BPF_ANY))
		return XDP_ABORTED;
	return XDP_PASS;
}

/* bench_wrap_flow_insert is bench_flow_insert without the insert. */
SEC("xdp")
int bench_wrap_flow_insert(struct xdp_md *ctx)
{
	struct edge_flow_key4 k;
	struct edge_flow v;

	if (insert_make(&k, &v))
		return XDP_ABORTED;
	/* Unread, the key and value would not be made at all. */
	asm volatile("" ::"r"(&k), "r"(&v) : "memory");
	return XDP_PASS;
}

/* How a stage joins the pipeline, timed alone: as a global function the
 * pipeline calls and goes on after, or as a tail call into a program of a
 * PROG_ARRAY, which does not come back (the Cilium way). Each variant
 * runs BENCH_STAGES stages that do the same work, the work a stage that
 * keeps its state in the per-packet context does at the least: find the
 * context, write a field of it. bench_stages_inline does that work
 * inlined, so the difference is the mechanism. */
#define BENCH_STAGES 4

static __always_inline int stage_work(void)
{
	struct edge_ctx *c = edge_ctx_get();

	if (!c)
		return -1;
	c->record++;
	return c->record;
}

static __always_inline int stages_begin(void)
{
	struct edge_ctx *c = edge_ctx_get();

	if (!c)
		return -1;
	c->record = 0;
	return 0;
}

SEC("xdp")
int bench_stages_inline(struct xdp_md *ctx)
{
	int i;

	if (stages_begin())
		return XDP_ABORTED;
#pragma unroll
	for (i = 0; i < BENCH_STAGES; i++) {
		if (stage_work() < 0)
			return XDP_ABORTED;
		asm volatile("" ::: "memory"); /* one stage after the other */
	}
	return XDP_PASS;
}

__noinline int bench_stage(struct xdp_md *ctx)
{
	if (!ctx)
		return -1;
	return stage_work();
}

SEC("xdp")
int bench_stages_global(struct xdp_md *ctx)
{
	int i;

	if (stages_begin())
		return XDP_ABORTED;
#pragma unroll
	for (i = 0; i < BENCH_STAGES; i++)
		if (bench_stage(ctx) < 0)
			return XDP_ABORTED;
	return XDP_PASS;
}

/* The tail-call stage: slot 0 holds bench_stage_tail, which calls itself
 * until BENCH_STAGES stages ran. Set from Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} bench_stage_progs SEC(".maps");

SEC("xdp")
int bench_stage_tail(struct xdp_md *ctx)
{
	int n = stage_work();

	if (n < 0)
		return XDP_ABORTED;
	if (n < BENCH_STAGES)
		bpf_tail_call(ctx, &bench_stage_progs, 0);
	return n == BENCH_STAGES ? XDP_PASS : XDP_ABORTED;
}

SEC("xdp")
int bench_stages_tail(struct xdp_md *ctx)
{
	if (stages_begin())
		return XDP_ABORTED;
	bpf_tail_call(ctx, &bench_stage_progs, 0);
	return XDP_ABORTED; /* the slot is empty */
}

/* Path probes (lib/probe.h). A peer's request answered (XDP_TX) has its
 * Ethernet and IPv4 addresses, its kind and its MAC rewritten, all in
 * the frame's first BENCH_PROBE_SAVE bytes (Ethernet, IPv4, GRE with
 * key, the 32-byte probe): bench_probe saves them and writes them back
 * around the pipeline, so every run answers the same request;
 * bench_wrap_probe times that alone. */
#define BENCH_PROBE_SAVE 80

struct probe_save {
	__u64 w[BENCH_PROBE_SAVE / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct probe_save);
	__uint(max_entries, 1);
} bench_probe_front SEC(".maps");

static __always_inline int wrap_probe(struct xdp_md *ctx, int run)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct probe_save *s;
	__u64 *w = data;
	__u32 zero = 0;
	int i, rc = XDP_PASS;

	s = bpf_map_lookup_elem(&bench_probe_front, &zero);
	if (!s || (void *)(w + BENCH_PROBE_SAVE / 8) > data_end)
		return XDP_ABORTED;
#pragma unroll
	for (i = 0; i < BENCH_PROBE_SAVE / 8; i++)
		s->w[i] = w[i];
	if (run)
		rc = edge_pipeline(ctx);
	asm volatile("" ::: "memory");
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	w = data;
	if ((void *)(w + BENCH_PROBE_SAVE / 8) > data_end)
		return XDP_ABORTED;
#pragma unroll
	for (i = 0; i < BENCH_PROBE_SAVE / 8; i++)
		w[i] = s->w[i];
	return rc;
}

SEC("xdp")
int bench_probe(struct xdp_md *ctx)
{
	return wrap_probe(ctx, 1);
}

SEC("xdp")
int bench_wrap_probe(struct xdp_md *ctx)
{
	return wrap_probe(ctx, 0);
}

/* bench_sip24 is SipHash-2-4 of the frame's bytes 16-39 under the key in
 * its first 16, as lib/probe.h signs a probe (three words and the length
 * block), written over bytes 40-47, which it does not read: the cost of
 * one probe MAC alone, and the BPF hash the reference vectors are
 * checked against (internal/bench). */
SEC("xdp")
int bench_sip24(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 k[2], m[3], h;

	if (data + 48 > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(k, data, sizeof(k));
	__builtin_memcpy(m, data + 16, sizeof(m));
	h = sip24_words(k[0], k[1], m, 3, 24ull << 56);
	__builtin_memcpy(data + 40, &h, sizeof(h));
	return XDP_PASS;
}

/* bench_flow_hash places a flow as the flow table does (lib/siphash.h's
 * sip_tuple, keyed SipHash-1-3): addresses from the frame's bytes 0-31
 * (four words; IPv4 uses the low halves of the first and third), ports
 * and protocol from 32-36, the family from 37, the hash written over
 * 40-47: the keyed hash's cost per new flow alone. */
SEC("xdp")
int bench_flow_hash(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 a[4], h;
	__u32 pg;
	__u8 proto, family;

	if (data + 48 > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(a, data, sizeof(a));
	__builtin_memcpy(&pg, data + 32, sizeof(pg));
	proto = *(__u8 *)(data + 36);
	family = *(__u8 *)(data + 37);
	h = sip_tuple(a[0], a[1], a[2], a[3], pg, proto, family);
	__builtin_memcpy(data + 40, &h, sizeof(h));
	return XDP_PASS;
}

/* bench_lru_ring_run runs the baseline as bench_resize_miss runs the
 * pipeline: saved, run, undone, restored, then the next flow of the
 * cycle. */
SEC("xdp")
int bench_lru_ring_run(struct xdp_md *ctx)
{
	int rc = wrap_resize(ctx, WRAP_LRU, 0);

	if (rc == XDP_ABORTED || next_flow(ctx))
		return XDP_ABORTED;
	return rc;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
