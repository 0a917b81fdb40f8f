/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The per-packet context: what the stages of lib/pipeline.h tell each
 * other about the packet being decided. It lives in a per-CPU slot
 * (edge_ctx in edge_maps.h), not on the entry function's stack, which the
 * verifier caps at 512 bytes for a program and every function it calls:
 * the stages to come add their state here. XDP runs in NAPI poll with
 * bottom halves off, one packet at a time on a CPU, so a slot is never
 * shared; every field a stage reads is written for the packet first.
 * (BPF_PROG_TEST_RUN only disables migration: on a fully preemptible
 * kernel two test runs on one CPU could interleave, as they could on the
 * exact-match cache's slots.) Not shared with Go. */
#ifndef EDGE_CTX_H
#define EDGE_CTX_H

#include <linux/types.h>
#include <linux/bpf.h>
#include "edge_types.h"

/* What parsing learned of the packet being decided: the outer packet, or
 * after decap the inner one. */
struct edge_pkt {
	struct edge_flow_key key;
	__u32 len;       /* frame length in bytes */
	__u16 l3_off;    /* offset of the IP header from data */
	__u16 l4_off;    /* offset of the L4 header (0 if none) */
	__u16 l3_len;    /* IP datagram length (tot_len; IPv6: + 40) */
	__u8 vlans;      /* VLAN tags seen */
	__u8 gre_hlen;   /* GRE header length incl. options, 0 if not GRE */
	__u8 first_frag; /* first fragment of several: L4 header, partial payload */
	__u8 tcp_flags;  /* TCP: FIN 0x01, SYN 0x02, RST 0x04, ... (byte 13) */
	__u8 ecn;        /* the IP header's ECN field (RFC 3168): 0 not ECN-capable, 3 CE */
	__u8 pad;
};

/* The balancer's keys and values, and the offsets edge_nat_icmp hands to
 * edge_nat_icmp_rewrite: map lookups need their keys in memory. */
struct edge_lb_scratch {
	struct edge_conn_key ck; /* the packet's connection */
	struct edge_conn_key fk; /* a connection to find (edge_ft_conn) */
	struct edge_svc_key sk;
	__u32 fb;                /* edge_ft_conn: fk's bucket */
	struct edge_flow_key ek; /* an exact-match slot's key, unpacked */
	/* edge_nat_icmp: offsets of the ICMP header (l4), the quoted IP
	 * header (il3), its L4 header (il4) and its source address (off), and
	 * the ICMP checksum's sum being updated */
	__u32 l3, l4, il3, il4, off, sum;
	__u8 family, proto;
	__u8 to_vip;       /* toward the VIP (else toward the client) */
	__u8 from_backend; /* toward the client, sent by the backend itself */
};

/* A connection (or NAT reply) the flow table holds for the packet's
 * 5-tuple, as edge_ft_lookup or edge_ft_conn found it: its backend (or
 * reply rewrite) FAR, kept under later generations while it is still at
 * its place. flags 0: none. */
struct edge_ft_rec {
	__u32 flags; /* EDGE_FF_* of the entry */
	__u32 svc;
	__u32 far;
	__u32 far_id;
	__u32 stats;
};

/* What a PFCP session's PDRs detect a packet by (gtpu.h): its
 * direction, TEID and QFI (uplink), the UE's address, the remote end's
 * address and port, the UE's port, the protocol (ports host order; 0
 * without L4). */
struct edge_sess_pkt {
	__u8 ul;
	__u8 qfi;
	__u8 proto;
	__u8 v6; /* an IPv6 packet: ue6 holds its UE's /64 prefix */
	__be32 teid;
	union {
		struct {
			__be32 ueip;
			__be32 remote;
		};
		/* v6: the UE address's /64 prefix, as edge_sess_pdr.ue6
		 * holds it, in two halves (the struct stays 4-aligned, the
		 * context's layout as it was) */
		__u32 ue6[2];
	};
	__u16 rport;
	__u16 lport;
};

/* struct edge_ctx is the context itself. */
struct edge_ctx {
	struct edge_pkt p;
	struct edge_flow_key4 k4; /* p.key packed (IPv4): the flow-cache key */
	struct edge_flow nf;      /* the flow entry a miss decides into */
	struct edge_flow hop;     /* scratch: a redundant member's next hop */
	__u32 tsval, tsecr;       /* scratch: a TCP packet's timestamps (tcprtt.h) */
	struct edge_rule rule;    /* what classification or a service chose */
	__u32 gen;                /* the rules generation read for the packet */
	__u32 now;                /* the agent's tick (edge_state.tick) */
	__u32 record;             /* nf goes into the flow table after act */
	/* Where the flow table places p.key (flowtab.h): its bucket, tag,
	 * the bucket's version at lookup (odd: do not record), and the way
	 * holding its entry (-1: none). */
	__u32 ft_bucket;
	__u32 ft_tag;
	__u32 ft_seq;
	__s32 ft_way;
	__u32 ft_nh; /* the entry's fib_epoch when it was read */
	/* FlowOpt's record of the packet's connection (flowopt.h): its slot
	 * + 1 (0: not known), from the flow's exact-match copy at decide,
	 * then as relief or act found it (looked at first, and taken only
	 * when the record there holds the connection's whole key; the copy
	 * keeps it for the flow's next packet: emc_fill, flow_keep); the
	 * connection's check and the packet's direction, as the stage that
	 * placed it found them; and the interface the record says that
	 * direction leaves by, as the probe found it before act (0: the
	 * probe did not run; after act, edge_fo_egress writes where the
	 * packet left when it is another). */
	__u32 fo_at;
	__u32 fo_check;
	__u32 fo_dir;
	__u32 fo_oif;
	/* FlowOpt ran on the packet (fo_done; edge_fo, once the flow is
	 * decided, for every packet but a GRE one from a peer: decapsulated,
	 * its inner packet at act), and the verdict it left for act
	 * (EDGE_GO_ON, or XDP_DROP: over its share). */
	__u32 fo_done;
	__s32 fo_rc;
	/* FlowOpt's clock on this CPU (flowopt.h's fo_clock), kept between
	 * packets, unlike the rest: the fine clock as last read, the
	 * packets after it that may still take it, and those that took it. */
	__u64 fo_t;
	__u32 fo_reuse;
	__u32 fo_count;
	struct edge_ft_rec rec;
	struct edge_lb_scratch lb;
	/* gtpu.h: what a session's PDRs detect the packet by, and the
	 * FIB's question about the GTP-U peer (kept off the stack, which
	 * the pipeline and the ICMP answers it may call share). */
	struct edge_sess_pkt sp;
	struct bpf_fib_lookup fib;
	__u64 nhkey[3];
	__u32 gtpu_mtu; /* EDGE_GTPU_TOO_BIG: the largest inner packet */
	__u32 pad2;
};

#endif
