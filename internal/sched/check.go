// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"

	"github.com/edgeplane/edgeplane/internal/config"
)

// checkHost refuses what this host cannot give strategies without
// risking itself (Host.Problems: a real-time policy while RT throttling
// is off, deadline runtimes past what real-time tasks may have of a
// CPU, no CPU left undedicated, fifo or rr with no CPU but the
// housekeeping one). Only the problems of strategies checked are
// reported, each at at(id) + "." + field; the others are checked
// first, so a problem of the set falls on a strategy reported.
func checkHost(others, checked []config.Strategy, at func(id uint32) string) error {
	if len(checked) == 0 {
		return nil
	}
	host, err := ReadHost("/proc", "/sys")
	if err != nil {
		return fmt.Errorf("cpu strategies: read the host's real-time limits and CPUs: %w", err)
	}
	mine := map[uint32]bool{}
	for _, s := range checked {
		mine[s.ID] = true
	}
	var errs config.Errors
	for _, p := range host.Problems(append(slices.Clone(others), checked...)) {
		if mine[p.ID] {
			errs = append(errs, config.FieldError{Path: at(p.ID) + "." + p.Field, Reason: p.Reason})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// CheckConfig refuses the strategies of a whole config this host cannot
// give (checkHost), each named by its place in the file: those not in
// live (the strategies that serve, a reload's) exactly as they are.
func CheckConfig(cfg *config.Config, live []any) error {
	at := map[uint32]string{}
	var checked, others []config.Strategy
	for i, s := range cfg.Strategies {
		if slices.ContainsFunc(live, func(o any) bool { return reflect.DeepEqual(o, s) }) {
			others = append(others, s)
			continue
		}
		at[s.ID] = "strategies[" + strconv.Itoa(i) + "]"
		checked = append(checked, s)
	}
	return checkHost(others, checked, func(id uint32) string { return at[id] })
}

// CheckChanges refuses the strategies a store batch (ch) created or
// updated that this host cannot give (checkHost), named by their
// operation, against the store's others.
func CheckChanges(st *config.Store, ch *config.Changes) error {
	if len(ch.Strategies) == 0 {
		return nil
	}
	at := map[uint32]string{}
	var checked, others []config.Strategy
	for _, d := range ch.Strategies {
		if d.New != nil {
			at[d.New.ID] = d.At
			checked = append(checked, *d.New)
		}
	}
	for _, o := range st.List(config.KindStrategy) {
		if s := o.(config.Strategy); at[s.ID] == "" {
			others = append(others, s)
		}
	}
	return checkHost(others, checked, func(id uint32) string { return at[id] })
}
