/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* De-duplication of a redundant group's copies at the receiving gateway:
 * the sender puts one GRE sequence number (of the group) on every copy of
 * a packet; decap lets the first copy of each number through and drops
 * the rest, so the host sees every packet once. The window is RFC 6479's
 * block bitmap (struct edge_dedup_win): numbers extended to 64 bits from the
 * newest seen, so a late, reordered or wrapped number is placed right;
 * one older than the window cannot be told from a copy and is dropped,
 * counted, unless a run of them says the sender started its numbers
 * again. */
#ifndef EDGE_DEDUP_H
#define EDGE_DEDUP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "../edge_maps.h"
#include "proto.h"
#include "verdict.h"

/* edge_dedup_fresh records sequence number seq in window win (edge_dedup's
 * index) and tells whether it is the first copy: 0, or the edge_reason to
 * drop it for. A global function: verified once. */
__noinline int edge_dedup_fresh(__u32 win, __u32 seq)
{
	struct edge_dedup_win *w;
	__u64 ext, blk, top, n, i, bit;
	int rc = 0;

	win &= EDGE_MAX_STEER - 1;
	w = bpf_map_lookup_elem(&edge_dedup, &win);
	if (!w)
		return 0;
	bpf_spin_lock(&w->lock);
	top = w->top;
	/* The first number lands 2^32 in, so one before it does not wrap
	 * below 0. */
	ext = top ? top + (__s32)(seq - (__u32)top) : (1ULL << 32) + seq;
	blk = ext / 64;
	if (!top || ext > top) {
		/* Newer than any: the window moves up to it, clearing the
		 * blocks it moves past (all of them after a jump past its
		 * length). */
		n = top ? blk - top / 64 : EDGE_DEDUP_WORDS;
	} else if (top / 64 - blk >= EDGE_DEDUP_WORDS - 1) {
		/* Older than the window. A run of such numbers means the
		 * sender numbers from somewhere else now: start over there. */
		if (++w->late < EDGE_DEDUP_RESYNC) {
			rc = EDGE_R_DUP_LATE;
			goto out;
		}
		n = EDGE_DEDUP_WORDS;
	} else {
		n = 0;
		w->late = 0;
	}
	if (n) {
		if (n > EDGE_DEDUP_WORDS)
			n = EDGE_DEDUP_WORDS;
		for (i = 0; i < EDGE_DEDUP_WORDS; i++) {
			if (i >= n)
				break;
			w->bits[(blk - i) & (EDGE_DEDUP_WORDS - 1)] = 0;
		}
		w->top = ext;
		w->late = 0;
	}
	bit = 1ULL << (ext & 63);
	i = blk & (EDGE_DEDUP_WORDS - 1);
	if (w->bits[i] & bit)
		rc = EDGE_R_DUP_SEEN;
	else
		w->bits[i] |= bit;
out:
	bpf_spin_unlock(&w->lock);
	return rc;
}

/* edge_dedup_check drops a copy of a packet that already came, when the
 * GRE packet in p (header at gre, path its stable index + 1) has a
 * sequence number and its path is the receiving side of a redundant
 * group in slot. Returns EDGE_GO_ON, or the verdict the packet got. */
static __always_inline int edge_dedup_check(const struct edge_pkt *p,
					    const __be16 *gre, void *data_end,
					    __u32 slot, __u32 path)
{
	__u32 k = (slot & 1) * EDGE_MAX_PATHS + ((path - 1) & (EDGE_MAX_PATHS - 1));
	const __be32 *seq;
	__u32 *win;
	int rc;

	if (!(gre[0] & GRE_F_SEQ))
		return EDGE_GO_ON;
	win = bpf_map_lookup_elem(&edge_path_dedup, &k);
	if (!win || !*win)
		return EDGE_GO_ON;
	/* The sequence number is the GRE header's last word (a header with
	 * one is 8 bytes or more). */
	seq = (const void *)gre + ((p->gre_hlen - 4) & 0x1f);
	if ((void *)(seq + 1) > data_end)
		return EDGE_GO_ON;
	rc = edge_dedup_fresh(*win - 1, bpf_ntohl(*seq));
	return rc ? punt(p, rc, XDP_DROP) : EDGE_GO_ON;
}

#endif
