// SPDX-License-Identifier: Apache-2.0

package api

import (
	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

// PathFromPB and PDRFromPB give API clients (the edgeplane CLI) the
// server's parsing of those objects, with its field errors as a
// config.Errors; the other conversions are exported as they are.

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
