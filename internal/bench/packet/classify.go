// SPDX-License-Identifier: Apache-2.0

package packet

import (
	"fmt"
	"net/netip"

	"github.com/edgeplane/edgeplane/internal/bench/measure"
	"github.com/edgeplane/edgeplane/internal/bench/testbed"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/rules"
)

// measureClassify adds classify+redirect through rule sets of 1, 1,024
// and 65,536 rules in one mask group, and of 8, 1,024 and 65,536 rules
// in eight (quick: 1 rule, one group).
func (b *bencher) measureClassify(r *Result) error {
	sizes, sizes8 := []int{1, 1024, 65536}, []int{8, 1024, 65536}
	if b.o.Quick {
		sizes, sizes8 = sizes[:1], nil
	}
	for _, n := range sizes {
		b.o.Log("classify+redirect, %d rules", n)
		if err := b.measureSet(r, "classify_redirect", n, 1); err != nil {
			return err
		}
	}
	for _, n := range sizes8 {
		b.o.Log("classify+redirect over 8 mask groups, %d rules", n)
		if err := b.measureSet(r, "classify_redirect_8groups", n, 8); err != nil {
			return err
		}
	}
	return nil
}

// measureSet commits n rules in shapes mask groups and adds a new flow's
// cost (series_miss_n) and, for the one-group series, an established
// one's (series_hit_n), the wrappers alone subtracted.
func (b *bencher) measureSet(r *Result, series string, n, shapes int) error {
	cfg, probeDst := ruleSet(n, shapes)
	gen, next, err := rules.Compile(cfg, b.ns.Resolve, b.alloc, b.limits)
	if err != nil {
		return fmt.Errorf("compile %d rules: %w", n, err)
	}
	if _, err := b.dp.Commit(gen); err != nil {
		return fmt.Errorf("commit %d rules: %w", n, err)
	}
	b.alloc = next
	frame := testbed.UDPFrame(netip.MustParseAddr("10.1.0.2"), probeDst, 5000)
	miss, err := b.median(b.progs.BenchMiss, frame, bpf.XDPRedirect)
	if err != nil {
		return fmt.Errorf("%s miss, %d rules: %w", series, n, err)
	}
	r.add(Figure{Name: fmt.Sprintf("%s_miss_%d", series, n), RawNs: miss, NsPerPacket: r.FloorNs + miss - b.wrapMiss,
		Rules: n, Groups: len(gen.Groups), Method: methodWrapped, Verdict: "redirect"})
	if series != "classify_redirect" {
		return nil
	}
	hit, err := b.median(b.progs.BenchHit, frame, bpf.XDPRedirect)
	if err != nil {
		return fmt.Errorf("hit, %d rules: %w", n, err)
	}
	r.add(Figure{Name: fmt.Sprintf("%s_hit_%d", series, n), RawNs: hit, NsPerPacket: r.FloorNs + hit - b.wrapHit,
		Rules: n, Groups: len(gen.Groups), Method: methodWrapped, Verdict: "redirect"})
	return nil
}

// measureMalformed adds a truncated IPv4 packet's drop.
func (b *bencher) measureMalformed(r *Result) error {
	bad := testbed.UDPFrame(netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.3.0.1"), 5000)[:14+12] // truncated IPv4
	drop, err := b.median(b.dp.Prog, bad, bpf.XDPDrop)
	if err != nil {
		return fmt.Errorf("malformed: %w", err)
	}
	r.add(Figure{Name: "malformed_drop", RawNs: drop, NsPerPacket: drop, Method: methodPlain, Verdict: "drop"})
	return nil
}

// classifyGoals: a miss at 65,536 rules costs at most 1.5 times one at 1,
// a hit at 65,536 rules 40 ns above the floor, and a miss at one rule
// about one bare insert.
func classifyGoals(r *Result) []measure.Goal {
	missAt := func(name string) float64 { return r.find(name).NsPerPacket }
	return []measure.Goal{
		{Name: "miss cost at 65536 rules / at 1 rule", Value: missAt("classify_redirect_miss_65536") / missAt("classify_redirect_miss_1"), Limit: 1.5},
		{Name: "hit cost above the XDP_PASS floor (ns)", Value: r.find("classify_redirect_hit_65536").AboveFloor, Limit: 40},
		{Name: "classifier miss, 1 rule, / bare LRU insert", Value: r.find("classify_redirect_miss_1").InsertMultiple, Limit: 1.1},
	}
}

// ruleSet builds n redirect rules toward 10.3.0.0/16 (routed via wan0) in
// the given number of match shapes (mask groups), and the destination of a
// probe that matches the last rule of the last-searched shape, so a miss
// walks every group.
func ruleSet(n, shapes int) (*config.Config, netip.Addr) {
	cfg := &config.Config{
		Interfaces: []config.Interface{{Name: "lan0", Role: "lan"}, {Name: "wan0", Role: "wan"}},
		FARs:       []config.FAR{{ID: 1, Action: "redirect", Interface: "wan0"}},
		Limits:     config.Limits{Flows: 65536, Rules: uint32(n) + 1024},
	}
	cfg.Normalize()
	udp := config.Proto{Num: 17, Set: true}
	var probe netip.Addr
	for i := 0; i < n; i++ {
		dst := netip.AddrFrom4([4]byte{10, 3, byte(i >> 8), byte(i)})
		m := config.Match{Proto: udp, Dport: config.PortRange{Lo: 5000, Hi: 5000, Set: true}}
		shape := i % shapes
		switch shape {
		case 0:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
		case 1:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 31).Masked()}
		case 2:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 30).Masked()}
		case 3:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
			m.Src = config.Prefix{P: netip.MustParsePrefix("10.1.0.0/24")}
		case 4:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
			m.Dport = config.PortRange{}
		case 5:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 29).Masked()}
		case 6:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
			m.Dport = config.PortRange{Lo: 4096, Hi: 8191, Set: true}
		case 7:
			m.Dst = config.Prefix{P: netip.PrefixFrom(dst, 32)}
			m.Proto = config.Proto{}
			m.Dport = config.PortRange{}
		}
		// Later rules have higher precedence values (worse), so the probe,
		// which matches the last rule, is found in the last group searched.
		cfg.PDRs = append(cfg.PDRs, config.PDR{ID: uint32(i + 1), Precedence: uint32(i + 1), Match: m, FAR: 1})
		probe = dst
	}
	return cfg, probe
}
