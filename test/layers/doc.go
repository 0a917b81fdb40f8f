// SPDX-License-Identifier: Apache-2.0

// Package layers holds the import rules between edgeplane's packages:
// which packages must not link which (the control plane not the
// loader, production binaries not the developer tools). Its test reads
// the real import graph with `go list -deps`.
package layers
