// SPDX-License-Identifier: Apache-2.0

package fleetlab

import (
	"sync"

	"github.com/edgeplane/edgeplane/internal/config"
)

// NoDataplane is a fleet.Gateway without a dataplane: it checks and keeps each
// batch in a config store, as an agent does before compiling, and writes
// nothing else. The fleet bench runs a hundred members on it to measure
// the control plane alone; its figures are labelled so.
type NoDataplane struct {
	mu  sync.Mutex
	s   *config.Store
	gen uint32
}

// NewNoDataplane returns an empty NoDataplane.
func NewNoDataplane() *NoDataplane {
	return &NoDataplane{s: config.NewStore(&config.Config{})}
}

// Config implements fleet.Gateway.
func (n *NoDataplane) Config() *config.Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.s.Config()
}

// Apply implements fleet.Gateway.
func (n *NoDataplane) Apply(ops []config.Op, dryRun bool, _ []byte) (uint32, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, undo, err := n.s.Apply(ops)
	if err != nil {
		return 0, err
	}
	if dryRun {
		undo()
		return n.gen, nil
	}
	n.gen++
	return n.gen, nil
}
