// SPDX-License-Identifier: Apache-2.0

package api

import (
	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

// PathFromPB, FARFromPB, PDRFromPB and ServiceFromPB give API clients
// (the edgeplane CLI) the server's parsing of those objects, with its
// field errors as a config.Errors; the other conversions are exported as
// they are.

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

// FARFromPB returns p in the config model, or a config.Errors naming
// every field that does not parse (paths start with "far.").
func FARFromPB(p *pb.Far) (config.FAR, error) {
	f := &fieldErrs{prefix: "far"}
	out := farFromPB(p, f)
	if len(f.errs) > 0 {
		return config.FAR{}, f.errs
	}
	return out, nil
}

// ServiceFromPB returns p in the config model, or a config.Errors naming
// every field that does not parse (paths start with "service.").
func ServiceFromPB(p *pb.Service) (config.Service, error) {
	f := &fieldErrs{prefix: "service"}
	out := serviceFromPB(p, f)
	if len(f.errs) > 0 {
		return config.Service{}, f.errs
	}
	return out, nil
}
