// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable writes objs (values of kind k's type) as the CLI shows them:
// one row per object under the kind's Columns, aligned by spaces.
func (s *Schema) WriteTable(w io.Writer, k Kind, objs []any) error {
	header, rows := s.def(k).table(objs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func (k *KindOf[T]) table(objs []any) (header []string, rows [][]string) {
	cells := make([][]string, len(objs))
	used := make([]bool, len(k.Columns))
	for i, o := range objs {
		x, ok := o.(T)
		if !ok {
			x = *o.(*T)
		}
		cells[i] = make([]string, len(k.Columns))
		for j, c := range k.Columns {
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
	for j, c := range k.Columns {
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
