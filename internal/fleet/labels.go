// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/yaml"
)

// A gateway's labels are the operator's: a controller writes them to
// v1/labels/NAME from what it is given (SetLabels, or a LabelSource), and
// a member takes its own from there. What a gateway writes (its status)
// is never read for targeting, so a compromised gateway can neither join
// a selector nor change what another gateway gets.

// maxTxnOps bounds the operations of one label transaction, below etcd's
// default --max-txn-ops (128), with room for the revision key.
const maxTxnOps = 100

// SetLabels makes the gateways' labels those of want, a gateway absent
// from it losing its labels (and the objects its selectors gave it). Each
// change moves the revision key on with it, so members follow it as they
// follow an Apply, and a gateway not yet following is in drift. It
// returns the revision that holds the change (the current one when
// nothing changes).
func (c *Controller) SetLabels(ctx context.Context, want map[string]map[string]string) (uint64, error) {
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if name == "" {
			return 0, fmt.Errorf("labels: a gateway with no name")
		}
		for k := range want[name] {
			if k == "" {
				return 0, fmt.Errorf("labels of %s: an empty key", name)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rev, err := c.setLabelsOnce(ctx, want)
		if !errors.Is(err, errConflict) || time.Now().After(deadline) {
			return rev, err
		}
		time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
	}
}

func (c *Controller) setLabelsOnce(ctx context.Context, want map[string]map[string]string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.refresh(ctx); err != nil {
		return 0, err
	}
	type change struct {
		name   string
		labels map[string]string // nil: delete
	}
	var changes []change
	for _, name := range slices.Sorted(maps.Keys(want)) {
		l := want[name]
		if l == nil {
			l = map[string]string{}
		}
		if old, ok := c.labels[name]; !ok || !maps.Equal(old, l) {
			changes = append(changes, change{name, l})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.labels)) {
		if _, ok := want[name]; !ok {
			changes = append(changes, change{name, nil})
		}
	}
	for chunk := range slices.Chunk(changes, maxTxnOps) {
		var ops []clientv3.Op
		for _, ch := range chunk {
			if ch.labels == nil {
				ops = append(ops, clientv3.OpDelete(c.k.label(ch.name)))
				continue
			}
			b, _ := json.Marshal(ch.labels)
			ops = append(ops, clientv3.OpPut(c.k.label(ch.name), string(b)))
		}
		next := c.next()
		ops = append(ops, clientv3.OpPut(c.k.revision(), next.encode()))
		tx, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(c.k.revision()), "=", max(c.seen, 0))).Then(ops...).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd: %w", err)
		}
		if !tx.Succeeded {
			c.seen = -1
			return 0, errConflict
		}
		c.wrote(tx.Header.Revision, next)
		for _, ch := range chunk {
			if ch.labels == nil {
				delete(c.labels, ch.name)
				delete(c.labelRev, ch.name)
				continue
			}
			c.labels[ch.name], c.labelRev[ch.name] = ch.labels, tx.Header.Revision
			c.log.Info("fleet: gateway labels set", "gateway", ch.name, "labels", ch.labels)
		}
	}
	return uint64(max(c.seen, 0)), nil
}

// LabelSource is where a controller takes the gateways' labels from:
// places only the operator writes.
type LabelSource struct {
	// File maps gateway names to their labels (YAML or JSON, NAME:
	// {KEY: VALUE}), read again at each sync.
	File string
	// Nodes, when set, returns the Kubernetes nodes' labels by node
	// name (InClusterNodes, NodesFile): gateway NAME gets those of node
	// NAME whose keys begin with NodePrefix, the prefix removed. File's
	// labels win over a node's.
	Nodes      func(context.Context) (map[string]map[string]string, error)
	NodePrefix string
}

// readLabelsFile reads a LabelSource's file.
func readLabelsFile(path string) (map[string]map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	if err := yaml.UnmarshalStrict(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// SyncLabels sets the labels src gives to the gateways it names (the
// file's) and to every gateway known in etcd that is a node; the others
// lose theirs. On an error nothing changes.
func (c *Controller) SyncLabels(ctx context.Context, src LabelSource) (uint64, error) {
	file := map[string]map[string]string{}
	if src.File != "" {
		var err error
		if file, err = readLabelsFile(src.File); err != nil {
			return 0, fmt.Errorf("gateway labels: %w", err)
		}
	}
	want := map[string]map[string]string{}
	if src.Nodes != nil {
		nodes, err := src.Nodes(ctx)
		if err != nil {
			return 0, fmt.Errorf("node labels: %w", err)
		}
		c.mu.Lock()
		err = c.refresh(ctx)
		if err == nil {
			err = c.readGateways(ctx)
		}
		names := slices.Collect(maps.Keys(c.gateways))
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
		for _, name := range names {
			nl, ok := nodes[name]
			if !ok {
				continue
			}
			l := map[string]string{}
			for k, v := range nl {
				if rest, ok := strings.CutPrefix(k, src.NodePrefix); ok && rest != "" {
					l[rest] = v
				}
			}
			want[name] = l
		}
	}
	for name, l := range file {
		if want[name] == nil {
			want[name] = map[string]string{}
		}
		maps.Copy(want[name], l)
	}
	return c.SetLabels(ctx, want)
}

// RunLabels syncs the labels src gives every interval, whenever reload
// fires (SIGHUP), and, with nodes, as soon as a new gateway takes its
// lease, until ctx ends. Errors are logged: the labels stay as they are.
func (c *Controller) RunLabels(ctx context.Context, src LabelSource, every time.Duration, reload <-chan struct{}) {
	joined := make(chan struct{}, 1)
	if src.Nodes != nil {
		go func() {
			for ctx.Err() == nil {
				wc := c.cli.Watch(clientv3.WithRequireLeader(ctx), c.k.gateways(), clientv3.WithPrefix(), clientv3.WithFilterDelete())
				for resp := range wc {
					for _, ev := range resp.Events {
						if _, leaf, ok := c.k.parseGateway(string(ev.Kv.Key)); ok && leaf == "alive" && ev.Type == mvccpb.PUT && ev.IsCreate() {
							select {
							case joined <- struct{}{}:
							default:
							}
						}
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-reload:
		case <-joined:
		}
		if _, err := c.SyncLabels(ctx, src); err != nil && ctx.Err() == nil {
			c.log.Error("fleet: gateway labels not synced; they stay as they are", "error", err)
		}
	}
}
