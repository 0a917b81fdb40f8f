// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config"
)

// objKey names an object across kinds.
type objKey struct {
	kind config.Kind
	key  config.Key
}

func (k objKey) String() string { return string(k.kind) + " " + k.key.String() }

// object is one object of the fleet's store: a value of its kind's
// type, in its scope, created at etcd revision created (the order lists
// keep, as a create goes last in an agent's).
type object struct {
	scope string
	objKey
	obj     any
	created int64
	// err: the value did not decode (a member keeps it, to refuse the
	// state it is missing from).
	err error
}

// decodeObject reads an object's etcd value.
func decodeObject(scope string, v []byte, created int64) (*object, error) {
	m := &pb.Object{}
	if err := protojson.Unmarshal(v, m); err != nil {
		return nil, err
	}
	k, msg, ok := api.ObjectMessage(m)
	if !ok || !config.Builtin().Has(k) {
		return nil, fmt.Errorf("no object of a known kind")
	}
	obj, errs := api.FromPB(config.Builtin(), k, msg, "")
	if len(errs) > 0 {
		return nil, errs
	}
	return &object{scope: scope, objKey: objKey{k, config.Builtin().KeyOf(k, obj)}, obj: obj, created: created}, nil
}

// encodeObject is decodeObject's inverse.
func encodeObject(k config.Kind, obj any) (string, error) {
	// Revealed: the store is where members read their objects from, a
	// path's secret included (etcd's own TLS and users guard it).
	b, err := protojson.Marshal(api.Object(k, api.ToPBRevealed(k, obj)))
	return string(b), err
}

// configOf returns objs as a Config, each kind's list in creation order.
func configOf(objs []*object) *config.Config {
	s := config.Builtin()
	byKind := map[config.Kind][]*object{}
	for _, o := range objs {
		byKind[o.kind] = append(byKind[o.kind], o)
	}
	c := &config.Config{}
	for k, l := range byKind {
		slices.SortFunc(l, func(a, b *object) int {
			return cmp.Or(cmp.Compare(a.created, b.created), strings.Compare(a.key.String(), b.key.String()))
		})
		vals := make([]any, len(l))
		for i, o := range l {
			vals[i] = o.obj
		}
		s.SetObjects(c, k, vals)
	}
	return c
}

// held is what a gateway holds of the kinds the API carries: each
// object by key, and the keys in the order the gateway lists them.
type held struct {
	obj   map[objKey]any
	order []objKey
}

// carried returns what cur holds.
func carried(cur *config.Config) held {
	s := config.Builtin()
	h := held{obj: map[objKey]any{}}
	for _, k := range s.Kinds() {
		if !api.Carries(k) {
			continue
		}
		for _, obj := range s.Objects(cur, k) {
			ok := objKey{k, s.KeyOf(k, obj)}
			h.obj[ok] = obj
			h.order = append(h.order, ok)
		}
	}
	return h
}

// heldOf returns what a gateway holds after committing objs, listed as
// configOf lists them (by creation, then key).
func heldOf(objs map[objKey]*object) held {
	h := held{obj: make(map[objKey]any, len(objs))}
	l := slices.Collect(maps.Values(objs))
	slices.SortFunc(l, func(a, b *object) int {
		return cmp.Or(cmp.Compare(a.created, b.created), strings.Compare(a.key.String(), b.key.String()))
	})
	for _, o := range l {
		h.obj[o.objKey] = o.obj
		h.order = append(h.order, o.objKey)
	}
	return h
}

// diffOps returns the operations that turn a gateway holding have into
// one holding want, updates where an object's API form differs. An
// object of want that is the very one prev holds under its key is taken
// as held without comparing it: a member that knows what it committed
// last compares only what changed since (prev nil: everything).
func diffOps(have held, want, prev map[objKey]*object) []*pb.Operation {
	kinds := config.Builtin().Kinds()
	var ops []*pb.Operation
	// What to compare, once: every object of want, or those that are
	// not the very ones prev holds (an Apply's one or two).
	var changed []*object
	for ok, o := range want {
		if prev == nil || prev[ok] != o {
			changed = append(changed, o)
		}
	}
	// Creates and updates in the order what is referred to comes first,
	// deletes after: the batch is checked as a whole, but a reader of
	// the journal sees it in an order that makes sense.
	for _, k := range kinds {
		var mine []*object
		for _, o := range changed {
			if o.kind == k {
				mine = append(mine, o)
			}
		}
		slices.SortFunc(mine, func(a, b *object) int { return cmp.Compare(a.created, b.created) })
		for _, o := range mine {
			m := api.ToPBRevealed(k, o.obj)
			old, ok := have.obj[o.objKey]
			switch {
			case !ok:
				ops = append(ops, &pb.Operation{Op: &pb.Operation_Create{Create: api.Object(k, m)}})
			case !proto.Equal(api.ToPBRevealed(k, old), m):
				ops = append(ops, &pb.Operation{Op: &pb.Operation_Update{Update: api.Object(k, m)}})
			}
		}
	}
	var gone []objKey
	for _, ok := range have.order {
		if _, keep := want[ok]; !keep {
			gone = append(gone, ok)
		}
	}
	for i := len(kinds) - 1; i >= 0 && len(gone) > 0; i-- {
		k := kinds[i]
		for _, ok := range gone {
			if ok.kind == k {
				ops = append(ops, &pb.Operation{Op: &pb.Operation_Delete{Delete: &pb.Ref{Kind: api.KindRef(k), Id: ok.key.ID, Name: ok.key.Name}}})
			}
		}
	}
	return ops
}

// ClientOptions say how to reach etcd.
type ClientOptions struct {
	Endpoints []string
	// CA verifies the members' certificates; Cert and Key are the
	// client's (mutual TLS). https:// endpoints without CA use the
	// system's roots.
	CA, Cert, Key string
	// User and PasswordFile authenticate with etcd's auth (RBAC).
	User, PasswordFile string
	// DialTimeout bounds authentication and each request the caller
	// does not bound itself (default 2 s).
	DialTimeout time.Duration
}

// NewClient returns an etcd client. It does not wait for etcd: a member
// started while etcd is down serves its last state and connects later.
func NewClient(o ClientOptions) (*clientv3.Client, error) {
	if len(o.Endpoints) == 0 {
		return nil, fmt.Errorf("etcd: no endpoints")
	}
	cfg := clientv3.Config{
		Endpoints: o.Endpoints, DialTimeout: cmp.Or(o.DialTimeout, 2*time.Second),
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		// etcd's client logs every retry at warn through zap; the
		// member's own status says what matters.
		Logger: zap.NewNop(),
	}
	if o.CA != "" || o.Cert != "" || strings.HasPrefix(o.Endpoints[0], "https://") {
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CA != "" {
			pem, err := os.ReadFile(o.CA)
			if err != nil {
				return nil, fmt.Errorf("etcd CA: %w", err)
			}
			t.RootCAs = x509.NewCertPool()
			if !t.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("etcd CA %s: no PEM certificate", o.CA)
			}
		}
		if (o.Cert == "") != (o.Key == "") {
			return nil, fmt.Errorf("etcd client certificate: give both --etcd-cert and --etcd-key")
		}
		if o.Cert != "" {
			c, err := tls.LoadX509KeyPair(o.Cert, o.Key)
			if err != nil {
				return nil, fmt.Errorf("etcd client certificate: %w", err)
			}
			t.Certificates = []tls.Certificate{c}
		}
		cfg.TLS = t
	}
	if o.User != "" {
		if o.PasswordFile == "" {
			return nil, fmt.Errorf("etcd user %s: no --etcd-password-file", o.User)
		}
		pw, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("etcd password: %w", err)
		}
		cfg.Username, cfg.Password = o.User, strings.TrimRight(string(pw), "\r\n")
	}
	return clientv3.New(cfg)
}
