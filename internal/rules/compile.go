// SPDX-License-Identifier: Apache-2.0

// Package rules compiles PDRs and FARs from the config into the dataplane's
// tables: tuple-space mask groups, masked classifier entries and FARs.
package rules

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Resolver maps an interface name to its ifindex on this host.
type Resolver func(name string) (uint32, error)

// Compile turns cfg into a generation. allocs give each PDR and path a
// stable statistics index; they are not modified: the updated allocators
// are returned for the caller to keep once the generation is committed, and
// indexes handed out for the first time are listed in
// Generation.ResetStats / ResetPathStats. Problems are reported as
// config.Errors with the path of the culprit.
func Compile(cfg *config.Config, ifindex Resolver, allocs Allocs, limits bpf.Limits) (*bpf.Generation, Allocs, error) {
	var errs config.Errors
	allocs = allocs.clone()
	alloc := allocs.PDR
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

	pathIdx := map[uint32]uint32{}
	livePaths := map[uint32]bool{}
	if len(cfg.Paths) > bpf.MaxPaths {
		errs = append(errs, config.FieldError{Path: "paths", Reason: fmt.Sprintf("%d paths, at most %d", len(cfg.Paths), bpf.MaxPaths)})
	}
	g.Decaps = map[bpf.DecapKey]bpf.Decap{}
	for i, pt := range cfg.Paths {
		if i >= bpf.MaxPaths {
			break
		}
		idx, ok := ifidx[pt.Interface]
		if !ok {
			if !missing[pt.Interface] {
				errs = append(errs, config.FieldError{Path: fmt.Sprintf("paths[%d].interface", i), Reason: fmt.Sprintf("interface %q is not available", pt.Interface)})
			}
			continue
		}
		stats, isNew, err := allocs.Path.Get(pt.ID)
		if err != nil {
			errs = append(errs, config.FieldError{Path: fmt.Sprintf("paths[%d].id", i), Reason: err.Error()})
			continue
		}
		livePaths[pt.ID] = true
		if isNew {
			g.ResetPathStats = append(g.ResetPathStats, stats)
		}
		bp := bpf.Path{Ifindex: idx, Stats: stats, Id: pt.ID, Ttl: pt.TTL}
		if bp.Ttl == 0 {
			bp.Ttl = config.DefaultPathTTL
		}
		l4, r4 := pt.Local.A.As4(), pt.Remote.A.As4()
		bp.Local, bp.Remote = be32(l4), be32(r4)
		dk := bpf.DecapKey{Local: bp.Local}
		if pt.Key != nil {
			bp.Flags |= bpf.PathFlagKey
			bp.Key = bits.ReverseBytes32(*pt.Key)
			dk.Key, dk.HasKey = bp.Key, 1
		}
		if pt.Seq {
			bp.Flags |= bpf.PathFlagSeq
		}
		if pt.DSCP != nil {
			bp.Flags |= bpf.PathFlagDSCPFixed
			bp.Dscp = *pt.DSCP
		}
		pathIdx[pt.ID] = uint32(len(g.Paths))
		g.Paths = append(g.Paths, bp)
		g.Decaps[dk] = bpf.Decap{Remote: bp.Remote, Stats: stats, Id: pt.ID}
	}
	allocs.Path.Retain(livePaths)

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
		case "encap":
			far.Action = bpf.ActEncap
			pi, ok := pathIdx[f.Path]
			if !ok {
				errs = append(errs, config.FieldError{Path: fmt.Sprintf("fars[%d].path", i), Reason: fmt.Sprintf("path %d is not available", f.Path)})
			}
			far.Path = pi
		case "decap":
			far.Action = bpf.ActDecap
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
			errs = append(errs, config.FieldError{Path: path + ".id", Reason: err.Error(), Capacity: errors.Is(err, ErrStatsFull)})
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
		errs = append(errs, config.FieldError{Path: "pdrs", Reason: fmt.Sprintf("%d classifier entries after port-range expansion exceed limits.rules %d", nEntries, limits.Rules), Capacity: true})
	}
	if len(groups) > bpf.MaxGroups {
		errs = append(errs, config.FieldError{Path: "pdrs", Reason: fmt.Sprintf("rules use %d distinct match shapes (prefix lengths, fields, port-range blocks); the classifier supports %d: align port ranges to powers of two or share prefix lengths", len(groups), bpf.MaxGroups), Capacity: true})
	}
	if len(errs) > 0 {
		return nil, Allocs{}, errs
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
	allocs.PDR = alloc
	return g, allocs, nil
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

// be32 returns the uint32 whose in-memory bytes are a (network order on
// this little-endian host's maps).
func be32(a [4]byte) uint32 {
	return uint32(a[0]) | uint32(a[1])<<8 | uint32(a[2])<<16 | uint32(a[3])<<24
}
