// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	pb "github.com/edgeplane/edgeplane/api/edgeplane/v1"
	"github.com/edgeplane/edgeplane/internal/api"
	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestFleetTLSAndCredentials runs a fleet over client TLS (mutual) with
// etcd auth on, each gateway with a user of its own: a gateway commits
// its objects and writes its status, and cannot write another gateway's
// status or the objects.
func TestFleetTLSAndCredentials(t *testing.T) {
	dir := t.TempDir()
	// One self-signed certificate is the CA, the server's and the
	// client's.
	cert := testutil.NewTestCert(t)

	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "etcd")
	cu := url.URL{Scheme: "https", Host: "127.0.0.1:" + port}
	pu := url.URL{Scheme: "http", Host: "127.0.0.1:" + peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: cert.CertFile, KeyFile: cert.KeyFile, TrustedCAFile: cert.CertFile, ClientCertAuth: true}
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()

	pw := func(user, pass string) string {
		p := filepath.Join(dir, user+".pw")
		if err := os.WriteFile(p, []byte(pass+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	opts := func(user, pass string) ClientOptions {
		o := ClientOptions{Endpoints: []string{cu.String()}, CA: cert.CertFile, Cert: cert.CertFile, Key: cert.KeyFile}
		if user != "" {
			o.User, o.PasswordFile = user, pw(user, pass)
		}
		return o
	}
	// Without the CA the server is not trusted.
	if cli, err := NewClient(ClientOptions{Endpoints: []string{cu.String()}}); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = cli.Get(ctx, "x")
		cancel()
		cli.Close()
		if err == nil {
			t.Fatalf("a client without the CA read from etcd")
		}
	}

	admin, err := NewClient(opts("", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	k := newKeys(DefaultPrefix)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The README's setup: root, a controller user, one user per gateway.
	must(admin.UserAdd(ctx, "root", "rootpw"))
	must(admin.UserGrantRole(ctx, "root", "root"))
	must(admin.RoleAdd(ctx, "edgeplane-controller"))
	must(admin.RoleGrantPermission(ctx, "edgeplane-controller", k.base, clientv3.GetPrefixRangeEnd(k.base), clientv3.PermissionType(clientv3.PermReadWrite)))
	must(admin.UserAdd(ctx, "controller", "ctlpw"))
	must(admin.UserGrantRole(ctx, "controller", "edgeplane-controller"))
	for _, gw := range []string{"gw1", "gw2"} {
		role := "gw-" + gw
		must(admin.RoleAdd(ctx, role))
		must(admin.RoleGrantPermission(ctx, role, k.base, clientv3.GetPrefixRangeEnd(k.base), clientv3.PermissionType(clientv3.PermRead)))
		must(admin.RoleGrantPermission(ctx, role, k.gateway(gw), clientv3.GetPrefixRangeEnd(k.gateway(gw)), clientv3.PermissionType(clientv3.PermReadWrite)))
		must(admin.UserAdd(ctx, role, gw+"pw"))
		must(admin.UserGrantRole(ctx, role, role))
	}
	must(admin.AuthEnable(ctx))

	ctlCli, err := NewClient(opts("controller", "ctlpw"))
	if err != nil {
		t.Fatal(err)
	}
	defer ctlCli.Close()
	ctl, err := NewController(ctx, ctlCli, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	gwCli, err := NewClient(opts("gw-gw1", "gw1pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer gwCli.Close()
	gw := NewNoDataplane()
	m := NewMember(gwCli, gw, MemberOptions{Name: "gw1", Labels: map[string]string{"site": "a"}, TTL: 2 * time.Second})
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { m.Run(mctx); close(done) }()
	defer func() { stop(); <-done }()

	r, err := api.NewServer(ctl).Apply(ctx, &pb.ApplyRequest{Operations: []*pb.Operation{farOp("create", 1, "drop")}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, ok := m.Status()
		if ok && uint64(st.Committed) >= r.GetRevision() && len(gw.Config().FARs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gw1 over TLS with its own user did not commit revision %d: %+v (connected %v)", r.GetRevision(), st, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
	gws, err := ctl.Gateways(nil)
	if err != nil || len(gws) != 1 || !gws[0].Reachable {
		t.Fatalf("controller lists %v (%v), want gw1 reachable", gws, err)
	}
	// gw1's user may not write gw2's status, nor the objects.
	for _, key := range []string{k.status("gw2"), k.object("all", "far", config.IDKey(7)), k.revision()} {
		_, err := gwCli.Put(ctx, key, "{}")
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("gw1's user wrote %s: %v, want permission denied", key, err)
		}
	}
}
