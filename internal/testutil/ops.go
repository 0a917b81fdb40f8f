// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"slices"

	"github.com/edgeplane/edgeplane/internal/config"
)

// RandomOps returns a batch of n random creates, updates and deletes of
// FARs and PDRs against cfg (interfaces lan0 and wan0): matches drawn
// from small pools so that PDRs share masks, collide on the same masked
// key and tie on precedence, and port ranges that expand into several
// mask groups; and NAT backends, LBRs over them and services. Some batches
// are invalid (a delete of a FAR in use, a create of an id that exists, two
// services on one VIP and port), as a client's would be.
func RandomOps(rng *rand.Rand, cfg *config.Config, n int) []config.Op {
	fars := map[uint32]bool{}
	for _, f := range cfg.FARs {
		fars[f.ID] = true
	}
	pdrs := map[uint32]bool{}
	for _, p := range cfg.PDRs {
		pdrs[p.ID] = true
	}
	lbrs := map[uint32]bool{}
	for _, l := range cfg.LBRs {
		lbrs[l.ID] = true
	}
	services := map[uint32]bool{}
	for _, sv := range cfg.Services {
		services[sv.ID] = true
	}
	// pick draws from the keys in order: the same seed, the same batches.
	pick := func(m map[uint32]bool) (uint32, bool) {
		if len(m) == 0 {
			return 0, false
		}
		return slices.Sorted(maps.Keys(m))[rng.Intn(len(m))], true
	}
	var ops []config.Op
	for i := 0; i < n; i++ {
		at := fmt.Sprintf("operations[%d]", i)
		switch r := rng.Intn(14); {
		case r < 4: // create a PDR
			id := uint32(1 + rng.Intn(300))
			if pdrs[id] && rng.Intn(4) != 0 {
				continue
			}
			far, ok := pick(fars)
			if !ok {
				continue
			}
			pdrs[id] = true
			ops = append(ops, config.Op{At: at + ".create.pdr", Verb: config.Create, Kind: config.KindPDR, Object: randomPDR(rng, id, far)})
		case r < 6: // update a PDR
			id, ok := pick(pdrs)
			far, ok2 := pick(fars)
			if !ok || !ok2 {
				continue
			}
			ops = append(ops, config.Op{At: at + ".update.pdr", Verb: config.Update, Kind: config.KindPDR, Object: randomPDR(rng, id, far)})
		case r < 8: // delete a PDR
			id, ok := pick(pdrs)
			if !ok {
				continue
			}
			delete(pdrs, id)
			ops = append(ops, config.Op{At: at + ".delete", Verb: config.Delete, Kind: config.KindPDR, ID: id})
		case r < 9: // create or update a FAR
			id := uint32(1 + rng.Intn(12))
			verb, v := config.Create, ".create.far"
			if fars[id] {
				verb, v = config.Update, ".update.far"
			}
			fars[id] = true
			ops = append(ops, config.Op{At: at + v, Verb: verb, Kind: config.KindFAR, Object: randomFAR(rng, id)})
		case r < 10: // delete a FAR (refused while a PDR or LBR uses it)
			id, ok := pick(fars)
			if !ok {
				continue
			}
			delete(fars, id)
			ops = append(ops, config.Op{At: at + ".delete", Verb: config.Delete, Kind: config.KindFAR, ID: id})
		case r < 11: // create or update a NAT backend
			id := uint32(40 + rng.Intn(8))
			verb, v := config.Create, ".create.far"
			if fars[id] {
				verb, v = config.Update, ".update.far"
			}
			fars[id] = true
			f := config.FAR{ID: id, Action: config.ActionNAT, Address: config.Addr{A: netip.AddrFrom4([4]byte{10, 9, 0, byte(rng.Intn(6))})}, Port: uint16(80 + rng.Intn(2))}
			ops = append(ops, config.Op{At: at + v, Verb: verb, Kind: config.KindFAR, Object: f})
		case r < 12: // create, update or delete an LBR of NAT backends
			id := uint32(1 + rng.Intn(3))
			if lbrs[id] && rng.Intn(4) == 0 {
				delete(lbrs, id)
				ops = append(ops, config.Op{At: at + ".delete", Verb: config.Delete, Kind: config.KindLBR, ID: id})
				continue
			}
			l := config.LBR{ID: id, Algorithm: config.AlgorithmMaglev}
			if rng.Intn(2) == 0 {
				l.TableSize = 251 // else the limit's
			}
			for _, far := range rng.Perm(8)[:rng.Intn(5)] {
				w := uint32(rng.Intn(4))
				l.Members = append(l.Members, config.Member{FAR: uint32(40 + far), Weight: &w})
			}
			verb, v := config.Create, ".create.lbr"
			if lbrs[id] {
				verb, v = config.Update, ".update.lbr"
			}
			lbrs[id] = true
			ops = append(ops, config.Op{At: at + v, Verb: verb, Kind: config.KindLBR, Object: l})
		default: // create, update or delete a service
			id := uint32(1 + rng.Intn(3))
			if services[id] && rng.Intn(4) == 0 {
				delete(services, id)
				ops = append(ops, config.Op{At: at + ".delete", Verb: config.Delete, Kind: config.KindService, ID: id})
				continue
			}
			sv := config.Service{ID: id, VIP: config.Addr{A: netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + rng.Intn(3))})},
				Port: uint16(80 + rng.Intn(2)), Proto: config.Proto{Num: config.IPProtoTCP, Set: true}, LBR: uint32(1 + rng.Intn(3)),
				Stateless: rng.Intn(3) == 0, Precedence: uint32(rng.Intn(4))}
			verb, v := config.Create, ".create.service"
			if services[id] {
				verb, v = config.Update, ".update.service"
			}
			services[id] = true
			ops = append(ops, config.Op{At: at + v, Verb: verb, Kind: config.KindService, Object: sv})
		}
	}
	return ops
}

func randomFAR(rng *rand.Rand, id uint32) config.FAR {
	switch rng.Intn(3) {
	case 0:
		return config.FAR{ID: id, Action: config.ActionDrop}
	case 1:
		return config.FAR{ID: id, Action: config.ActionPass}
	}
	return config.FAR{ID: id, Action: config.ActionRedirect, Interface: []string{"lan0", "wan0"}[rng.Intn(2)]}
}

func randomPDR(rng *rand.Rand, id, far uint32) config.PDR {
	p := config.PDR{ID: id, Precedence: uint32(rng.Intn(4)), FAR: far}
	m := &p.Match
	if rng.Intn(2) == 0 {
		m.In = "lan0"
	}
	switch rng.Intn(5) {
	case 0:
		m.Dst = config.Prefix{P: netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", rng.Intn(3), rng.Intn(3)))}
	case 3: // the services' VIPs: stands before them at their precedence
		m.Dst = config.Prefix{P: netip.MustParsePrefix(fmt.Sprintf("203.0.113.%d/32", 1+rng.Intn(3)))}
	case 1:
		m.Dst = config.Prefix{P: netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", rng.Intn(3)))}
	case 2:
		m.Dst = config.Prefix{P: netip.MustParsePrefix(fmt.Sprintf("fd00:%x::/32", rng.Intn(3)))}
	}
	if rng.Intn(2) == 0 {
		m.Proto = config.Proto{Num: []uint8{config.IPProtoTCP, config.IPProtoUDP}[rng.Intn(2)], Set: true}
		switch rng.Intn(6) {
		case 0:
			m.Dport = config.PortRange{Lo: 443, Hi: 443, Set: true}
		case 1:
			m.Dport = config.PortRange{Lo: 8192, Hi: 16383, Set: true}
		case 2:
			lo := uint16(rng.Intn(2000))
			m.Dport = config.PortRange{Lo: lo, Hi: lo + uint16(rng.Intn(300)), Set: true}
		}
	}
	return p
}
