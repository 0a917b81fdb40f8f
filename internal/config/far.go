// SPDX-License-Identifier: Apache-2.0

package config

import (
	"net/netip"
	"slices"
)

// FAR is a forwarding action rule: what to do with a packet a PDR selected.
type FAR struct {
	// ID identifies the FAR; it is required (non-zero) and unique.
	ID uint32 `yaml:"id"`
	// Action is ActionPass, ActionDrop, ActionRedirect, ActionEncap,
	// ActionDecap, ActionNAT or ActionSteer.
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
	// LBR is the steering group of ActionSteer: an LBR of a steering
	// algorithm whose members are encap FARs.
	LBR uint32 `yaml:"lbr,omitempty"`
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
			{Field: "lbr", Kind: KindLBR, Key: IDKey(f.LBR), Check: steeringLBR},
		}
	},
}

func checkFAR(c *Check, f *FAR) {
	const want = "want pass, drop, redirect, encap, decap, nat or steer"
	if f.ID == 0 {
		c.Add("id", "required")
	}
	knownAction := true
	switch f.Action {
	case ActionPass, ActionDrop, ActionRedirect, ActionEncap, ActionDecap, ActionNAT, ActionSteer:
	case "":
		knownAction = false
		c.Add("action", "required (%s)", want)
	default:
		knownAction = false
		c.Add("action", "unknown action %q (%s)", f.Action, want)
	}
	// Each target field is required by one action, allowed by the
	// actions listed and not allowed by the others.
	for _, x := range []struct {
		field   string
		set     bool
		need    string
		why     string
		allowed []string
	}{
		{"interface", f.Interface != "", ActionRedirect, "", []string{ActionRedirect, ActionNAT}},
		{"path", f.Path != 0, ActionEncap, "", []string{ActionEncap}},
		{"address", f.Address.IsSet(), ActionNAT, " (the backend)", []string{ActionNAT}},
		{"port", f.Port != 0, ActionNAT, " (the backend's port)", []string{ActionNAT}},
		{"lbr", f.LBR != 0, ActionSteer, " (the steering group)", []string{ActionSteer}},
	} {
		switch {
		case f.Action == x.need && !x.set:
			c.Add(x.field, "required for action %s%s", x.need, x.why)
		case knownAction && x.set && !slices.Contains(x.allowed, f.Action):
			c.Add(x.field, "not allowed for action %s", f.Action)
		}
	}
	if f.Address.IsSet() && !c.bad["address"] && !unicast(f.Address.A) {
		c.Add("address", "%s is not a unicast address", f.Address)
	}
}

func unicast(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}
