// SPDX-License-Identifier: Apache-2.0

// Package fleet runs many gateways from one desired state kept in etcd:
// the controller (Controller) serves the v1 API and writes each Apply as
// one etcd transaction, and every agent started with --etcd (Member)
// watches the objects meant for it and commits them as one rules
// generation, as a local Apply does, and keeps its status in etcd under a
// lease. etcd does the consensus; nothing here elects or replicates.
//
// # Key layout (version 1)
//
// Under a prefix (default /edgeplane), all keys begin with PREFIX/v1/:
//
//	v1/layout                         "1": the layout version. A controller writes
//	                                  it; a member commits nothing until it is there,
//	                                  so an agent pointed at the wrong etcd or prefix
//	                                  never wipes its rules.
//	v1/revision                       bumped by every Apply: controllers compare its
//	                                  mod revision in their transaction, so two of
//	                                  them never interleave half-seen batches.
//	v1/objects/SCOPE/KIND/KEY         one object (edgeplane.v1.Object, protojson).
//	v1/scopes/SCOPE                   rewritten by every Apply to SCOPE: its mod
//	                                  revision is the scope's last change, which a
//	                                  gateway targeted by SCOPE is in drift without.
//	v1/gateways/NAME/status           the gateway's status (Status, JSON), written by
//	                                  its agent when it changes.
//	v1/gateways/NAME/alive            written under the agent's lease: gone when the
//	                                  lease expires, and the gateway is unreachable.
//
// SCOPE is a Target, path-escaped: "all", "gateway=NAME", or
// "selector=K1=V1,K2=V2" (keys sorted, keys and values query-escaped). KIND
// is the config kind ("pdr"), KEY the object's id or name, path-escaped.
//
// A gateway's agent may read everything under v1/ and write only
// v1/gateways/NAME/ (see README: per-gateway etcd users), so a
// compromised gateway cannot change another's state or the objects.
package fleet

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

// LayoutVersion is the key layout this package reads and writes.
const LayoutVersion = "1"

// DefaultPrefix is where a fleet's keys live unless told otherwise.
const DefaultPrefix = "/edgeplane"

// keys are the etcd keys of one fleet.
type keys struct{ base string }

func newKeys(prefix string) keys {
	return keys{base: strings.TrimRight(prefix, "/") + "/v1/"}
}

func (k keys) layout() string             { return k.base + "layout" }
func (k keys) revision() string           { return k.base + "revision" }
func (k keys) objects() string            { return k.base + "objects/" }
func (k keys) scopes() string             { return k.base + "scopes/" }
func (k keys) scope(s string) string      { return k.base + "scopes/" + url.PathEscape(s) }
func (k keys) gateways() string           { return k.base + "gateways/" }
func (k keys) gateway(name string) string { return k.base + "gateways/" + url.PathEscape(name) + "/" }
func (k keys) status(name string) string  { return k.gateway(name) + "status" }
func (k keys) alive(name string) string   { return k.gateway(name) + "alive" }

// object returns the key of kind's object key in scope s.
func (k keys) object(s string, kind config.Kind, key config.Key) string {
	return k.objects() + url.PathEscape(s) + "/" + string(kind) + "/" + url.PathEscape(key.String())
}

// parseObject splits an object key into its scope and kind (the key
// itself is in the object).
func (k keys) parseObject(key string) (scope string, kind config.Kind, err error) {
	rest, ok := strings.CutPrefix(key, k.objects())
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return "", "", fmt.Errorf("%q is not an object key", key)
	}
	if scope, err = url.PathUnescape(parts[0]); err != nil {
		return "", "", fmt.Errorf("%q: scope: %w", key, err)
	}
	return scope, config.Kind(parts[1]), nil
}

// parseGateway returns the gateway and the leaf ("status", "alive") of a
// key under gateways/.
func (k keys) parseGateway(key string) (name, leaf string, ok bool) {
	rest, ok := strings.CutPrefix(key, k.gateways())
	if !ok {
		return "", "", false
	}
	esc, leaf, ok := strings.Cut(rest, "/")
	if !ok {
		return "", "", false
	}
	name, err := url.PathUnescape(esc)
	return name, leaf, err == nil
}

// ScopeOf returns the scope string of target t: what its objects are
// kept under, and how it is shown.
func ScopeOf(t *pb.Target) string {
	switch {
	case t.GetGateway() != "":
		return "gateway=" + t.GetGateway()
	case len(t.GetSelector()) > 0:
		pairs := make([]string, 0, len(t.GetSelector()))
		for k, v := range t.GetSelector() {
			pairs = append(pairs, url.QueryEscape(k)+"="+url.QueryEscape(v))
		}
		slices.Sort(pairs)
		return "selector=" + strings.Join(pairs, ",")
	}
	return "all"
}

// ParseScope is ScopeOf's inverse.
func ParseScope(s string) (*pb.Target, error) {
	switch {
	case s == "all":
		return &pb.Target{}, nil
	case strings.HasPrefix(s, "gateway="):
		return &pb.Target{Gateway: strings.TrimPrefix(s, "gateway=")}, nil
	case strings.HasPrefix(s, "selector="):
		sel, err := ParseLabels(strings.TrimPrefix(s, "selector="), true)
		if err != nil {
			return nil, err
		}
		return &pb.Target{Selector: sel}, nil
	}
	return nil, fmt.Errorf("scope %q: want all, gateway=NAME or selector=K=V,...", s)
}

// ParseLabels reads "k1=v1,k2=v2" (query-escaped when escaped) into a
// map, refusing an empty key or a key given twice.
func ParseLabels(s string, escaped bool) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if escaped {
			var err1, err2 error
			k, err1 = url.QueryUnescape(k)
			v, err2 = url.QueryUnescape(v)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("labels %q: bad escape in %q", s, pair)
			}
		}
		switch {
		case !ok || k == "":
			return nil, fmt.Errorf("labels %q: %q is not KEY=VALUE", s, pair)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("labels %q: %q given twice", s, k)
		}
		out[k] = v
	}
	return out, nil
}

// Targets reports whether target t takes in the gateway called name
// with labels.
func Targets(t *pb.Target, name string, labels map[string]string) bool {
	if t.GetGateway() != "" {
		return t.GetGateway() == name
	}
	for k, v := range t.GetSelector() {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Status is what an agent keeps under v1/gateways/NAME/status.
type Status struct {
	Labels map[string]string `json:"labels"`
	// Committed is the etcd revision of the desired state the gateway
	// serves; Generation its rules generation then.
	Committed  int64  `json:"committed_revision"`
	Generation uint32 `json:"generation"`
	// State is converged, behind, failing or disconnected (see
	// edgeplane.v1.GatewayStatus); Error says why it is failing.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// DataplaneOK: the agent read its counters; PathsUp/PathsDown: its
	// path monitor's verdicts.
	DataplaneOK bool   `json:"dataplane_ok"`
	PathsUp     uint32 `json:"paths_up"`
	PathsDown   uint32 `json:"paths_down"`
	Objects     uint32 `json:"objects"`
	// Written is when the agent wrote this status (Unix ms).
	Written int64 `json:"written_unix_ms"`
}

// The states of a gateway.
const (
	StateConverged    = "converged"
	StateBehind       = "behind"
	StateFailing      = "failing"
	StateDisconnected = "disconnected"
	// StateWaiting: etcd holds no layout under the prefix (no controller
	// has run there); the agent serves its last state.
	StateWaiting = "waiting"
)
