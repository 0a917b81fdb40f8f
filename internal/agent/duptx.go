// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/bpf/loader"
)

// dupTxEvery is how often the agent looks whether each interface a
// redundant group broadcasts to takes redirected frames.
const dupTxEvery = 2 * time.Second

// watchDupTx keeps an eye on the interfaces redundant groups broadcast
// their copies to: the kernel skips, without a trace, a device that
// does not take redirected frames (no ndo_xdp_xmit; on veth, a peer
// without XDP or GRO), so its copies would vanish. Each interface's
// readiness is in ready (1 or 0, by interface name), and every change is
// logged once.
func watchDupTx(ctx context.Context, dp *loader.Dataplane, log *slog.Logger, ready *prometheus.GaugeVec) {
	known := map[uint32]bool{}
	t := time.NewTicker(dupTxEvery)
	defer t.Stop()
	for {
		seen := map[uint32]bool{}
		for g, ifs := range dp.RedundantInterfaces() {
			for _, ifi := range ifs {
				if seen[ifi] {
					continue
				}
				seen[ifi] = true
				f, err := loader.XDPFeatures(ifi)
				if err != nil {
					log.Debug("redundant copies: interface features", "ifindex", ifi, "error", err)
					continue
				}
				ok := f&loader.XDPActNDOXmit != 0
				name := strconv.FormatUint(uint64(ifi), 10)
				if nif, err := net.InterfaceByIndex(int(ifi)); err == nil {
					name = nif.Name
				}
				v := 0.0
				if ok {
					v = 1
				}
				ready.WithLabelValues(name).Set(v)
				if was, had := known[ifi]; !had || was != ok {
					if ok {
						if had {
							log.Info("redundant copies: interface takes redirected frames again", "interface", name, "group", g)
						}
					} else {
						log.Warn("redundant copies out of this interface are dropped by the kernel, uncounted: it takes no redirected frames "+
							"(no ndo_xdp_xmit; a veth's peer runs no XDP and has GRO off)", "interface", name, "group", g)
					}
					known[ifi] = ok
				}
			}
		}
		for ifi := range known {
			if !seen[ifi] {
				delete(known, ifi)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
