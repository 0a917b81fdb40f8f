// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// rtaNHID is RTA_NH_ID: a route through a nexthop object, which may be a
// group (golang.org/x/sys does not name it).
const rtaNHID = 30

// The rules a namespace starts with: priority and table of each family's
// "from all lookup" rules (local, main, default).
var defaultRules = map[int]map[[2]uint32]bool{
	unix.AF_INET:  {{0, unix.RT_TABLE_LOCAL}: true, {32766, unix.RT_TABLE_MAIN}: true, {32767, unix.RT_TABLE_DEFAULT}: true},
	unix.AF_INET6: {{0, unix.RT_TABLE_LOCAL}: true, {32766, unix.RT_TABLE_MAIN}: true},
}

// RoutingByDestination tells whether the kernel routes the calling
// thread's network namespace by destination alone: no rule but each
// family's default ones, and no route that spreads over several next
// hops (or through a nexthop object, which may be a group), matches a TOS
// or (IPv6) a source prefix. Then bpf_fib_lookup gives every packet to
// one destination, from one ingress and asked for one egress interface,
// the same next hop whatever its source address, ports or DSCP, and XDP
// lets flows share it (SetFIBByDst). why names the first thing found
// that makes routing depend on more. It reads the rules and routes of
// every table: on a host with a full Internet table, about a second.
func RoutingByDestination() (ok bool, why string, err error) {
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		if why, err := ruleBeyondDefault(fam); err != nil || why != "" {
			return false, why, err
		}
		if why, err := routeBeyondDestination(fam); err != nil || why != "" {
			return false, why, err
		}
	}
	return true, "", nil
}

// dump runs a netlink dump of kind (RTM_GETRULE, RTM_GETROUTE) for family
// and calls f with each message's header and attributes until f returns
// a reason ("" goes on).
func dump(kind, family int, f func(h *nl.RtMsg, attrs map[uint16][]byte) string) (string, error) {
	req := nl.NewNetlinkRequest(kind, unix.NLM_F_DUMP)
	msg := nl.NewRtMsg()
	msg.Family = uint8(family)
	req.AddData(msg)
	var why string
	var perr error
	resp := uint16(unix.RTM_NEWRULE)
	if kind == unix.RTM_GETROUTE {
		resp = unix.RTM_NEWROUTE
	}
	err := req.ExecuteIter(unix.NETLINK_ROUTE, resp, func(m []byte) bool {
		if len(m) < unix.SizeofRtMsg {
			perr = fmt.Errorf("short message (%d bytes)", len(m))
			return false
		}
		h := nl.DeserializeRtMsg(m)
		list, err := nl.ParseRouteAttr(m[unix.SizeofRtMsg:])
		if err != nil {
			perr = err
			return false
		}
		attrs := make(map[uint16][]byte, len(list))
		for _, a := range list {
			attrs[a.Attr.Type] = a.Value
		}
		why = f(h, attrs)
		return why == ""
	})
	if errors.Is(err, nl.ErrDumpInterrupted) {
		return "they changed while read", nil
	}
	if err == nil {
		err = perr
	}
	if err != nil {
		what := "rules"
		if kind == unix.RTM_GETROUTE {
			what = "routes"
		}
		return "", fmt.Errorf("list %s (family %d): %w", what, family, err)
	}
	return why, nil
}

func ruleBeyondDefault(family int) (string, error) {
	return dump(unix.RTM_GETRULE, family, func(h *nl.RtMsg, attrs map[uint16][]byte) string {
		prio, table := uint32(0), uint32(h.Table)
		if v, ok := attrs[unix.FRA_PRIORITY]; ok && len(v) == 4 {
			prio = binary.NativeEndian.Uint32(v)
		}
		if v, ok := attrs[unix.FRA_TABLE]; ok && len(v) == 4 {
			table = binary.NativeEndian.Uint32(v)
		}
		plain := h.Dst_len == 0 && h.Src_len == 0 && h.Tos == 0 && h.Type == unix.FR_ACT_TO_TBL &&
			h.Flags&unix.FIB_RULE_INVERT == 0
		for t, v := range attrs {
			switch {
			case t == unix.FRA_PRIORITY || t == unix.FRA_TABLE || t == unix.FRA_PROTOCOL:
			case t == unix.FRA_SUPPRESS_PREFIXLEN && len(v) == 4 && binary.NativeEndian.Uint32(v) == 0xffffffff:
				// -1: not set (the kernel reports it anyway)
			default:
				plain = false
			}
		}
		if plain && defaultRules[family][[2]uint32{prio, table}] {
			return ""
		}
		return fmt.Sprintf("ip rule %d (family %d, table %d) is not one of the defaults", prio, family, table)
	})
}

func routeBeyondDestination(family int) (string, error) {
	return dump(unix.RTM_GETROUTE, family, func(h *nl.RtMsg, attrs map[uint16][]byte) string {
		var what string
		switch {
		case attrs[unix.RTA_MULTIPATH] != nil:
			what = "has several next hops"
		case attrs[rtaNHID] != nil:
			what = "goes through a nexthop object"
		case h.Tos != 0:
			what = fmt.Sprintf("matches TOS %#x", h.Tos)
		case h.Src_len != 0:
			what = fmt.Sprintf("matches a /%d source prefix", h.Src_len)
		default:
			return ""
		}
		dst := "default"
		if v := attrs[unix.RTA_DST]; v != nil {
			dst = fmt.Sprintf("%s/%d", net.IP(v), h.Dst_len)
		}
		return fmt.Sprintf("route %s (table %d) %s", dst, h.Table, what)
	})
}

// ScanRouting lets flows share next hops by destination when the calling
// thread's namespace routes by destination alone, as an agent's watcher
// keeps it (for tools without one: the benchmark, tests). It returns what
// RoutingByDestination found.
func (dp *Dataplane) ScanRouting() (ok bool, why string, err error) {
	if ok, why, err = RoutingByDestination(); err != nil || !ok {
		return ok, why, err
	}
	_, err = dp.SetFIBByDst(true, nil)
	return ok, why, err
}
