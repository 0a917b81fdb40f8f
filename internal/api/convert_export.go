// SPDX-License-Identifier: Apache-2.0

package api

import (
	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

// These wrappers give API clients (the edgeplane CLI) the same
// conversions the server makes, so an object read from the API and one
// read from a config file compare and print alike.

// InterfaceToPB returns i as an API object.
func InterfaceToPB(i config.Interface) *pb.Interface {
	return interfaceToPB(i)
}

// InterfaceFromPB returns p in the config model.
func InterfaceFromPB(p *pb.Interface) config.Interface {
	return interfaceFromPB(p)
}

// PathToPB returns p as an API object.
func PathToPB(p config.Path) *pb.Path {
	return pathToPB(p)
}

// PathFromPB returns p in the config model, or a config.Errors naming
// every field that does not parse (paths start with "path.").
func PathFromPB(p *pb.Path) (config.Path, error) {
	f := &fieldErrs{prefix: "path"}
	out := pathFromPB(p, f)
	if len(f.errs) > 0 {
		return config.Path{}, f.errs
	}
	return out, nil
}

// FARToPB returns f as an API object.
func FARToPB(f config.FAR) *pb.Far {
	return farToPB(f)
}

// FARFromPB returns p in the config model.
func FARFromPB(p *pb.Far) config.FAR {
	return farFromPB(p)
}

// PDRToPB returns p as an API object.
func PDRToPB(p config.PDR) *pb.Pdr {
	return pdrToPB(p)
}

// PDRFromPB returns p in the config model, or a config.Errors naming
// every field that does not parse (paths start with "pdr.").
func PDRFromPB(p *pb.Pdr) (config.PDR, error) {
	f := &fieldErrs{prefix: "pdr"}
	out := pdrFromPB(p, f)
	if len(f.errs) > 0 {
		return config.PDR{}, f.errs
	}
	return out, nil
}
