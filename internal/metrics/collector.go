// SPDX-License-Identifier: Apache-2.0

// Package metrics exposes the dataplane's per-CPU counters to Prometheus,
// summed at scrape time from a snapshot at most a second old.
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeplane/edgeplane/internal/dataplane"
)

// Source returns the current counters.
type Source func() (*dataplane.Snapshot, error)

// SnapshotEvery is how often at most a scrape reads the dataplane.
const SnapshotEvery = time.Second

// Throttle returns a Source that reads src at most once per every and
// answers from that read in between. A read walks the connection table
// (millions of entries, a syscall or two each), so scrapes in a tight
// loop, or many scrapers at once, must not each cause one. Concurrent
// callers wait for the one read under way and share its result.
func Throttle(src Source, every time.Duration) Source {
	var mu sync.Mutex
	var at time.Time
	var snap *dataplane.Snapshot
	var err error
	return func() (*dataplane.Snapshot, error) {
		mu.Lock()
		defer mu.Unlock()
		if at.IsZero() || time.Since(at) >= every {
			snap, err = src()
			at = time.Now()
		}
		return snap, err
	}
}

// Collector is a prometheus.Collector over the dataplane's maps.
type Collector struct {
	src Source

	pdrPackets, pdrBytes                *prometheus.Desc
	verdictPackets, verdictBytes        *prometheus.Desc
	reasonPackets, reasonBytes          *prometheus.Desc
	cache, first, generation, scrapeErr *prometheus.Desc
	pathPackets, pathBytes              *prometheus.Desc
	lbPackets, lbBytes                  *prometheus.Desc
	lbNew, lbActive                     *prometheus.Desc
	replyPackets, replyBytes            *prometheus.Desc
	nextHopsByDst                       *prometheus.Desc
	xdpCPU                              *prometheus.Desc
}

// NewCollector returns a collector reading from src.
func NewCollector(src Source) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("edgeplane_"+name, help, labels, nil)
	}
	return &Collector{
		src:            src,
		pdrPackets:     d("pdr_packets_total", "Packets matched by a PDR.", "pdr"),
		pdrBytes:       d("pdr_bytes_total", "Bytes matched by a PDR.", "pdr"),
		verdictPackets: d("verdict_packets_total", "Packets by final XDP verdict.", "verdict"),
		verdictBytes:   d("verdict_bytes_total", "Bytes by final XDP verdict.", "verdict"),
		reasonPackets:  d("reason_packets_total", "Packets punted to the kernel or dropped outside a rule, by reason.", "reason"),
		reasonBytes:    d("reason_bytes_total", "Bytes punted or dropped outside a rule, by reason.", "reason"),
		cache:          d("flow_cache_lookups_total", "Flow-cache lookups by result.", "result"),
		first:          d("flow_first_packets_total", "Flow-cache misses that were a flow's first packet, decided and not recorded: a flow a rule decides enters the flow table on its second packet."),
		generation:     d("rules_generation", "Generation number of the live rule tables."),
		scrapeErr:      d("scrape_error", "1 if reading the dataplane maps failed on this scrape."),
		pathPackets:    d("path_packets_total", "Packets a GRE path sent (tx, encapsulated) or received (rx, decapsulated).", "path", "dir"),
		pathBytes:      d("path_bytes_total", "Bytes a GRE path sent (tx, outer frame) or received (rx).", "path", "dir"),
		lbPackets:      d("service_backend_packets_total", "Packets of a service's connections sent to a backend (its FAR).", "service", "far"),
		lbBytes:        d("service_backend_bytes_total", "Bytes of a service's connections sent to a backend.", "service", "far"),
		lbNew:          d("service_backend_new_connections_total", "Connections the balancer gave a backend.", "service", "far"),
		lbActive: d("service_backend_active_connections",
			"Connection-table entries pinned to a backend without a FIN or RST from the client yet (approximate: an entry stays until the table evicts it).", "service", "far"),
		replyPackets: d("service_reply_packets_total", "Packets of a NAT service's replies rewritten back to its VIP.", "service"),
		replyBytes:   d("service_reply_bytes_total", "Bytes of a NAT service's replies.", "service"),
		nextHopsByDst: d("next_hops_shared_by_destination",
			"1 while the kernel routes by destination alone (default rules; no multipath, TOS or source routes) and new flows share a destination's next hop; 0 while each new flow asks the FIB."),
		xdpCPU: d("xdp_cpu_packets_total",
			"Packets the XDP pipeline ran on, by the interface they came in by and the CPU: which CPU does each interface's XDP work (on veth, the sending process's).", "interface", "cpu"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pdrPackets, c.pdrBytes, c.verdictPackets, c.verdictBytes,
		c.reasonPackets, c.reasonBytes, c.cache, c.first, c.generation, c.scrapeErr, c.pathPackets, c.pathBytes,
		c.lbPackets, c.lbBytes, c.lbNew, c.lbActive, c.replyPackets, c.replyBytes, c.nextHopsByDst, c.xdpCPU} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.src()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.scrapeErr, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeErr, prometheus.GaugeValue, 0)
	ch <- prometheus.MustNewConstMetric(c.generation, prometheus.GaugeValue, float64(s.Gen))
	byDst := 0.0
	if s.NextHopsByDst {
		byDst = 1
	}
	ch <- prometheus.MustNewConstMetric(c.nextHopsByDst, prometheus.GaugeValue, byDst)
	for id, v := range s.PDRs {
		l := strconv.FormatUint(uint64(id), 10)
		ch <- prometheus.MustNewConstMetric(c.pdrPackets, prometheus.CounterValue, float64(v.Packets), l)
		ch <- prometheus.MustNewConstMetric(c.pdrBytes, prometheus.CounterValue, float64(v.Bytes), l)
	}
	for i, v := range s.Verdicts {
		ch <- prometheus.MustNewConstMetric(c.verdictPackets, prometheus.CounterValue, float64(v.Packets), dataplane.VerdictNames[i])
		ch <- prometheus.MustNewConstMetric(c.verdictBytes, prometheus.CounterValue, float64(v.Bytes), dataplane.VerdictNames[i])
	}
	for i, v := range s.Reasons {
		if i == dataplane.ReasonNone {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.reasonPackets, prometheus.CounterValue, float64(v.Packets), dataplane.ReasonNames[i])
		ch <- prometheus.MustNewConstMetric(c.reasonBytes, prometheus.CounterValue, float64(v.Bytes), dataplane.ReasonNames[i])
	}
	for id, v := range s.Paths {
		l := strconv.FormatUint(uint64(id), 10)
		for dir, ctr := range map[string]dataplane.Counter{"tx": v.Tx, "rx": v.Rx} {
			ch <- prometheus.MustNewConstMetric(c.pathPackets, prometheus.CounterValue, float64(ctr.Packets), l, dir)
			ch <- prometheus.MustNewConstMetric(c.pathBytes, prometheus.CounterValue, float64(ctr.Bytes), l, dir)
		}
	}
	for _, b := range s.Backends {
		svc := strconv.FormatUint(uint64(b.Service), 10)
		if b.FAR == 0 {
			ch <- prometheus.MustNewConstMetric(c.replyPackets, prometheus.CounterValue, float64(b.Packets), svc)
			ch <- prometheus.MustNewConstMetric(c.replyBytes, prometheus.CounterValue, float64(b.Bytes), svc)
			continue
		}
		far := strconv.FormatUint(uint64(b.FAR), 10)
		ch <- prometheus.MustNewConstMetric(c.lbPackets, prometheus.CounterValue, float64(b.Packets), svc, far)
		ch <- prometheus.MustNewConstMetric(c.lbBytes, prometheus.CounterValue, float64(b.Bytes), svc, far)
		ch <- prometheus.MustNewConstMetric(c.lbNew, prometheus.CounterValue, float64(b.NewConns), svc, far)
		ch <- prometheus.MustNewConstMetric(c.lbActive, prometheus.GaugeValue, float64(b.Active), svc, far)
	}
	for name, per := range s.XDPCPU {
		for cpu, v := range per {
			ch <- prometheus.MustNewConstMetric(c.xdpCPU, prometheus.CounterValue, float64(v), name, strconv.Itoa(cpu))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.cache, prometheus.CounterValue, float64(s.CacheHit), "hit")
	ch <- prometheus.MustNewConstMetric(c.cache, prometheus.CounterValue, float64(s.CacheMiss), "miss")
	ch <- prometheus.MustNewConstMetric(c.first, prometheus.CounterValue, float64(s.CacheFirst))
}
