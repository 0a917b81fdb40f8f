// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"os"

	"github.com/edgeplane/edgeplane/internal/bpf/loader"
	"github.com/edgeplane/edgeplane/internal/config"
)

// ifaceOf is a configured interface as the loader attaches to it.
func ifaceOf(itf config.Interface) loader.Iface { return loader.Iface{Name: itf.Name, XDP: itf.XDP} }

// ifacesOf is ifaceOf of each configured interface.
func ifacesOf(its []config.Interface) []loader.Iface {
	out := make([]loader.Iface, len(its))
	for i, itf := range its {
		out[i] = ifaceOf(itf)
	}
	return out
}

// Down takes edgeplane off a gateway (loader.Down: the XDP links pinned
// under pinDir detached, edgeplane's pins removed and only those).
//
// Down takes the pin dir's lock first: while an agent runs on it, its
// pins are left alone and the error names the agent's pid (an agent
// would otherwise go on committing into maps no program uses).
func Down(pinDir string) error {
	l, err := lockPath(pinDir, "pin dir", true)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%w (edgeplane down takes the dataplane away from under a running agent only once it has stopped)", err)
	}
	defer l.release()
	return loader.Down(pinDir)
}
