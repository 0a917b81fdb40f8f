// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/edgeplane/edgeplane/internal/maglev"
)

// Validate checks the configuration as Normalize would leave it (c itself
// is not modified) and returns an Errors value listing every problem, or
// nil. Problems are listed section by section: interfaces, fars, pdrs,
// limits, defaults.
func (c *Config) Validate() error {
	if errs := c.validate(); len(errs) > 0 {
		return errs
	}
	return nil
}

func (c *Config) validate() Errors {
	n := c.normalizedCopy()
	var v validator
	ifaces := v.interfaces(n.Interfaces)
	paths := v.paths(n.Paths, ifaces)
	fars := v.fars(n.FARs, ifaces, paths)
	v.pdrs(n.PDRs, n.Limits.Rules, ifaces, paths, fars)
	farAction := func(id uint32) (string, bool) {
		if i, ok := fars[id]; ok {
			return n.FARs[i].Action, true
		}
		return "", false
	}
	lbrs := v.lbrs(n.LBRs, farAction, n.Limits.MaglevTable)
	v.services(n.Services, lbrs)
	v.counts(0, len(n.Services), 0)
	v.limits(n.Limits)
	v.defaults(n.Defaults)
	return v.errs
}

// normalizedCopy returns a normalized copy of c that shares nothing
// Normalize writes to with c.
func (c *Config) normalizedCopy() *Config {
	n := *c
	n.Interfaces = append([]Interface(nil), c.Interfaces...)
	n.Paths = append([]Path(nil), c.Paths...)
	n.PDRs = append([]PDR(nil), c.PDRs...)
	n.Normalize()
	return &n
}

type validator struct {
	errs Errors
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// interfaces checks the interfaces and returns the index of each name.
func (v *validator) interfaces(list []Interface) map[string]int {
	v.someInterface(len(list))
	byName := make(map[string]int, len(list))
	for i, it := range list {
		p := "interfaces[" + strconv.Itoa(i) + "]"
		if !v.iface(p, it) {
			continue
		}
		if first, dup := byName[it.Name]; dup {
			v.add(p+".name", "duplicate name %q (first at interfaces[%d])", it.Name, first)
		} else {
			byName[it.Name] = i
		}
	}
	return byName
}

// iface checks one interface's fields and reports whether its name is
// valid.
func (v *validator) iface(p string, it Interface) bool {
	reason := ifnameProblem(it.Name)
	if reason != "" {
		v.add(p+".name", "%s", reason)
	}
	switch it.Role {
	case RoleLAN, RoleWAN:
	case "":
		v.add(p+".role", "required (want lan or wan)")
	default:
		v.add(p+".role", "unknown role %q (want lan or wan)", it.Role)
	}
	switch it.XDP {
	case XDPNative, XDPGeneric, XDPAuto:
	default:
		v.add(p+".xdp", "unknown mode %q (want native, generic or auto)", it.XDP)
	}
	return reason == ""
}

// counts reports more PDRs than limits.rules (when rules is set) or more
// services than the dataplane has places for: problems of size.
func (v *validator) counts(pdrs, services int, rules uint32) {
	if rules != 0 && uint64(pdrs) > uint64(rules) {
		v.errs = append(v.errs, FieldError{Path: "pdrs", Reason: fmt.Sprintf("%d rules exceed limits.rules %d", pdrs, rules), Code: CodeCapacity})
	}
	if services > MaxServices {
		v.errs = append(v.errs, FieldError{Path: "services", Reason: fmt.Sprintf("%d services, at most %d", services, MaxServices), Code: CodeCapacity})
	}
}

// someInterface reports a config left with no interface (n of them).
func (v *validator) someInterface(n int) {
	if n == 0 {
		v.add("interfaces", "at least one interface required")
	}
}

// uniqueID records list[i]'s id in byID, reporting one already taken.
func (v *validator) uniqueID(byID map[uint32]int, p, list string, id uint32, i int) {
	if id == 0 {
		return // "required" is reported with the object's fields
	}
	if first, dup := byID[id]; dup {
		v.add(p+".id", "duplicate id %d (first at %s[%d])", id, list, first)
		return
	}
	byID[id] = i
}

// ifnameProblem returns why name is not a valid Linux interface name, or
// "" when it is. The rules are the kernel's dev_valid_name.
func ifnameProblem(name string) string {
	switch {
	case name == "":
		return "required"
	case len(name) > MaxIfnameLen:
		return fmt.Sprintf("interface name %q is %d bytes, longer than %d", name, len(name), MaxIfnameLen)
	case name == "." || name == "..":
		return fmt.Sprintf("interface name %q not allowed", name)
	}
	for _, r := range name {
		switch {
		case r == '/' || r == ':':
			return fmt.Sprintf("interface name %q must not contain %q", name, r)
		case unicode.IsSpace(r):
			return fmt.Sprintf("interface name %q must not contain whitespace", name)
		case r == 0:
			return fmt.Sprintf("interface name %q must not contain NUL", name)
		}
	}
	return ""
}

// paths checks the paths and returns the index of each id.
func (v *validator) paths(list []Path, ifaces map[string]int) map[uint32]int {
	byID := make(map[uint32]int, len(list))
	decap := map[DecapID]int{}
	for i, pt := range list {
		p := "paths[" + strconv.Itoa(i) + "]"
		v.uniqueID(byID, p, "paths", pt.ID, i)
		v.path(p, pt, func(name string) bool { _, ok := ifaces[name]; return ok })
		if k, ok := pt.DecapID(); ok {
			if first, dup := decap[k]; dup {
				v.decapClash(p, pt, fmt.Sprintf("paths[%d]", first))
			} else {
				decap[k] = i
			}
		}
	}
	return byID
}

// DecapID is what tells a path's received GRE packets apart from other
// paths': its local address and key.
type DecapID struct {
	Local  Addr
	Key    uint32
	HasKey bool
}

// DecapID returns pt's decapsulation identity, if its local address is set.
func (pt Path) DecapID() (DecapID, bool) {
	k := DecapID{Local: pt.Local, HasKey: pt.Key != nil}
	if pt.Key != nil {
		k.Key = *pt.Key
	}
	return k, pt.Local.IsSet()
}

func (v *validator) decapClash(p string, pt Path, other string) {
	what := "no key"
	if pt.Key != nil {
		what = fmt.Sprintf("key %d", *pt.Key)
	}
	v.add(p+".key", "%s with local %s is already used by %s; decapsulation could not tell them apart", what, pt.Local, other)
}

// path checks one path's fields; iface says whether an interface exists.
func (v *validator) path(p string, pt Path, iface func(string) bool) {
	if pt.ID == 0 {
		v.add(p+".id", "required")
	}
	switch pt.Type {
	case PathGRE:
	case "":
		v.add(p+".type", "required (want gre)")
	default:
		v.add(p+".type", "unknown type %q (want gre)", pt.Type)
	}
	if pt.Interface == "" {
		v.add(p+".interface", "required")
	} else if !iface(pt.Interface) {
		v.add(p+".interface", "unknown interface %q", pt.Interface)
	}
	for _, a := range []struct {
		name string
		addr Addr
	}{{"local", pt.Local}, {"remote", pt.Remote}} {
		switch {
		case !a.addr.IsSet():
			v.add(p+"."+a.name, "required (the outer IPv4 address)")
		case !a.addr.A.Is4():
			v.add(p+"."+a.name, "%s is not IPv4 (outer headers are IPv4)", a.addr)
		case a.addr.A.IsUnspecified() || a.addr.A.IsMulticast() || a.addr.A == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			v.add(p+"."+a.name, "%s cannot be a tunnel endpoint", a.addr)
		}
	}
	if pt.Local.IsSet() && pt.Local == pt.Remote {
		v.add(p+".remote", "same as local %s", pt.Local)
	}
}

// fars checks the FARs and returns the index of each id.
func (v *validator) fars(list []FAR, ifaces map[string]int, paths map[uint32]int) map[uint32]int {
	byID := make(map[uint32]int, len(list))
	iface := func(name string) bool { _, ok := ifaces[name]; return ok }
	path := func(id uint32) bool { _, ok := paths[id]; return ok }
	for i, f := range list {
		p := "fars[" + strconv.Itoa(i) + "]"
		v.uniqueID(byID, p, "fars", f.ID, i)
		v.far(p, f, iface, path)
	}
	return byID
}

// far checks one FAR's fields; iface and path say whether what it names
// exists.
func (v *validator) far(p string, f FAR, iface func(string) bool, path func(uint32) bool) {
	const want = "want pass, drop, redirect, encap, decap or nat"
	if f.ID == 0 {
		v.add(p+".id", "required")
	}
	knownAction := true
	switch f.Action {
	case ActionPass, ActionDrop, ActionRedirect, ActionEncap, ActionDecap, ActionNAT:
	case "":
		knownAction = false
		v.add(p+".action", "required (%s)", want)
	default:
		knownAction = false
		v.add(p+".action", "unknown action %q (%s)", f.Action, want)
	}
	switch {
	case f.Action == ActionRedirect && f.Interface == "":
		v.add(p+".interface", "required for action redirect")
	case knownAction && f.Action != ActionRedirect && f.Action != ActionNAT && f.Interface != "":
		v.add(p+".interface", "not allowed for action %s", f.Action)
	case f.Interface != "" && !iface(f.Interface):
		v.add(p+".interface", "unknown interface %q", f.Interface)
	}
	switch {
	case f.Action == ActionEncap && f.Path == 0:
		v.add(p+".path", "required for action encap")
	case knownAction && f.Action != ActionEncap && f.Path != 0:
		v.add(p+".path", "not allowed for action %s", f.Action)
	case f.Path != 0 && !path(f.Path):
		v.add(p+".path", "no path with id %d", f.Path)
	}
	switch {
	case f.Action == ActionNAT && !f.Address.IsSet():
		v.add(p+".address", "required for action nat (the backend)")
	case knownAction && f.Action != ActionNAT && f.Address.IsSet():
		v.add(p+".address", "not allowed for action %s", f.Action)
	case f.Address.IsSet() && !unicast(f.Address.A):
		v.add(p+".address", "%s is not a unicast address", f.Address)
	}
	switch {
	case f.Action == ActionNAT && f.Port == 0:
		v.add(p+".port", "required for action nat (the backend's port)")
	case knownAction && f.Action != ActionNAT && f.Port != 0:
		v.add(p+".port", "not allowed for action %s", f.Action)
	}
}

func unicast(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// lbrs checks the LBRs and returns the index of each id; farAction gives
// a FAR's action.
func (v *validator) lbrs(list []LBR, farAction func(uint32) (string, bool), maxTable uint32) map[uint32]int {
	byID := make(map[uint32]int, len(list))
	for i, l := range list {
		p := "lbrs[" + strconv.Itoa(i) + "]"
		v.uniqueID(byID, p, "lbrs", l.ID, i)
		v.lbr(p, l, farAction, maxTable)
	}
	return byID
}

// lbr checks one LBR's fields.
func (v *validator) lbr(p string, l LBR, farAction func(uint32) (string, bool), maxTable uint32) {
	if l.ID == 0 {
		v.add(p+".id", "required")
	}
	switch t := l.TableSize; {
	case t == 0:
	case t < MinMaglevTable || t > maxTable:
		v.add(p+".table_size", "%d outside %d..%d (limits.maglev_table)", t, MinMaglevTable, maxTable)
	case !maglev.IsPrime(t):
		v.add(p+".table_size", "%d is not prime", t)
	}
	switch l.Algorithm {
	case AlgorithmMaglev:
	case "":
		v.add(p+".algorithm", "required (want maglev)")
	default:
		v.add(p+".algorithm", "unknown algorithm %q (want maglev)", l.Algorithm)
	}
	if len(l.Members) > MaxMembers {
		v.errs = append(v.errs, FieldError{Path: p + ".members", Reason: fmt.Sprintf("%d members, at most %d", len(l.Members), MaxMembers), Code: CodeCapacity})
	}
	seen := map[uint32]int{}
	for j, m := range l.Members {
		mp := p + ".members[" + strconv.Itoa(j) + "]"
		if first, dup := seen[m.FAR]; dup {
			v.add(mp+".far", "far %d is already members[%d]", m.FAR, first)
			continue
		}
		seen[m.FAR] = j
		switch act, ok := farAction(m.FAR); {
		case m.FAR == 0:
			v.add(mp+".far", "required")
		case !ok:
			v.add(mp+".far", "no far with id %d", m.FAR)
		case act != ActionNAT && act != ActionEncap:
			v.add(mp+".far", "far %d has action %s; members need nat or encap", m.FAR, act)
		}
	}
}

// services checks the services against the LBRs (index by id).
func (v *validator) services(list []Service, lbrs map[uint32]int) {
	byID := make(map[uint32]int, len(list))
	byAddr := map[string]int{}
	byLBR := map[uint32]int{}
	lbr := func(id uint32) bool { _, ok := lbrs[id]; return ok }
	for i, sv := range list {
		p := "services[" + strconv.Itoa(i) + "]"
		v.uniqueID(byID, p, "services", sv.ID, i)
		v.service(p, sv, lbr)
		if k := sv.key(); sv.VIP.IsSet() {
			if first, dup := byAddr[k]; dup {
				v.add(p+".vip", "%s is already services[%d]", k, first)
			} else {
				byAddr[k] = i
			}
		}
		if first, dup := byLBR[sv.LBR]; dup && sv.LBR != 0 {
			v.add(p+".lbr", "lbr %d is already used by services[%d]", sv.LBR, first)
		} else if sv.LBR != 0 {
			byLBR[sv.LBR] = i
		}
	}
}

// key names a service's VIP, port and protocol.
func (sv Service) key() string {
	return fmt.Sprintf("%s %s/%d", sv.Proto, sv.VIP, sv.Port)
}

// service checks one service's fields.
func (v *validator) service(p string, sv Service, lbr func(uint32) bool) {
	if sv.ID == 0 {
		v.add(p+".id", "required")
	}
	switch {
	case !sv.VIP.IsSet():
		v.add(p+".vip", "required")
	case !unicast(sv.VIP.A):
		v.add(p+".vip", "%s is not a unicast address", sv.VIP)
	}
	if sv.Port == 0 {
		v.add(p+".port", "required")
	}
	switch {
	case !sv.Proto.Set:
		v.add(p+".proto", "required (tcp or udp)")
	case sv.Proto.Num != IPProtoTCP && sv.Proto.Num != IPProtoUDP:
		v.add(p+".proto", "%s cannot be balanced (want tcp or udp)", sv.Proto)
	}
	switch {
	case sv.LBR == 0:
		v.add(p+".lbr", "required")
	case !lbr(sv.LBR):
		v.add(p+".lbr", "no lbr with id %d", sv.LBR)
	}
	if sv.Health != nil {
		v.health(p+".health", *sv.Health)
	}
}

// health checks a service's health check settings.
func (v *validator) health(p string, h Health) {
	switch h.Type {
	case HealthTCP:
		if h.Path != "" {
			v.add(p+".path", "only for type http")
		}
	case HealthHTTP:
		if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
			v.add(p+".path", "must start with /")
		}
	case "":
		v.add(p+".type", "required (want tcp or http)")
	default:
		v.add(p+".type", "unknown type %q (want tcp or http)", h.Type)
	}
	e := h.Effective()
	if e.Interval.D < 100*time.Millisecond || e.Interval.D > time.Hour {
		v.add(p+".interval", "%s outside 100ms..1h", e.Interval.D)
	}
	if e.Timeout.D <= 0 || e.Timeout.D > e.Interval.D {
		v.add(p+".timeout", "%s must be positive and at most the interval (%s)", e.Timeout.D, e.Interval.D)
	}
	for _, x := range []struct {
		name string
		n    uint32
	}{{"rise", e.Rise}, {"fall", e.Fall}} {
		if x.n > 100 {
			v.add(p+"."+x.name, "%d above 100", x.n)
		}
	}
}

func (v *validator) pdrs(list []PDR, rules uint32, ifaces map[string]int, paths, fars map[uint32]int) {
	v.counts(len(list), 0, rules)
	byID := make(map[uint32]int, len(list))
	iface := func(name string) bool { _, ok := ifaces[name]; return ok }
	path := func(id uint32) bool { _, ok := paths[id]; return ok }
	far := func(id uint32) bool { _, ok := fars[id]; return ok }
	for i, r := range list {
		p := "pdrs[" + strconv.Itoa(i) + "]"
		v.uniqueID(byID, p, "pdrs", r.ID, i)
		v.pdr(p, r, iface, path, far)
	}
}

// pdr checks one PDR's fields; iface, path and far say whether what it
// names exists.
func (v *validator) pdr(p string, r PDR, iface func(string) bool, path, far func(uint32) bool) {
	if r.ID == 0 {
		v.add(p+".id", "required")
	}
	v.match(p+".match", r.Match, iface, path)
	if r.FAR == 0 {
		v.add(p+".far", "required")
	} else if !far(r.FAR) {
		v.add(p+".far", "no far with id %d", r.FAR)
	}
}

func (v *validator) match(p string, m Match, iface func(string) bool, path func(uint32) bool) {
	if m.In != "" && !iface(m.In) {
		v.add(p+".in", "unknown interface %q", m.In)
	}
	if m.InPath != 0 && !path(m.InPath) {
		v.add(p+".in_path", "no path with id %d", m.InPath)
	}
	for _, x := range []struct {
		name string
		pfx  Prefix
	}{{"src", m.Src}, {"dst", m.Dst}} {
		if x.pfx.IsSet() {
			if masked := x.pfx.P.Masked(); masked != x.pfx.P {
				v.add(p+"."+x.name, "host bits set; did you mean %s?", masked)
			}
		}
	}
	has4 := (m.Src.IsSet() && m.Src.P.Addr().Is4()) || (m.Dst.IsSet() && m.Dst.P.Addr().Is4())
	has6 := (m.Src.IsSet() && m.Src.P.Addr().Is6()) || (m.Dst.IsSet() && m.Dst.P.Addr().Is6())
	if m.Src.IsSet() && m.Dst.IsSet() && has4 && has6 {
		v.add(p, "src is %s but dst is %s", family(m.Src), family(m.Dst))
	}
	if m.Proto.Set {
		switch {
		case m.Proto.Num == IPProtoICMP && has6:
			v.add(p+".proto", "icmp cannot match IPv6 prefixes (use icmpv6)")
		case m.Proto.Num == IPProtoICMPv6 && has4:
			v.add(p+".proto", "icmpv6 cannot match IPv4 prefixes (use icmp)")
		}
	}
	portProto := m.Proto.Set && (m.Proto.Num == IPProtoTCP || m.Proto.Num == IPProtoUDP || m.Proto.Num == IPProtoSCTP)
	for _, x := range []struct {
		name string
		r    PortRange
	}{{"sport", m.Sport}, {"dport", m.Dport}} {
		switch {
		case !x.r.Set:
		case x.r.Lo > x.r.Hi:
			v.add(p+"."+x.name, "port range reversed (%d-%d)", x.r.Lo, x.r.Hi)
		case !portProto:
			v.add(p+"."+x.name, "ports need proto tcp, udp or sctp")
		}
	}
	if m.DSCP != nil && *m.DSCP > MaxDSCP {
		v.add(p+".dscp", "%d out of range 0-%d", *m.DSCP, MaxDSCP)
	}
	if m.GREKey != nil && m.Proto.Set && m.Proto.Num != IPProtoGRE {
		v.add(p+".gre_key", "needs proto gre (or leave proto empty)")
	}
}

func family(p Prefix) string {
	if p.P.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func (v *validator) limits(l Limits) {
	bound := func(path string, val, lo, hi uint32) {
		switch {
		case val < lo:
			v.add(path, "%d below minimum %d", val, lo)
		case val > hi:
			v.add(path, "%d above maximum %d", val, hi)
		}
	}
	bound("limits.flows", l.Flows, MinFlows, MaxFlows)
	bound("limits.rules", l.Rules, MinRules, MaxRules)
	if l.Connections != l.Flows { // the default follows flows, checked above
		bound("limits.connections", l.Connections, MinFlows, MaxFlows)
	}
	bound("limits.maglev_table", l.MaglevTable, MinMaglevTable, MaxMaglevTable)
	if l.MaglevTable >= MinMaglevTable && l.MaglevTable <= MaxMaglevTable && !maglev.IsPrime(l.MaglevTable) {
		v.add("limits.maglev_table", "%d is not prime (Maglev's permutations need a prime table size; 65537 is)", l.MaglevTable)
	}
}

func (v *validator) defaults(d Defaults) {
	for _, x := range []struct{ path, val string }{
		{"defaults.no_match", d.NoMatch},
		{"defaults.malformed", d.Malformed},
	} {
		switch x.val {
		case ActionPass, ActionDrop:
		default:
			v.add(x.path, "unknown action %q (want pass or drop)", x.val)
		}
	}
}
