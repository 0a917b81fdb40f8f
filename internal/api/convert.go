// SPDX-License-Identifier: Apache-2.0

package api

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
)

// The API carries values in the config file's syntax (CIDRs, protocol
// names, "lo-hi" port ranges as strings), so both are parsed by the same
// functions of package config and say the same thing the same way.

// fieldErrs collects FieldErrors under a path prefix.
type fieldErrs struct {
	prefix string
	errs   config.Errors
}

func (f *fieldErrs) add(field, format string, a ...any) {
	f.errs = append(f.errs, config.FieldError{Path: f.prefix + "." + field, Reason: fmt.Sprintf(format, a...)})
}

// InterfaceToPB returns i as an API object.
func InterfaceToPB(i config.Interface) *pb.Interface {
	return &pb.Interface{Name: i.Name, Role: i.Role, Xdp: i.XDP}
}

// InterfaceFromPB returns p in the config model.
func InterfaceFromPB(p *pb.Interface) config.Interface {
	return config.Interface{Name: p.GetName(), Role: p.GetRole(), XDP: p.GetXdp()}
}

// PathToPB returns p as an API object.
func PathToPB(p config.Path) *pb.Path {
	out := &pb.Path{Id: p.ID, Type: p.Type, Interface: p.Interface, Local: p.Local.String(), Remote: p.Remote.String(), Seq: p.Seq, Ttl: uint32(p.TTL)}
	if p.Key != nil {
		k := *p.Key
		out.Key = &k
	}
	if p.DSCP != nil {
		d := uint32(*p.DSCP)
		out.Dscp = &d
	}
	return out
}

func pathFromPB(p *pb.Path, f *fieldErrs) config.Path {
	out := config.Path{ID: p.GetId(), Type: p.GetType(), Interface: p.GetInterface(), Seq: p.GetSeq()}
	out.Local = addr(p.GetLocal(), "local", f)
	out.Remote = addr(p.GetRemote(), "remote", f)
	if p.Key != nil {
		k := p.GetKey()
		out.Key = &k
	}
	if p.GetTtl() > 255 {
		f.add("ttl", "must be 0-255 (0: the default, %d)", config.DefaultPathTTL)
	} else {
		out.TTL = uint8(p.GetTtl())
	}
	if p.Dscp != nil {
		out.DSCP = dscp(p.GetDscp(), "dscp", f)
	}
	return out
}

// FARToPB returns f as an API object.
func FARToPB(f config.FAR) *pb.Far {
	out := &pb.Far{Id: f.ID, Action: f.Action, Interface: f.Interface, Path: f.Path, Port: uint32(f.Port)}
	if f.Address.IsSet() {
		out.Address = f.Address.String()
	}
	return out
}

func farFromPB(p *pb.Far, f *fieldErrs) config.FAR {
	return config.FAR{ID: p.GetId(), Action: p.GetAction(), Interface: p.GetInterface(), Path: p.GetPath(),
		Address: addr(p.GetAddress(), "address", f), Port: port(p.GetPort(), "port", f)}
}

// LBRToPB returns l as an API object.
func LBRToPB(l config.LBR) *pb.Lbr {
	out := &pb.Lbr{Id: l.ID, Algorithm: l.Algorithm, TableSize: l.TableSize}
	for _, m := range l.Members {
		out.Members = append(out.Members, &pb.Member{Far: m.FAR, Weight: m.Weight})
	}
	return out
}

// LBRFromPB returns p in the config model.
func LBRFromPB(p *pb.Lbr) config.LBR {
	out := config.LBR{ID: p.GetId(), Algorithm: p.GetAlgorithm(), TableSize: p.GetTableSize()}
	for _, m := range p.GetMembers() {
		cm := config.Member{FAR: m.GetFar()}
		if m.Weight != nil {
			w := m.GetWeight()
			cm.Weight = &w
		}
		out.Members = append(out.Members, cm)
	}
	return out
}

// ServiceToPB returns s as an API object.
func ServiceToPB(s config.Service) *pb.Service {
	out := &pb.Service{Id: s.ID, Port: uint32(s.Port), Lbr: s.LBR, Stateless: s.Stateless}
	if s.Precedence != 0 {
		out.Precedence = &s.Precedence
	}
	if s.VIP.IsSet() {
		out.Vip = s.VIP.String()
	}
	if s.Proto.Set {
		out.Proto = s.Proto.String()
	}
	if h := s.Health; h != nil {
		out.Health = &pb.Health{Type: h.Type, Path: h.Path, Port: uint32(h.Port), Interval: h.Interval.String(),
			Timeout: h.Timeout.String(), Rise: h.Rise, Fall: h.Fall}
	}
	return out
}

func serviceFromPB(p *pb.Service, f *fieldErrs) config.Service {
	out := config.Service{ID: p.GetId(), VIP: addr(p.GetVip(), "vip", f), Port: port(p.GetPort(), "port", f), LBR: p.GetLbr(),
		Stateless: p.GetStateless(), Precedence: p.GetPrecedence()}
	if s := p.GetProto(); s != "" {
		var err error
		if out.Proto, err = config.ParseProto(s); err != nil {
			f.add("proto", "%v", err)
		}
	}
	if h := p.GetHealth(); h != nil {
		out.Health = &config.Health{Type: h.GetType(), Path: h.GetPath(), Port: port(h.GetPort(), "health.port", f),
			Rise: h.GetRise(), Fall: h.GetFall()}
		for _, d := range []struct {
			field string
			in    string
			out   *config.Duration
		}{{"interval", h.GetInterval(), &out.Health.Interval}, {"timeout", h.GetTimeout(), &out.Health.Timeout}} {
			if d.in == "" {
				continue
			}
			v, err := config.ParseDuration(d.in)
			if err != nil {
				f.add("health."+d.field, "%v", err)
			}
			*d.out = v
		}
	}
	return out
}

func port(v uint32, field string, f *fieldErrs) uint16 {
	if v > 65535 {
		f.add(field, "must be 0-65535, got %d", v)
		return 0
	}
	return uint16(v)
}

// PDRToPB returns p as an API object.
func PDRToPB(p config.PDR) *pb.Pdr {
	m := p.Match
	out := &pb.Match{In: m.In, Src: m.Src.String(), Dst: m.Dst.String(), InPath: m.InPath}
	if m.Proto.Set {
		out.Proto = m.Proto.String()
	}
	if m.Sport.Set {
		out.Sport = m.Sport.String()
	}
	if m.Dport.Set {
		out.Dport = m.Dport.String()
	}
	if m.DSCP != nil {
		d := uint32(*m.DSCP)
		out.Dscp = &d
	}
	if m.GREKey != nil {
		k := *m.GREKey
		out.GreKey = &k
	}
	return &pb.Pdr{Id: p.ID, Precedence: p.Precedence, Far: p.FAR, Match: out}
}

func pdrFromPB(p *pb.Pdr, f *fieldErrs) config.PDR {
	out := config.PDR{ID: p.GetId(), Precedence: p.GetPrecedence(), FAR: p.GetFar()}
	m := p.GetMatch()
	if m == nil {
		return out
	}
	mf := &fieldErrs{prefix: f.prefix + ".match"}
	defer func() { f.errs = append(f.errs, mf.errs...) }()
	out.Match.In = m.GetIn()
	out.Match.InPath = m.GetInPath()
	var err error
	if s := m.GetSrc(); s != "" {
		if out.Match.Src, err = config.ParsePrefix(s); err != nil {
			mf.add("src", "%v", err)
		}
	}
	if s := m.GetDst(); s != "" {
		if out.Match.Dst, err = config.ParsePrefix(s); err != nil {
			mf.add("dst", "%v", err)
		}
	}
	if s := m.GetProto(); s != "" {
		if out.Match.Proto, err = config.ParseProto(s); err != nil {
			mf.add("proto", "%v", err)
		}
	}
	if s := m.GetSport(); s != "" {
		if out.Match.Sport, err = config.ParsePortRange(s); err != nil {
			mf.add("sport", "%v", err)
		}
	}
	if s := m.GetDport(); s != "" {
		if out.Match.Dport, err = config.ParsePortRange(s); err != nil {
			mf.add("dport", "%v", err)
		}
	}
	if m.Dscp != nil {
		out.Match.DSCP = dscp(m.GetDscp(), "dscp", mf)
	}
	if m.GreKey != nil {
		k := m.GetGreKey()
		out.Match.GREKey = &k
	}
	return out
}

func addr(s, field string, f *fieldErrs) config.Addr {
	if s == "" {
		return config.Addr{}
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		f.add(field, "invalid IP address %q", s)
		return config.Addr{}
	}
	return config.Addr{A: a}
}

func dscp(v uint32, field string, f *fieldErrs) *uint8 {
	if v > 63 {
		f.add(field, "must be 0-63, got %d", v)
		return nil
	}
	d := uint8(v)
	return &d
}

// statsToPB converts a counter snapshot, naming verdicts and reasons as
// `edgeplane stats` does and leaving out reasons that never happened.
func statsToPB(s *bpf.Snapshot) *pb.Stats {
	out := &pb.Stats{Generation: s.Gen, Verdicts: map[string]*pb.Counter{}, Reasons: map[string]*pb.Counter{},
		FlowCacheHits: s.CacheHit, FlowCacheMisses: s.CacheMiss}
	ctr := func(c bpf.Counter) *pb.Counter { return &pb.Counter{Packets: c.Packets, Bytes: c.Bytes} }
	for _, id := range slices.Sorted(maps.Keys(s.PDRs)) {
		out.Pdrs = append(out.Pdrs, &pb.PdrCounter{Id: id, Counter: ctr(s.PDRs[id])})
	}
	for i, c := range s.Verdicts {
		if i < len(bpf.VerdictNames) {
			out.Verdicts[bpf.VerdictNames[i]] = ctr(c)
		}
	}
	for i, c := range s.Reasons {
		if i < len(bpf.ReasonNames) && c.Packets > 0 {
			out.Reasons[bpf.ReasonNames[i]] = ctr(c)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.Paths)) {
		p := s.Paths[id]
		out.Paths = append(out.Paths, &pb.PathCounter{Id: id, Tx: ctr(p.Tx), Rx: ctr(p.Rx)})
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, &pb.BackendCounter{Service: b.Service, Far: b.FAR, Counter: ctr(b.Counter),
			NewConnections: b.NewConns, ActiveConnections: b.Active})
	}
	return out
}
