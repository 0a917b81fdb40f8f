// SPDX-License-Identifier: Apache-2.0

package scx

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types scxedge ../../../bpf/scx_edge.bpf.c
