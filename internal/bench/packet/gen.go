// SPDX-License-Identifier: Apache-2.0

package packet

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu -I../../../bpf" -target bpfel -no-global-types benchobj testdata/bench.bpf.c
