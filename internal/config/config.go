// SPDX-License-Identifier: Apache-2.0

// Package config is the edgeplane configuration model. It describes the
// interfaces the dataplane attaches to, the forwarding action rules (FARs),
// the packet detection rules (PDRs) that select a FAR, table limits and the
// default verdicts. Validate checks a config, reporting every problem
// with the path of the offending field (for example "pdrs[1].match.dst:
// invalid CIDR ..."); the Store changes one in batches with the same
// checks. The file's YAML form is package yamlcfg's, which this package
// does not import.
//
// Each kind of object is declared once, in a file of its own (pdr.go:
// the PDR type, its checks and references), and registered in kinds.go;
// validation and the Store are driven by those declarations, and so are
// the file's decoder and encoder, the API and the CLI (whose table of a
// kind, package client's, lists its key unless it declares columns).
package config

import (
	"reflect"
	"strings"
)

// Actions of FARs (all) and of Defaults (pass and drop).
const (
	ActionPass     = "pass"
	ActionDrop     = "drop"
	ActionRedirect = "redirect"
	ActionEncap    = "encap"
	ActionDecap    = "decap"
	// ActionNAT rewrites the destination to a backend (an LBR member).
	ActionNAT = "nat"
	// ActionSteer sends the flow over a member of a steering LBR.
	ActionSteer = "steer"
)

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
	// PFCP sessions the user plane holds: each takes two records of
	// ~400 bytes in the dataplane.
	DefaultSessions uint32 = 4096
	MinSessions     uint32 = 64
	MaxSessions     uint32 = 1048576
)

// MaxDSCP is the largest DSCP code point (6 bits).
const MaxDSCP = 63

// IP protocol numbers that have names in the configuration.
const (
	IPProtoICMP   uint8 = 1
	IPProtoTCP    uint8 = 6
	IPProtoUDP    uint8 = 17
	IPProtoGRE    uint8 = 47
	IPProtoICMPv6 uint8 = 58
	IPProtoSCTP   uint8 = 132
)

// Config is the whole edgeplane configuration file. Its lists are the
// objects of the built-in kinds, in the order the file lists them; a
// kind without a field here keeps its objects in Objects.
type Config struct {
	Interfaces []Interface `yaml:"interfaces,omitempty"`
	Paths      []Path      `yaml:"paths,omitempty"`
	FARs       []FAR       `yaml:"fars,omitempty"`
	PDRs       []PDR       `yaml:"pdrs,omitempty"`
	LBRs       []LBR       `yaml:"lbrs,omitempty"`
	Services   []Service   `yaml:"services,omitempty"`
	Limits     Limits      `yaml:"limits"`
	Defaults   Defaults    `yaml:"defaults"`
	// QoSClasses come after Limits and Defaults, where the file had them
	// while they were in Objects: the file's shape, the order problems
	// are listed in and the top-level error stay as they were.
	QoSClasses []QoSClass      `yaml:"qos_classes,omitempty"`
	FlowOpt    []FlowOptModule `yaml:"flowopt,omitempty"`
	Strategies []Strategy      `yaml:"strategies,omitempty"`
	// Objects holds, by their list's name, the objects (a []T) of kinds
	// that have no field above.
	Objects map[string]any `yaml:",inline"`
}

// Diff is what a batch did to one object: Old is nil for an object it
// created, New is nil for one it deleted. At is where errors about the
// object are reported (the last operation on it).
type Diff[T any] struct {
	At       string
	Old, New *T
}

// Changes are the objects a batch changed, per kind, in the order it
// first touched them. A built-in kind has a field here as in Config, so
// the compiler reads its changes typed (TestBuiltinKindsTyped).
type Changes struct {
	Interfaces []Diff[Interface]
	Paths      []Diff[Path]
	FARs       []Diff[FAR]
	PDRs       []Diff[PDR]
	LBRs       []Diff[LBR]
	Services   []Diff[Service]
	QoSClasses []Diff[QoSClass]
	FlowOpt    []Diff[FlowOptModule]
	Strategies []Diff[Strategy]
	// Other holds the changes of kinds without a field above, a
	// []Diff[T] each: the dataplane compiles none of them.
	Other map[Kind]any
}

// Len is the number of objects changed.
func (c *Changes) Len() int {
	n := 0
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice {
			n += f.Len()
		}
	}
	for _, d := range c.Other {
		n += reflect.ValueOf(d).Len()
	}
	return n
}

// Limits sizes the dataplane maps.
type Limits struct {
	// Flows is the number of flows the flow table holds, of both
	// families (MinFlows..MaxFlows, DefaultFlows when zero).
	Flows uint32 `yaml:"flows"`
	// Rules is the classifier capacity (MinRules..MaxRules, DefaultRules
	// when zero); the number of PDRs must not exceed it.
	Rules uint32 `yaml:"rules"`
	// MaglevTable is the entries of each service's Maglev table (a prime,
	// MinMaglevTable..MaxMaglevTable, DefaultMaglevTable when zero).
	MaglevTable uint32 `yaml:"maglev_table,omitempty"`
	// Connections is how many balanced connections the flow table must
	// hold (MinFlows..MaxFlows; Flows when zero): a connection is a
	// flow's entry, and the table holds the larger of the two.
	Connections uint32 `yaml:"connections,omitempty"`
	// Sessions is how many PFCP sessions the user plane holds (the
	// agent's N4; MinSessions..MaxSessions, DefaultSessions when zero).
	Sessions uint32 `yaml:"sessions,omitempty"`
}

// Defaults holds the verdicts for packets no rule decides.
type Defaults struct {
	// NoMatch applies to packets no PDR matches: ActionPass (default) or
	// ActionDrop.
	NoMatch string `yaml:"no_match,omitempty"`
	// Malformed applies to packets with malformed headers (truncated,
	// bad IHL, ...): ActionDrop (default) or ActionPass.
	Malformed string `yaml:"malformed,omitempty"`
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

// Normalize fills defaults: each kind's (XDP mode auto, path TTL, proto
// gre for a PDR that sets gre_key without a proto), DefaultFlows and
// DefaultRules for zero limits, no_match pass, malformed drop. It is
// idempotent.
func (c *Config) Normalize() { builtin.Normalize(c) }

// Normalize is the package's Normalize for a config of s's kinds.
func (s *Schema) Normalize(c *Config) {
	for _, k := range s.kinds {
		k.normalizeAll(k.meta().list(c))
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
	if c.Limits.Sessions == 0 {
		c.Limits.Sessions = DefaultSessions
	}
	if c.Defaults.NoMatch == "" {
		c.Defaults.NoMatch = ActionPass
	}
	if c.Defaults.Malformed == "" {
		c.Defaults.Malformed = ActionDrop
	}
}
