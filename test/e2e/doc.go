// SPDX-License-Identifier: Apache-2.0

// Package e2e runs real traffic through real XDP gateways: each test
// builds host A -- gateway -- host B in network namespaces (internal/lab),
// starts the edgeplane binary built once by TestMain on the gateway, and
// checks forwarding, drops, counters, reloads, restarts and metrics. The
// lab tests bring up the two-site SD-WAN lab with `edgeplane-dev lab up` and
// check the GRE overlay on the wire, iperf3 through it and `lab down`.
package e2e
