/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* A stage that exists only for TestStageRecipe (stage_recipe_test.go),
 * which adds it to a copy of bpf/ as lib/test_stage.h the way
 * docs/architecture.md's "Adding a stage" says, and runs the result
 * through the production loader: it counts every packet it sees in
 * edge_test_ctrs[0] and drops UDP to the discard port (9, RFC 863),
 * counting those in edge_test_ctrs[1]. */
#ifndef EDGE_TEST_STAGE_H
#define EDGE_TEST_STAGE_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include "verdict.h"

/* edge_test_stage returns EDGE_GO_ON, or XDP_DROP (counted by verdict)
 * for UDP to port 9. Ports are in network byte order in the key. */
static __always_inline int edge_test_stage(struct edge_ctx *c)
{
	struct edge_pkt *p = &c->p;

	count(&edge_test_ctrs, 0, p->len);
	if (p->key.proto == IPPROTO_UDP && p->l4_off &&
	    p->key.dport == bpf_htons(9)) {
		count(&edge_test_ctrs, 1, p->len);
		return verdict(p, XDP_DROP);
	}
	return EDGE_GO_ON;
}

#endif
