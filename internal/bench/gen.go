// SPDX-License-Identifier: Apache-2.0

// Package bench measures the dataplane: per-packet cost through
// BPF_PROG_TEST_RUN beside an XDP_PASS floor measured in the same run, and
// Mpps end to end through a gateway namespace beside the kernel's own
// forwarding through the same topology, measured in the same run.
package bench

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu -I../../bpf" -target bpfel -no-global-types benchobj testdata/bench.bpf.c
