// SPDX-License-Identifier: Apache-2.0

package rules

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"

	"github.com/edgeplane/edgeplane/internal/bpf"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/maglev"
)

// compiledService is a service as the dataplane holds it.
type compiledService struct {
	cfg   config.Service
	tag   uint32 // its table and counters
	key   bpf.SvcKey
	unnat uint32 // FAR index of the reply rewrite, or bpf.NoFAR
	// members gives each backend (by FAR id) a counter index that stays
	// with the service, also after the backend leaves the LBR: its
	// pinned connections still count there.
	members *StatsAlloc
	size    uint32 // entries of its Maglev table
	// backends are the keys (address, port, protocol) of its NAT
	// backends, as balancer.backendUsers holds them.
	backends []bpf.SvcKey
	// guards counts the PDRs that may stand before the service
	// (guards): while there are any, its packets are classified first.
	guards int
	// tables builds its Maglev tables, keeping those a backend taken
	// out (or put back) needs built ahead: such a change then costs a
	// copy rather than a build.
	tables *maglev.Cache
}

// balancer is the Compiler's state for L4 services.
type balancer struct {
	lbrs     map[uint32]config.LBR
	lbrAt    map[uint32]string           // where each LBR was last put, for errors
	services map[uint32]*compiledService // by service id
	byLBR    map[uint32]uint32           // lbr id -> service id
	fars     map[uint32]config.FAR       // every FAR, by id (member keys)
	// down lists backends health checks took out, by service and FAR:
	// they get no new connections, as if drained.
	down map[uint32]map[uint32]bool
	// dirty lists the services whose table this Apply rebuilds, with the
	// path errors about it go to; guardsMoved those whose entry says
	// otherwise than before whether PDRs stand before them.
	dirty       map[uint32]string
	guardsMoved map[uint32]bool
	// backendUsers lists the services each NAT backend (address, port,
	// protocol) serves: a stateless service's replies are told apart by
	// their backend alone, so its backends may serve no other service.
	backendUsers map[bpf.SvcKey][]uint32
}

func newBalancer() balancer {
	return balancer{lbrs: map[uint32]config.LBR{}, lbrAt: map[uint32]string{}, services: map[uint32]*compiledService{},
		byLBR: map[uint32]uint32{}, fars: map[uint32]config.FAR{}, down: map[uint32]map[uint32]bool{},
		backendUsers: map[bpf.SvcKey][]uint32{}}
}

// setMap puts (ok) or deletes m[k], undoably.
func setMap[K comparable, V any](c *Compiler, m map[K]V, k K, v V, ok bool) {
	old, had := m[k]
	if ok {
		m[k] = v
	} else {
		delete(m, k)
	}
	c.onUndo(func() {
		if had {
			m[k] = old
		} else {
			delete(m, k)
		}
	})
}

// noteFAR records a FAR's config (members are keyed by their backend) and
// marks the services it is a member of for a rebuild.
func (c *Compiler) noteFAR(at string, f *config.FAR, ok bool) {
	b := &c.lb
	setMap(c, b.fars, f.ID, *f, ok)
	for _, l := range b.lbrs {
		for _, m := range l.Members {
			if m.FAR == f.ID {
				c.markLBR(at, l.ID)
			}
		}
	}
}

// notePath marks the services with a member encapsulating into path id
// for a rebuild: the tunnel's remote is the member's backend key.
func (c *Compiler) notePath(at string, id uint32) {
	for _, f := range c.lb.fars {
		if f.Action == config.ActionEncap && f.Path == id {
			c.noteFAR(at, &f, true)
		}
	}
}

// markLBR marks the service of LBR id, if any, for a rebuild.
func (c *Compiler) markLBR(at string, id uint32) {
	if sid, ok := c.lb.byLBR[id]; ok {
		if _, seen := c.lb.dirty[sid]; !seen {
			c.lb.dirty[sid] = at
		}
	}
}

func (c *Compiler) putLBR(at string, l *config.LBR) {
	setMap(c, c.lb.lbrs, l.ID, *l, true)
	setMap(c, c.lb.lbrAt, l.ID, at, true)
	c.markLBR(at, l.ID)
}

func (c *Compiler) removeLBR(id uint32) {
	setMap(c, c.lb.lbrs, id, config.LBR{}, false)
	setMap(c, c.lb.lbrAt, id, "", false)
}

func (c *Compiler) putService(at string, sv *config.Service) {
	b := &c.lb
	cs, had := b.services[sv.ID]
	if had {
		c.dropService(cs)
		cs = &compiledService{tag: cs.tag, members: cs.members, unnat: bpf.NoFAR, backends: cs.backends, tables: cs.tables}
	} else {
		tag, isNew, err := c.allocs.Service.Get(sv.ID)
		if err != nil {
			c.fail(at+".id", fmt.Sprintf("no free service place (%d in use)", len(b.services)), config.CodeCapacity)
			return
		}
		c.onUndo(func() { c.allocs.Service.Free(sv.ID) })
		cs = &compiledService{tag: tag, members: NewStatsAlloc(bpf.ReplyMember, c.allocs.Members[sv.ID]), unnat: bpf.NoFAR, tables: maglev.NewCache()}
		if isNew {
			// The replies' counter starts at zero with the service.
			c.gen.ResetLBStats = append(c.gen.ResetLBStats, tag*bpf.MaxMembers+bpf.ReplyMember)
		}
	}
	cs.cfg = *sv
	cs.key = svcKey(sv)
	cs.guards = 0
	for _, p := range c.pdrs {
		if guards(p, sv) {
			cs.guards++
		}
	}
	setMap(c, b.services, sv.ID, cs, true)
	setMap(c, b.byLBR, sv.LBR, sv.ID, true)
	b.dirty[sv.ID] = at
}

// dropService takes a service out of the tables (its place stays
// allocated).
func (c *Compiler) dropService(cs *compiledService) {
	g := c.gen
	// Its key and LBR may already be another service's (two services
	// swapping them in one batch): only what is still its own goes.
	if cur, ok := g.Services[cs.key]; ok && cur.Id == cs.cfg.ID {
		setMap(c, g.Services, cs.key, bpf.Svc{}, false)
	}
	if c.lb.byLBR[cs.cfg.LBR] == cs.cfg.ID {
		setMap(c, c.lb.byLBR, cs.cfg.LBR, 0, false)
	}
	if cs.unnat != bpf.NoFAR {
		c.setFAR(cs.unnat, bpf.Far{}, false)
	}
}

func (c *Compiler) removeService(id uint32) {
	cs, ok := c.lb.services[id]
	if !ok {
		return
	}
	c.dropService(cs)
	c.setBackends(cs, nil)
	cs.tables.Stop() // a later build (the removal undone) starts it again
	setMap(c, c.lb.down, id, nil, false)
	c.setMembers(cs, cs.members, nil)
	setMap(c, c.lb.services, id, nil, false)
	c.allocs.Service.Free(id)
	c.onUndo(func() { c.allocs.Service.put(id, cs.tag) })
	delete(c.lb.dirty, id)
}

func svcKey(sv *config.Service) bpf.SvcKey {
	k := bpf.SvcKey{Port: bits.ReverseBytes16(sv.Port), Proto: sv.Proto.Num}
	if sv.VIP.A.Is4() {
		a := sv.VIP.A.As4()
		copy(k.Vip[:], a[:])
		k.Family = 4
	} else {
		k.Vip = sv.VIP.A.As16()
		k.Family = 6
	}
	return k
}

// rebuildServices rebuilds the table of every service marked this Apply,
// and rewrites the entry of every other one PDRs now stand before, or no
// longer do.
func (c *Compiler) rebuildServices() {
	for id, at := range c.lb.dirty {
		if cs, ok := c.lb.services[id]; ok {
			c.rebuildService(at, cs)
		}
	}
	for id := range c.lb.guardsMoved {
		cs, ok := c.lb.services[id]
		if _, rebuilt := c.lb.dirty[id]; ok && !rebuilt {
			c.setServiceEntry(cs)
		}
	}
}

// rebuildService compiles a service's members into its Maglev table, its
// reply rewrite and its entry.
func (c *Compiler) rebuildService(at string, cs *compiledService) {
	b := &c.lb
	g := c.gen
	sv := cs.cfg
	l := b.lbrs[sv.LBR]
	backends := make([]maglev.Backend, 0, len(l.Members))
	places := make([]place, 0, len(l.Members))
	nat := false
	members := cs.members.clone()
	keyFAR := map[string]uint32{} // backend key -> the member FAR that has it
	var natKeys []bpf.SvcKey
	for _, m := range l.Members {
		f, ok := b.fars[m.FAR]
		fi, ok2 := c.fars[m.FAR]
		if !ok || !ok2 {
			c.fail(at, fmt.Sprintf("lbr %d member far %d is not available", l.ID, m.FAR), config.CodeInvalid)
			return
		}
		var key string
		switch f.Action {
		case config.ActionNAT:
			if f.Address.A.Is4() != sv.VIP.A.Is4() {
				c.fail(at, fmt.Sprintf("far %d rewrites to %s, but the VIP %s is of the other family (no NAT between IPv4 and IPv6)", f.ID, f.Address, sv.VIP), config.CodeInvalid)
				return
			}
			nat = true
			key = "nat " + netip.AddrPortFrom(f.Address.A, f.Port).String()
			bk := natBackendKey(&f, sv.Proto.Num)
			if users := b.backendUsers[bk]; len(users) >= bpf.NATUsers && !slices.Contains(users, sv.ID) {
				c.fail(at, fmt.Sprintf("far %d: backend %s serves %d NAT services already, at most %d (its replies are matched to their service by backend)",
					f.ID, netip.AddrPortFrom(f.Address.A, f.Port), len(users), bpf.NATUsers), config.CodeInvalid)
				return
			}
			for _, other := range b.backendUsers[bk] {
				if os := b.services[other]; other != sv.ID && os != nil && (sv.Stateless || os.cfg.Stateless) {
					c.fail(at, fmt.Sprintf("far %d: backend %s serves service %d too; a stateless service's NAT backends must serve it alone (their replies are told apart by backend)",
						f.ID, netip.AddrPortFrom(f.Address.A, f.Port), other), config.CodeInvalid)
					return
				}
			}
			natKeys = append(natKeys, bk)
		case config.ActionEncap:
			p, ok := c.paths[f.Path]
			if !ok {
				c.fail(at, fmt.Sprintf("far %d: path %d is not available", f.ID, f.Path), config.CodeInvalid)
				return
			}
			key = "gre " + strconv.FormatUint(uint64(g.Paths[p.idx].Remote), 16) + "/" + strconv.FormatUint(uint64(g.Paths[p.idx].Key), 16)
		default:
			c.fail(at, fmt.Sprintf("far %d has action %s; members need nat or encap", f.ID, f.Action), config.CodeInvalid)
			return
		}
		if other, dup := keyFAR[key]; dup {
			c.fail(at, fmt.Sprintf("lbr %d: far %d and far %d are the same backend (%s)", l.ID, other, m.FAR, key), config.CodeInvalid)
			return
		}
		keyFAR[key] = m.FAR
		idx, isNew, err := members.Get(m.FAR)
		if err != nil {
			// Full of former members: give theirs up.
			members.Retain(liveMembers(l))
			if idx, isNew, err = members.Get(m.FAR); err != nil {
				c.fail(at, fmt.Sprintf("lbr %d: %v", l.ID, err), config.CodeCapacity)
				return
			}
		}
		stats := cs.tag*bpf.MaxMembers + idx
		if isNew {
			g.ResetLBStats = append(g.ResetLBStats, stats)
		}
		w := m.EffectiveWeight()
		if b.down[sv.ID][m.FAR] {
			w = 0
		}
		backends = append(backends, maglev.Backend{Key: key, Weight: w})
		places = append(places, place{far: fi, member: uint8(idx)})
	}
	size := c.limits.MaglevSize
	if l.TableSize != 0 && l.TableSize <= size {
		size = l.TableSize
	}
	table, err := lbTable(cs.tables, backends, size, places)
	if err != nil {
		c.fail(at, fmt.Sprintf("lbr %d: %v", l.ID, err), config.CodeInvalid)
		return
	}
	oldMembers := cs.members
	cs.members = members
	c.onUndo(func() { cs.members = oldMembers })
	c.setMembers(cs, oldMembers, members)
	setMap(c, g.Tables, cs.tag, table, true)
	c.gen.Dirty.Tables[cs.tag] = struct{}{}

	unnat := uint32(bpf.NoFAR)
	if nat {
		unnat = c.limits.Rules + cs.tag
		far := bpf.Far{Action: bpf.ActUnNAT, Id: sv.ID, Addr: cs.key.Vip, Port: cs.key.Port}
		c.setFAR(unnat, far, true)
	} else if cs.unnat != bpf.NoFAR {
		c.setFAR(cs.unnat, bpf.Far{}, false)
	}
	oldUnnat, oldSize := cs.unnat, cs.size
	cs.unnat, cs.size = unnat, size
	c.onUndo(func() { cs.unnat, cs.size = oldUnnat, oldSize })
	c.setBackends(cs, natKeys)
	c.setServiceEntry(cs)
}

// place is where a backend of a service is: its FAR's index and its
// member index (its counters' place within the service's).
type place struct {
	far    uint32
	member uint8
}

// lbTable builds the Maglev table of backends (at places) in the
// kernel's form: a member index an entry, the FAR index of each member
// with a weight above 0 (the others own no entry).
func lbTable(tables *maglev.Cache, backends []maglev.Backend, size uint32, places []place) (*bpf.LBTable, error) {
	code := make([]uint8, len(places))
	for i, p := range places {
		code[i] = p.member
	}
	members, err := tables.Bytes(backends, size, code, bpf.ReplyMember)
	if err != nil {
		return nil, err
	}
	t := &bpf.LBTable{Members: members}
	for i := range t.Far {
		t.Far[i] = bpf.NoFAR
	}
	for i, p := range places {
		if backends[i].Weight > 0 {
			t.Far[p.member] = p.far
		}
	}
	return t, nil
}

// natBackendKey is the key of a NAT backend far of a service of proto in
// edge_nat_backends (and balancer.backendUsers): its address, port and
// protocol.
func natBackendKey(f *config.FAR, proto uint8) bpf.SvcKey {
	k := bpf.SvcKey{Port: bits.ReverseBytes16(f.Port), Proto: proto, Family: 6}
	if f.Address.A.Is4() {
		a := f.Address.A.As4()
		copy(k.Vip[:], a[:])
		k.Family = 4
	} else {
		k.Vip = f.Address.A.As16()
	}
	return k
}

// setBackends makes keys the NAT backends of service cs (undoably): in
// backendUsers, and in the generation's NATBackends, where each backend
// lists the services it serves with their reply rewrites.
func (c *Compiler) setBackends(cs *compiledService, keys []bpf.SvcKey) {
	b := &c.lb
	id := cs.cfg.ID
	// Only the backends that come or go change their users: a backend
	// taken out of ten changes one list, not ten taken out and nine put
	// back. Every entry is written again (its value compared first):
	// the service's reply rewrite may have changed.
	for _, k := range cs.backends {
		if !slices.Contains(keys, k) {
			users := slices.DeleteFunc(slices.Clone(b.backendUsers[k]), func(u uint32) bool { return u == id })
			setMap(c, b.backendUsers, k, users, len(users) > 0)
		}
	}
	for _, k := range keys {
		if !slices.Contains(cs.backends, k) {
			setMap(c, b.backendUsers, k, append(slices.Clone(b.backendUsers[k]), id), true)
		}
	}
	old := cs.backends
	cs.backends = keys
	c.onUndo(func() { cs.backends = old })
	for _, k := range old {
		c.setNATBackend(k)
	}
	for _, k := range keys {
		if !slices.Contains(old, k) {
			c.setNATBackend(k)
		}
	}
}

// setNATBackend writes backend k's entry in NATBackends from the NAT
// services backendUsers lists for it (none: no entry).
func (c *Compiler) setNATBackend(k bpf.SvcKey) {
	var nb bpf.NATBackend
	n := 0
	for _, id := range c.lb.backendUsers[k] {
		cs := c.lb.services[id]
		if cs == nil || cs.unnat == bpf.NoFAR || n == bpf.NATUsers {
			continue
		}
		var flags uint32
		if cs.cfg.Stateless {
			flags = bpf.SvcStateless
		}
		nb.U[n] = bpf.NATUser{Svc: id, Unnat: cs.unnat, Stats: cs.tag*bpf.MaxMembers + bpf.ReplyMember, Flags: flags}
		n++
	}
	if cur, ok := c.gen.NATBackends[k]; ok == (n > 0) && cur == nb {
		return // as it is
	}
	setMap(c, c.gen.NATBackends, k, nb, n > 0)
}

// portIn tells whether port is in r (an unset range holds every port).
func portIn(r config.PortRange, port uint16) bool {
	return !r.Set || r.Lo <= port && port <= r.Hi
}

// setServiceEntry writes the service's entry as it is compiled now.
func (c *Compiler) setServiceEntry(cs *compiledService) {
	var flags uint32
	if cs.cfg.Stateless {
		flags |= bpf.SvcStateless
	}
	if cs.guards > 0 {
		flags |= bpf.SvcGuarded
	}
	setMap(c, c.gen.Services, cs.key, bpf.Svc{Tag: cs.tag, Id: cs.cfg.ID, Unnat: cs.unnat, Size: cs.size, Flags: flags, Prec: cs.cfg.Precedence}, true)
}

// guardServices counts PDR p (in: n 1, out: -1) with the services it may
// stand before, marking those whose entry changes.
func (c *Compiler) guardServices(p *compiledPDR, n int) {
	for id, cs := range c.lb.services {
		if !guards(p, &cs.cfg) {
			continue
		}
		before := cs.guards
		cs.guards += n
		c.onUndo(func() { cs.guards = before })
		if (before > 0) != (cs.guards > 0) {
			setMap(c, c.lb.guardsMoved, id, true, true)
		}
	}
}

// guards tells whether PDR p may match packets of service sv at a
// precedence that puts it first ("PDRs first": its own precedence or a
// lower one): the service's connections (its protocol to the VIP and
// port) or ICMP errors to the VIP about them. It may say yes for a PDR
// that matches none (the dataplane's classifier decides exactly), never
// no for one that matches some.
func guards(p *compiledPDR, sv *config.Service) bool {
	m := p.match
	if p.prec > sv.Precedence || m.GREKey != nil {
		return false
	}
	vip := sv.VIP.A
	if m.Dst.IsSet() && !m.Dst.P.Contains(vip) || m.Src.IsSet() && m.Src.P.Addr().Is4() != vip.Is4() {
		return false
	}
	icmp := config.IPProtoICMP
	if !vip.Is4() {
		icmp = config.IPProtoICMPv6
	}
	conn := (!m.Proto.Set || m.Proto.Num == sv.Proto.Num) && portIn(m.Dport, sv.Port)
	// ICMP carries no ports: they are 0 in the packet's key.
	icmpErr := (!m.Proto.Set || m.Proto.Num == icmp) && portIn(m.Dport, 0) && portIn(m.Sport, 0)
	return conn || icmpErr
}

func liveMembers(l config.LBR) map[uint32]bool {
	live := map[uint32]bool{}
	for _, m := range l.Members {
		live[m.FAR] = true
	}
	return live
}

// setMembers names the counters of service cs (undoably): one per backend
// it has had (members), and its replies'; the names of old's backends
// members no longer has go. A nil members takes them all out.
func (c *Compiler) setMembers(cs *compiledService, old, members *StatsAlloc) {
	base := cs.tag * bpf.MaxMembers
	for far, idx := range old.byID {
		if members == nil || members.byID[far] != idx {
			setMap(c, c.gen.Members, base+idx, bpf.MemberRef{}, false)
		}
	}
	if members == nil {
		setMap(c, c.gen.Members, base+bpf.ReplyMember, bpf.MemberRef{}, false)
		return
	}
	// Each counter's name set when it is not so already (with undo, a
	// closure each: only those that change).
	set := func(idx uint32, ref bpf.MemberRef) {
		if cur, ok := c.gen.Members[base+idx]; !ok || cur != ref {
			setMap(c, c.gen.Members, base+idx, ref, true)
		}
	}
	for far, idx := range members.byID {
		set(idx, bpf.MemberRef{Service: cs.cfg.ID, FAR: far})
	}
	set(bpf.ReplyMember, bpf.MemberRef{Service: cs.cfg.ID})
}

// SetBackendUp records a health check's verdict on backend far of service
// svc and rebuilds the service's table: a backend that is down gets no new
// connections (its established ones stay pinned, as when drained). The
// returned undo takes it back, for a commit that fails.
func (c *Compiler) SetBackendUp(svc, far uint32, up bool) (undo func(), err error) {
	c.begin()
	b := &c.lb
	cur := b.down[svc]
	if cur == nil {
		cur = map[uint32]bool{}
		setMap(c, b.down, svc, cur, true)
	}
	setMap(c, cur, far, true, !up)
	if _, ok := b.services[svc]; ok {
		b.dirty[svc] = fmt.Sprintf("service %d", svc)
	}
	c.rebuildServices()
	return c.end()
}
