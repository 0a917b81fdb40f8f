// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* CPU strategies' process events (issue 17): the agent applies a
 * strategy to a process as soon as it appears, not at its next scan of
 * /proc. Every exec is reported (a process takes the command line a
 * strategy matches at exec); a fork or clone only by a process the agent
 * holds (edge_sched_watch), whose new thread or child it must look at.
 * Raw tracepoints: no tracefs needed, and they fire whatever network
 * namespace the agent runs in (the netlink proc connector reports to the
 * initial one only). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define EDGE_SCHED_EXEC 1
#define EDGE_SCHED_FORK 2

struct edge_sched_event {
	__u32 what; /* EDGE_SCHED_EXEC or EDGE_SCHED_FORK */
	__u32 tgid; /* the process that exec'd, or forked */
};

/* Events to the agent. Read by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} edge_sched_events SEC(".maps");

/* The processes the agent's strategies hold (tgid -> 1). Written by the
 * agent after each scan; read by the fork hook. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 4096);
} edge_sched_watch SEC(".maps");

static __always_inline void edge_sched_emit(__u32 what, __u32 tgid)
{
	struct edge_sched_event ev = { .what = what, .tgid = tgid };

	/* A full ring loses the event: the agent's next scan finds the
	 * process anyway. */
	bpf_ringbuf_output(&edge_sched_events, &ev, sizeof(ev), 0);
}

SEC("raw_tracepoint/sched_process_exec")
int edge_sched_exec(void *ctx)
{
	edge_sched_emit(EDGE_SCHED_EXEC, bpf_get_current_pid_tgid() >> 32);
	return 0;
}

/* sched_process_fork fires in the parent (current) for every new task,
 * thread or process. */
SEC("raw_tracepoint/sched_process_fork")
int edge_sched_fork(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (bpf_map_lookup_elem(&edge_sched_watch, &tgid))
		edge_sched_emit(EDGE_SCHED_FORK, tgid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
