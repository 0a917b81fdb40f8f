/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* De-duplication of a redundant group's copies at the receiving gateway:
 * the sender puts one GRE sequence number (of the group) on every copy of
 * a packet; decap lets the first copy of each number through and drops
 * the rest, so the host sees every packet once. The window is RFC 6479's
 * block bitmap (struct edge_dedup_win): numbers extended to 64 bits from the
 * newest seen, so a late, reordered or wrapped number is placed right;
 * one older than the window cannot be told from a copy and is dropped,
 * counted, and so is one too far ahead for a single packet to move the
 * window, unless a run of them says the sender's numbers moved there. */
#ifndef EDGE_DEDUP_H
#define EDGE_DEDUP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "../edge_maps.h"
#include "proto.h"
#include "verdict.h"

/* dedup_reach tells whether extended number ext is within one packet's
 * reach of a window whose newest is top: no more than EDGE_DEDUP_JUMP
 * ahead of it, and not older than the window. */
static __always_inline int dedup_reach(__u64 ext, __u64 top)
{
	if (ext > top)
		return ext - top <= EDGE_DEDUP_JUMP;
	return top / 64 - ext / 64 < EDGE_DEDUP_WORDS - 1;
}

/* edge_dedup_fresh records sequence number seq in window win (edge_dedup's
 * index) and tells whether it is the first copy: 0, or the edge_reason to
 * drop it for. A global function: verified once.
 *
 * GRE carries no authentication (RFC 2890's numbers are cleartext), so
 * anyone who can send to the gateway from a path's remote address can
 * carry any number. One packet may therefore move the window at most
 * EDGE_DEDUP_JUMP ahead, which keeps every number the sender is about to
 * use inside it; a number further ahead, or older than the window, is
 * dropped (dup_jump, dup_late) and only proposes a new place: the window
 * moves there once EDGE_DEDUP_CONFIRM such numbers in a row lie within
 * EDGE_DEDUP_JUMP of each other, with no number within the window's
 * reach between them, as a sender that started its numbers again, or
 * came back after a long outage, sends them (copies and reordering
 * included). A random number every few packets never gets there. */
__noinline int edge_dedup_fresh(__u32 win, __u32 seq)
{
	struct edge_dedup_win *w;
	__u64 ext, blk, top, n, i, bit;
	__s32 d;
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
	if (!top) {
		n = EDGE_DEDUP_WORDS;
	} else if (!dedup_reach(ext, top)) {
		/* Copies and reordering among the sender's own numbers
		 * confirm too: near the candidate either way. */
		d = seq - w->cand;
		if (w->run && d >= -EDGE_DEDUP_JUMP && d <= EDGE_DEDUP_JUMP) {
			w->run++;
			if (d > 0)
				w->cand = seq;
		} else {
			w->run = 1;
			w->cand = seq;
		}
		if (w->run < EDGE_DEDUP_CONFIRM) {
			rc = ext > top ? EDGE_R_DUP_JUMP : EDGE_R_DUP_LATE;
			goto out;
		}
		/* Confirmed: the window starts over at this number. */
		ext = (1ULL << 32) + seq;
		blk = ext / 64;
		top = 0;
		n = EDGE_DEDUP_WORDS;
	} else if (ext > top) {
		/* Newer than any: the window moves up to it, clearing the
		 * blocks it moves past. */
		n = blk - top / 64;
	} else {
		n = 0;
	}
	w->run = 0;
	if (n > EDGE_DEDUP_WORDS)
		n = EDGE_DEDUP_WORDS;
	for (i = 0; i < EDGE_DEDUP_WORDS; i++) {
		if (i >= n)
			break;
		w->bits[(blk - i) & (EDGE_DEDUP_WORDS - 1)] = 0;
	}
	/* The newest number, not its block's first: how far the next may
	 * jump counts from it. */
	if (ext > top)
		w->top = ext;
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

/* edge_dedup_check drops a copy of a packet that already came, when its
 * path (stable index + 1) is the receiving side of a redundant group in
 * slot; seq is its GRE sequence number, len its length. Called once the
 * inner packet proved well formed, so a malformed one moves no window.
 * Returns 0 when the packet goes on, else XDP_DROP, counted under its
 * reason. A global function, verified once: it comes after each of the
 * inner parser's ways out. */
__noinline int edge_dedup_check(__u32 slot, __u32 path, __u32 seq, __u32 len)
{
	__u32 k = (slot & 1) * EDGE_MAX_PATHS + ((path - 1) & (EDGE_MAX_PATHS - 1));
	__u32 *win;
	int rc;

	win = bpf_map_lookup_elem(&edge_path_dedup, &k);
	if (!win || !*win)
		return 0;
	rc = edge_dedup_fresh(*win - 1, seq);
	if (!rc)
		return 0;
	count(&edge_reasons, rc, len);
	count(&edge_verdicts, XDP_DROP, len);
	return XDP_DROP;
}

#endif
