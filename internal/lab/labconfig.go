// SPDX-License-Identifier: Apache-2.0

package lab

import (
	_ "embed"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/wanem"
)

// DefaultConfigYAML is the lab's default configuration (lab.yaml).
//
//go:embed lab.yaml
var DefaultConfigYAML []byte

// Link names of the SD-WAN lab, in order.
var LinkNames = []string{"wan1", "wan2"}

// MaxNameLen bounds the lab name, which prefixes every namespace
// (<name>wan1 is the longest) and pin dir of the lab.
const MaxNameLen = 5

// Config is the lab's configuration file (lab.yaml): the name that
// prefixes its namespaces and the impairment of each WAN link.
type Config struct {
	Name string `yaml:"name"`
	// MTU of the WAN links: the gateways' WAN interfaces and the
	// emulators' ports.
	MTU   int                 `yaml:"mtu" what:"a number of bytes"`
	Links map[string]LinkSpec `yaml:"links"`
}

// WAN link MTU bounds. The lower one is IPv6's minimum; above the upper
// one a veth refuses native XDP (a frame must fit one page).
const (
	MinMTU = 1280
	MaxMTU = 3000
)

// LinkSpec is the impairment of one WAN link, applied to each direction,
// as written in lab.yaml; Impairment parses it.
type LinkSpec struct {
	Delay  string `json:"delay" yaml:"delay"`   // one way, a Go duration ("5ms")
	Jitter string `json:"jitter" yaml:"jitter"` // ± around delay, a Go duration
	Loss   string `json:"loss" yaml:"loss"`     // percent of frames, "1%" or "1"
	Rate   string `json:"rate" yaml:"rate"`     // "50mbit"; 0 is unlimited
}

// Impairment parses the spec; the spec must have passed validation.
func (s LinkSpec) Impairment() (wanem.Impairment, error) {
	var imp wanem.Impairment
	var err error
	if imp.Delay, err = parseDuration(s.Delay); err != nil {
		return imp, err
	}
	if imp.Jitter, err = parseDuration(s.Jitter); err != nil {
		return imp, err
	}
	if s.Loss != "" {
		if imp.LossPercent, err = wanem.ParseLoss(s.Loss); err != nil {
			return imp, err
		}
	}
	if s.Rate != "" {
		if imp.RateBps, err = wanem.ParseRate(s.Rate); err != nil {
			return imp, err
		}
	}
	return imp, nil
}

// maxDelay is the emulator's bound on delay and jitter.
const maxDelay = time.Minute

func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 5ms)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s is negative", s)
	}
	if d > maxDelay {
		return 0, fmt.Errorf("%s is longer than %s", s, maxDelay)
	}
	return d, nil
}

// DefaultConfig returns the embedded defaults.
func DefaultConfig() Config {
	c, err := ParseConfig(nil)
	if err != nil {
		panic(fmt.Sprintf("embedded lab.yaml: %v", err)) // a build defect
	}
	return c
}

// LoadConfig reads a lab config file; an empty path means the defaults.
func LoadConfig(path string) (Config, error) {
	if path == "" {
		return ParseConfig(nil)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read lab config: %w", err)
	}
	return ParseConfig(data)
}

// ParseConfig reads a lab config over the embedded defaults: every field
// the document sets replaces the default, the rest keep it. Problems are
// returned as config.Errors, each "path: reason" (for example
// "links.wan2.loss: ..."), all of them at once.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	errs, err := decodeConfig(DefaultConfigYAML, &c)
	if err != nil {
		return Config{}, fmt.Errorf("embedded lab.yaml: %w", err)
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("embedded lab.yaml: %w", errs)
	}
	if errs, err = decodeConfig(data, &c); err != nil {
		return Config{}, config.Errors{{Path: "lab", Reason: err.Error()}}
	}
	errs = append(errs, c.validate()...)
	if len(errs) > 0 {
		return Config{}, errs
	}
	return c, nil
}

// decodeConfig overlays the YAML document data on c, with the gateway
// config's decoder: problems with fields are returned at their paths; a
// document that is not YAML at all is the error. The lab's files have few
// fields, so an unknown one is answered with the list of them.
func decodeConfig(data []byte, c *Config) (config.Errors, error) {
	return yamlcfg.Decode(data, c, yamlcfg.DecodeOptions{ListFields: true})
}

// Validate reports every problem as config.Errors.
func (c Config) Validate() error {
	if errs := c.validate(); len(errs) > 0 {
		return errs
	}
	return nil
}

func (c Config) validate() config.Errors {
	var errs config.Errors
	add := func(path, format string, a ...any) {
		errs = append(errs, config.FieldError{Path: path, Reason: fmt.Sprintf(format, a...)})
	}
	if p := nameProblem(c.Name); p != "" {
		add("name", "%s", p)
	}
	if c.MTU < MinMTU || c.MTU > MaxMTU {
		add("mtu", "%d out of range %d-%d", c.MTU, MinMTU, MaxMTU)
	}
	names := make([]string, 0, len(c.Links))
	for n := range c.Links {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := "links." + n
		if !isLink(n) {
			add(p, "unknown link (want %s)", strings.Join(LinkNames, " or "))
			continue
		}
		s := c.Links[n]
		for _, d := range []struct{ field, v string }{{"delay", s.Delay}, {"jitter", s.Jitter}} {
			if _, err := parseDuration(d.v); err != nil {
				add(p+"."+d.field, "%v", err)
			}
		}
		if s.Loss != "" {
			if _, err := wanem.ParseLoss(s.Loss); err != nil {
				add(p+".loss", "invalid loss %q (want a percentage within 0 and 100, such as 1%%)", s.Loss)
			}
		}
		if s.Rate != "" {
			if _, err := wanem.ParseRate(s.Rate); err != nil {
				add(p+".rate", "invalid rate %q (want bits per second such as 50mbit, 0 for unlimited)", s.Rate)
			}
		}
	}
	return errs
}

// nameProblem says why name cannot prefix the lab's namespaces, or "".
func nameProblem(name string) string {
	switch {
	case name == "":
		return "required"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("%q is longer than %d characters", name, MaxNameLen)
	case name[0] < 'a' || name[0] > 'z':
		return fmt.Sprintf("%q must start with a letter a-z", name)
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return fmt.Sprintf("%q may only contain a-z and 0-9", name)
		}
	}
	return ""
}

func isLink(name string) bool {
	for _, l := range LinkNames {
		if l == name {
			return true
		}
	}
	return false
}

// YAML writes the config back as lab.yaml text (fields in a fixed order,
// so two equal configs give equal text).
func (c Config) YAML() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nmtu: %d\nlinks:\n", c.Name, c.MTU)
	for _, n := range LinkNames {
		s := c.Links[n]
		fmt.Fprintf(&b, "  %s: {delay: %s, jitter: %s, loss: %s, rate: %s}\n", n,
			orZero(s.Delay), orZero(s.Jitter), orZero(s.Loss), orZero(s.Rate))
	}
	return []byte(b.String())
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
