// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/config/yamlnode"
	"gopkg.in/yaml.v3"
)

// The value types below are written as one string (or number) in the
// config file and in the API. Each parses its text in one place,
// SetString, used by UnmarshalYAML (the file) and by the API's conversion
// (with String, the other way), so both say the same thing about a bad
// value.

// unmarshalText decodes a value type written as one scalar for its
// UnmarshalYAML: null leaves it zero, anything but a scalar is an error
// saying what it must be (want), and a scalar's text goes to SetString.
func unmarshalText[T any, P interface {
	*T
	SetString(string) error
}](p P, n *yaml.Node, want string) error {
	s, ok, err := yamlnode.ScalarText(n, want)
	if !ok {
		*p = *new(T)
		return err
	}
	return p.SetString(s)
}

// marshalText encodes a value type for its MarshalYAML as its text, or
// as nothing (null, left out) when unset: when String gives "".
func marshalText(v fmt.Stringer) (any, error) {
	if s := v.String(); s != "" {
		return s, nil
	}
	return nil, nil
}

// Prefix is an optional IPv4 or IPv6 CIDR prefix. The zero value means
// "not set". A set prefix is always masked (no host bits).
type Prefix struct {
	P netip.Prefix
}

// ParsePrefix parses a masked CIDR prefix such as "10.2.0.0/16"; a bare
// address means a /32 or /128 prefix.
func ParsePrefix(s string) (Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Prefix{}, fmt.Errorf("invalid CIDR %q", s)
		}
		if m := p.Masked(); m != p {
			return Prefix{}, fmt.Errorf("host bits set; did you mean %s?", m)
		}
		return Prefix{P: p}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return Prefix{}, fmt.Errorf("invalid CIDR %q", s)
	}
	return Prefix{P: netip.PrefixFrom(a, a.BitLen())}, nil
}

// IsSet reports whether the prefix was given.
func (p Prefix) IsSet() bool {
	return p.P.IsValid()
}

// IsZero reports an unset prefix, for yaml's omitempty (netip.Prefix's
// fields are unexported, so yaml cannot tell on its own).
func (p Prefix) IsZero() bool { return !p.IsSet() }

// String returns the prefix in CIDR notation, or "" when unset.
func (p Prefix) String() string {
	if !p.IsSet() {
		return ""
	}
	return p.P.String()
}

// SetString parses a CIDR prefix.
func (p *Prefix) SetString(s string) (err error) {
	*p, err = ParsePrefix(s)
	return err
}

// UnmarshalYAML decodes a CIDR string; null leaves the prefix unset.
func (p *Prefix) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalText(p, n, "a CIDR prefix like 10.2.0.0/16")
}

// MarshalYAML encodes the prefix as a CIDR string, or null when unset.
func (p Prefix) MarshalYAML() (any, error) { return marshalText(p) }

// Proto is an optional IP protocol: a name (tcp, udp, icmp, icmpv6, gre,
// sctp) or a number 0-255.
type Proto struct {
	Num uint8
	Set bool
}

// ParseProto parses a protocol name (tcp, udp, icmp, icmpv6, gre, sctp) or
// a decimal number 0..255.
func ParseProto(s string) (Proto, error) {
	if n, ok := protoNumber(s); ok {
		return Proto{Num: n, Set: true}, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return Proto{}, fmt.Errorf("protocol %s out of range 0-255", s)
		}
		return Proto{}, fmt.Errorf("unknown protocol %q (want tcp, udp, icmp, icmpv6, gre, sctp or 0-255)", s)
	}
	if v > 255 {
		return Proto{}, fmt.Errorf("protocol %d out of range 0-255", v)
	}
	return Proto{Num: uint8(v), Set: true}, nil
}

// String returns the protocol name if it has one, else its number, or ""
// when unset.
func (p Proto) String() string {
	if !p.Set {
		return ""
	}
	if name, ok := protoName(p.Num); ok {
		return name
	}
	return strconv.Itoa(int(p.Num))
}

// SetString parses a protocol name or number.
func (p *Proto) SetString(s string) (err error) {
	*p, err = ParseProto(s)
	return err
}

// UnmarshalYAML decodes a protocol name or number; null leaves it unset.
func (p *Proto) UnmarshalYAML(n *yaml.Node) error {
	s, ok, err := yamlnode.ScalarText(n, "a protocol name or number")
	if !ok {
		*p = Proto{}
		return err
	}
	if yamlnode.Resolve(n).ShortTag() == "!!int" {
		var v int64
		if err := yamlnode.Resolve(n).Decode(&v); err != nil || v < 0 || v > 255 {
			return fmt.Errorf("protocol %s out of range 0-255", s)
		}
		*p = Proto{Num: uint8(v), Set: true}
		return nil
	}
	return p.SetString(s)
}

// MarshalYAML encodes the protocol by name when it has one, else as a
// number, or null when unset.
func (p Proto) MarshalYAML() (any, error) {
	if !p.Set {
		return nil, nil
	}
	if name, ok := protoName(p.Num); ok {
		return name, nil
	}
	return int(p.Num), nil
}

func protoName(n uint8) (string, bool) {
	switch n {
	case IPProtoICMP:
		return "icmp", true
	case IPProtoTCP:
		return "tcp", true
	case IPProtoUDP:
		return "udp", true
	case IPProtoGRE:
		return "gre", true
	case IPProtoICMPv6:
		return "icmpv6", true
	case IPProtoSCTP:
		return "sctp", true
	}
	return "", false
}

func protoNumber(name string) (uint8, bool) {
	switch name {
	case "icmp":
		return IPProtoICMP, true
	case "tcp":
		return IPProtoTCP, true
	case "udp":
		return IPProtoUDP, true
	case "gre":
		return IPProtoGRE, true
	case "icmpv6":
		return IPProtoICMPv6, true
	case "sctp":
		return IPProtoSCTP, true
	}
	return 0, false
}

// PortRange is an optional inclusive range of transport ports, written
// as one port ("443") or a range ("9000-9100").
type PortRange struct {
	Lo, Hi uint16
	Set    bool
}

// ParsePortRange parses "80" or "9000-9100".
func ParsePortRange(s string) (PortRange, error) {
	loStr, hiStr, isRange := strings.Cut(s, "-")
	lo, err := parsePort(loStr, s)
	if err != nil {
		return PortRange{}, err
	}
	hi := lo
	if isRange {
		if hi, err = parsePort(hiStr, s); err != nil {
			return PortRange{}, err
		}
	}
	if lo > hi {
		return PortRange{}, fmt.Errorf("port range reversed (%d-%d)", lo, hi)
	}
	return PortRange{Lo: lo, Hi: hi, Set: true}, nil
}

func parsePort(part, whole string) (uint16, error) {
	part = strings.TrimSpace(part)
	v, err := strconv.ParseUint(part, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("port %s out of range 0-65535", part)
		}
		return 0, fmt.Errorf("invalid port range %q (want a port like 80 or a range like 9000-9100)", whole)
	}
	if v > 65535 {
		return 0, fmt.Errorf("port %d out of range 0-65535", v)
	}
	return uint16(v), nil
}

// String returns "80" or "9000-9100", or "" when unset.
func (r PortRange) String() string {
	switch {
	case !r.Set:
		return ""
	case r.Lo == r.Hi:
		return strconv.Itoa(int(r.Lo))
	default:
		return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
	}
}

// SetString parses a port or a "lo-hi" range.
func (r *PortRange) SetString(s string) (err error) {
	*r, err = ParsePortRange(s)
	return err
}

// UnmarshalYAML decodes a port (integer or string) or a "lo-hi" range;
// null leaves the range unset.
func (r *PortRange) UnmarshalYAML(n *yaml.Node) error {
	s, ok, err := yamlnode.ScalarText(n, "a port like 80 or a range like 9000-9100")
	if !ok {
		*r = PortRange{}
		return err
	}
	if yamlnode.Resolve(n).ShortTag() == "!!int" {
		var v int64
		if err := yamlnode.Resolve(n).Decode(&v); err != nil || v < 0 || v > 65535 {
			return fmt.Errorf("port %s out of range 0-65535", s)
		}
		*r = PortRange{Lo: uint16(v), Hi: uint16(v), Set: true}
		return nil
	}
	return r.SetString(s)
}

// MarshalYAML encodes a single port as an integer and a range as a
// "lo-hi" string, or null when unset.
func (r PortRange) MarshalYAML() (any, error) {
	switch {
	case !r.Set:
		return nil, nil
	case r.Lo == r.Hi:
		return int(r.Lo), nil
	default:
		return r.String(), nil
	}
}

// Addr is an optional IP address; the zero value means "not set".
type Addr struct {
	A netip.Addr
}

// IsSet reports whether the address was given.
func (a Addr) IsSet() bool { return a.A.IsValid() }

// IsZero reports an unset address, for yaml's omitempty.
func (a Addr) IsZero() bool { return !a.IsSet() }

// String returns the address, or "" when unset.
func (a Addr) String() string {
	if !a.IsSet() {
		return ""
	}
	return a.A.String()
}

// SetString parses an IP address without a zone; an IPv4-mapped IPv6 address
// is taken as the IPv4 address.
func (a *Addr) SetString(s string) error {
	v, err := netip.ParseAddr(s)
	if err != nil || v.Zone() != "" {
		*a = Addr{}
		return fmt.Errorf("invalid IP address %q", s)
	}
	*a = Addr{A: v.Unmap()}
	return nil
}

// UnmarshalYAML decodes an address string; null leaves it unset.
func (a *Addr) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalText(a, n, "an IP address")
}

// MarshalYAML encodes the address, or null when unset.
func (a Addr) MarshalYAML() (any, error) { return marshalText(a) }

// Duration is a span of time written as "1s", "250ms" (a Go
// time.Duration).
type Duration struct{ D time.Duration }

// ParseDuration parses a Go duration ("1s", "250ms").
func ParseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return Duration{}, fmt.Errorf("invalid duration %q (want e.g. 500ms or 2s)", s)
	}
	return Duration{D: d}, nil
}

func (d Duration) String() string {
	if d.D == 0 {
		return ""
	}
	return d.D.String()
}

// SetString parses a Go duration.
func (d *Duration) SetString(s string) (err error) {
	*d, err = ParseDuration(s)
	return err
}

// UnmarshalYAML decodes a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalText(d, n, "a duration")
}

// MarshalYAML encodes the duration as a string (nothing when zero).
func (d Duration) MarshalYAML() (any, error) { return marshalText(d) }

// ParseRate parses a rate such as "50mbit", "1gbit", "500kbit", "1.5m" or
// "64000" (bits per second) into bits per second; "0" means no limit. Units
// are decimal as in tc: "bit", "kbit", "mbit", "gbit", "tbit", or just "k",
// "m", "g", "t". tc's "bps" means bytes per second, which readers take for
// bits, so ParseRate refuses it.
func ParseRate(s string) (uint64, error) {
	rateUnits := []struct {
		suffix string
		mult   float64
	}{
		{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12}, {"bit", 1},
		{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12},
	}
	t := strings.ToLower(strings.TrimSpace(s))
	if strings.HasSuffix(t, "bps") {
		return 0, fmt.Errorf("rate %q: bps is ambiguous, write kbit, mbit or gbit", s)
	}
	mult := 1.0
	for _, u := range rateUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("rate %q: want a number of bits per second such as 50mbit", s)
	}
	bps := v * mult
	if bps > math.MaxInt64 {
		return 0, fmt.Errorf("rate %q: too large", s)
	}
	return uint64(math.Round(bps)), nil
}

// FormatRate writes bits per second (not 0) the way ParseRate reads
// them.
func FormatRate(bps uint64) string {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if bps >= u.mult {
			return strconv.FormatFloat(float64(bps)/float64(u.mult), 'f', -1, 64) + u.suffix
		}
	}
	return strconv.FormatUint(bps, 10) + "bit"
}

// Factor is a multiplier written as a plain number ("1.5"). An explicit
// 0 is not the same as unset.
type Factor struct {
	V   float64
	Set bool
}

// ParseFactor parses a finite number such as "1.5".
func ParseFactor(s string) (Factor, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return Factor{}, fmt.Errorf("invalid factor %q (want a number such as 1.5)", s)
	}
	return Factor{V: v, Set: true}, nil
}

func (f Factor) String() string {
	if !f.Set {
		return ""
	}
	return strconv.FormatFloat(f.V, 'g', -1, 64)
}

// SetString parses a factor ("" unsets it).
func (f *Factor) SetString(s string) (err error) {
	if s == "" {
		*f = Factor{}
		return nil
	}
	*f, err = ParseFactor(s)
	return err
}

// UnmarshalYAML decodes a factor.
func (f *Factor) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalText(f, n, "a number such as 1.5")
}

// MarshalYAML encodes the factor as a string (nothing when unset).
func (f Factor) MarshalYAML() (any, error) { return marshalText(f) }

// MaxCPUs bounds the CPUs a CPUList names (0 to MaxCPUs-1).
const MaxCPUs = 1024

// CPUList is a set of CPUs written as a Linux cpulist: numbers and
// ranges, "0,2-3" (as cpuset.cpus and /sys/devices/system/cpu/online
// show them), ascending and without overlaps; the zero value is none.
type CPUList struct {
	Bits [MaxCPUs / 64]uint64
}

// Has tells whether cpu is in the list.
func (l CPUList) Has(cpu int) bool {
	return cpu >= 0 && cpu < MaxCPUs && l.Bits[cpu/64]>>(cpu%64)&1 == 1
}

// IsZero reports an empty list.
func (l CPUList) IsZero() bool { return l == CPUList{} }

// First returns the lowest CPU of l, -1 when it has none.
func (l CPUList) First() int {
	for c := range MaxCPUs {
		if l.Has(c) {
			return c
		}
	}
	return -1
}

// CPUs lists the CPUs of l, ascending.
func (l CPUList) CPUs() []int {
	var out []int
	for c := range MaxCPUs {
		if l.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// String writes the list as the kernel does: runs of two or more as
// ranges ("0,2-3"), "" when empty.
func (l CPUList) String() string {
	var parts []string
	for c := 0; c < MaxCPUs; {
		if !l.Has(c) {
			c++
			continue
		}
		e := c
		for l.Has(e + 1) {
			e++
		}
		if e > c {
			parts = append(parts, strconv.Itoa(c)+"-"+strconv.Itoa(e))
		} else {
			parts = append(parts, strconv.Itoa(c))
		}
		c = e + 1
	}
	return strings.Join(parts, ",")
}

// ParseCPUList parses a cpulist such as "0,2-3"; "" is none.
func ParseCPUList(s string) (CPUList, error) {
	var l CPUList
	if strings.TrimSpace(s) == "" {
		return l, nil
	}
	next := 0 // the lowest CPU the next part may start at
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.ParseUint(lo, 10, 32)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.ParseUint(hi, 10, 32)
		}
		switch {
		case err1 != nil || err2 != nil:
			return CPUList{}, fmt.Errorf("invalid cpu list %q (want CPUs and ranges such as 0,2-3)", s)
		case b >= MaxCPUs:
			return CPUList{}, fmt.Errorf("cpu list %q: cpu %d is outside 0-%d", s, b, MaxCPUs-1)
		case b < a:
			return CPUList{}, fmt.Errorf("cpu list %q: range %d-%d is reversed", s, a, b)
		case int(a) < next:
			return CPUList{}, fmt.Errorf("cpu list %q: %s overlaps or comes before cpu %d (want ascending, without overlaps)", s, strings.TrimSpace(part), next-1)
		}
		for c := a; c <= b; c++ {
			l.Bits[c/64] |= 1 << (c % 64)
		}
		next = int(b) + 1
	}
	return l, nil
}

// SetString parses a cpulist.
func (l *CPUList) SetString(s string) (err error) {
	*l, err = ParseCPUList(s)
	return err
}

// UnmarshalYAML decodes a cpulist string, or one CPU as a number.
func (l *CPUList) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalText(l, n, "a cpu list such as 0,2-3")
}

// MarshalYAML encodes the list as a string (nothing when empty).
func (l CPUList) MarshalYAML() (any, error) { return marshalText(l) }
