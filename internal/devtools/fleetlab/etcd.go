// SPDX-License-Identifier: Apache-2.0

// Package fleetlab is a fleet on one machine, for the lab, the bench and
// the tests: etcd's own server run in-process (Cluster) and fleet members
// without a dataplane (NoDataplane). It is a developer tool: no
// production package imports it, so what a gateway or a controller runs
// does not link an etcd server. It imports no edgeplane package that a
// test of one could not import back.
package fleetlab

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Cluster is an etcd cluster of embedded members (etcd's own server,
// go.etcd.io/etcd/server/v3/embed), peers on loopback: for the lab, the
// tests and the bench on one machine, where a separately installed etcd
// is not at hand. Production fleets run etcd of their own.
type Cluster struct {
	dir     string
	names   []string
	peer    []url.URL
	client  []url.URL
	host    string
	initial string
	members []*embed.Etcd
	// logs are the members' log files, closed with them (etcd's own
	// sinks outlive its Close).
	logs []*os.File
}

// StartCluster starts n members keeping their data under dir, serving
// clients on host (an address to listen on, such as 127.0.0.1 or
// 0.0.0.0 to be reached from network namespaces) at free ports, and
// waits until they have a leader. A port another process took between
// choosing it and listening on it (tests run in parallel on these
// machines) is chosen again, twice at most.
func StartCluster(dir string, n int, host string) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := startCluster(dir, n, host)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
		for i := range n {
			if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("m%d", i))); err != nil {
				return nil, err
			}
		}
	}
}

func startCluster(dir string, n int, host string) (*Cluster, error) {
	c := &Cluster{dir: dir, host: host, members: make([]*embed.Etcd, n), logs: make([]*os.File, n)}
	var initial []string
	for i := range n {
		pp, err := FreePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		cp, err := FreePort(host)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		c.names = append(c.names, name)
		c.peer = append(c.peer, url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", pp)})
		c.client = append(c.client, url.URL{Scheme: "http", Host: net.JoinHostPort(host, cp)})
		initial = append(initial, name+"="+c.peer[i].String())
	}
	c.initial = strings.Join(initial, ",")
	errc := make(chan error, n)
	for i := range n {
		go func() { errc <- c.start(i, "new") }()
	}
	var errs []error
	for range n {
		errs = append(errs, <-errc)
	}
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// FreePort returns a port free on host now.
func FreePort(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, p, err := net.SplitHostPort(ln.Addr().String())
	return p, err
}

// start starts member i and waits until it serves.
func (c *Cluster) start(i int, state string) error {
	cfg := embed.NewConfig()
	cfg.Name = c.names[i]
	cfg.Dir = filepath.Join(c.dir, c.names[i])
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{c.peer[i]}, []url.URL{c.peer[i]}
	cfg.ListenClientUrls = []url.URL{c.client[i]}
	cfg.AdvertiseClientUrls = []url.URL{c.client[i]}
	cfg.InitialCluster, cfg.ClusterState, cfg.InitialClusterToken = c.initial, state, "edgeplane-lab"
	// Loopback peers: a short tick elects a new leader within ~0.5 s of
	// one being killed.
	cfg.TickMs, cfg.ElectionMs = 50, 500
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(c.dir, c.names[i]+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(f), zap.ErrorLevel)))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		f.Close()
		return fmt.Errorf("etcd member %s: %w", c.names[i], err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		f.Close()
		return fmt.Errorf("etcd member %s: %w", c.names[i], err)
	case <-time.After(30 * time.Second):
		e.Close()
		f.Close()
		return fmt.Errorf("etcd member %s: not ready within 30s", c.names[i])
	}
	c.members[i], c.logs[i] = e, f
	return nil
}

// Endpoints returns the members' client URLs, comma-separated, with
// host replaced by at (the address clients reach the members at; "":
// host).
func (c *Cluster) Endpoints(at string) string {
	var out []string
	for _, u := range c.client {
		if at != "" {
			_, p, _ := net.SplitHostPort(u.Host)
			u.Host = net.JoinHostPort(at, p)
		}
		out = append(out, u.String())
	}
	return strings.Join(out, ",")
}

// Stop stops member i, as a crash of it would for the others.
func (c *Cluster) Stop(i int) {
	if e := c.members[i]; e != nil {
		e.Close()
		c.logs[i].Close()
		c.members[i], c.logs[i] = nil, nil
	}
}

// Restart starts the members given again on their data, at once: a
// member serves only once a quorum of them is up.
func (c *Cluster) Restart(ids ...int) error {
	errc := make(chan error, len(ids))
	for _, i := range ids {
		go func() {
			if c.members[i] != nil {
				errc <- nil
				return
			}
			errc <- c.start(i, "existing")
		}()
	}
	var errs []error
	for range ids {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

// Backup stops every member, copies their data to dir and starts them
// again: what a backup of the members' disks holds, to Restore later.
func (c *Cluster) Backup(dir string) error {
	c.Close()
	for _, n := range c.names {
		if err := os.CopyFS(filepath.Join(dir, n), os.DirFS(filepath.Join(c.dir, n))); err != nil {
			return fmt.Errorf("back up etcd member %s: %w", n, err)
		}
	}
	return c.Restart(c.ids()...)
}

// Restore stops every member, replaces their data with a Backup's in
// dir and starts them again: etcd is back at the backup's revision, as
// after restoring a snapshot.
func (c *Cluster) Restore(dir string) error {
	c.Close()
	for _, n := range c.names {
		if err := os.RemoveAll(filepath.Join(c.dir, n)); err != nil {
			return err
		}
		if err := os.CopyFS(filepath.Join(c.dir, n), os.DirFS(filepath.Join(dir, n))); err != nil {
			return fmt.Errorf("restore etcd member %s: %w", n, err)
		}
	}
	return c.Restart(c.ids()...)
}

// Wipe stops every member, removes their data and starts them again as
// a new, empty cluster on the same addresses.
func (c *Cluster) Wipe() error {
	c.Close()
	for _, n := range c.names {
		if err := os.RemoveAll(filepath.Join(c.dir, n)); err != nil {
			return err
		}
	}
	errc := make(chan error, len(c.names))
	for i := range c.names {
		go func() { errc <- c.start(i, "new") }()
	}
	var errs []error
	for range c.names {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

func (c *Cluster) ids() []int {
	ids := make([]int, len(c.names))
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// Close stops every member.
func (c *Cluster) Close() {
	for i := range c.members {
		c.Stop(i)
	}
}
