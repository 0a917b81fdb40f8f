// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// XDP feature bits a device advertises (enum netdev_xdp_act,
// linux/netdev.h).
const (
	// XDPActNDOXmit: the device takes frames redirected into it
	// (ndo_xdp_xmit). A devmap redirect or broadcast to a device without
	// it is dropped, and a broadcast skips it without a trace. A veth has
	// it while its peer runs NAPI (an XDP program, or GRO on).
	XDPActNDOXmit = 4
)

// The netdev generic netlink family (linux/netdev.h).
const (
	netdevCmdDevGet      = 1
	netdevAttrIfindex    = 1
	netdevAttrXDPFeature = 3
)

// XDPFeatures returns the XDP features (XDPAct* bits) the device ifindex
// of the calling thread's network namespace advertises, as the netdev
// netlink family reports them (Linux 6.3 and later).
func XDPFeatures(ifindex uint32) (uint64, error) {
	fam, err := netlink.GenlFamilyGet("netdev")
	if err != nil {
		return 0, fmt.Errorf("netdev netlink family: %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_REQUEST)
	req.AddData(genlHeader{cmd: netdevCmdDevGet, version: 1})
	req.AddData(nl.NewRtAttr(netdevAttrIfindex, nl.Uint32Attr(ifindex)))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return 0, fmt.Errorf("xdp features of ifindex %d: %w", ifindex, err)
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
		if err != nil {
			return 0, fmt.Errorf("xdp features of ifindex %d: %w", ifindex, err)
		}
		for _, a := range attrs {
			if a.Attr.Type == netdevAttrXDPFeature && len(a.Value) >= 8 {
				return binary.NativeEndian.Uint64(a.Value), nil
			}
		}
	}
	return 0, fmt.Errorf("xdp features of ifindex %d: not in the kernel's answer", ifindex)
}

// genlHeader is a generic netlink header (struct genlmsghdr) with its
// reserved half zero, as the netdev family's strict checks want (the
// netlink package's Genlmsg leaves it to whatever follows in memory).
type genlHeader struct{ cmd, version uint8 }

func (h genlHeader) Len() int          { return nl.SizeofGenlmsg }
func (h genlHeader) Serialize() []byte { return []byte{h.cmd, h.version, 0, 0} }
