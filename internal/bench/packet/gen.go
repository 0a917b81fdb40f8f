// SPDX-License-Identifier: Apache-2.0

package packet

// The benchmark wrappers, built from the dataplane's headers: what most
// per-packet figures time is this object's copy of the pipeline, so a
// variant of the pipeline (EDGE_GEN_CFLAGS, empty for make generate, as
// internal/bpf's go:generate takes it) must be built into both objects
// to be timed.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu -I../../../bpf $EDGE_GEN_CFLAGS" -target bpfel -no-global-types benchobj testdata/bench.bpf.c
