// SPDX-License-Identifier: Apache-2.0

package config

import "fmt"

// PDR is a packet detection rule: a match and the FAR applied on a hit.
type PDR struct {
	// ID identifies the PDR; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Precedence orders overlapping PDRs; the lower value wins, as in
	// PFCP. Zero is a valid precedence.
	Precedence uint32 `yaml:"precedence"`
	// Match selects packets; unset fields match anything.
	Match Match `yaml:"match,flow"`
	// FAR is the ID of the FAR applied to matching packets (required).
	FAR uint32 `yaml:"far"`
	// QoS is the id of the QoS class matching packets are in, whatever
	// their DSCP (0: the class of their DSCP, if any).
	QoS uint32 `yaml:"qos,omitempty"`
}

// Match is the packet classifier of a PDR. Every field is optional; an
// unset field is a wildcard.
type Match struct {
	// In is the interface the packet arrived on.
	In string `yaml:"in,omitempty"`
	// Src and Dst are the source and destination prefixes, IPv4 or
	// IPv6 (both of one family when both are set).
	Src Prefix `yaml:"src,omitempty"`
	Dst Prefix `yaml:"dst,omitempty"`
	// Proto is the IP protocol (of the inner packet after decap).
	Proto Proto `yaml:"proto,omitempty"`
	// Sport and Dport are the source and destination ports, one or a
	// range; they need proto tcp, udp or sctp.
	Sport PortRange `yaml:"sport,omitempty"`
	Dport PortRange `yaml:"dport,omitempty"`
	// DSCP is the packet's DSCP code point.
	DSCP *uint8 `yaml:"dscp,omitempty" max:"63"`
	// GREKey matches GRE packets by their key (proto gre, filled in
	// when proto is unset).
	GREKey *uint32 `yaml:"gre_key,omitempty"`
	// InPath, when set, matches only packets the dataplane decapsulated
	// from the GRE path with this id (the inner packet is classified
	// after decap); 0 matches any packet, decapsulated or not.
	InPath uint32 `yaml:"in_path,omitempty"`
}

var pdrKind = &KindOf[PDR]{
	Kind:     KindPDR,
	Plural:   "pdrs",
	KeyField: "id",
	Normalize: func(p *PDR) {
		if p.Match.GREKey != nil && !p.Match.Proto.Set {
			p.Match.Proto = Proto{Num: IPProtoGRE, Set: true}
		}
	},
	Check: checkPDR,
	Refs: func(p *PDR) []Ref {
		return []Ref{
			{Field: "match.in", Kind: KindInterface, Key: NameKey(p.Match.In)},
			{Field: "match.in_path", Kind: KindPath, Key: IDKey(p.Match.InPath)},
			{Field: "far", Kind: KindFAR, Key: IDKey(p.FAR)},
			{Field: "qos", Kind: KindQoSClass, Key: IDKey(p.QoS)},
		}
	},
	Capacity: func(n int, l Limits) string {
		if l.Rules != 0 && uint64(n) > uint64(l.Rules) {
			return fmt.Sprintf("%d rules exceed limits.rules %d", n, l.Rules)
		}
		return ""
	},
}

func checkPDR(c *Check, r *PDR) {
	if r.ID == 0 {
		c.Add("id", "required")
	}
	checkMatch(c, &r.Match)
	if r.FAR == 0 {
		c.Add("far", "required")
	}
}

func checkMatch(c *Check, m *Match) {
	for _, x := range []struct {
		name string
		pfx  Prefix
	}{{"src", m.Src}, {"dst", m.Dst}} {
		if x.pfx.IsSet() {
			if masked := x.pfx.P.Masked(); masked != x.pfx.P {
				c.Add("match."+x.name, "host bits set; did you mean %s?", masked)
			}
		}
	}
	has4 := (m.Src.IsSet() && m.Src.P.Addr().Is4()) || (m.Dst.IsSet() && m.Dst.P.Addr().Is4())
	has6 := (m.Src.IsSet() && m.Src.P.Addr().Is6()) || (m.Dst.IsSet() && m.Dst.P.Addr().Is6())
	if m.Src.IsSet() && m.Dst.IsSet() && has4 && has6 {
		c.Add("match", "src is %s but dst is %s", family(m.Src), family(m.Dst))
	}
	if m.Proto.Set {
		switch {
		case m.Proto.Num == IPProtoICMP && has6:
			c.Add("match.proto", "icmp cannot match IPv6 prefixes (use icmpv6)")
		case m.Proto.Num == IPProtoICMPv6 && has4:
			c.Add("match.proto", "icmpv6 cannot match IPv4 prefixes (use icmp)")
		}
	}
	portProto := m.Proto.Set && (m.Proto.Num == IPProtoTCP || m.Proto.Num == IPProtoUDP || m.Proto.Num == IPProtoSCTP)
	for _, x := range []struct {
		name string
		r    PortRange
	}{{"sport", m.Sport}, {"dport", m.Dport}} {
		switch {
		case !x.r.Set:
		case x.r.Lo > x.r.Hi:
			c.Add("match."+x.name, "port range reversed (%d-%d)", x.r.Lo, x.r.Hi)
		case !portProto:
			c.Add("match."+x.name, "ports need proto tcp, udp or sctp")
		}
	}
	if m.DSCP != nil && *m.DSCP > MaxDSCP {
		c.Add("match.dscp", "%d out of range 0-%d", *m.DSCP, MaxDSCP)
	}
	if m.GREKey != nil && m.Proto.Set && m.Proto.Num != IPProtoGRE {
		c.Add("match.gre_key", "needs proto gre (or leave proto empty)")
	}
}

func family(p Prefix) string {
	if p.P.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}
