// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Stopped CPUs. A CPU of a virtual machine stops now and then while the
 * others run: the host runs something else on it. Whatever waits on the
 * stopped CPU (a frame in its softirq, a thread whose timer is armed
 * there) waits with it, and a loop running on another CPU sees the wait
 * as loss. A BPF timer pinned to each CPU beats at a fixed period (an
 * hrtimer: it fires in idle too, and no task of the guest delays it) and
 * notes each beat that came more than two periods after the one before:
 * the CPU ran nothing, not even its timer interrupt, meanwhile. One
 * timer interrupt per period per CPU; no thread to wake, no context
 * switch. (A perf cpu-clock event does not fire on an idle CPU.) */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#ifndef BPF_F_TIMER_CPU_PIN
#define BPF_F_TIMER_CPU_PIN (1ULL << 1) /* Linux 6.7 */
#endif

#define EDGE_CPU_GAPS 32 /* stalls remembered per CPU, a power of two */
#define CLOCK_MONOTONIC 1

struct edge_cpu_gap {
	__u64 from; /* the beat that should have come (CLOCK_MONOTONIC ns) */
	__u64 to;   /* the beat that came */
};

struct edge_cpu_beat {
	struct bpf_timer timer;
	__u64 last;  /* the CPU's last beat (CLOCK_MONOTONIC ns), 0: none yet */
	__u64 beats; /* beats, ever */
	__u64 gaps;  /* stalls noted, ever: the next goes to gap[gaps % EDGE_CPU_GAPS] */
	__u64 stalled; /* the stalls' time, ever (ns) */
	struct edge_cpu_gap gap[EDGE_CPU_GAPS];
};

/* The beat period in ns, set by the agent before loading. */
const volatile __u64 edge_cpu_period_ns = 1000000;

/* One entry per CPU, written by that CPU's beat alone; read by the
 * agent. Closing it (the agent's last reference) cancels the timers. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct edge_cpu_beat);
	__uint(max_entries, 1); /* the agent sets the possible CPUs */
} edge_cpu_beats SEC(".maps");

static int edge_cpu_tick(void *map, __u32 *key, struct edge_cpu_beat *b)
{
	__u64 now = bpf_ktime_get_ns();

	if (b->last && now - b->last > 2 * edge_cpu_period_ns) {
		struct edge_cpu_gap *g = &b->gap[b->gaps & (EDGE_CPU_GAPS - 1)];

		g->from = b->last + edge_cpu_period_ns;
		g->to = now;
		/* The gap is written before the count that shows it (a
		 * reader copies the count first; x86 keeps stores in order;
		 * a gap read torn elsewhere delays a verdict, no more). */
		asm volatile("" ::: "memory");
		b->gaps++;
		b->stalled += g->to - g->from;
	}
	b->last = now;
	b->beats++;
	bpf_timer_start(&b->timer, edge_cpu_period_ns, BPF_F_TIMER_CPU_PIN);
	return 0;
}

/* Started on each CPU by the agent (a test run on a thread pinned to
 * it): arms that CPU's timer, pinned there. */
SEC("xdp")
int edge_cpu_watch_start(struct xdp_md *ctx)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct edge_cpu_beat *b = bpf_map_lookup_elem(&edge_cpu_beats, &cpu);

	if (!b)
		return XDP_ABORTED;
	bpf_timer_init(&b->timer, &edge_cpu_beats, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&b->timer, edge_cpu_tick);
	if (bpf_timer_start(&b->timer, edge_cpu_period_ns, BPF_F_TIMER_CPU_PIN))
		return XDP_ABORTED;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
