// SPDX-License-Identifier: Apache-2.0

// Package config is the edgeplane configuration model. It describes the
// interfaces the dataplane attaches to, the forwarding action rules (FARs),
// the packet detection rules (PDRs) that select a FAR, table limits and the
// default verdicts. Parse and Load read the YAML configuration file, fill
// defaults and validate it, reporting every problem with the path of the
// offending field (for example "pdrs[1].match.dst: invalid CIDR ...").
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"
)

// Interface roles.
const (
	RoleLAN = "lan"
	RoleWAN = "wan"
)

// XDP attach modes.
const (
	XDPNative  = "native"
	XDPGeneric = "generic"
	XDPAuto    = "auto"
)

// Actions used by FARs (all) and by Defaults (pass and drop).
const (
	ActionPass     = "pass"
	ActionDrop     = "drop"
	ActionRedirect = "redirect"
	ActionEncap    = "encap"
	ActionDecap    = "decap"
	// ActionNAT rewrites the destination to a backend (an LBR member).
	ActionNAT = "nat"
)

// LBR algorithms.
const (
	AlgorithmMaglev = "maglev"
)

// Service limits, mirroring the dataplane's EDGE_MAX_SERVICES and
// EDGE_MAX_MEMBERS (one member index is the replies' counter).
const (
	MaxServices = 16
	MaxMembers  = 255
)

// Path types.
const (
	PathGRE = "gre"
)

// DefaultPathTTL is the outer TTL of encapsulated packets when a path does
// not set one.
const DefaultPathTTL = 64

// Limits bounds and defaults.
const (
	DefaultFlows uint32 = 65536
	MinFlows     uint32 = 1024
	MaxFlows     uint32 = 16777216
	DefaultRules uint32 = 65536
	MinRules     uint32 = 1
	MaxRules     uint32 = 1048576
	// Maglev tables: prime sizes; the largest is 2^17-1 (a Mersenne
	// prime): 16 services x 2 slots x 8 bytes x 131071 = 32 MiB.
	DefaultMaglevTable uint32 = 65537
	MinMaglevTable     uint32 = 251
	MaxMaglevTable     uint32 = 131071
)

// MaxDSCP is the largest DSCP code point (6 bits).
const MaxDSCP = 63

// MaxIfnameLen is the longest Linux interface name in bytes (IFNAMSIZ-1).
const MaxIfnameLen = 15

// IP protocol numbers that have names in the configuration.
const (
	IPProtoICMP   uint8 = 1
	IPProtoTCP    uint8 = 6
	IPProtoUDP    uint8 = 17
	IPProtoGRE    uint8 = 47
	IPProtoICMPv6 uint8 = 58
	IPProtoSCTP   uint8 = 132
)

// Config is the whole edgeplane configuration file.
type Config struct {
	Interfaces []Interface `yaml:"interfaces"`
	Paths      []Path      `yaml:"paths"`
	FARs       []FAR       `yaml:"fars"`
	PDRs       []PDR       `yaml:"pdrs"`
	LBRs       []LBR       `yaml:"lbrs"`
	Services   []Service   `yaml:"services"`
	Limits     Limits      `yaml:"limits"`
	Defaults   Defaults    `yaml:"defaults"`
}

// Interface is a network interface the dataplane attaches an XDP program to.
type Interface struct {
	// Name is the Linux interface name (1..15 bytes, no '/', ':' or
	// whitespace, not "." or "..").
	Name string `yaml:"name"`
	// Role is RoleLAN or RoleWAN.
	Role string `yaml:"role"`
	// XDP is XDPNative, XDPGeneric or XDPAuto; Normalize turns "" into
	// XDPAuto.
	XDP string `yaml:"xdp"`
}

// Path is a WAN overlay path: a GRE tunnel (RFC 2784, key and sequence
// numbers of RFC 2890) from this gateway to a remote one.
type Path struct {
	// ID identifies the path; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Type is PathGRE.
	Type string `yaml:"type"`
	// Interface is the egress interface of the outer packets.
	Interface string `yaml:"interface"`
	// Local and Remote are the outer IPv4 addresses (this gateway's and
	// the far end's).
	Local  Addr `yaml:"local"`
	Remote Addr `yaml:"remote"`
	// Key is the optional GRE key; decapsulation tells paths apart by
	// (local address, key).
	Key *uint32 `yaml:"key"`
	// Seq adds GRE sequence numbers to encapsulated packets.
	Seq bool `yaml:"seq"`
	// TTL of the outer header; 0 means DefaultPathTTL.
	TTL uint8 `yaml:"ttl"`
	// DSCP of the outer header; nil copies the inner packet's DSCP.
	DSCP *uint8 `yaml:"dscp"`
}

// FAR is a forwarding action rule: what to do with a packet a PDR selected.
type FAR struct {
	// ID identifies the FAR; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Action is ActionPass, ActionDrop, ActionRedirect, ActionEncap,
	// ActionDecap or ActionNAT.
	Action string `yaml:"action"`
	// Interface is the egress interface for ActionRedirect and must be
	// empty for the other actions.
	Interface string `yaml:"interface"`
	// Path is the path id for ActionEncap and must be 0 otherwise.
	Path uint32 `yaml:"path"`
	// Address and Port are the backend of ActionNAT (Interface, optional
	// for it, pins the egress; else the route to Address decides).
	Address Addr   `yaml:"address"`
	Port    uint16 `yaml:"port"`
}

// LBR is a load-balancing rule: a group of FARs (members) one of which
// each flow is given.
type LBR struct {
	// ID identifies the LBR; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Algorithm is AlgorithmMaglev: consistent hashing of the flow's
	// 5-tuple, weighted, with the connection pinned to its member.
	Algorithm string `yaml:"algorithm"`
	// Members are FARs with action nat or encap.
	Members []Member `yaml:"members"`
	// TableSize is the entries of the Maglev table of the service using
	// this LBR: a prime up to limits.maglev_table (0: that). More entries
	// per backend spread more evenly and move fewer on changes.
	TableSize uint32 `yaml:"table_size,omitempty"`
}

// Member is one FAR of an LBR and its weight.
type Member struct {
	FAR uint32 `yaml:"far"`
	// Weight is relative to the other members'; nil means 1, 0 drains
	// the member: no new connections, established ones continue.
	Weight *uint32 `yaml:"weight,omitempty"`
}

// EffectiveWeight is the member's weight, 1 when unset.
func (m Member) EffectiveWeight() uint32 {
	if m.Weight == nil {
		return 1
	}
	return *m.Weight
}

// Service is an L4 service: connections to VIP:Port over Proto are
// balanced over the members of an LBR.
type Service struct {
	ID    uint32 `yaml:"id"`
	VIP   Addr   `yaml:"vip"`
	Port  uint16 `yaml:"port"`
	Proto Proto  `yaml:"proto"`
	LBR   uint32 `yaml:"lbr"`
	// Health, when set, has the agent probe each backend and take one
	// that fails Fall probes in a row out of the table until it passes
	// Rise in a row.
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
	Type string `yaml:"type"`
	Path string `yaml:"path,omitempty"`
	// Port to probe; 0: the backend's (nat) or the service's (dsr-gre).
	Port     uint16   `yaml:"port,omitempty"`
	Interval Duration `yaml:"interval,omitempty"`
	Timeout  Duration `yaml:"timeout,omitempty"`
	Rise     uint32   `yaml:"rise,omitempty"`
	Fall     uint32   `yaml:"fall,omitempty"`
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

// Duration is a time.Duration written as "1s", "250ms".
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

// UnmarshalYAML decodes a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	n = resolve(n)
	if isNull(n) {
		*d = Duration{}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a duration, got %s", describe(n))
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML encodes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// PDR is a packet detection rule: a match and the FAR applied on a hit.
type PDR struct {
	// ID identifies the PDR; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Precedence orders overlapping PDRs; the lower value wins, as in
	// PFCP. Zero is a valid precedence.
	Precedence uint32 `yaml:"precedence"`
	// Match selects packets; unset fields match anything.
	Match Match `yaml:"match"`
	// FAR is the ID of the FAR applied to matching packets (required).
	FAR uint32 `yaml:"far"`
}

// Match is the packet classifier of a PDR. Every field is optional; an
// unset field is a wildcard.
type Match struct {
	In     string    `yaml:"in"`
	Src    Prefix    `yaml:"src"`
	Dst    Prefix    `yaml:"dst"`
	Proto  Proto     `yaml:"proto"`
	Sport  PortRange `yaml:"sport"`
	Dport  PortRange `yaml:"dport"`
	DSCP   *uint8    `yaml:"dscp"`
	GREKey *uint32   `yaml:"gre_key"`
	// InPath, when set, matches only packets the dataplane decapsulated
	// from the GRE path with this id (the inner packet is classified
	// after decap); 0 matches any packet, decapsulated or not.
	InPath uint32 `yaml:"in_path"`
}

// Limits sizes the dataplane maps.
type Limits struct {
	// Flows is the number of flow-cache entries (MinFlows..MaxFlows,
	// DefaultFlows when zero).
	Flows uint32 `yaml:"flows"`
	// Rules is the classifier capacity (MinRules..MaxRules, DefaultRules
	// when zero); the number of PDRs must not exceed it.
	Rules uint32 `yaml:"rules"`
	// MaglevTable is the entries of each service's Maglev table (a prime,
	// MinMaglevTable..MaxMaglevTable, DefaultMaglevTable when zero).
	MaglevTable uint32 `yaml:"maglev_table"`
	// Connections is the connection table's size (MinFlows..MaxFlows;
	// Flows when zero).
	Connections uint32 `yaml:"connections"`
}

// Defaults holds the verdicts for packets no rule decides.
type Defaults struct {
	// NoMatch applies to packets no PDR matches: ActionPass (default) or
	// ActionDrop.
	NoMatch string `yaml:"no_match"`
	// Malformed applies to packets with malformed headers (truncated,
	// bad IHL, ...): ActionDrop (default) or ActionPass.
	Malformed string `yaml:"malformed"`
}

// FieldError is one problem in a configuration, located by a path such as
// "pdrs[1].match.dst".
type FieldError struct {
	Path   string
	Reason string
	// Code classifies the problem for callers that answer with a status
	// (the API): a bad value unless set.
	Code ErrorCode
}

// ErrorCode classifies a FieldError.
type ErrorCode uint8

const (
	// CodeInvalid: the value is wrong.
	CodeInvalid ErrorCode = iota
	// CodeCapacity: a problem of size, not of value: the config is valid
	// but does not fit the maps as sized (limits).
	CodeCapacity
	// CodeExists: a create names an object that exists.
	CodeExists
	// CodeNotFound: an update or delete names an object that does not
	// exist.
	CodeNotFound
	// CodeInUse: a delete removes an object others still refer to.
	CodeInUse
)

// Error returns "path: reason".
func (e FieldError) Error() string {
	return e.Path + ": " + e.Reason
}

// Errors lists every problem found in a configuration, in document order.
type Errors []FieldError

// Error returns every entry on its own line.
func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, fe := range e {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

// docPath is the path used for problems with the document as a whole.
const docPath = "config"

// Interface returns the interface called name.
func (c *Config) Interface(name string) (Interface, bool) {
	for _, i := range c.Interfaces {
		if i.Name == name {
			return i, true
		}
	}
	return Interface{}, false
}

// FAR returns the FAR with the given id.
func (c *Config) FAR(id uint32) (FAR, bool) {
	for _, f := range c.FARs {
		if f.ID == id {
			return f, true
		}
	}
	return FAR{}, false
}

// Normalize fills defaults: XDP mode auto, DefaultFlows and DefaultRules
// for zero limits, no_match pass, malformed drop, and proto gre for a PDR
// that sets gre_key without a proto. It is idempotent.
func (c *Config) Normalize() {
	for i := range c.Interfaces {
		c.Interfaces[i].normalize()
	}
	for i := range c.Paths {
		c.Paths[i].normalize()
	}
	for i := range c.PDRs {
		c.PDRs[i].normalize()
	}
	if c.Limits.Flows == 0 {
		c.Limits.Flows = DefaultFlows
	}
	if c.Limits.Rules == 0 {
		c.Limits.Rules = DefaultRules
	}
	if c.Limits.MaglevTable == 0 {
		c.Limits.MaglevTable = DefaultMaglevTable
	}
	if c.Limits.Connections == 0 {
		c.Limits.Connections = c.Limits.Flows
	}
	if c.Defaults.NoMatch == "" {
		c.Defaults.NoMatch = ActionPass
	}
	if c.Defaults.Malformed == "" {
		c.Defaults.Malformed = ActionDrop
	}
}

func (i *Interface) normalize() {
	if i.XDP == "" {
		i.XDP = XDPAuto
	}
}

func (p *Path) normalize() {
	if p.TTL == 0 {
		p.TTL = DefaultPathTTL
	}
}

func (p *PDR) normalize() {
	if p.Match.GREKey != nil && !p.Match.Proto.Set {
		p.Match.Proto = Proto{Num: IPProtoGRE, Set: true}
	}
}

// FAR has nothing to normalize; the method lets the store treat every
// kind alike.
func (*FAR) normalize() {}

// Load reads the configuration file at path and parses it with Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data)
}

// Parse decodes a YAML configuration, applies Normalize and validates it.
// On failure it returns a nil Config and an Errors value listing every
// problem found (unknown fields, type errors and semantic errors), each
// with the path of the offending field, in document order.
func Parse(data []byte) (*Config, error) {
	root, err := parseDocument(data)
	if err != nil {
		return nil, Errors{{Path: docPath, Reason: err.Error()}}
	}
	var c Config
	d := decoder{pos: map[string]position{}, last: map[string]position{}, failed: map[string]bool{}}
	if root != nil && !isNull(root) {
		if root.Kind != yaml.MappingNode {
			return nil, Errors{{Path: docPath, Reason: "top level must be a mapping of interfaces, paths, fars, pdrs, lbrs, services, limits and defaults, got " + describe(root)}}
		}
		d.config(root, &c)
	}
	c.Normalize()
	all := d.errs
	for _, e := range c.validate() {
		if !d.suppressed(e.Path) {
			all = append(all, e)
		}
	}
	if len(all) == 0 {
		return &c, nil
	}
	d.sort(all)
	return nil, all
}

// parseDocument returns the root node of the single YAML document in data,
// or nil when data holds no document.
func parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, fmt.Errorf("invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	default:
		return nil, errors.New("multiple YAML documents are not supported")
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return doc.Content[0], nil
	}
	return &doc, nil
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

// String returns the prefix in CIDR notation, or "" when unset.
func (p Prefix) String() string {
	if !p.IsSet() {
		return ""
	}
	return p.P.String()
}

// UnmarshalYAML decodes a CIDR string; null leaves the prefix unset.
func (p *Prefix) UnmarshalYAML(n *yaml.Node) error {
	n = resolve(n)
	if isNull(n) {
		*p = Prefix{}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a CIDR prefix like 10.2.0.0/16, got %s", describe(n))
	}
	v, err := ParsePrefix(n.Value)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalYAML encodes the prefix as a CIDR string, or null when unset.
func (p Prefix) MarshalYAML() (any, error) {
	if !p.IsSet() {
		return nil, nil
	}
	return p.P.String(), nil
}

// Proto is an optional IP protocol number.
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

// UnmarshalYAML decodes a protocol name or number; null leaves it unset.
func (p *Proto) UnmarshalYAML(n *yaml.Node) error {
	n = resolve(n)
	if isNull(n) {
		*p = Proto{}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a protocol name or number, got %s", describe(n))
	}
	if n.ShortTag() == "!!int" {
		var v int64
		if err := n.Decode(&v); err != nil || v < 0 || v > 255 {
			return fmt.Errorf("protocol %s out of range 0-255", n.Value)
		}
		*p = Proto{Num: uint8(v), Set: true}
		return nil
	}
	v, err := ParseProto(n.Value)
	if err != nil {
		return err
	}
	*p = v
	return nil
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

// PortRange is an optional inclusive range of transport ports. A single
// port has Lo == Hi.
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

// UnmarshalYAML decodes a port (integer or string) or a "lo-hi" range;
// null leaves the range unset.
func (r *PortRange) UnmarshalYAML(n *yaml.Node) error {
	n = resolve(n)
	if isNull(n) {
		*r = PortRange{}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a port like 80 or a range like 9000-9100, got %s", describe(n))
	}
	if n.ShortTag() == "!!int" {
		var v int64
		if err := n.Decode(&v); err != nil || v < 0 || v > 65535 {
			return fmt.Errorf("port %s out of range 0-65535", n.Value)
		}
		*r = PortRange{Lo: uint16(v), Hi: uint16(v), Set: true}
		return nil
	}
	v, err := ParsePortRange(n.Value)
	if err != nil {
		return err
	}
	*r = v
	return nil
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

// MarshalYAML writes only the fields that are set, as a flow mapping such
// as {in: lan0, proto: udp, dport: 9000-9100}.
func (m Match) MarshalYAML() (any, error) {
	type match struct {
		In     string     `yaml:"in,omitempty"`
		Src    *Prefix    `yaml:"src,omitempty"`
		Dst    *Prefix    `yaml:"dst,omitempty"`
		Proto  *Proto     `yaml:"proto,omitempty"`
		Sport  *PortRange `yaml:"sport,omitempty"`
		Dport  *PortRange `yaml:"dport,omitempty"`
		DSCP   *uint8     `yaml:"dscp,omitempty"`
		GREKey *uint32    `yaml:"gre_key,omitempty"`
		InPath uint32     `yaml:"in_path,omitempty"`
	}
	out := match{In: m.In, DSCP: m.DSCP, GREKey: m.GREKey, InPath: m.InPath}
	if m.Src.IsSet() {
		out.Src = &m.Src
	}
	if m.Dst.IsSet() {
		out.Dst = &m.Dst
	}
	if m.Proto.Set {
		out.Proto = &m.Proto
	}
	if m.Sport.Set {
		out.Sport = &m.Sport
	}
	if m.Dport.Set {
		out.Dport = &m.Dport
	}
	var n yaml.Node
	if err := n.Encode(out); err != nil {
		return nil, fmt.Errorf("encode match: %w", err)
	}
	n.Style = yaml.FlowStyle
	return &n, nil
}

// MarshalYAML omits the interface, path, address and port when they are
// not set.
func (f FAR) MarshalYAML() (any, error) {
	type far struct {
		ID        uint32 `yaml:"id"`
		Action    string `yaml:"action"`
		Interface string `yaml:"interface,omitempty"`
		Path      uint32 `yaml:"path,omitempty"`
		Address   *Addr  `yaml:"address,omitempty"`
		Port      uint16 `yaml:"port,omitempty"`
	}
	out := far{ID: f.ID, Action: f.Action, Interface: f.Interface, Path: f.Path, Port: f.Port}
	if f.Address.IsSet() {
		out.Address = &f.Address
	}
	return out, nil
}

// MarshalYAML omits unset optional fields.
func (p Path) MarshalYAML() (any, error) {
	type path struct {
		ID        uint32  `yaml:"id"`
		Type      string  `yaml:"type"`
		Interface string  `yaml:"interface"`
		Local     Addr    `yaml:"local"`
		Remote    Addr    `yaml:"remote"`
		Key       *uint32 `yaml:"key,omitempty"`
		Seq       bool    `yaml:"seq,omitempty"`
		TTL       uint8   `yaml:"ttl,omitempty"`
		DSCP      *uint8  `yaml:"dscp,omitempty"`
	}
	return path{p.ID, p.Type, p.Interface, p.Local, p.Remote, p.Key, p.Seq, p.TTL, p.DSCP}, nil
}

// Addr is an optional IP address; the zero value means "not set".
type Addr struct {
	A netip.Addr
}

// IsSet reports whether the address was given.
func (a Addr) IsSet() bool { return a.A.IsValid() }

// String returns the address, or "" when unset.
func (a Addr) String() string {
	if !a.IsSet() {
		return ""
	}
	return a.A.String()
}

// UnmarshalYAML decodes an address string; null leaves it unset.
func (a *Addr) UnmarshalYAML(n *yaml.Node) error {
	n = resolve(n)
	if isNull(n) {
		*a = Addr{}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be an IP address, got %s", describe(n))
	}
	v, err := netip.ParseAddr(n.Value)
	if err != nil || v.Zone() != "" {
		return fmt.Errorf("invalid IP address %q", n.Value)
	}
	*a = Addr{A: v.Unmap()}
	return nil
}

// MarshalYAML encodes the address, or null when unset.
func (a Addr) MarshalYAML() (any, error) {
	if !a.IsSet() {
		return nil, nil
	}
	return a.A.String(), nil
}

// position is a line and column in the YAML document (1-based).
type position struct {
	line, col int
}

// decoder walks the YAML node tree field by field so that unknown keys and
// type errors are reported with their paths.
type decoder struct {
	errs Errors
	// pos maps a path to where it appears in the document.
	pos map[string]position
	// last maps a path to the position of its last recorded descendant,
	// so that problems with missing fields sort after the present ones.
	last map[string]position
	// failed holds paths whose value could not be decoded; semantic
	// errors at or below them are not reported again.
	failed map[string]bool
}

// field is a known key of a mapping and how to decode its value.
type field struct {
	name   string
	decode func(path string, v *yaml.Node)
}

// mark records where path appears and extends the last known position of
// its ancestors.
func (d *decoder) mark(path string, n *yaml.Node) {
	here := position{n.Line, n.Column}
	if _, ok := d.pos[path]; !ok {
		d.pos[path] = here
	}
	for p := parentPath(path); p != ""; p = parentPath(p) {
		if here.compare(d.last[p]) > 0 {
			d.last[p] = here
		}
	}
}

// report records a problem at path.
func (d *decoder) report(path string, n *yaml.Node, format string, args ...any) {
	d.mark(path, n)
	d.errs = append(d.errs, FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// fail records a problem that left the value at path undecoded.
func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	d.report(path, n, format, args...)
	d.failed[path] = true
}

// suppressed reports whether path is at or below a path that failed to
// decode.
func (d *decoder) suppressed(path string) bool {
	for p := path; p != ""; p = parentPath(p) {
		if d.failed[p] {
			return true
		}
	}
	return false
}

// sort orders errs by where their paths appear in the document, keeping
// discovery order for ties. A path missing from the document (a required
// field left out) sorts just after the last key of its nearest ancestor.
func (d *decoder) sort(errs Errors) {
	type key struct {
		pos   position
		after bool
	}
	where := func(path string) key {
		if pos, ok := d.pos[path]; ok {
			return key{pos: pos}
		}
		for p := parentPath(path); p != ""; p = parentPath(p) {
			if pos, ok := d.last[p]; ok {
				return key{pos: pos, after: true}
			}
			if pos, ok := d.pos[p]; ok {
				return key{pos: pos, after: true}
			}
		}
		return key{}
	}
	slices.SortStableFunc(errs, func(a, b FieldError) int {
		ka, kb := where(a.Path), where(b.Path)
		if c := ka.pos.compare(kb.pos); c != 0 {
			return c
		}
		switch {
		case ka.after == kb.after:
			return 0
		case ka.after:
			return 1
		default:
			return -1
		}
	})
}

func (p position) compare(q position) int {
	if p.line != q.line {
		return p.line - q.line
	}
	return p.col - q.col
}

// parentPath returns "pdrs[0].match" for "pdrs[0].match.dst", "pdrs" for
// "pdrs[0]" and "" for "pdrs".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// mapping decodes the mapping n against fields, reporting unknown and
// duplicate keys. Merge keys (<<) are honoured.
func (d *decoder) mapping(n *yaml.Node, path string, fields []field) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "must be a mapping, got %s", describe(n))
		return
	}
	type entry struct{ key, val *yaml.Node }
	var entries, merged []entry
	seen := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			merges = append(merges, v)
			continue
		}
		k = resolve(k)
		if k.Kind != yaml.ScalarNode {
			d.report(path, k, "keys must be field names, got %s", describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.report(joinPath(path, k.Value), k, "duplicate key (first at line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		entries = append(entries, entry{k, v})
	}
	// Merged keys never override explicit ones; earlier merge sources win
	// over later ones. visited keeps expansion linear even when anchors
	// are merged many times.
	visited := map[*yaml.Node]bool{}
	var expand func(m *yaml.Node)
	expand = func(m *yaml.Node) {
		m = resolve(m)
		if visited[m] {
			return
		}
		visited[m] = true
		switch m.Kind {
		case yaml.MappingNode:
			var nested []*yaml.Node
			for i := 0; i+1 < len(m.Content); i += 2 {
				k, v := m.Content[i], m.Content[i+1]
				if isMergeKey(k) {
					nested = append(nested, v)
					continue
				}
				k = resolve(k)
				if k.Kind != yaml.ScalarNode {
					continue
				}
				if _, ok := seen[k.Value]; ok {
					continue
				}
				seen[k.Value] = k
				merged = append(merged, entry{k, v})
			}
			for _, v := range nested {
				expand(v)
			}
		case yaml.SequenceNode:
			for _, item := range m.Content {
				if resolve(item).Kind != yaml.MappingNode {
					d.report(path, item, "merge key << needs a mapping or a list of mappings, got a list item that is %s", describe(resolve(item)))
					continue
				}
				expand(item)
			}
		default:
			d.report(path, m, "merge key << needs a mapping or a list of mappings, got %s", describe(m))
		}
	}
	for _, m := range merges {
		expand(m)
	}
	for _, e := range append(entries, merged...) {
		p := joinPath(path, e.key.Value)
		d.mark(p, e.key)
		i := slices.IndexFunc(fields, func(f field) bool { return f.name == e.key.Value })
		if i < 0 {
			d.report(p, e.key, "unknown field%s", suggest(e.key.Value, fields))
			continue
		}
		fields[i].decode(p, e.val)
	}
}

// list decodes the sequence n, calling item for every element.
func (d *decoder) list(n *yaml.Node, path string, item func(path string, n *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(path, n, "must be a list, got %s", describe(n))
		return
	}
	for i, it := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.mark(p, it)
		item(p, it)
	}
}

// str decodes a scalar into out; null leaves out unchanged.
func (d *decoder) str(n *yaml.Node, path string, out *string) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(path, n, "must be a string, got %s", describe(n))
		return
	}
	*out = n.Value
}

// uint decodes an unsigned integer no larger than limit. ok is false for
// null and on error.
func (d *decoder) uint(n *yaml.Node, path string, limit uint64) (v uint64, ok bool) {
	n = resolve(n)
	if isNull(n) {
		return 0, false
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && isDigits(n.Value) {
		// Too large for a 64-bit integer, so YAML resolved it as a float.
		d.fail(path, n, "%s out of range 0-%d", n.Value, limit)
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.fail(path, n, "must be an unsigned integer, got %s", describe(n))
		return 0, false
	}
	if err := n.Decode(&v); err != nil {
		d.fail(path, n, "must be an unsigned integer, got %s", describe(n))
		return 0, false
	}
	if v > limit {
		d.fail(path, n, "%d out of range 0-%d", v, limit)
		return 0, false
	}
	return v, true
}

// boolean decodes true or false.
func (d *decoder) boolean(n *yaml.Node, path string, out *bool) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		d.fail(path, n, "must be true or false, got %s", describe(n))
		return
	}
	*out = n.Value == "true"
}

func (d *decoder) port(n *yaml.Node, path string, out *uint16) {
	if v, ok := d.uint(n, path, 65535); ok {
		*out = uint16(v)
	}
}

func (d *decoder) uint32(n *yaml.Node, path string, out *uint32) {
	if v, ok := d.uint(n, path, 1<<32-1); ok {
		*out = uint32(v)
	}
}

// custom decodes a value through its UnmarshalYAML method, which reports
// reasons without paths.
func (d *decoder) custom(n *yaml.Node, path string, u yaml.Unmarshaler) {
	if err := u.UnmarshalYAML(n); err != nil {
		d.fail(path, n, "%s", err.Error())
	}
}

func (d *decoder) config(n *yaml.Node, c *Config) {
	d.mapping(n, "", []field{
		{"interfaces", func(p string, v *yaml.Node) {
			d.list(v, p, func(p string, item *yaml.Node) {
				var x Interface
				d.mapping(item, p, []field{
					{"name", func(p string, v *yaml.Node) { d.str(v, p, &x.Name) }},
					{"role", func(p string, v *yaml.Node) { d.str(v, p, &x.Role) }},
					{"xdp", func(p string, v *yaml.Node) { d.str(v, p, &x.XDP) }},
				})
				c.Interfaces = append(c.Interfaces, x)
			})
		}},
		{"paths", func(p string, v *yaml.Node) {
			d.list(v, p, func(p string, item *yaml.Node) {
				var x Path
				d.mapping(item, p, []field{
					{"id", func(p string, v *yaml.Node) { d.uint32(v, p, &x.ID) }},
					{"type", func(p string, v *yaml.Node) { d.str(v, p, &x.Type) }},
					{"interface", func(p string, v *yaml.Node) { d.str(v, p, &x.Interface) }},
					{"local", func(p string, v *yaml.Node) { d.custom(v, p, &x.Local) }},
					{"remote", func(p string, v *yaml.Node) { d.custom(v, p, &x.Remote) }},
					{"key", func(p string, v *yaml.Node) {
						if k, ok := d.uint(v, p, 1<<32-1); ok {
							u := uint32(k)
							x.Key = &u
						}
					}},
					{"seq", func(p string, v *yaml.Node) { d.boolean(v, p, &x.Seq) }},
					{"ttl", func(p string, v *yaml.Node) {
						if t, ok := d.uint(v, p, 255); ok {
							x.TTL = uint8(t)
						}
					}},
					{"dscp", func(p string, v *yaml.Node) {
						if t, ok := d.uint(v, p, MaxDSCP); ok {
							u := uint8(t)
							x.DSCP = &u
						}
					}},
				})
				c.Paths = append(c.Paths, x)
			})
		}},
		{"fars", func(p string, v *yaml.Node) {
			d.list(v, p, func(p string, item *yaml.Node) {
				var x FAR
				d.mapping(item, p, []field{
					{"id", func(p string, v *yaml.Node) { d.uint32(v, p, &x.ID) }},
					{"action", func(p string, v *yaml.Node) { d.str(v, p, &x.Action) }},
					{"interface", func(p string, v *yaml.Node) { d.str(v, p, &x.Interface) }},
					{"path", func(p string, v *yaml.Node) { d.uint32(v, p, &x.Path) }},
					{"address", func(p string, v *yaml.Node) { d.custom(v, p, &x.Address) }},
					{"port", func(p string, v *yaml.Node) { d.port(v, p, &x.Port) }},
				})
				c.FARs = append(c.FARs, x)
			})
		}},
		{"pdrs", func(p string, v *yaml.Node) {
			d.list(v, p, func(p string, item *yaml.Node) {
				var x PDR
				d.mapping(item, p, []field{
					{"id", func(p string, v *yaml.Node) { d.uint32(v, p, &x.ID) }},
					{"precedence", func(p string, v *yaml.Node) { d.uint32(v, p, &x.Precedence) }},
					{"match", func(p string, v *yaml.Node) { d.match(v, p, &x.Match) }},
					{"far", func(p string, v *yaml.Node) { d.uint32(v, p, &x.FAR) }},
				})
				c.PDRs = append(c.PDRs, x)
			})
		}},
		{"lbrs", func(p string, v *yaml.Node) {
			d.list(v, p, func(p string, item *yaml.Node) {
				var x LBR
				d.mapping(item, p, []field{
					{"id", func(p string, v *yaml.Node) { d.uint32(v, p, &x.ID) }},
					{"algorithm", func(p string, v *yaml.Node) { d.str(v, p, &x.Algorithm) }},
					{"table_size", func(p string, v *yaml.Node) { d.uint32(v, p, &x.TableSize) }},
					{"members", func(p string, v *yaml.Node) {
						d.list(v, p, func(p string, item *yaml.Node) {
							var m Member
							d.mapping(item, p, []field{
								{"far", func(p string, v *yaml.Node) { d.uint32(v, p, &m.FAR) }},
								{"weight", func(p string, v *yaml.Node) {
									if w, ok := d.uint(v, p, 1<<32-1); ok {
										u := uint32(w)
										m.Weight = &u
									}
								}},
							})
							x.Members = append(x.Members, m)
						})
					}},
				})
				c.LBRs = append(c.LBRs, x)
			})
		}},
		{"services", func(p string, v *yaml.Node) {
			d.list(v, p, func(p string, item *yaml.Node) {
				var x Service
				d.mapping(item, p, []field{
					{"id", func(p string, v *yaml.Node) { d.uint32(v, p, &x.ID) }},
					{"vip", func(p string, v *yaml.Node) { d.custom(v, p, &x.VIP) }},
					{"port", func(p string, v *yaml.Node) { d.port(v, p, &x.Port) }},
					{"proto", func(p string, v *yaml.Node) { d.custom(v, p, &x.Proto) }},
					{"lbr", func(p string, v *yaml.Node) { d.uint32(v, p, &x.LBR) }},
					{"stateless", func(p string, v *yaml.Node) { d.boolean(v, p, &x.Stateless) }},
					{"precedence", func(p string, v *yaml.Node) { d.uint32(v, p, &x.Precedence) }},
					{"health", func(p string, v *yaml.Node) {
						h := &Health{}
						d.mapping(v, p, []field{
							{"type", func(p string, v *yaml.Node) { d.str(v, p, &h.Type) }},
							{"path", func(p string, v *yaml.Node) { d.str(v, p, &h.Path) }},
							{"port", func(p string, v *yaml.Node) { d.port(v, p, &h.Port) }},
							{"interval", func(p string, v *yaml.Node) { d.custom(v, p, &h.Interval) }},
							{"timeout", func(p string, v *yaml.Node) { d.custom(v, p, &h.Timeout) }},
							{"rise", func(p string, v *yaml.Node) { d.uint32(v, p, &h.Rise) }},
							{"fall", func(p string, v *yaml.Node) { d.uint32(v, p, &h.Fall) }},
						})
						x.Health = h
					}},
				})
				c.Services = append(c.Services, x)
			})
		}},
		{"limits", func(p string, v *yaml.Node) {
			d.mapping(v, p, []field{
				{"flows", func(p string, v *yaml.Node) { d.uint32(v, p, &c.Limits.Flows) }},
				{"rules", func(p string, v *yaml.Node) { d.uint32(v, p, &c.Limits.Rules) }},
				{"maglev_table", func(p string, v *yaml.Node) { d.uint32(v, p, &c.Limits.MaglevTable) }},
				{"connections", func(p string, v *yaml.Node) { d.uint32(v, p, &c.Limits.Connections) }},
			})
		}},
		{"defaults", func(p string, v *yaml.Node) {
			d.mapping(v, p, []field{
				{"no_match", func(p string, v *yaml.Node) { d.str(v, p, &c.Defaults.NoMatch) }},
				{"malformed", func(p string, v *yaml.Node) { d.str(v, p, &c.Defaults.Malformed) }},
			})
		}},
	})
}

func (d *decoder) match(n *yaml.Node, path string, m *Match) {
	d.mapping(n, path, []field{
		{"in", func(p string, v *yaml.Node) { d.str(v, p, &m.In) }},
		{"src", func(p string, v *yaml.Node) { d.custom(v, p, &m.Src) }},
		{"dst", func(p string, v *yaml.Node) { d.custom(v, p, &m.Dst) }},
		{"proto", func(p string, v *yaml.Node) { d.custom(v, p, &m.Proto) }},
		{"sport", func(p string, v *yaml.Node) { d.custom(v, p, &m.Sport) }},
		{"dport", func(p string, v *yaml.Node) { d.custom(v, p, &m.Dport) }},
		{"dscp", func(p string, v *yaml.Node) {
			if x, ok := d.uint(v, p, MaxDSCP); ok {
				u := uint8(x)
				m.DSCP = &u
			}
		}},
		{"gre_key", func(p string, v *yaml.Node) {
			if x, ok := d.uint(v, p, 1<<32-1); ok {
				u := uint32(x)
				m.GREKey = &u
			}
		}},
		{"in_path", func(p string, v *yaml.Node) { d.uint32(v, p, &m.InPath) }},
	})
}

// resolve follows aliases to the anchored node.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

func isDigits(s string) bool {
	s = strings.TrimPrefix(s, "+")
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) }) < 0
}

// describe names a node for "got ..." messages: strings are quoted, other
// scalars are shown as written.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	case yaml.DocumentNode:
		return "a document"
	}
	return "nothing"
}

// suggest returns ` (did you mean "x"?)` when key is a likely typo of a
// known field name, else "".
func suggest(key string, fields []field) string {
	best, bestDist := "", 3
	for _, f := range fields {
		dist := editDistance(strings.ToLower(key), f.name)
		if dist < bestDist && (dist <= 1 || len(f.name) >= 6) {
			best, bestDist = f.name, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
