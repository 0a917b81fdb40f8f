/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The per-packet pipeline, stage by stage:
 *
 *   parse -> decide -> [FlowOpt: relief to the flow's CPU, probe,
 *   fairness] -> [decap (or a path probe: answered, or timed; or a
 *   redundant copy already seen: dropped) -> a TCP echo timed -> decide
 *   the inner packet -> FlowOpt on it] -> [steer] -> act (a packet over
 *   its share dropped) -> record
 *
 * decide: ICMP errors about NAT'd connections (translated, never cached)
 *   -> stateless services (before any cache) -> flow table; on a miss
 *   classify: services, and PDRs (all of them, or for a guarded service
 *   those before it) -> the decision.
 *
 * The stages share the per-packet context (edge_ctx.h) and live in their
 * own headers, each including what it uses:
 *
 *   verdict.h (context, FARs, counters) <- fib.h <- icmp.h, too_big.h
 *   <- gre.h (encap, decap; probe.h answers and times path probes,
 *   dedup.h drops a redundant group's later copies, tcprtt.h times TCP
 *   echoes) <- nat.h <- balance.h <- act.h <- pipeline.h, with parse.h,
 *   classify.h, flowtab.h, flowcache.h, steer.h (dup.h: a redundant
 *   group's broadcast) and flowopt.h (FlowOpt's relief, probe and
 *   fairness stages) beside them.
 *
 * A new stage is a header of its own and a call here; one that needs
 * state between packets keeps it in a map, one that needs scratch space
 * keeps it in struct edge_ctx. */
#ifndef EDGE_PIPELINE_H
#define EDGE_PIPELINE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "../edge_maps.h"
#include "act.h"
#include "balance.h"
#include "classify.h"
#include "flowcache.h"
#include "flowopt.h"
#include "gre.h"
#include "gtpu.h"
#include "parse.h"
#include "proto.h"
#include "steer.h"
#include "verdict.h"

/* nat_icmp decides an ICMP error about a NAT'd connection: translated and
 * sent on out of the interface of the FAR edge_nat_icmp chose, by the
 * FIB (the next hop into ctx->nf, not kept), counted with the
 * connection's backend. Returns EDGE_GO_ON when the packet is no such
 * error, or a PDR before a guarded service's place takes it. */
static __always_inline int nat_icmp(struct xdp_md *ctx, struct edge_ctx *c,
				    const struct edge_state *st)
{
	const struct edge_far *far;
	int lb;

	lb = edge_nat_icmp(ctx, c, 0);
	if (lb == EDGE_LB_GUARDED) {
		if (edge_classify(c, st, c->rule.prio))
			return EDGE_GO_ON;
		lb = edge_nat_icmp(ctx, c, EDGE_BAL_UNGUARDED);
	}
	if (lb != EDGE_LB_HIT)
		return EDGE_GO_ON;
	if (edge_nat_icmp_rewrite(ctx, c, c->rule.far))
		return punt(&c->p, EDGE_R_NAT_L4, XDP_DROP);
	far = far_get(c->gen, c->rule.far);
	if (!far)
		return punt(&c->p, EDGE_R_NO_STATE, XDP_DROP);
	count(&edge_lb_stats, c->rule.stats & ~EDGE_STATS_LB, c->p.len);
	count(&edge_reasons, EDGE_R_NAT_ICMP, c->p.len);
	flow_fresh(c);
	return edge_redirect(ctx, &c->p, far->ifindex, &c->nf, st->fib_epoch);
}

/* service_or_pdr settles a guarded service's packet: a PDR before the
 * service's place (c->rule.prio, as edge_balance left it) wins
 * (EDGE_LB_PDR, its rule in c->rule), else the balancer is asked again. */
static __always_inline int service_or_pdr(struct edge_ctx *c,
					  const struct edge_state *st,
					  __u32 bal)
{
	if (edge_classify(c, st, c->rule.prio))
		return EDGE_LB_PDR;
	return edge_balance(c, bal | EDGE_BAL_UNGUARDED);
}

/* decide returns the flow entry holding the decision for the packet in
 * c->p: a flow-cache entry, or c->nf, made on a miss, with c->record set
 * when it goes into the flow cache after the packet is acted on (emc:
 * the exact-match slot for it). NULL: the packet is done, *rc its
 * verdict. */
static __always_inline struct edge_flow *
decide(struct xdp_md *ctx, struct edge_ctx *c, const struct edge_state *st,
       struct edge_emc_slot **emc, int *rc)
{
	struct edge_pkt *p = &c->p;
	struct edge_flow *fl;
	__u32 slot = c->gen & 1, bal = st->nnat[slot] ? EDGE_BAL_NAT : 0;
	int lb = EDGE_LB_NONE, stateless = 0;
	__u64 vips;

	c->record = 0;
	c->fo_at = 0; /* an exact-match hit knows it (flow_find) */
	c->fo_done = 0; /* FlowOpt has not run on the packet */
	/* An ICMP error about a NAT'd connection is translated and sent on,
	 * never cached: the flow cache keys it by its own addresses, not by
	 * the connection it quotes. */
	if (bal && (p->key.proto == IPPROTO_ICMP ||
		    p->key.proto == IPPROTO_ICMPV6) && p->l4_off) {
		*rc = nat_icmp(ctx, c, st);
		if (*rc != EDGE_GO_ON)
			return NULL;
	}
	/* A stateless service's packets are decided before any cache: they
	 * are never in edge_flows, and exact-match copies of them would let
	 * a flood of its flows evict every other flow's copy. Other packets
	 * pay one multiply and a bit test (sl_bit), or nothing when the
	 * slot has no stateless service. */
	vips = st->stateless_vips[slot];
	if (vips && (vips >> sl_bit(p->key.dst, p->key.dport) & 1)) {
		lb = edge_stateless(c);
		if (lb == EDGE_LB_ASK)
			lb = edge_balance(c, bal | EDGE_BAL_STATELESS);
		stateless = lb != EDGE_LB_NONE;
	}
	if (stateless) {
		flow_fresh(c);
	} else {
		fl = flow_find(c, emc);
		if (fl) {
			count_cache(EDGE_CACHE_HIT);
			return fl;
		}
		count_cache(EDGE_CACHE_MISS);
		if (st->nservices[slot])
			lb = edge_balance(c, bal);
	}

	/* Classify: a service, or the best PDR. */
	if (lb == EDGE_LB_GUARDED)
		lb = service_or_pdr(c, st, bal);
	if (lb == EDGE_LB_NO_BACKEND) {
		*rc = punt(p, EDGE_R_LB_NO_BACKEND, XDP_DROP);
		return NULL;
	}
	/* A service's decision names no QoS class: its flows' DSCP does. */
	if (lb == EDGE_LB_HIT || lb == EDGE_LB_STATELESS)
		c->rule.qos = 0;
	if (lb == EDGE_LB_HIT || lb == EDGE_LB_STATELESS || lb == EDGE_LB_PDR ||
	    edge_classify(c, st, EDGE_PRIO_ANY)) {
		c->nf.far = c->rule.far;
		c->nf.stats = c->rule.stats;
	} else {
		/* No PDR: defaults.no_match, or for a decapsulated packet
		 * the route the FIB gives it. */
		c->nf.far = p->key.path ? EDGE_FAR_ROUTE : EDGE_NO_FAR;
		c->nf.stats = EDGE_NO_PDR;
		c->rule.qos = 0;
	}
	/* The flow's QoS class, for fairness and relief. */
	if (st->fo_flags[slot] & (EDGE_FO_FAIR | EDGE_FO_RELIEF))
		c->nf.flags |= fo_class(c, c->rule.qos) << EDGE_FF_QOS_SHIFT;
	/* A stateless service's flow is recorded nowhere. */
	c->record = !stateless;
	return &c->nf;
}

/* decided counts the packet with its PDR or service backend and returns
 * the FAR its decision names (NULL: no PDR, or the FIB's route). */
static __always_inline const struct edge_far *
decided(struct edge_ctx *c, const struct edge_flow *fl)
{
	/* EDGE_FAR_ROUTE and EDGE_NO_FAR, the two largest indexes. */
	if (fl->far >= EDGE_FAR_ROUTE)
		return NULL;
	if (fl->stats & EDGE_STATS_LB) {
		count(&edge_lb_stats, fl->stats & ~EDGE_STATS_LB, c->p.len);
		if (c->p.tcp_flags & (TCP_F_FIN | TCP_F_RST))
			edge_conn_close(c);
	} else {
		count(&edge_pdr_stats, fl->stats, c->p.len);
	}
	return far_get(fl->gen, fl->far);
}

/* act carries out the decision in fl, whose FAR is far: a steering
 * FAR's first (steer.h: the member's FAR, recorded in fl; or every
 * usable member's, for a redundant group: dup). */
static __always_inline int act(struct xdp_md *ctx, struct edge_ctx *c,
			       const struct edge_state *st,
			       struct edge_flow *fl, const struct edge_far *far)
{
	__u32 dup = 0, fo = st->fo_flags[c->gen & 1];
	int rc;

	if (fo) {
		rc = c->fo_done ? c->fo_rc :
				  edge_flowopt(ctx, c, st, 0, fl->flags >> EDGE_FF_QOS_SHIFT);
		if (rc != EDGE_GO_ON)
			return rc;
	}
	if (far && far->action == EDGE_ACT_STEER) {
		far = edge_steer_pick(ctx, c, far, fl, st->fib_epoch, &dup, &rc);
		if (!far)
			return rc;
	}
	if (far)
		return edge_act(ctx, &c->p, far, fl, st->fib_epoch, dup);
	if (fl->far == EDGE_FAR_ROUTE)
		return edge_redirect(ctx, &c->p, 0, fl, st->fib_epoch);
	if (fl->far == EDGE_NO_FAR)
		return punt(&c->p, EDGE_R_NO_MATCH, st->nomatch_verdict);
	return punt(&c->p, EDGE_R_NO_STATE, XDP_PASS);
}

/* edge_pipeline_on is the whole per-packet path; entry programs (and
 * the benchmark wrappers) call it, through edge_pipeline but for
 * edge_xdp_cpu. placed: the packet was handed to this CPU by relief, so
 * it is not placed again. */
static __always_inline int edge_pipeline_on(struct xdp_md *ctx, int placed)
{
	struct edge_emc_slot *emc = NULL;
	const struct edge_state *st;
	const struct edge_far *far;
	struct edge_flow *fl;
	struct edge_ctx *c;
	__u32 zero = 0, path, fo;
	int rc;

	__u32 ifslot = ctx->ingress_ifindex & (EDGE_IF_SLOTS - 1);
	__u32 *steer;
	__u64 *on_cpu;

	/* The interface's XDP work belongs on another CPU (edge_if_steer):
	 * hand the frame over; its pipeline runs there (edge_xdp_cpu). */
	steer = placed ? NULL : bpf_map_lookup_elem(&edge_if_steer, &ifslot);
	if (steer && *steer && *steer - 1 != bpf_get_smp_processor_id() &&
	    bpf_redirect_map(&edge_cpus, *steer - 1, 0) == XDP_REDIRECT)
		return XDP_REDIRECT;
	on_cpu = bpf_map_lookup_elem(&edge_if_cpu, &ifslot);
	if (on_cpu)
		(*on_cpu)++;
	c = edge_ctx_get();
	if (!c)
		return XDP_PASS;
	st = bpf_map_lookup_elem(&edge_global, &zero);
	rc = edge_parse(ctx, &c->p);
	if (rc == EDGE_R_NON_IP)
		return punt(&c->p, EDGE_R_NON_IP, XDP_PASS);
	if (!st)
		return punt(&c->p, EDGE_R_NO_STATE, XDP_PASS);
	/* A stack of tags deeper than the parser walks cannot be classified:
	 * it is decided by defaults.malformed like a broken header, never
	 * handed to the kernel past the rules. */
	if (rc < 0)
		return punt(&c->p, -rc, st->malformed_verdict);
	c->gen = st->gen;
	c->now = st->tick;
	if (c->gen == 0)
		return punt(&c->p, EDGE_R_NO_STATE, XDP_PASS);
	/* The user plane's GTP-U (gtpu.h), before any rule. */
	if (gtpu_for_us(c, st))
		return gtpu_too_big(ctx, c, st, edge_gtpu(ctx, c));
	/* A UE's downlink, when the user plane holds sessions: a bit test
	 * first, the session's record only for a destination it may be. */
	if (st->nsess && (c->p.key.family == 4 ? ue_maybe(*(__be32 *)c->p.key.dst)
				: c->p.key.family == 6 && ue_maybe(ue6_key(*(__u64 *)c->p.key.dst)))) {
		rc = edge_gtpu_dl(ctx, c);
		if (rc != EDGE_GO_ON)
			return gtpu_too_big(ctx, c, st, rc);
	}

	fl = decide(ctx, c, st, &emc, &rc);
	if (!fl)
		return rc;
	fo = st->fo_flags[c->gen & 1];
	if (fo && c->p.key.proto != IPPROTO_GRE) {
		/* FlowOpt (relief, probe, fairness), once. Handed to its
		 * flow's CPU: decided and counted there (a new flow's decision
		 * recorded here first, found there). */
		rc = edge_flowopt(ctx, c, st, !placed, fl->flags >> EDGE_FF_QOS_SHIFT);
		if (rc != EDGE_GO_ON) {
			if (c->record)
				flow_record(c, emc);
			else
				flow_keep(c, emc, fl);
			return rc;
		}
	}
	far = decided(c, fl);
	if (far && far->action == EDGE_ACT_DECAP) {
		/* The outer packet's flow is recorded before decap parses
		 * the inner packet into c->p and decides it into c->nf. */
		path = decap_check(c, fl, &rc);
		if (c->record)
			flow_record(c, emc);
		if (!path)
			return rc;
		rc = edge_decap(ctx, c, path);
		if (rc != EDGE_GO_ON)
			return rc;
		/* TCP: the echo that ends the path's passive RTT sample? */
		if (c->p.key.proto == IPPROTO_TCP && c->p.l4_off)
			edge_tcp_rtt_in(ctx, c, path - 1);
		emc = NULL;
		fl = decide(ctx, c, st, &emc, &rc);
		if (!fl)
			return rc;
		far = decided(c, fl);
		if (far && far->action == EDGE_ACT_DECAP) {
			rc = punt(&c->p, EDGE_R_GRE_NESTED, XDP_DROP);
			goto done;
		}
	}
	rc = act(ctx, c, st, fl, far);
	/* The probe's record learns where the packet left (fl's next hop,
	 * once sent), when its direction left elsewhere before: a new
	 * flow's first packet learns it only now. */
	if ((fo & EDGE_FO_PROBE) && fl->oif != c->fo_oif)
		edge_fo_egress(c, fl->oif);
done:
	if (c->record)
		flow_record(c, emc);
	else
		flow_keep(c, emc, fl);
	return rc;
}

static __always_inline int edge_pipeline(struct xdp_md *ctx)
{
	return edge_pipeline_on(ctx, 0);
}

#endif
