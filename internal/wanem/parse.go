// SPDX-License-Identifier: Apache-2.0

package wanem

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

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

// FormatRate writes bits per second the way ParseRate reads them; 0 is
// "unlimited".
func FormatRate(bps uint64) string {
	if bps == 0 {
		return "unlimited"
	}
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

// ParseLoss parses a loss percentage: "1%" and "1" both mean one frame in a
// hundred.
func ParseLoss(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
		return 0, fmt.Errorf("loss %q: want a percentage within 0 and 100, such as 1%%", s)
	}
	return v, nil
}
