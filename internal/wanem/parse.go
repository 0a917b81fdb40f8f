// SPDX-License-Identifier: Apache-2.0

package wanem

import (
	"fmt"

	"github.com/edgeplane/edgeplane/internal/config"
	"math"
	"strconv"
	"strings"
)

// ParseRate parses a rate such as "50mbit" into bits per second (see
// config.ParseRate); "0" means no limit.
func ParseRate(s string) (uint64, error) { return config.ParseRate(s) }

// FormatRate writes bits per second the way ParseRate reads them; 0 is
// "unlimited".
func FormatRate(bps uint64) string {
	if bps == 0 {
		return "unlimited"
	}
	return config.FormatRate(bps)
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
