// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"strings"
)

// Text renders the report as a table.
func (r *Report) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "kernel %s, %d CPUs", r.Kernel, r.CPUs)
	if len(r.Figures) > 0 {
		fmt.Fprintf(&sb, ", %d repeats x %d rounds (median)\n", r.Repeat, r.Rounds)
		fmt.Fprintf(&sb, "%-36s %10s %10s %8s %7s\n", "figure", "ns/pkt", "+floor ns", "x floor", "groups")
	} else {
		sb.WriteString("\n")
	}
	for _, f := range r.Figures {
		fmt.Fprintf(&sb, "%-36s %10.1f %10.1f %8.2f %7d\n", f.Name, f.NsPerPacket, f.AboveFloor, f.RatioFloor, f.Groups)
	}
	if e := r.EndToEnd; e != nil {
		sb.WriteString(e.Text())
	}
	if m := r.MultiQueue; m != nil {
		sb.WriteString(m.Text())
	}
	if c := r.Control; c != nil {
		sb.WriteString(c.Text())
	}
	if f := r.FlowOpt; f != nil {
		sb.WriteString(f.Text())
	}
	if f := r.Fleet; f != nil {
		sb.WriteString(f.Text())
	}
	if f := r.Failover; f != nil {
		sb.WriteString(f.Text())
	}
	for _, g := range r.Goals {
		bound := "limit"
		if g.AtLeast {
			bound = "at least"
		}
		fmt.Fprintf(&sb, "goal: %-44s %8.2f (%s %.2f) met=%v\n", g.Name, g.Value, bound, g.Limit, g.Met)
	}
	return sb.String()
}
