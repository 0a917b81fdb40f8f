// SPDX-License-Identifier: Apache-2.0

package cpuwatch

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target bpfel -type edge_cpu_beat cpuwatch ../../bpf/cpu_watch.bpf.c
