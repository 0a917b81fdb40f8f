/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Protocol numbers and header bits the dataplane names, beside the kernel
 * UAPI headers that define the rest. Kernel headers only, so every lib/
 * header (lib/icmp.h too, which is tested alone) can include it. */
#ifndef EDGE_PROTO_H
#define EDGE_PROTO_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#ifndef IPPROTO_GRE
#define IPPROTO_GRE 47
#endif

/* bpf_fib_lookup's address families (linux/socket.h, which the bpf
 * target cannot include: it pulls in libc). */
#ifndef AF_INET
#define AF_INET 2
#define AF_INET6 10
#endif

/* IPv6 extension headers (RFC 8200 section 4; net/ipv6.h is not UAPI). */
#ifndef NEXTHDR_HOP
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60
#endif

/* GRE flag bits (RFC 2784 / RFC 2890), network order in the first 16 bits. */
#define GRE_F_CSUM bpf_htons(0x8000)
#define GRE_F_ROUTING bpf_htons(0x4000)
#define GRE_F_KEY bpf_htons(0x2000)
#define GRE_F_SEQ bpf_htons(0x1000)
#define GRE_F_VERSION bpf_htons(0x0007)
/* RFC 1701's strict source route bit and the high bit of its recursion
 * control: with the routing bit, the bits 1-5 of RFC 2784 section 2.5 a
 * receiver that does not implement RFC 1701 must discard a packet for. */
#define GRE_F_STRICT bpf_htons(0x0800)
#define GRE_F_RECUR_HI bpf_htons(0x0400)

/* IPv4 flags and fragment offset (iphdr.frag_off, RFC 791), network
 * order. */
#define IP4_DF bpf_htons(0x4000)
#define IP4_MF bpf_htons(0x2000)
#define IP4_OFFSET bpf_htons(0x1fff)

/* TCP flag bits of header byte 13 (RFC 9293). */
#define TCP_F_FIN 0x01
#define TCP_F_SYN 0x02
#define TCP_F_RST 0x04
#define TCP_F_ACK 0x10

/* The part of linux/icmp.h used here. That header pulls libc's
 * sys/socket.h in through linux/if.h, and libc's headers want the 32-bit
 * stubs (a multilib package) when compiled for the bpf target. */
#define ICMP_ECHOREPLY 0
#define ICMP_DEST_UNREACH 3
#define ICMP_ECHO 8
#define ICMP_TIME_EXCEEDED 11
#define ICMP_PARAMETERPROB 12
#define ICMP_TIMESTAMP 13
#define ICMP_TIMESTAMPREPLY 14
#define ICMP_INFO_REQUEST 15
#define ICMP_INFO_REPLY 16
#define ICMP_ADDRESS 17
#define ICMP_ADDRESSREPLY 18
#define ICMP_FRAG_NEEDED 4

/* reflect4 turns a frame back toward where it came from: its MAC
 * addresses swap, and its IPv4 addresses (the header checksum stays). */
static __always_inline void reflect4(struct ethhdr *eth, struct iphdr *iph)
{
	__u8 mac[ETH_ALEN];
	__be32 a;

	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	a = iph->saddr;
	iph->saddr = iph->daddr;
	iph->daddr = a;
}

/* reflect6 is reflect4 for an IPv6 header. */
static __always_inline void reflect6(struct ethhdr *eth, struct ipv6hdr *ip6)
{
	__u8 mac[ETH_ALEN];
	__u64 a[2], *s = (__u64 *)&ip6->saddr, *d = (__u64 *)&ip6->daddr;

	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	a[0] = s[0];
	a[1] = s[1];
	s[0] = d[0];
	s[1] = d[1];
	d[0] = a[0];
	d[1] = a[1];
}

#endif
