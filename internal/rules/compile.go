// SPDX-License-Identifier: Apache-2.0

// Package rules compiles PDRs and FARs from the config into the dataplane's
// tables: tuple-space mask groups, masked classifier entries and FARs.
package rules

import (
	"fmt"
	"math/bits"
	"sort"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Resolver maps an interface name to its ifindex on this host.
type Resolver func(name string) (uint32, error)

// Compile turns cfg into a generation. alloc gives each PDR a stable
// statistics index; it is not modified: the updated allocator is returned
// for the caller to keep once the generation is committed, and indexes
// handed out for the first time are listed in Generation.ResetStats.
// Problems are reported as config.Errors with the path of the culprit.
func Compile(cfg *config.Config, ifindex Resolver, alloc *StatsAlloc, limits bpf.Limits) (*bpf.Generation, *StatsAlloc, error) {
	var errs config.Errors
	alloc = alloc.clone()
	g := &bpf.Generation{
		Rules:     map[bpf.RuleKey]bpf.Rule{},
		NoMatch:   verdict(cfg.Defaults.NoMatch),
		Malformed: verdict(cfg.Defaults.Malformed),
	}

	ifidx := map[string]uint32{}
	missing := map[string]bool{} // reported once, not again at each reference
	for i, itf := range cfg.Interfaces {
		idx, err := ifindex(itf.Name)
		if err != nil {
			errs = append(errs, config.FieldError{Path: fmt.Sprintf("interfaces[%d].name", i), Reason: err.Error()})
			missing[itf.Name] = true
			continue
		}
		ifidx[itf.Name] = idx
	}

	farIdx := map[uint32]uint32{}
	for i, f := range cfg.FARs {
		far := bpf.Far{Id: f.ID}
		switch f.Action {
		case "pass":
			far.Action = bpf.ActPass
		case "drop":
			far.Action = bpf.ActDrop
		case "redirect":
			far.Action = bpf.ActRedirect
			idx, ok := ifidx[f.Interface]
			if !ok && !missing[f.Interface] {
				errs = append(errs, config.FieldError{Path: fmt.Sprintf("fars[%d].interface", i), Reason: fmt.Sprintf("interface %q is not available", f.Interface)})
			}
			far.Ifindex = idx
		default:
			errs = append(errs, config.FieldError{Path: fmt.Sprintf("fars[%d].action", i), Reason: fmt.Sprintf("unknown action %q", f.Action)})
		}
		farIdx[f.ID] = uint32(len(g.FARs))
		g.FARs = append(g.FARs, far)
	}

	type group struct {
		mask    bpf.FlowKey
		minPrio uint64
		entries map[bpf.FlowKey]bpf.Rule
	}
	groups := map[bpf.FlowKey]*group{}
	live := map[uint32]bool{}
	nEntries := 0

	for i, p := range cfg.PDRs {
		path := fmt.Sprintf("pdrs[%d]", i)
		fi, ok := farIdx[p.FAR]
		if !ok {
			errs = append(errs, config.FieldError{Path: path + ".far", Reason: fmt.Sprintf("no far with id %d", p.FAR)})
			continue
		}
		var in uint32
		if p.Match.In != "" {
			if in, ok = ifidx[p.Match.In]; !ok {
				if !missing[p.Match.In] {
					errs = append(errs, config.FieldError{Path: path + ".match.in", Reason: fmt.Sprintf("interface %q is not available", p.Match.In)})
				}
				continue
			}
		}
		stats, isNew, err := alloc.Get(p.ID)
		if err != nil {
			errs = append(errs, config.FieldError{Path: path + ".id", Reason: err.Error()})
			continue
		}
		live[p.ID] = true
		if isNew {
			g.ResetStats = append(g.ResetStats, stats)
		}
		key, mask := baseKey(p.Match, in)
		rule := bpf.Rule{Prio: uint64(p.Precedence)<<32 | uint64(p.ID), Far: fi, Stats: stats}
		for _, sp := range portPrefixes(p.Match.Sport) {
			for _, dp := range portPrefixes(p.Match.Dport) {
				k, m := key, mask
				k.Sport, m.Sport = bits.ReverseBytes16(sp.val), bits.ReverseBytes16(sp.mask)
				k.Dport, m.Dport = bits.ReverseBytes16(dp.val), bits.ReverseBytes16(dp.mask)
				grp := groups[m]
				if grp == nil {
					grp = &group{mask: m, minPrio: rule.Prio, entries: map[bpf.FlowKey]bpf.Rule{}}
					groups[m] = grp
				}
				grp.minPrio = min(grp.minPrio, rule.Prio)
				// Same masked key twice: only the better rule can ever win it.
				if old, dup := grp.entries[k]; !dup || rule.Prio < old.Prio {
					if !dup {
						nEntries++
					}
					grp.entries[k] = rule
				}
			}
		}
	}
	alloc.Retain(live)

	if nEntries > int(limits.Rules) {
		errs = append(errs, config.FieldError{Path: "pdrs", Reason: fmt.Sprintf("%d classifier entries after port-range expansion exceed limits.rules %d", nEntries, limits.Rules)})
	}
	if len(groups) > bpf.MaxGroups {
		errs = append(errs, config.FieldError{Path: "pdrs", Reason: fmt.Sprintf("rules use %d distinct match shapes (prefix lengths, fields, port-range blocks); the classifier supports %d: align port ranges to powers of two or share prefix lengths", len(groups), bpf.MaxGroups)})
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}

	sorted := make([]*group, 0, len(groups))
	for _, grp := range groups {
		sorted = append(sorted, grp)
	}
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].minPrio != sorted[b].minPrio {
			return sorted[a].minPrio < sorted[b].minPrio
		}
		// Deterministic order for equal minPrio: bigger groups first.
		return len(sorted[a].entries) > len(sorted[b].entries)
	})
	for gi, grp := range sorted {
		g.Groups = append(g.Groups, bpf.Group{Mask: grp.mask, MinPrio: grp.minPrio})
		for k, r := range grp.entries {
			g.Rules[bpf.RuleKey{K: k, Group: uint32(gi)}] = r
		}
	}
	return g, alloc, nil
}

func verdict(s string) uint32 {
	if s == "drop" {
		return bpf.XDPDrop
	}
	return bpf.XDPPass
}

// baseKey builds the key and mask of a match without its ports.
func baseKey(m config.Match, in uint32) (key, mask bpf.FlowKey) {
	if in != 0 {
		key.Ifindex, mask.Ifindex = in, 0xffffffff
	}
	setPrefix := func(p config.Prefix, k, mk *[16]uint8) {
		if !p.IsSet() {
			return
		}
		addr := p.P.Addr()
		fam := uint8(6)
		b := addr.As16()
		if addr.Is4() {
			fam = 4
			a4 := addr.As4()
			b = [16]uint8{}
			copy(b[:], a4[:])
		}
		key.Family, mask.Family = fam, 0xff
		for i := 0; i < p.P.Bits(); i++ {
			mk[i/8] |= 0x80 >> (i % 8)
		}
		for i := range b {
			k[i] = b[i] & mk[i]
		}
	}
	setPrefix(m.Src, &key.Src, &mask.Src)
	setPrefix(m.Dst, &key.Dst, &mask.Dst)
	if m.Proto.Set {
		key.Proto, mask.Proto = m.Proto.Num, 0xff
	}
	if m.DSCP != nil {
		key.Dscp, mask.Dscp = *m.DSCP, 0xff
	}
	if m.GREKey != nil {
		key.GreKey, mask.GreKey = bits.ReverseBytes32(*m.GREKey), 0xffffffff
		key.Flags, mask.Flags = bpf.KeyFlagGREKey, bpf.KeyFlagGREKey
	}
	return key, mask
}

type portPrefix struct{ val, mask uint16 }

// portPrefixes covers a port range with the fewest aligned power-of-two
// blocks (at most 30 for a 16-bit range); an unset range is one wildcard.
func portPrefixes(r config.PortRange) []portPrefix {
	if !r.Set {
		return []portPrefix{{0, 0}}
	}
	var out []portPrefix
	lo, hi := uint32(r.Lo), uint32(r.Hi)
	for lo <= hi {
		size := uint32(1) << 16
		if lo != 0 {
			size = lo & -lo
		}
		for lo+size-1 > hi {
			size >>= 1
		}
		out = append(out, portPrefix{val: uint16(lo), mask: uint16(^(size - 1))})
		lo += size
	}
	return out
}
