// SPDX-License-Identifier: Apache-2.0

package config

import (
	"net"
	"net/netip"
	"strconv"
)

// FAR is a forwarding action rule: what to do with a packet a PDR selected.
type FAR struct {
	// ID identifies the FAR; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Action is ActionPass, ActionDrop, ActionRedirect, ActionEncap,
	// ActionDecap or ActionNAT.
	Action string `yaml:"action,omitempty"`
	// Interface is the egress interface for ActionRedirect and must be
	// empty for the other actions.
	Interface string `yaml:"interface,omitempty"`
	// Path is the path id for ActionEncap and must be 0 otherwise.
	Path uint32 `yaml:"path,omitempty"`
	// Address and Port are the backend of ActionNAT (Interface, optional
	// for it, pins the egress; else the route to Address decides).
	Address Addr   `yaml:"address,omitempty"`
	Port    uint16 `yaml:"port,omitempty"`
}

var farKind = &KindOf[FAR]{
	Kind:     KindFAR,
	Plural:   "fars",
	KeyField: "id",
	Check:    checkFAR,
	Refs: func(f *FAR) []Ref {
		return []Ref{
			{Field: "interface", Kind: KindInterface, Key: NameKey(f.Interface)},
			{Field: "path", Kind: KindPath, Key: IDKey(f.Path)},
		}
	},
	Columns: []Column[FAR]{
		{Name: "ID", Value: func(f *FAR) string { return always(f.ID) }},
		{Name: "ACTION", Value: func(f *FAR) string { return f.Action }, Unset: "-"},
		{Name: "INTERFACE", Value: func(f *FAR) string { return f.Interface }, Unset: "-"},
		{Name: "PATH", Value: func(f *FAR) string { return num(f.Path) }, Unset: "-"},
		// The backend a nat FAR rewrites the destination to.
		{Name: "NAT", Value: func(f *FAR) string {
			if f.Action != ActionNAT || !f.Address.IsSet() {
				return ""
			}
			return net.JoinHostPort(f.Address.String(), strconv.Itoa(int(f.Port)))
		}, Unset: "-"},
	},
}

func checkFAR(c *Check, f *FAR) {
	const want = "want pass, drop, redirect, encap, decap or nat"
	if f.ID == 0 {
		c.Add("id", "required")
	}
	knownAction := true
	switch f.Action {
	case ActionPass, ActionDrop, ActionRedirect, ActionEncap, ActionDecap, ActionNAT:
	case "":
		knownAction = false
		c.Add("action", "required (%s)", want)
	default:
		knownAction = false
		c.Add("action", "unknown action %q (%s)", f.Action, want)
	}
	switch {
	case f.Action == ActionRedirect && f.Interface == "":
		c.Add("interface", "required for action redirect")
	case knownAction && f.Action != ActionRedirect && f.Action != ActionNAT && f.Interface != "":
		c.Add("interface", "not allowed for action %s", f.Action)
	}
	switch {
	case f.Action == ActionEncap && f.Path == 0:
		c.Add("path", "required for action encap")
	case knownAction && f.Action != ActionEncap && f.Path != 0:
		c.Add("path", "not allowed for action %s", f.Action)
	}
	switch {
	case f.Action == ActionNAT && !f.Address.IsSet():
		c.Add("address", "required for action nat (the backend)")
	case knownAction && f.Action != ActionNAT && f.Address.IsSet():
		c.Add("address", "not allowed for action %s", f.Action)
	case f.Address.IsSet() && !unicast(f.Address.A):
		c.Add("address", "%s is not a unicast address", f.Address)
	}
	switch {
	case f.Action == ActionNAT && f.Port == 0:
		c.Add("port", "required for action nat (the backend's port)")
	case knownAction && f.Action != ActionNAT && f.Port != 0:
		c.Add("port", "not allowed for action %s", f.Action)
	}
}

func unicast(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}
