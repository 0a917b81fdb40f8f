// SPDX-License-Identifier: GPL-2.0
/* edgeplane's sched_ext scheduler (issue 17): the CPU strategies' own
 * scheduler where the kernel has sched_ext (CONFIG_SCHED_CLASS_EXT).
 * A task of a process a priority strategy holds (edge_scx_prio, written
 * by the agent) goes straight to its CPU's local queue, ahead of
 * everything there, preempting what runs, with the strategy's slice;
 * every other task joins one shared queue, taken in order with the
 * default slice: round robin among the rest. The kernel unloads it (and
 * every task goes back to the fair class) when the agent closes its
 * link, exits, or the scheduler stalls a task past timeout_ms.
 *
 * No vmlinux.h: the few kernel types used are declared here with
 * preserve_access_index, so their members are found by name in the
 * running kernel's BTF (CO-RE), and the struct_ops members by name too.
 * GPL: sched_ext's kfuncs are GPL-only. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

typedef __s32 s32;
typedef __u32 u32;
typedef __u64 u64;

struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

enum scx_exit_kind {
	SCX_EXIT_NONE,
};

struct scx_exit_info {
	enum scx_exit_kind kind;
} __attribute__((preserve_access_index));

struct sched_ext_ops {
	void (*enqueue)(struct task_struct *p, u64 enq_flags);
	void (*dispatch)(s32 cpu, struct task_struct *prev);
	s32 (*init)(void);
	void (*exit)(struct scx_exit_info *info);
	u32 timeout_ms;
	char name[128];
};

/* sched_ext's constants (include/linux/sched/ext.h, stable ABI). */
#define SCX_DSQ_LOCAL (0x8000000000000000ULL | 2)
#define SCX_ENQ_PREEMPT (1ULL << 32)
#define SCX_SLICE_DFL 20000000ULL

/* The ___v2 kfuncs (Linux 6.19 and later; they return whether they
 * did it): the loader (cilium/ebpf 0.22) finds the first versions'
 * names twice in kernels that have both. */
extern _Bool scx_bpf_dsq_insert___v2(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym;
extern _Bool scx_bpf_dsq_move_to_local___v2(u64 dsq_id, u64 enq_flags) __ksym;
extern s32 scx_bpf_create_dsq(u64 dsq_id, s32 node) __ksym;

/* The shared queue of the tasks no strategy protects. */
#define EDGE_FAIR_DSQ 1

/* A priority strategy's process: its tasks' slice. */
struct edge_scx_prio {
	__u64 slice_ns;
};

/* Processes (tgid) a priority strategy holds. Written by the agent;
 * read at every enqueue. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct edge_scx_prio);
	__uint(max_entries, 4096);
} edge_scx_prio SEC(".maps");

/* Enqueues: [0] priority tasks, [1] the rest; [2] the exit kind the
 * kernel gave when it unloaded the scheduler (0: not unloaded). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 3);
} edge_scx_stats SEC(".maps");

static __always_inline void edge_scx_count(__u32 idx, __u64 v)
{
	__u64 *c = bpf_map_lookup_elem(&edge_scx_stats, &idx);

	if (c)
		__sync_fetch_and_add(c, v);
}

SEC("struct_ops/edge_scx_enqueue")
void BPF_PROG(edge_scx_enqueue, struct task_struct *p, u64 enq_flags)
{
	__u32 tgid = p->tgid;
	struct edge_scx_prio *pr = bpf_map_lookup_elem(&edge_scx_prio, &tgid);

	if (pr) {
		scx_bpf_dsq_insert___v2(p, SCX_DSQ_LOCAL, pr->slice_ns, enq_flags | SCX_ENQ_PREEMPT);
		edge_scx_count(0, 1);
		return;
	}
	scx_bpf_dsq_insert___v2(p, EDGE_FAIR_DSQ, SCX_SLICE_DFL, enq_flags);
	edge_scx_count(1, 1);
}

SEC("struct_ops/edge_scx_dispatch")
void BPF_PROG(edge_scx_dispatch, s32 cpu, struct task_struct *prev)
{
	scx_bpf_dsq_move_to_local___v2(EDGE_FAIR_DSQ, 0);
}

SEC("struct_ops.s/edge_scx_init")
s32 BPF_PROG(edge_scx_init)
{
	return scx_bpf_create_dsq(EDGE_FAIR_DSQ, -1);
}

SEC("struct_ops/edge_scx_exit")
void BPF_PROG(edge_scx_exit, struct scx_exit_info *info)
{
	edge_scx_count(2, info->kind);
}

SEC(".struct_ops.link")
struct sched_ext_ops edge_scx = {
	.enqueue = (void *)edge_scx_enqueue,
	.dispatch = (void *)edge_scx_dispatch,
	.init = (void *)edge_scx_init,
	.exit = (void *)edge_scx_exit,
	.timeout_ms = 5000,
	.name = "edgeplane",
};

char LICENSE[] SEC("license") = "GPL";
