// SPDX-License-Identifier: Apache-2.0

package client

import (
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/edgeplane/edgeplane/internal/config"
)

// Column is one column of the CLI's table of a kind whose objects are T.
type Column[T any] struct {
	Name  string
	Value func(x *T) string
	// Unset is shown when Value returns "": "*" for a match field that
	// matches anything, "-" for a field not set.
	Unset string
	// Optional columns are shown only when some row has a value: fields
	// most objects never set.
	Optional bool
}

// Table is the CLI's table of a kind whose objects are T: the columns
// `get` shows, one row per object.
type Table[T any] []Column[T]

// tabler is a Table without its type parameter.
type tabler interface {
	cells(objs []any) (header []string, rows [][]string)
}

// Write writes objs (each a T or *T) one row per object under the
// table's columns, aligned by spaces.
func (t Table[T]) Write(w io.Writer, objs []any) error {
	return writeCells(w, t, objs)
}

func writeCells(w io.Writer, t tabler, objs []any) error {
	header, rows := t.cells(objs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func (t Table[T]) cells(objs []any) (header []string, rows [][]string) {
	cells := make([][]string, len(objs))
	used := make([]bool, len(t))
	for i, o := range objs {
		x, ok := o.(T)
		if !ok {
			x = *o.(*T)
		}
		cells[i] = make([]string, len(t))
		for j, c := range t {
			v := c.Value(&x)
			if v != "" {
				used[j] = true
			} else {
				v = c.Unset
			}
			cells[i][j] = v
		}
	}
	var cols []int
	for j, c := range t {
		if !c.Optional || used[j] {
			cols = append(cols, j)
			header = append(header, c.Name)
		}
	}
	rows = make([][]string, len(objs))
	for i := range cells {
		for _, j := range cols {
			rows[i] = append(rows[i], cells[i][j])
		}
	}
	return header, rows
}

// WriteTable writes objs, objects of kind k of s, as `get` shows them: under
// the kind's table, or, for a kind without one, its key alone.
func WriteTable(w io.Writer, s *config.Schema, k config.Kind, objs []any) error {
	if t, ok := tables[k]; ok {
		return writeCells(w, t, objs)
	}
	return writeCells(w, keyTable{s, k}, objs)
}

// keyTable is the table of a kind declared without one: its key.
type keyTable struct {
	s *config.Schema
	k config.Kind
}

func (t keyTable) cells(objs []any) (header []string, rows [][]string) {
	rows = make([][]string, len(objs))
	for i, o := range objs {
		rows[i] = []string{t.s.KeyOf(t.k, o).String()}
	}
	return []string{strings.ToUpper(t.s.KeyField(t.k))}, rows
}

// tables are the built-in kinds' tables.
var tables = map[config.Kind]tabler{
	config.KindInterface: Table[config.Interface]{
		{Name: "NAME", Value: func(i *config.Interface) string { return i.Name }},
		{Name: "ROLE", Value: func(i *config.Interface) string { return i.Role }, Unset: "-"},
		{Name: "XDP", Value: func(i *config.Interface) string { return i.XDP }, Unset: config.XDPAuto},
	},
	config.KindPath: Table[config.Path]{
		{Name: "ID", Value: func(p *config.Path) string { return always(p.ID) }},
		{Name: "TYPE", Value: func(p *config.Path) string { return p.Type }, Unset: "-"},
		{Name: "INTERFACE", Value: func(p *config.Path) string { return p.Interface }, Unset: "-"},
		{Name: "LOCAL", Value: func(p *config.Path) string { return p.Local.String() }, Unset: "-"},
		{Name: "REMOTE", Value: func(p *config.Path) string { return p.Remote.String() }, Unset: "-"},
		{Name: "KEY", Value: func(p *config.Path) string { return optNum(p.Key) }, Unset: "-"},
		{Name: "SEQ", Value: func(p *config.Path) string { return yesNo(p.Seq) }},
		{Name: "TTL", Value: func(p *config.Path) string { return num(p.TTL) }, Unset: fmt.Sprint(config.DefaultPathTTL)},
		// An unset DSCP copies the inner packet's.
		{Name: "DSCP", Value: func(p *config.Path) string { return optNum(p.DSCP) }, Unset: "inner"},
	},
	config.KindFAR: Table[config.FAR]{
		{Name: "ID", Value: func(f *config.FAR) string { return always(f.ID) }},
		{Name: "ACTION", Value: func(f *config.FAR) string { return f.Action }, Unset: "-"},
		{Name: "INTERFACE", Value: func(f *config.FAR) string { return f.Interface }, Unset: "-"},
		{Name: "PATH", Value: func(f *config.FAR) string { return num(f.Path) }, Unset: "-"},
		{Name: "LBR", Value: func(f *config.FAR) string { return num(f.LBR) }, Unset: "-", Optional: true},
		// The backend a nat FAR rewrites the destination to.
		{Name: "NAT", Value: func(f *config.FAR) string {
			if f.Action != config.ActionNAT || !f.Address.IsSet() {
				return ""
			}
			return net.JoinHostPort(f.Address.String(), strconv.Itoa(int(f.Port)))
		}, Unset: "-"},
	},
	config.KindPDR: Table[config.PDR]{
		{Name: "ID", Value: func(p *config.PDR) string { return always(p.ID) }},
		{Name: "PRECEDENCE", Value: func(p *config.PDR) string { return always(p.Precedence) }},
		{Name: "IN", Value: func(p *config.PDR) string { return p.Match.In }, Unset: "*"},
		// Only when a PDR matches decapsulated traffic.
		{Name: "IN_PATH", Value: func(p *config.PDR) string { return num(p.Match.InPath) }, Unset: "*", Optional: true},
		{Name: "SRC", Value: func(p *config.PDR) string { return p.Match.Src.String() }, Unset: "*"},
		{Name: "DST", Value: func(p *config.PDR) string { return p.Match.Dst.String() }, Unset: "*"},
		{Name: "PROTO", Value: func(p *config.PDR) string { return p.Match.Proto.String() }, Unset: "*"},
		{Name: "SPORT", Value: func(p *config.PDR) string { return p.Match.Sport.String() }, Unset: "*"},
		{Name: "DPORT", Value: func(p *config.PDR) string { return p.Match.Dport.String() }, Unset: "*"},
		{Name: "DSCP", Value: func(p *config.PDR) string { return optNum(p.Match.DSCP) }, Unset: "*"},
		{Name: "GRE_KEY", Value: func(p *config.PDR) string { return optNum(p.Match.GREKey) }, Unset: "*"},
		{Name: "FAR", Value: func(p *config.PDR) string { return always(p.FAR) }},
	},
	config.KindLBR: Table[config.LBR]{
		{Name: "ID", Value: func(l *config.LBR) string { return always(l.ID) }},
		{Name: "ALGORITHM", Value: func(l *config.LBR) string { return l.Algorithm }, Unset: "-"},
		// Members as far:weight.
		{Name: "MEMBERS", Value: func(l *config.LBR) string {
			ms := make([]string, len(l.Members))
			for i, m := range l.Members {
				ms[i] = fmt.Sprintf("%d:%d", m.FAR, m.EffectiveWeight())
			}
			return strings.Join(ms, ",")
		}, Unset: "-"},
	},
	config.KindService: Table[config.Service]{
		{Name: "ID", Value: func(sv *config.Service) string { return always(sv.ID) }},
		{Name: "VIP", Value: func(sv *config.Service) string { return sv.VIP.String() }, Unset: "-"},
		{Name: "PORT", Value: func(sv *config.Service) string { return always(sv.Port) }},
		{Name: "PROTO", Value: func(sv *config.Service) string { return sv.Proto.String() }, Unset: "-"},
		{Name: "LBR", Value: func(sv *config.Service) string { return always(sv.LBR) }},
		// Only when a service sets one: most never do, and then they
		// all stand behind the PDRs at 0 alike.
		{Name: "PRECEDENCE", Value: func(sv *config.Service) string { return num(sv.Precedence) }, Unset: "0", Optional: true},
		{Name: "CONNECTIONS", Value: func(sv *config.Service) string {
			if sv.Stateless {
				return "stateless"
			}
			return "pinned"
		}},
	},
	config.KindQoSClass: Table[config.QoSClass]{
		{Name: "ID", Value: func(c *config.QoSClass) string { return always(c.ID) }},
		{Name: "NAME", Value: func(c *config.QoSClass) string { return c.Name }, Unset: "-"},
		{Name: "TYPE", Value: func(c *config.QoSClass) string { return c.Type }},
		{Name: "DSCP", Value: func(c *config.QoSClass) string { return c.DSCP.String() }, Unset: "-"},
		{Name: "RATE", Value: func(c *config.QoSClass) string { return c.Rate.String() }, Unset: "-"},
		{Name: "QUANTUM", Value: func(c *config.QoSClass) string { return num(c.Effective().Quantum) }, Unset: "-"},
		{Name: "OVER", Value: func(c *config.QoSClass) string { return c.Effective().Over }, Unset: "-"},
	},
	config.KindFlowOpt: Table[config.FlowOptModule]{
		{Name: "MODULE", Value: func(m *config.FlowOptModule) string { return m.Module }},
		{Name: "STATE", Value: func(m *config.FlowOptModule) string {
			if m.Off {
				return "off"
			}
			return "on"
		}},
		{Name: "SETTINGS", Value: func(m *config.FlowOptModule) string { return m.Effective().Settings() }, Unset: "-"},
	},
	config.KindStrategy: Table[config.Strategy]{
		{Name: "ID", Value: func(s *config.Strategy) string { return always(s.ID) }},
		{Name: "NAME", Value: func(s *config.Strategy) string { return s.Name }, Unset: "-"},
		{Name: "MATCH", Value: strategyMatch, Unset: "-"},
		{Name: "POLICY", Value: func(s *config.Strategy) string { return strategyPolicy(s.Effective()) }},
		{Name: "CPUS", Value: func(s *config.Strategy) string { return s.CPUs.String() }, Unset: "-"},
	},
}

// Column value helpers: a number, "" for zero (shown as the column's
// Unset), and an optional number.
func num[N ~uint8 | ~uint16 | ~uint32](v N) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(v), 10)
}

func optNum[N ~uint8 | ~uint16 | ~uint32](v *N) string {
	if v == nil {
		return ""
	}
	return strconv.FormatUint(uint64(*v), 10)
}

// always is a number shown even when zero.
func always[N ~uint8 | ~uint16 | ~uint32](v N) string {
	return strconv.FormatUint(uint64(v), 10)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// strategyMatch shows what s matches as "name value" pairs: "regex
// ^gnb$ labels app=gnb user open5gs".
func strategyMatch(s *config.Strategy) string {
	var out []string
	if s.CommandRegex != "" {
		out = append(out, "regex "+s.CommandRegex)
	}
	if sel := s.Selectors; sel != nil {
		if len(sel.PodLabels) > 0 {
			var labels []string
			for _, k := range slices.Sorted(maps.Keys(sel.PodLabels)) {
				labels = append(labels, k+"="+sel.PodLabels[k])
			}
			out = append(out, "labels "+strings.Join(labels, ","))
		}
		for _, f := range []struct{ name, v string }{{"cgroup", sel.Cgroup}, {"user", sel.User}, {"env", sel.Env}} {
			if f.v != "" {
				out = append(out, f.name+" "+f.v)
			}
		}
	}
	return strings.Join(out, " ")
}

// strategyPolicy shows an effective policy with its settings: "fifo
// 50", "deadline 500µs/1ms", "weight others 2".
func strategyPolicy(s config.Strategy) string {
	out := s.Policy
	switch s.Policy {
	case config.PolicyFIFO, config.PolicyRR:
		out += " " + strconv.FormatUint(uint64(s.RTPriority), 10)
	case config.PolicyDeadline:
		out += " " + s.ExecutionTime.String() + "/" + s.Period.String()
	}
	if s.OthersWeight != 0 {
		out += " others " + strconv.FormatUint(uint64(s.OthersWeight), 10)
	}
	return out
}
