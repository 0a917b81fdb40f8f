// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// PathMonitor is how a path is probed and judged: the agent sends a probe
// over the path every Interval, the peer's XDP answers it, and the
// answers decide the path's state. A path is down after DownAfter
// probes in a row go unanswered and up again after UpAfter in a row are
// answered; it is degraded while its smoothed RTT, its jitter or its
// loss over the last Window probes is past a limit, and up again once
// each is below its limit less Hysteresis, UpAfter probes in a row.
type PathMonitor struct {
	// Off: no probes (the peer does not answer them); the path counts
	// as up.
	Off bool `yaml:"off,omitempty"`
	// Secret signs the path's probes and their answers, both ways (a
	// keyed MAC, SipHash-2-4): the same 32 hex digits at both ends. Only
	// who holds it can make a probe the peer answers or an answer this
	// end takes. Required while the monitor is on, unless Insecure; with
	// it off, what this end's XDP needs to answer a peer that signs.
	Secret Secret `yaml:"secret,omitempty"`
	// Insecure sends and answers the path's probes unsigned: anyone who
	// can send from the path's remote address (GRE hides nothing) can
	// answer them, keep a dead path up or make a live one look faster.
	// Only where the underlay is trusted.
	Insecure bool `yaml:"insecure,omitempty"`
	// Interval between probes: DefaultProbeInterval when unset,
	// MinProbeInterval to MaxProbeInterval.
	Interval Duration `yaml:"interval,omitempty"`
	// DownAfter and UpAfter count probes in a row (defaults 2 and 3,
	// 1-64).
	DownAfter uint32 `yaml:"down_after,omitempty"`
	UpAfter   uint32 `yaml:"up_after,omitempty"`
	// Window is the probes the loss is counted over (default 100,
	// 4-4096).
	Window uint32 `yaml:"window,omitempty"`
	// MaxRTT, MaxJitter and MaxLoss are the limits of the smoothed
	// RTT, the RTT variation and the loss past which the path is
	// degraded; unset: none.
	MaxRTT    Duration `yaml:"max_rtt,omitempty"`
	MaxJitter Duration `yaml:"max_jitter,omitempty"`
	MaxLoss   Ratio    `yaml:"max_loss,omitempty"`
	// Hysteresis is the share of each limit a measure must come back
	// below to end a degradation (default 10%).
	Hysteresis Ratio `yaml:"hysteresis,omitempty"`
}

// Path monitor defaults and bounds.
const (
	DefaultProbeInterval = 100 * time.Millisecond
	MinProbeInterval     = 10 * time.Millisecond
	MaxProbeInterval     = 10 * time.Second
	DefaultDownAfter     = 2
	DefaultUpAfter       = 3
	DefaultProbeWindow   = 100
	DefaultHysteresis    = 0.1
)

// Effective returns m with its defaults filled.
func (m PathMonitor) Effective() PathMonitor {
	e := m
	if e.Interval.D == 0 {
		e.Interval.D = DefaultProbeInterval
	}
	if e.DownAfter == 0 {
		e.DownAfter = DefaultDownAfter
	}
	if e.UpAfter == 0 {
		e.UpAfter = DefaultUpAfter
	}
	if e.Window == 0 {
		e.Window = DefaultProbeWindow
	}
	if !e.Hysteresis.Set {
		e.Hysteresis = Ratio{V: DefaultHysteresis, Set: true}
	}
	return e
}

// checkMonitor checks a path's monitor settings (fields under prefix).
func checkMonitor(c *Check, prefix string, m PathMonitor) {
	switch {
	case m.Insecure && m.Secret.IsSet():
		c.Add(prefix+"insecure", "set together with a secret: give one or the other")
	case !m.Off && !m.Insecure && !m.Secret.IsSet():
		c.Add(prefix+"secret", "required to sign the path's probes: 32 hex digits, the same at both ends (`openssl rand -hex 16`); "+
			"or insecure: true where the underlay is trusted, or off: true")
	}
	if d := m.Interval.D; d != 0 && (d < MinProbeInterval || d > MaxProbeInterval) {
		c.Add(prefix+"interval", "%s is outside %s-%s", d, MinProbeInterval, MaxProbeInterval)
	}
	for _, f := range []struct {
		name     string
		v, lo, h uint32
	}{{"down_after", m.DownAfter, 1, 64}, {"up_after", m.UpAfter, 1, 64}, {"window", m.Window, 4, 4096}} {
		if f.v != 0 && (f.v < f.lo || f.v > f.h) {
			c.Add(prefix+f.name, "%d is outside %d-%d", f.v, f.lo, f.h)
		}
	}
	if m.Hysteresis.Set && (m.Hysteresis.V < 0 || m.Hysteresis.V > 1) {
		c.Add(prefix+"hysteresis", "%s is outside 0-100%%", m.Hysteresis)
	}
	checkLimits(c, prefix, m.MaxRTT, m.MaxJitter, m.MaxLoss)
}

// checkLimits checks a path's or a steering group's RTT, jitter and loss
// limits (fields under prefix).
func checkLimits(c *Check, prefix string, rtt, jitter Duration, loss Ratio) {
	if loss.Set && (loss.V < 0 || loss.V > 1) {
		c.Add(prefix+"max_loss", "%s is outside 0-100%%", loss)
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"max_rtt", rtt}, {"max_jitter", jitter}} {
		if d.v.D < 0 {
			c.Add(prefix+d.name, "%s is negative", d.v.D)
		}
	}
}

// Ratio is a share written as a percentage ("5%", "0.5%") or a fraction
// ("0.05"); an explicit 0 is not the same as unset.
type Ratio struct {
	V   float64
	Set bool
}

// ParseRatio parses "5%" or "0.05".
func ParseRatio(s string) (Ratio, error) {
	t := strings.TrimSpace(s)
	pct := strings.HasSuffix(t, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(t, "%"), 64)
	// NaN would pass every range check (each comparison is false).
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return Ratio{}, fmt.Errorf("invalid ratio %q (want e.g. 5%% or 0.05)", s)
	}
	if pct {
		v /= 100
	}
	return Ratio{V: v, Set: true}, nil
}

// String writes the ratio as the shortest percentage that reads back as
// it: V*100 carries float rounding (110% is 110.00000000000001 times
// 0.01), which the API and the CLI would show.
func (r Ratio) String() string {
	if !r.Set {
		return ""
	}
	pct := r.V * 100
	for d := range 16 {
		s := strconv.FormatFloat(pct, 'f', d, 64)
		if v, err := strconv.ParseFloat(s, 64); err == nil && v/100 == r.V {
			return s + "%"
		}
	}
	return strconv.FormatFloat(pct, 'g', -1, 64) + "%"
}

// SetString parses a ratio ("" unsets it).
func (r *Ratio) SetString(s string) (err error) {
	if s == "" {
		*r = Ratio{}
		return nil
	}
	*r, err = ParseRatio(s)
	return err
}

// UnmarshalYAML decodes a ratio.
func (r *Ratio) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalText(r, n, "a ratio")
}

// MarshalYAML encodes the ratio as a percentage (nothing when unset).
func (r Ratio) MarshalYAML() (any, error) { return marshalText(r) }
