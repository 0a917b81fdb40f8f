// SPDX-License-Identifier: Apache-2.0

package endtoend

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu -I../../../bpf" -target bpfel -no-global-types benche2e testdata/bench_e2e.bpf.c
