// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/config"
)

// Controller serves the v1 API over a fleet's desired state in etcd
// (api.Backend and api.Fleet): objects per target, each Apply one etcd
// transaction. It has no dataplane, so the API refuses it counters,
// flows and path and CPU status. Several controllers may serve one fleet: each reads
// again when another has written, and their transactions compare the
// revision key, so none writes over a batch it has not seen.
type Controller struct {
	cli *clientv3.Client
	k   keys
	log *slog.Logger

	mu sync.Mutex
	// objs holds every object by etcd key, as of the revision key's mod
	// revision seen (seen, -1 before the first read), whose value is rv
	// (raw as etcd holds it); scopeRev is each scope's last change.
	objs map[string]*object
	seen int64
	rv   revisionValue
	raw  string
	// hi is the newest revision key this controller has seen (mod
	// revision and raw value): etcd holding an older one went back.
	hiRev    int64
	hiRaw    string
	scopeRev map[string]int64
	// labels are the gateways' labels as controllers wrote them, and
	// labelRev the revision each was written at.
	labels   map[string]map[string]string
	labelRev map[string]int64
	// gateways are the labels of the gateways last listed, for checking
	// a batch against each gateway it reaches.
	gateways map[string]map[string]string
	// named are the gateways with keys under gateways/ at namedRev, when
	// there were namedKeys of those keys (nil: not read yet).
	named     map[string]bool
	namedRev  int64
	namedKeys int64
	// stores caches each scope's store for reads, until the next change.
	stores map[string]*config.Store
	// asked is when this controller last asked for statuses.
	asked time.Time
}

// NewController returns a controller of the fleet under prefix, writing
// the layout version if etcd has none (refusing another version), and
// moves the fleet's epoch on: a gateway whose status was restored with
// etcd from a backup is then behind until it has read etcd again, even
// though this controller never saw the revisions that were lost.
func NewController(ctx context.Context, cli *clientv3.Client, prefix string, log *slog.Logger) (*Controller, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cli: cli, k: newKeys(cmp.Or(prefix, DefaultPrefix)), log: log, seen: -1}
	// Bounded: a controller started while etcd is away says so and
	// exits (to be restarted) rather than hanging without a word.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(c.k.layout()), "=", 0)).
		Then(clientv3.OpPut(c.k.layout(), LayoutVersion)).Else(clientv3.OpGet(c.k.layout())).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(cli.Endpoints(), ","), err)
	}
	if !tx.Succeeded {
		if v := string(tx.Responses[0].GetResponseRange().Kvs[0].Value); v != LayoutVersion {
			return nil, fmt.Errorf("%s holds layout %q; this controller writes %q", c.k.layout(), v, LayoutVersion)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(ctx); err != nil {
		return nil, err
	}
	if err := c.bump(ctx); err != nil && !errors.Is(err, errConflict) {
		return nil, err
	}
	return c, nil
}

// position is the revision key's value as last read; c.mu held.
func (c *Controller) position() Position {
	if c.seen <= 0 {
		return Position{}
	}
	return Position{Rev: c.seen, ID: c.rv.ID}
}

// next returns the revision key's next value: a new id after the
// current one, in the same cluster (a new one when none is known yet)
// and epoch.
func (c *Controller) next() revisionValue {
	prev := c.position()
	return revisionValue{Cluster: cmp.Or(c.rv.Cluster, newID()), Epoch: c.rv.Epoch, ID: newID(), Prev: &prev, Asks: true}
}

// wrote records the revision key a transaction of this controller wrote
// at rev; c.mu held.
func (c *Controller) wrote(rev int64, v revisionValue) {
	c.seen, c.rv, c.raw = rev, v, v.encode()
	c.hiRev, c.hiRaw = rev, c.raw
}

// bump writes the revision key with the epoch moved on (and nothing
// else): every gateway's position is then behind etcd's until its member
// has followed the write, or read everything again if its history is not
// etcd's; c.mu held. errConflict: another controller wrote meanwhile,
// which moves the position as well.
func (c *Controller) bump(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v := c.next()
	v.Epoch++
	tx, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(c.k.revision()), "=", max(c.seen, 0))).
		Then(clientv3.OpPut(c.k.revision(), v.encode())).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if !tx.Succeeded {
		c.seen = -1
		return errConflict
	}
	c.wrote(tx.Header.Revision, v)
	c.log.Info("fleet: epoch moved on", "cluster", v.Cluster, "epoch", v.Epoch, "revision", tx.Header.Revision)
	return nil
}

// refresh reads the objects and labels again if another controller has
// written since the last read; c.mu held. When etcd holds an older
// revision key than this controller saw (restored from a backup, or
// wiped and filled again) it moves the epoch on, so that no gateway that
// followed the lost revisions is listed converged.
func (c *Controller) refresh(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := c.cli.Get(rctx, c.k.revision())
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	mod, raw := int64(0), ""
	if len(r.Kvs) > 0 {
		mod, raw = r.Kvs[0].ModRevision, string(r.Kvs[0].Value)
	}
	if mod == c.seen && raw == c.raw {
		return nil
	}
	back := c.hiRev > 0 && (mod < c.hiRev || mod == c.hiRev && raw != c.hiRaw)
	// One transaction: the objects, scopes, labels and revision key of
	// one revision.
	tx, err := c.cli.Txn(rctx).Then(
		clientv3.OpGet(c.k.revision()),
		clientv3.OpGet(c.k.objects(), clientv3.WithPrefix()),
		clientv3.OpGet(c.k.scopes(), clientv3.WithPrefix()),
		clientv3.OpGet(c.k.labels(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	objs := map[string]*object{}
	for _, kv := range tx.Responses[1].GetResponseRange().Kvs {
		scope, _, err := c.k.parseObject(string(kv.Key))
		if err == nil {
			var o *object
			if o, err = decodeObject(scope, kv.Value, kv.CreateRevision); err == nil {
				objs[string(kv.Key)] = o
				continue
			}
		}
		c.log.Error("fleet: unreadable object skipped", "key", string(kv.Key), "error", err)
	}
	scopeRev := map[string]int64{}
	for _, kv := range tx.Responses[2].GetResponseRange().Kvs {
		scopeRev[string(kv.Value)] = kv.ModRevision
	}
	labels, labelRev := map[string]map[string]string{}, map[string]int64{}
	for _, kv := range tx.Responses[3].GetResponseRange().Kvs {
		name, ok := c.k.parseLabel(string(kv.Key))
		var l map[string]string
		if err := json.Unmarshal(kv.Value, &l); !ok || err != nil {
			c.log.Error("fleet: unreadable labels skipped", "key", string(kv.Key), "error", err)
			continue
		}
		labels[name], labelRev[name] = l, kv.ModRevision
	}
	c.objs, c.scopeRev, c.stores = objs, scopeRev, map[string]*config.Store{}
	c.labels, c.labelRev = labels, labelRev
	c.seen, c.rv, c.raw = 0, revisionValue{}, ""
	if kvs := tx.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		c.seen, c.rv, c.raw = kvs[0].ModRevision, parseRevision(kvs[0].Value), string(kvs[0].Value)
	}
	if back || c.seen > c.hiRev {
		c.hiRev, c.hiRaw = c.seen, c.raw
	}
	if back {
		c.named = nil // of the lost history
		c.log.Warn("fleet: etcd holds an older state than this controller saw (restored, or wiped and filled again); moving the epoch on so that gateways that followed the lost revisions read everything again",
			"revision_key", c.seen)
		if err := c.bump(ctx); err != nil && !errors.Is(err, errConflict) {
			return err
		}
	}
	return nil
}

// inScope returns the objects of scope s; c.mu held.
func (c *Controller) inScope(s string) []*object {
	var out []*object
	for _, o := range c.objs {
		if o.scope == s {
			out = append(out, o)
		}
	}
	return out
}

// ViewTarget implements api.Fleet.
func (c *Controller) ViewTarget(t *pb.Target, fn func(*config.Store)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(context.Background()); err != nil {
		return err
	}
	s := ScopeOf(t)
	st, ok := c.stores[s]
	if !ok {
		st = config.NewStore(configOf(c.inScope(s)))
		c.stores[s] = st
	}
	fn(st)
	return nil
}

// View implements api.Backend: the objects for all gateways.
func (c *Controller) View(fn func(*config.Store)) {
	if err := c.ViewTarget(nil, fn); err != nil {
		c.log.Error("fleet: read etcd", "error", err)
		fn(config.NewStore(&config.Config{}))
	}
}

// Config implements api.Backend: the objects for all gateways.
func (c *Controller) Config() *config.Config {
	var cfg *config.Config
	c.View(func(s *config.Store) { cfg = s.Config() })
	return cfg
}

// Apply implements api.Backend: a batch for all gateways.
func (c *Controller) Apply(ops []config.Op, dryRun bool, _ []byte) (uint32, error) {
	_, err := c.ApplyTo(nil, ops, dryRun)
	return 0, err
}

// errConflict is a transaction that lost to another controller's.
var errConflict = errors.New("another controller changed the fleet meanwhile")

// ApplyTo implements api.Fleet. It checks the batch as each gateway the
// target reaches would (against everything else it is given, so an id
// two targets of one gateway both give is refused as existing), or, when
// no known gateway is reached, against the target's objects and those
// for all gateways; then writes it in one transaction.
func (c *Controller) ApplyTo(t *pb.Target, ops []config.Op, dryRun bool) (uint64, error) {
	if t.GetGateway() != "" && len(t.GetSelector()) > 0 {
		return 0, config.Errors{{Path: "target", Reason: "give a gateway or a selector, not both"}}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Lost to another controller: read what it wrote and check the
	// batch again, for up to a few seconds of contention.
	deadline := time.Now().Add(5 * time.Second)
	for {
		rev, err := c.applyOnce(t, ops, dryRun)
		if !errors.Is(err, errConflict) || time.Now().After(deadline) {
			return rev, err
		}
		time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
	}
}

func (c *Controller) applyOnce(t *pb.Target, ops []config.Op, dryRun bool) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.refresh(ctx); err != nil {
		return 0, err
	}
	if err := c.readGateways(ctx); err != nil {
		return 0, err
	}
	scope := ScopeOf(t)
	// The scope after the batch: a store of its objects alone, applied
	// without reference checks (they are the gateways' to make).
	mine := c.inScope(scope)
	after, err := applyScope(mine, ops)
	if err != nil {
		return 0, err
	}
	var reached []string
	for name, labels := range c.gateways {
		if Targets(t, name, labels) {
			reached = append(reached, name)
		}
	}
	slices.Sort(reached)
	check := func(what string, others []*object) error {
		st := config.NewStore(configOf(append(others, mine...)))
		if _, _, err := st.Apply(ops); err != nil {
			var fe config.Errors
			if errors.As(err, &fe) {
				for i := range fe {
					fe[i].Reason = what + ": " + fe[i].Reason
				}
				return fe
			}
			return err
		}
		return nil
	}
	if len(reached) == 0 {
		var others []*object
		if scope != "all" {
			others = c.inScope("all")
		}
		if err := check("for "+scope, others); err != nil {
			return 0, err
		}
	}
	// Gateways given the same targets get the same objects: check the
	// batch once per distinct set of targets, not once per gateway (a
	// hundred gateways of one site are one check).
	scopes := map[string]*pb.Target{}
	for _, o := range c.objs {
		if _, ok := scopes[o.scope]; !ok && o.scope != scope {
			if ot, err := ParseScope(o.scope); err == nil {
				scopes[o.scope] = ot
			}
		}
	}
	checked := map[string]bool{}
	for _, name := range reached {
		var set []string
		for sc, ot := range scopes {
			if Targets(ot, name, c.gateways[name]) {
				set = append(set, sc)
			}
		}
		slices.Sort(set)
		id := strings.Join(set, "\n")
		if checked[id] {
			continue
		}
		checked[id] = true
		in := map[string]bool{}
		for _, sc := range set {
			in[sc] = true
		}
		var others []*object
		for _, o := range c.objs {
			if in[o.scope] {
				others = append(others, o)
			}
		}
		if err := check("gateway "+name, others); err != nil {
			return 0, err
		}
	}
	if dryRun {
		return uint64(c.seen), nil
	}

	// One transaction: the objects the batch leaves changed, the scope's
	// change mark and the revision key, if nobody wrote since we read.
	var txOps []clientv3.Op
	before := map[objKey]*object{}
	for _, o := range mine {
		before[o.objKey] = o
	}
	touched := map[objKey]bool{}
	for _, op := range ops {
		touched[opKey(op)] = true
	}
	for k := range touched {
		v, ok := after[k]
		if !ok {
			txOps = append(txOps, clientv3.OpDelete(c.k.object(scope, k.kind, k.key)))
			continue
		}
		val, err := encodeObject(k.kind, v)
		if err != nil {
			return 0, err
		}
		txOps = append(txOps, clientv3.OpPut(c.k.object(scope, k.kind, k.key), val))
	}
	next := c.next()
	txOps = append(txOps, clientv3.OpPut(c.k.scope(scope), scope), clientv3.OpPut(c.k.revision(), next.encode()))
	tx, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(c.k.revision()), "=", c.seen)).Then(txOps...).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcd: %w", err)
	}
	if !tx.Succeeded {
		c.seen = -1 // read everything again
		return 0, errConflict
	}
	rev := tx.Header.Revision
	// What we wrote is what etcd holds: the cache follows without a read.
	for k := range touched {
		key := c.k.object(scope, k.kind, k.key)
		v, ok := after[k]
		if !ok {
			delete(c.objs, key)
			continue
		}
		created := rev
		if old, ok := before[k]; ok {
			created = old.created
		}
		c.objs[key] = &object{scope: scope, objKey: k, obj: v, created: created}
	}
	c.scopeRev[scope] = rev
	c.wrote(rev, next)
	c.stores = map[string]*config.Store{}
	return uint64(rev), nil
}

// opKey returns the object op changes.
func opKey(op config.Op) objKey {
	if op.Verb == config.Delete {
		return objKey{op.Kind, config.Key{Name: op.Name, ID: op.ID}}
	}
	return objKey{op.Kind, config.Builtin().KeyOf(op.Kind, op.Object)}
}

// applyScope returns what a scope holds after ops: creates must not
// exist in it, updates and deletes must, as in an agent's store.
func applyScope(objs []*object, ops []config.Op) (map[objKey]any, error) {
	out := map[objKey]any{}
	for _, o := range objs {
		out[o.objKey] = o.obj
	}
	var fe config.Errors
	for _, op := range ops {
		k := opKey(op)
		_, exists := out[k]
		switch {
		case op.Verb == config.Create && exists:
			fe = append(fe, config.FieldError{Path: op.At, Reason: k.String() + " exists", Code: config.CodeExists})
		case op.Verb != config.Create && !exists:
			fe = append(fe, config.FieldError{Path: op.At, Reason: "no " + k.String(), Code: config.CodeNotFound})
		case op.Verb == config.Delete:
			delete(out, k)
		default:
			out[k] = op.Object
		}
	}
	if len(fe) > 0 {
		return nil, fe
	}
	return out, nil
}

// readGateways reads the gateways' names and their labels; c.mu held,
// labels fresh. A gateway is known by its keys under gateways/ (its
// lease, while it lasts) or by labels a controller gave it.
//
// The keys under gateways/ are read again only when some were deleted:
// otherwise the keys created since the last read, and their count, say
// what changed. A thousand gateways are 2,000 keys, which every Apply
// read, sent and parsed (3-6 ms of the Apply here, on its way to every
// gateway) where a gateway joins or leaves a few times a day.
func (c *Controller) readGateways(ctx context.Context) error {
	if c.named == nil || !c.namedSince(ctx) {
		r, err := c.cli.Get(ctx, c.k.gateways(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		c.named = map[string]bool{}
		for _, kv := range r.Kvs {
			if name, _, ok := c.k.parseGateway(string(kv.Key)); ok {
				c.named[name] = true
			}
		}
		c.namedRev, c.namedKeys = r.Header.Revision, int64(len(r.Kvs))
	}
	c.gateways = make(map[string]map[string]string, len(c.named)+len(c.labels))
	for name := range c.named {
		c.gateways[name] = c.labels[name]
	}
	for name, l := range c.labels {
		c.gateways[name] = l
	}
	return nil
}

// namedSince adds the gateways whose keys were created since c.named
// was read and reports true, or false when some key was deleted
// meanwhile (a lease lapsed, a gateway left: read them all again) or
// etcd did not answer. A key created and deleted since is neither; one
// deleted and created again counts as deleted. c.mu held.
func (c *Controller) namedSince(ctx context.Context) bool {
	pre := c.k.gateways()
	tx, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(pre, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMinCreateRev(c.namedRev+1)),
		clientv3.OpGet(pre, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return false
	}
	fresh, count := tx.Responses[0].GetResponseRange().Kvs, tx.Responses[1].GetResponseRange().Count
	// etcd before the last read: restored or wiped since, another history.
	if tx.Header.Revision < c.namedRev || count != c.namedKeys+int64(len(fresh)) {
		return false
	}
	for _, kv := range fresh {
		if name, _, ok := c.k.parseGateway(string(kv.Key)); ok {
			c.named[name] = true
		}
	}
	c.namedRev, c.namedKeys = tx.Header.Revision, count
	return true
}
