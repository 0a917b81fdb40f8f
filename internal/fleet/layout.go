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
//	v1/revision                       the fleet's position, rewritten by every change
//	                                  a member follows (an Apply, a label change, a
//	                                  controller's start): JSON {cluster, epoch, id,
//	                                  prev, asks}. cluster is chosen when the layout is
//	                                  written, epoch counts controller starts and
//	                                  restores a controller noticed, id is new at each
//	                                  write and prev is the mod revision and id of the
//	                                  value it replaced. Controllers compare its mod
//	                                  revision in their transactions, so two of them
//	                                  never interleave half-seen batches; members check
//	                                  the chain (see Position), so an etcd restored to
//	                                  an older revision, or wiped and refilled, is
//	                                  noticed and everything is read again. asks:
//	                                  the controller that wrote it asks for statuses
//	                                  (v1/poll), so members write how far they got
//	                                  when asked rather than at every commit (a
//	                                  controller from before asks never does, and its
//	                                  writes leave it out).
//	v1/labels/NAME                    the gateway's labels (JSON object), written by
//	                                  controllers alone from what the operator gives
//	                                  them (a file, the Kubernetes nodes): the labels
//	                                  selectors target. A gateway never chooses them.
//	v1/objects/SCOPE/KIND/KEY         one object (edgeplane.v1.Object, protojson).
//	v1/poll                           rewritten (a random id) by a controller that
//	                                  lists the gateways while some have not said
//	                                  whether they followed the fleet's last change:
//	                                  each member whose status changed since it last
//	                                  wrote it writes it then. It is no change to
//	                                  follow: members do not commit for it.
//	v1/scopes/SCOPE                   rewritten by every Apply to SCOPE: its mod
//	                                  revision is the scope's last change, which a
//	                                  gateway targeted by SCOPE is in drift without.
//	v1/gateways/NAME/status           the gateway's status (Status, JSON), written by
//	                                  its agent under its lease: at once when its state
//	                                  or health changes, and when asked (v1/poll) when
//	                                  only how far it got did (or at every commit,
//	                                  under a controller that does not ask).
//	v1/gateways/NAME/alive            written under the agent's lease: gone when the
//	                                  lease expires, and the gateway is unreachable.
//
// SCOPE is a Target, path-escaped: "all", "gateway=NAME", or
// "selector=K1=V1,K2=V2" (keys sorted, keys and values query-escaped). KIND
// is the config kind ("pdr"), KEY the object's id or name, path-escaped.
//
// A member reads the keys from v1/labels/ up to v1/s (labels, layout,
// objects, poll, revision: nothing else sorts between them, and new keys
// a member must not read must not), so a gateway's etcd user needs read
// on that range
// and readwrite on v1/gateways/NAME/ alone (GatewayPermissions): a
// compromised gateway cannot change another's state, its own labels or
// the objects, and what it writes reaches nobody's rules.
package fleet

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

// LayoutVersion is the key layout this package reads and writes.
const LayoutVersion = "1"

// DefaultPrefix is where a fleet's keys live unless told otherwise.
const DefaultPrefix = "/edgeplane"

// keys are the etcd keys of one fleet. The fixed ones are made once: a
// member compares each key of every watch event with several of them.
type keys struct {
	base                                      string
	layoutKey, revisionKey, labelsKey, objKey string
	pollKey                                   string
}

func newKeys(prefix string) keys {
	base := strings.TrimRight(prefix, "/") + "/v1/"
	return keys{base: base, layoutKey: base + "layout", revisionKey: base + "revision", labelsKey: base + "labels/",
		objKey: base + "objects/", pollKey: base + "poll"}
}

func (k keys) layout() string             { return k.layoutKey }
func (k keys) revision() string           { return k.revisionKey }
func (k keys) labels() string             { return k.labelsKey }
func (k keys) label(name string) string   { return k.labelsKey + url.PathEscape(name) }
func (k keys) objects() string            { return k.objKey }
func (k keys) poll() string               { return k.pollKey }
func (k keys) scopes() string             { return k.base + "scopes/" }
func (k keys) scope(s string) string      { return k.base + "scopes/" + url.PathEscape(s) }
func (k keys) gateways() string           { return k.base + "gateways/" }
func (k keys) gateway(name string) string { return k.base + "gateways/" + url.PathEscape(name) + "/" }
func (k keys) status(name string) string  { return k.gateway(name) + "status" }
func (k keys) alive(name string) string   { return k.gateway(name) + "alive" }

// memberRange is the range a member reads and watches: from labels/ up
// to scopes/, exclusive (labels, layout, objects, poll, revision). The end is
// "s", not "revision\x00", so that an operator can type it into etcdctl.
func (k keys) memberRange() (from, end string) { return k.labels(), k.base + "s" }

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

// parseLabel returns the gateway of a key under labels/.
func (k keys) parseLabel(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, k.labels())
	if !ok || strings.Contains(rest, "/") {
		return "", false
	}
	name, err := url.PathUnescape(rest)
	return name, err == nil
}

// Permission is one etcd role permission: read or readwrite on the keys
// from Key to RangeEnd (exclusive; etcdctl's `role grant-permission ROLE
// TYPE KEY RANGE_END`).
type Permission struct {
	Key, RangeEnd string
	Write         bool
}

// GatewayPermissions are all a gateway's etcd user needs: read the
// member range (its labels, the layout, the objects, the controllers'
// asks, the revision key) and write its own status and alive keys. Nothing else: not another
// gateway's keys, not the labels (the controller's), not the objects.
func GatewayPermissions(prefix, name string) []Permission {
	k := newKeys(cmp.Or(prefix, DefaultPrefix))
	from, end := k.memberRange()
	gw := k.gateway(name)
	return []Permission{{Key: from, RangeEnd: end}, {Key: gw, RangeEnd: clientv3.GetPrefixRangeEnd(gw), Write: true}}
}

// ControllerPermissions are a controller's: readwrite on the whole
// layout under prefix.
func ControllerPermissions(prefix string) []Permission {
	k := newKeys(cmp.Or(prefix, DefaultPrefix))
	return []Permission{{Key: k.base, RangeEnd: clientv3.GetPrefixRangeEnd(k.base), Write: true}}
}

// PollKey is the key under prefix that controllers rewrite to ask the
// members for their statuses (see the layout).
func PollKey(prefix string) string { return newKeys(cmp.Or(prefix, DefaultPrefix)).poll() }

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

// Status is what an agent keeps under v1/gateways/NAME/status, under
// its lease. Nothing in it reaches another gateway: targeting follows the
// labels controllers write (v1/labels/NAME), never a status.
type Status struct {
	// Committed is the etcd revision of the desired state the gateway
	// serves; Generation its rules generation then.
	Committed  int64  `json:"committed_revision"`
	Generation uint32 `json:"generation"`
	// Position is the fleet's revision key as of Committed: a controller
	// lists the gateway converged only while it is etcd's, so a gateway
	// that holds a state from before etcd was restored is not.
	Position Position `json:"position"`
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

// Position names one value of the fleet's revision key: its mod revision
// and its id. {0, ""} is no key.
type Position struct {
	Rev int64  `json:"rev"`
	ID  string `json:"id"`
}

// revisionValue is the revision key's value.
type revisionValue struct {
	// Cluster is chosen once, when the layout is written: a member that
	// finds another has changed etcds (or fleets) under it.
	Cluster string `json:"cluster"`
	// Epoch counts controller starts and the restores a controller
	// noticed (etcd's revision key older than what it had seen).
	Epoch int64 `json:"epoch"`
	// ID is new at every write; Prev is the value this one replaced.
	ID   string    `json:"id"`
	Prev *Position `json:"prev,omitempty"`
	// Asks: the controller that wrote it asks for statuses (v1/poll).
	Asks bool `json:"asks,omitempty"`
}

// parseRevision reads the revision key's value. A value of layout 1's
// first form (a number) has no cluster, epoch or chain: its id is the
// value itself.
func parseRevision(v []byte) revisionValue {
	var r revisionValue
	if err := json.Unmarshal(v, &r); err != nil || r.ID == "" {
		return revisionValue{ID: string(v)}
	}
	return r
}

func (r revisionValue) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// newID returns a random id: 64 bits, so two writes never share one.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
