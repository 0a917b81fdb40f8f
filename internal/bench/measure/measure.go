// SPDX-License-Identifier: Apache-2.0

// Package measure holds what every part of the bench shares: the goals a
// run states against its figures, nearest-rank percentiles and medians,
// and the binaries the parts that run agents start.
package measure

import (
	"errors"
	"math"
	"slices"
	"sort"
	"time"
)

// Goal states one target against the measured figures.
type Goal struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	// AtLeast makes Limit a lower bound (otherwise an upper bound).
	AtLeast bool `json:"at_least,omitempty"`
	Met     bool `json:"met"`
}

// Judge tells which goals are met.
func Judge(goals []Goal) {
	for i, g := range goals {
		if g.AtLeast {
			goals[i].Met = g.Value >= g.Limit
		} else {
			goals[i].Met = g.Value <= g.Limit
		}
	}
}

// Logf says what a part is doing (the bench's progress on stderr).
type Logf func(format string, a ...any)

// Binaries are the programs a part that runs agents starts: the
// gateway's edgeplane for the agents, edgeplane-dev for a lab's WAN
// emulators.
type Binaries struct {
	Edgeplane string
	Dev       string
}

// Gateway returns the edgeplane binary, which a part that runs agents
// needs.
func (b Binaries) Gateway() (string, error) {
	if b.Edgeplane == "" {
		return "", errors.New("this part runs agents with the edgeplane binary: none found (build it beside edgeplane-dev with make build, or give --edgeplane)")
	}
	return b.Edgeplane, nil
}

// Median is the median of v (the mean of the two middle values for an
// even count; 0 for none).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Us is d in microseconds.
func Us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// Pct is the nearest-rank percentile p (0..100) of sorted samples.
func Pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// Sorted returns d sorted, d left as it is.
func Sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}
