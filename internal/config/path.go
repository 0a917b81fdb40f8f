// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net/netip"
)

// Path types.
const (
	PathGRE = "gre"
)

// DefaultPathTTL is the outer TTL of encapsulated packets when a path does
// not set one.
const DefaultPathTTL = 64

// Path is a WAN overlay path: a GRE tunnel (RFC 2784, key and sequence
// numbers of RFC 2890) from this gateway to a remote one.
type Path struct {
	// ID identifies the path; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Type is PathGRE.
	Type string `yaml:"type,omitempty"`
	// Interface is the egress interface of the outer packets.
	Interface string `yaml:"interface,omitempty"`
	// Local and Remote are the outer IPv4 addresses (this gateway's and
	// the far end's).
	Local  Addr `yaml:"local,omitempty"`
	Remote Addr `yaml:"remote,omitempty"`
	// Key is the optional GRE key; decapsulation tells paths apart by
	// (local address, key).
	Key *uint32 `yaml:"key,omitempty"`
	// Seq adds GRE sequence numbers to encapsulated packets.
	Seq bool `yaml:"seq,omitempty"`
	// TTL of the outer header; 0 means DefaultPathTTL.
	TTL uint8 `yaml:"ttl,omitempty"`
	// DSCP of the outer header; unset copies the inner packet's.
	DSCP *uint8 `yaml:"dscp,omitempty" max:"63"`
	// Monitor is how the path is probed and judged (unset fields: the
	// defaults).
	Monitor PathMonitor `yaml:"monitor,omitempty"`
}

var pathKind = &KindOf[Path]{
	Kind:     KindPath,
	Plural:   "paths",
	KeyField: "id",
	Normalize: func(p *Path) {
		if p.TTL == 0 {
			p.TTL = DefaultPathTTL
		}
	},
	Check: checkPath,
	// A path's secret shows redacted; given back so, it stays.
	Keep: func(p, old *Path) {
		if s := p.Monitor.Secret; s.Redacted() && old != nil && old.Monitor.Secret.Same(s) {
			p.Monitor.Secret = old.Monitor.Secret
		}
	},
	Refs: func(p *Path) []Ref {
		return []Ref{{Field: "interface", Kind: KindInterface, Key: NameKey(p.Interface)}}
	},
	Unique: []Unique[Path]{{
		Field: "key",
		Key: func(p *Path) (any, bool) {
			return p.DecapID()
		},
		Clash: func(p *Path, other string) string {
			what := "no key"
			if p.Key != nil {
				what = fmt.Sprintf("key %d", *p.Key)
			}
			return fmt.Sprintf("%s with local %s is already used by %s; decapsulation could not tell them apart", what, p.Local, other)
		},
	}},
}

// DecapID is what tells a path's received GRE packets apart from other
// paths': its local address and key.
type DecapID struct {
	Local  Addr
	Key    uint32
	HasKey bool
}

// DecapID returns pt's decapsulation identity, if its local address is set.
func (pt Path) DecapID() (DecapID, bool) {
	k := DecapID{Local: pt.Local, HasKey: pt.Key != nil}
	if pt.Key != nil {
		k.Key = *pt.Key
	}
	return k, pt.Local.IsSet()
}

func checkPath(c *Check, pt *Path) {
	if pt.ID == 0 {
		c.Add("id", "required")
	}
	switch pt.Type {
	case PathGRE:
	case "":
		c.Add("type", "required (want gre)")
	default:
		c.Add("type", "unknown type %q (want gre)", pt.Type)
	}
	if pt.Interface == "" {
		c.Add("interface", "required")
	}
	for _, a := range []struct {
		name string
		addr Addr
	}{{"local", pt.Local}, {"remote", pt.Remote}} {
		switch {
		case !a.addr.IsSet():
			c.Add(a.name, "required (the outer IPv4 address)")
		case !a.addr.A.Is4():
			c.Add(a.name, "%s is not IPv4 (outer headers are IPv4)", a.addr)
		case a.addr.A.IsUnspecified() || a.addr.A.IsMulticast() || a.addr.A == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			c.Add(a.name, "%s cannot be a tunnel endpoint", a.addr)
		}
	}
	if pt.Local.IsSet() && pt.Local == pt.Remote {
		c.Add("remote", "same as local %s", pt.Local)
	}
	checkMonitor(c, "monitor.", pt.Monitor)
}
