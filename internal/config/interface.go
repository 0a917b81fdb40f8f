// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"unicode"
)

// Interface roles.
const (
	RoleLAN = "lan"
	RoleWAN = "wan"
)

// XDP attach modes.
const (
	XDPNative  = "native"
	XDPGeneric = "generic"
	XDPAuto    = "auto"
)

// MaxIfnameLen is the longest Linux interface name in bytes (IFNAMSIZ-1).
const MaxIfnameLen = 15

// MaxInterfaces is the dataplane's EDGE_MAX_IFACES: the interfaces its
// transmit and address maps hold.
const MaxInterfaces = 64

// Interface is a network interface the dataplane attaches an XDP program to.
type Interface struct {
	// Name is the Linux interface name (1..15 bytes, no '/', ':' or
	// whitespace, not "." or "..").
	Name string `yaml:"name,omitempty"`
	// Role is RoleLAN or RoleWAN.
	Role string `yaml:"role,omitempty"`
	// XDP is the attach mode: XDPNative, XDPGeneric or XDPAuto (native,
	// falling back to generic with a warning); unset is XDPAuto.
	XDP string `yaml:"xdp,omitempty"`
}

var interfaceKind = &KindOf[Interface]{
	Kind:     KindInterface,
	Plural:   "interfaces",
	KeyField: "name",
	Normalize: func(i *Interface) {
		if i.XDP == "" {
			i.XDP = XDPAuto
		}
	},
	Check:      checkInterface,
	AtLeastOne: true,
	Capacity: func(n int, _ Limits) string {
		if n > MaxInterfaces {
			return fmt.Sprintf("%d interfaces, at most %d", n, MaxInterfaces)
		}
		return ""
	},
}

func checkInterface(c *Check, it *Interface) {
	if reason := ifnameProblem(it.Name); reason != "" {
		c.Add("name", "%s", reason)
	}
	switch it.Role {
	case RoleLAN, RoleWAN:
	case "":
		c.Add("role", "required (want lan or wan)")
	default:
		c.Add("role", "unknown role %q (want lan or wan)", it.Role)
	}
	switch it.XDP {
	case XDPNative, XDPGeneric, XDPAuto:
	default:
		c.Add("xdp", "unknown mode %q (want native, generic or auto)", it.XDP)
	}
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
