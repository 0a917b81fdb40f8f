// SPDX-License-Identifier: Apache-2.0

// Package icmptest tests bpf/lib/icmp.h (ICMP fragmentation needed and
// ICMPv6 packet too big built in place from XDP) through a test-only XDP
// program, independently of the dataplane that calls it. The program is
// built twice: with clang's default CPU, and with -mcpu=v3 as the
// dataplane is (alu32 code the verifier sees differently).
package icmptest

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I../../../bpf" -target bpfel -no-global-types icmptest testdata/test_icmp.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu -I../../../bpf" -target bpfel -no-global-types icmptestv3 testdata/test_icmp.bpf.c
