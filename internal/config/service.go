// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"strings"
	"time"
)

// MaxServices bounds the services, mirroring the dataplane's
// EDGE_MAX_SERVICES.
const MaxServices = 16

// Service is an L4 service: connections to VIP:Port over Proto are
// balanced over the members of an LBR.
type Service struct {
	// ID identifies the service; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// VIP is the service's virtual address, IPv4 or IPv6 (required).
	VIP Addr `yaml:"vip,omitempty"`
	// Port is the service's port (required).
	Port uint16 `yaml:"port"`
	// Proto is tcp or udp (required).
	Proto Proto `yaml:"proto,omitempty"`
	// LBR is the id of the maglev LBR whose members are the backends.
	LBR uint32 `yaml:"lbr"`
	// Health, when set, has the agent probe each backend and take one
	// that fails health.fall probes in a row out of the table until it
	// passes health.rise in a row.
	Health *Health `yaml:"health,omitempty"`
	// Stateless services record no connections (Katran's LRU bypass):
	// every packet is hashed through the Maglev table, before the flow
	// cache, which never holds such a flow. New connections cost no table
	// insert and a flood of them evicts nothing, but a connection keeps
	// its backend only while table changes leave its entry alone
	// (Maglev moves about 1/N of them when one of N backends goes, and
	// drained backends lose theirs), and no per-connection counts (new,
	// active) are kept. NAT backends still record each reply's reverse
	// entry.
	Stateless bool `yaml:"stateless,omitempty"`
	// Precedence places the service in the PDRs' precedence order: a PDR
	// whose precedence is at most this and that matches the VIP's
	// packets is applied in front of the service (PDRs first on equal
	// precedence), so a drop PDR can protect a VIP.
	Precedence uint32 `yaml:"precedence,omitempty"`
}

// Health checks of a service's backends.
type Health struct {
	// Type is HealthTCP (connect) or HealthHTTP (GET Path, 2xx or 3xx).
	Type string `yaml:"type,omitempty"`
	// Path is what an http check gets (default "/").
	Path string `yaml:"path,omitempty"`
	// Port to probe; 0: the backend's (nat) or the service's (dsr-gre).
	Port uint16 `yaml:"port,omitempty"`
	// Interval between checks of a backend.
	Interval Duration `yaml:"interval,omitempty"`
	// Timeout of one check (default: the interval).
	Timeout Duration `yaml:"timeout,omitempty"`
	// Rise is the checks in a row a backend out of the table must pass
	// to come back.
	Rise uint32 `yaml:"rise,omitempty"`
	// Fall is the checks in a row a backend must fail to be taken out.
	Fall uint32 `yaml:"fall,omitempty"`
}

// Health check types and defaults.
const (
	HealthTCP  = "tcp"
	HealthHTTP = "http"

	DefaultHealthInterval = time.Second
	DefaultHealthRise     = 2
	DefaultHealthFall     = 3
)

// Effective returns h with its defaults filled: interval 1 s, timeout the
// interval, rise 2, fall 3, path "/" for HTTP.
func (h Health) Effective() Health {
	if h.Interval.D == 0 {
		h.Interval.D = DefaultHealthInterval
	}
	if h.Timeout.D == 0 {
		h.Timeout.D = h.Interval.D
	}
	if h.Rise == 0 {
		h.Rise = DefaultHealthRise
	}
	if h.Fall == 0 {
		h.Fall = DefaultHealthFall
	}
	if h.Type == HealthHTTP && h.Path == "" {
		h.Path = "/"
	}
	return h
}

var serviceKind = &KindOf[Service]{
	Kind:     KindService,
	Plural:   "services",
	KeyField: "id",
	Check:    checkService,
	Refs: func(sv *Service) []Ref {
		return []Ref{{Field: "lbr", Kind: KindLBR, Key: IDKey(sv.LBR), Check: maglevLBR}}
	},
	Unique: []Unique[Service]{{
		Field: "vip",
		Key:   func(sv *Service) (any, bool) { return sv.key(), sv.VIP.IsSet() },
		Clash: func(sv *Service, other string) string { return fmt.Sprintf("%s is already %s", sv.key(), other) },
	}, {
		Field: "lbr",
		Key:   func(sv *Service) (any, bool) { return sv.LBR, sv.LBR != 0 },
		Clash: func(sv *Service, other string) string {
			return fmt.Sprintf("lbr %d is already used by %s", sv.LBR, other)
		},
	}},
	Capacity: func(n int, _ Limits) string {
		if n > MaxServices {
			return fmt.Sprintf("%d services, at most %d", n, MaxServices)
		}
		return ""
	},
}

// key names a service's VIP, port and protocol.
func (sv Service) key() string {
	return fmt.Sprintf("%s %s/%d", sv.Proto, sv.VIP, sv.Port)
}

func checkService(c *Check, sv *Service) {
	if sv.ID == 0 {
		c.Add("id", "required")
	}
	switch {
	case !sv.VIP.IsSet():
		c.Add("vip", "required")
	case !unicast(sv.VIP.A):
		c.Add("vip", "%s is not a unicast address", sv.VIP)
	}
	if sv.Port == 0 {
		c.Add("port", "required")
	}
	switch {
	case !sv.Proto.Set:
		c.Add("proto", "required (tcp or udp)")
	case sv.Proto.Num != IPProtoTCP && sv.Proto.Num != IPProtoUDP:
		c.Add("proto", "%s cannot be balanced (want tcp or udp)", sv.Proto)
	}
	if sv.LBR == 0 {
		c.Add("lbr", "required")
	}
	if sv.Health != nil {
		checkHealth(c, "health.", *sv.Health)
	}
}

// checkHealth checks a service's health check settings (fields under
// prefix).
func checkHealth(c *Check, prefix string, h Health) {
	switch h.Type {
	case HealthTCP:
		if h.Path != "" {
			c.Add(prefix+"path", "only for type http")
		}
	case HealthHTTP:
		if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
			c.Add(prefix+"path", "must start with /")
		}
	case "":
		c.Add(prefix+"type", "required (want tcp or http)")
	default:
		c.Add(prefix+"type", "unknown type %q (want tcp or http)", h.Type)
	}
	e := h.Effective()
	if e.Interval.D < 100*time.Millisecond || e.Interval.D > time.Hour {
		c.Add(prefix+"interval", "%s outside 100ms..1h", e.Interval.D)
	}
	if e.Timeout.D <= 0 || e.Timeout.D > e.Interval.D {
		c.Add(prefix+"timeout", "%s must be positive and at most the interval (%s)", e.Timeout.D, e.Interval.D)
	}
	for _, x := range []struct {
		name string
		n    uint32
	}{{"rise", e.Rise}, {"fall", e.Fall}} {
		if x.n > 100 {
			c.Add(prefix+x.name, "%d above 100", x.n)
		}
	}
}
