// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/edgeplane/edgeplane/internal/config/yamlnode"
	"gopkg.in/yaml.v3"
)

// QoS class types: the three 5G service classes, and custom.
const (
	QoSURLLC  = "urllc"  // latency-critical: never held back by the others
	QoSEMBB   = "embb"   // bulk: fair shares by quantum, within rate
	QoSMMTC   = "mmtc"   // many small sources: bounded, fair shares
	QoSCustom = "custom" // fair shares, as configured
)

// What a flow over its share gets.
const (
	OverECN  = "ecn"  // ECN-marked (CE) when ECN-capable, dropped otherwise
	OverDrop = "drop" // dropped
)

// QoSClass is a class of traffic FlowOpt's fairness stage serves: a
// packet is in the class its PDR names (PDR.QoS), else the class its
// DSCP is in. Each flow of a class gets Quantum bytes a round (DRR), the
// class's flows together at most Rate, bursting to Burst; a flow over
// its share gets Over. A urllc class is never held back by the others.
type QoSClass struct {
	// ID identifies the class; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Name is a label for people (optional).
	Name string `yaml:"name,omitempty"`
	// Type is QoSURLLC (latency-critical: never held back by the
	// others), QoSEMBB (bulk), QoSMMTC (many small sources) or
	// QoSCustom.
	Type string `yaml:"type"`
	// DSCP are the code points that put a packet in the class (no two
	// classes share one).
	DSCP DSCPSet `yaml:"dscp,omitempty"`
	// Rate is what the class's flows together may send (0: no limit),
	// Burst how far past it they may go at once, in bytes (when Rate is
	// set, default DefaultBurstQuantums times the quantum, or times
	// DefaultQuantum if that is more).
	Rate  Bitrate `yaml:"rate,omitempty"`
	Burst uint32  `yaml:"burst,omitempty"`
	// Quantum is the bytes each flow of the class earns a round
	// (MinQuantum-MaxQuantum; default DefaultQuantum, DefaultQuantumMMTC
	// for mmtc; urllc takes none: it is never held back).
	Quantum uint32 `yaml:"quantum,omitempty"`
	// Over is OverECN (default) or OverDrop.
	Over string `yaml:"over,omitempty"`
}

// MaxQoSClasses bounds the classes: as many as there are DSCP code
// points, each a flow's class index in a byte of the dataplane's flow
// entry.
const MaxQoSClasses = 64

// Quantum bounds and defaults: a full Ethernet frame a round for bulk
// flows, a small one for mMTC sources.
const (
	MinQuantum           = 64
	MaxQuantum           = 65535
	DefaultQuantum       = 1514
	DefaultQuantumMMTC   = 256
	DefaultBurstQuantums = 16
)

// Effective returns c with its defaults filled: the quantum of its type,
// a burst of 16 quanta under a rate, ECN marking.
func (c QoSClass) Effective() QoSClass {
	if c.Quantum == 0 && c.Type != QoSURLLC {
		c.Quantum = DefaultQuantum
		if c.Type == QoSMMTC {
			c.Quantum = DefaultQuantumMMTC
		}
	}
	if c.Burst == 0 && c.Rate.BPS != 0 {
		c.Burst = DefaultBurstQuantums * max(c.Quantum, DefaultQuantum)
	}
	if c.Over == "" && c.Type != QoSURLLC {
		c.Over = OverECN
	}
	return c
}

var qosKind = func() *KindOf[QoSClass] {
	k := &KindOf[QoSClass]{
		Kind:     KindQoSClass,
		Plural:   "qos_classes",
		KeyField: "id",
		Check:    checkQoSClass,
		Capacity: func(n int, _ Limits) string {
			if n > MaxQoSClasses {
				return fmt.Sprintf("%d qos classes, at most %d", n, MaxQoSClasses)
			}
			return ""
		},
	}
	// A code point belongs to one class.
	for d := range 64 {
		k.Unique = append(k.Unique, Unique[QoSClass]{
			Field: "dscp",
			Key:   func(c *QoSClass) (any, bool) { return d, c.DSCP.Has(uint8(d)) },
			Clash: func(c *QoSClass, other string) string { return fmt.Sprintf("dscp %d is already %s's", d, other) },
		})
	}
	return k
}()

func checkQoSClass(c *Check, q *QoSClass) {
	if q.ID == 0 {
		c.Add("id", "required")
	}
	switch q.Type {
	case QoSURLLC, QoSEMBB, QoSMMTC, QoSCustom:
	case "":
		c.Add("type", "required (urllc, embb, mmtc or custom)")
	default:
		c.Add("type", "unknown type %q (want urllc, embb, mmtc or custom)", q.Type)
	}
	if q.Type == QoSURLLC {
		// URLLC is never held back: nothing shares out its traffic.
		if q.Quantum != 0 {
			c.Add("quantum", "not for urllc (never held back by the others)")
		}
		if q.Over != "" {
			c.Add("over", "not for urllc (never held back by the others)")
		}
	}
	if q.Quantum != 0 && (q.Quantum < MinQuantum || q.Quantum > MaxQuantum) {
		c.Add("quantum", "%d bytes is outside %d-%d", q.Quantum, MinQuantum, MaxQuantum)
	}
	switch q.Over {
	case "", OverECN, OverDrop:
	default:
		c.Add("over", "unknown %q (want ecn or drop)", q.Over)
	}
	if q.Burst != 0 && q.Rate.BPS == 0 {
		c.Add("burst", "needs a rate")
	}
	if e := q.Effective(); e.Burst != 0 && e.Burst < e.Quantum {
		c.Add("burst", "%d bytes is less than a quantum (%d)", e.Burst, e.Quantum)
	}
}

// Bitrate is a rate in bits per second, written as "100mbit", "1gbit",
// "500kbit" (decimal units, as tc); unset (0) is no limit.
type Bitrate struct{ BPS uint64 }

func (r Bitrate) String() string {
	if r.BPS == 0 {
		return ""
	}
	return FormatRate(r.BPS)
}

// SetString parses a rate such as "100mbit".
func (r *Bitrate) SetString(s string) error {
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	r.BPS = v
	return nil
}

// UnmarshalYAML decodes a rate string, or a number of bits per second.
func (r *Bitrate) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalText(r, n, "a rate such as 100mbit")
}

// MarshalYAML encodes the rate as a string (nothing when unset).
func (r Bitrate) MarshalYAML() (any, error) { return marshalText(r) }

// DSCPSet is a set of DSCP code points (0-63), written as "46",
// "10,12,14" or "40-47,46", or in YAML as a number or a list of them.
type DSCPSet struct{ Bits uint64 }

// Has tells whether code point d is in the set.
func (s DSCPSet) Has(d uint8) bool { return d < 64 && s.Bits>>d&1 == 1 }

// String lists the code points, runs of three or more as ranges.
func (s DSCPSet) String() string {
	var parts []string
	for d := 0; d < 64; {
		if !s.Has(uint8(d)) {
			d++
			continue
		}
		e := d
		for e+1 < 64 && s.Has(uint8(e+1)) {
			e++
		}
		switch {
		case e-d >= 2:
			parts = append(parts, fmt.Sprintf("%d-%d", d, e))
		case e > d:
			parts = append(parts, strconv.Itoa(d), strconv.Itoa(e))
		default:
			parts = append(parts, strconv.Itoa(d))
		}
		d = e + 1
	}
	return strings.Join(parts, ",")
}

// SetString parses "46", "10,12,14" or "40-47".
func (s *DSCPSet) SetString(v string) error {
	var set uint64
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 8)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.ParseUint(strings.TrimSpace(hi), 10, 8)
		}
		if err1 != nil || err2 != nil || a > 63 || b > 63 || b < a {
			return fmt.Errorf("dscp %q: want code points 0-63 such as 46, 10,12,14 or 40-47", v)
		}
		for d := a; d <= b; d++ {
			set |= 1 << d
		}
	}
	s.Bits = set
	return nil
}

// UnmarshalYAML decodes a code point, a string of them, or a list.
func (s *DSCPSet) UnmarshalYAML(n *yaml.Node) error {
	n = yamlnode.Resolve(n)
	if n.Kind == yaml.SequenceNode {
		var parts []string
		for _, c := range n.Content {
			t, ok, err := yamlnode.ScalarText(c, "a DSCP code point")
			if !ok {
				return err
			}
			parts = append(parts, t)
		}
		if len(parts) == 0 {
			*s = DSCPSet{}
			return nil
		}
		return s.SetString(strings.Join(parts, ","))
	}
	t, ok, err := yamlnode.ScalarText(n, "DSCP code points such as 46 or [10, 12]")
	if !ok {
		*s = DSCPSet{}
		return err
	}
	return s.SetString(t)
}

// MarshalYAML encodes one code point as a number, more as a string.
func (s DSCPSet) MarshalYAML() (any, error) {
	switch bits.OnesCount64(s.Bits) {
	case 0:
		return nil, nil
	case 1:
		return bits.TrailingZeros64(s.Bits), nil
	}
	return s.String(), nil
}
