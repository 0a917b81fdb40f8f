// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"encoding/json"
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
	"github.com/edgeplane/edgeplane/internal/devtools/fleetlab"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// authFleet is an etcd over mutual TLS with auth on, set up as the
// README says: root, a controller user, and one user per gateway whose
// role is GatewayPermissions.
type authFleet struct {
	t    *testing.T
	dir  string
	url  string
	cert *testutil.TestCert
	ctl  *Controller
}

func newAuthFleet(t *testing.T, gateways ...string) *authFleet {
	f := &authFleet{t: t, dir: t.TempDir(), cert: testutil.NewTestCert(t)}
	port, err := fleetlab.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := fleetlab.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(f.dir, "etcd")
	cu := url.URL{Scheme: "https", Host: "127.0.0.1:" + port}
	pu := url.URL{Scheme: "http", Host: "127.0.0.1:" + peer}
	f.url = cu.String()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	// One self-signed certificate is the CA, the server's and the
	// client's.
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: f.cert.CertFile, KeyFile: f.cert.KeyFile, TrustedCAFile: f.cert.CertFile, ClientCertAuth: true}
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(f.dir, "etcd.log")}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	<-e.Server.ReadyNotify()

	admin := f.client("", "")
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	grant := func(role string, perms []Permission) {
		for _, p := range perms {
			typ := clientv3.PermRead
			if p.Write {
				typ = clientv3.PermReadWrite
			}
			must(admin.RoleGrantPermission(ctx, role, p.Key, p.RangeEnd, clientv3.PermissionType(typ)))
		}
	}
	must(admin.UserAdd(ctx, "root", "rootpw"))
	must(admin.UserGrantRole(ctx, "root", "root"))
	must(admin.RoleAdd(ctx, "edgeplane-controller"))
	grant("edgeplane-controller", ControllerPermissions(""))
	must(admin.UserAdd(ctx, "controller", "ctlpw"))
	must(admin.UserGrantRole(ctx, "controller", "edgeplane-controller"))
	for _, gw := range gateways {
		role := "gw-" + gw
		must(admin.RoleAdd(ctx, role))
		grant(role, GatewayPermissions("", gw))
		must(admin.UserAdd(ctx, role, gw+"pw"))
		must(admin.UserGrantRole(ctx, role, role))
	}
	must(admin.AuthEnable(ctx))
	if f.ctl, err = NewController(ctx, f.client("controller", "ctlpw"), "", nil); err != nil {
		t.Fatal(err)
	}
	return f
}

// client returns a client of etcd as user (none: the certificate's).
func (f *authFleet) client(user, pass string) *clientv3.Client {
	o := ClientOptions{Endpoints: []string{f.url}, CA: f.cert.CertFile, Cert: f.cert.CertFile, Key: f.cert.KeyFile}
	if user != "" {
		o.User, o.PasswordFile = user, filepath.Join(f.dir, user+".pw")
		if err := os.WriteFile(o.PasswordFile, []byte(pass+"\n"), 0o600); err != nil {
			f.t.Fatal(err)
		}
	}
	cli, err := NewClient(o)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { cli.Close() })
	return cli
}

// member starts gateway name's member as its own etcd user.
func (f *authFleet) member(name string) (*Member, *fleetlab.NoDataplane, *clientv3.Client) {
	cli := f.client("gw-"+name, name+"pw")
	gw := fleetlab.NewNoDataplane()
	m := NewMember(cli, gw, MemberOptions{Name: name, TTL: 2 * time.Second})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	f.t.Cleanup(func() { stop(); <-done })
	return m, gw, cli
}

// apply applies ops to t at the controller, through the API server.
func (f *authFleet) apply(t *pb.Target, ops ...*pb.Operation) (uint64, error) {
	r, err := api.NewServer(f.ctl).Apply(context.Background(), &pb.ApplyRequest{Operations: ops, Target: t})
	return r.GetRevision(), err
}

// waitCommitted waits until m has committed rev.
func waitMember(t *testing.T, name string, m *Member, rev uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, ok := m.Status()
		if ok && uint64(st.Committed) >= rev && st.State == StateConverged {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not commit revision %d: %+v (connected %v)", name, rev, st, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFleetTLSAndCredentials runs a fleet over client TLS (mutual) with
// etcd auth on, each gateway with a user of its own: a gateway commits
// its objects and writes its status, and its user can do nothing else.
func TestFleetTLSAndCredentials(t *testing.T) {
	f := newAuthFleet(t, "gw1", "gw2")
	// Without the CA the server is not trusted.
	if cli, err := NewClient(ClientOptions{Endpoints: []string{f.url}}); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = cli.Get(ctx, "x")
		cancel()
		cli.Close()
		if err == nil {
			t.Fatalf("a client without the CA read from etcd")
		}
	}
	ctx := context.Background()
	if _, err := f.ctl.SetLabels(ctx, map[string]map[string]string{"gw1": {"site": "a"}, "gw2": {"site": "b"}}); err != nil {
		t.Fatal(err)
	}
	m, gw, gwCli := f.member("gw1")
	rev, err := f.apply(&pb.Target{Selector: map[string]string{"site": "a"}}, farOp("create", 1, "drop"))
	if err != nil {
		t.Fatal(err)
	}
	waitMember(t, "gw1", m, rev)
	if len(gw.Config().FARs) != 1 {
		t.Fatalf("gw1 (site=a) over TLS with its own user: FARs %v, want FAR 1", gw.Config().FARs)
	}
	waitListed(t, f.ctl, rev, "gw1")
	if gws, err := f.ctl.Gateways(nil); err != nil || len(gws) != 2 || gws[1].Name != "gw2" {
		t.Fatalf("controller lists %v (%v), want gw1 and gw2 (labelled, never joined)", gws, err)
	}
	checkGatewayUser(t, gwCli, "gw1", "gw2")
}

// checkGatewayUser checks that gateway name's etcd user (cli) may write
// its own status and alive keys and nothing else, and read what its
// member reads but not another gateway's keys.
func checkGatewayUser(t *testing.T, cli *clientv3.Client, name, other string) {
	t.Helper()
	ctx := context.Background()
	k := newKeys(DefaultPrefix)
	if _, err := cli.Put(ctx, k.gateway(name)+"probe", "{}"); err != nil {
		t.Errorf("%s's user may not write under its own %s: %v", name, k.gateway(name), err)
	}
	for _, key := range []string{
		k.status(other), k.alive(other), k.label(name), k.label(other),
		k.object("all", "far", config.IDKey(7)), k.object("gateway="+name, "far", config.IDKey(7)),
		k.revision(), k.layout(), k.scope("all"), k.base + "zzz",
	} {
		_, err := cli.Put(ctx, key, "{}")
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s's user wrote %s: %v, want permission denied", name, key, err)
		}
		_, err = cli.Delete(ctx, key)
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s's user deleted %s: %v, want permission denied", name, key, err)
		}
	}
	for _, key := range []string{k.status(other), k.scope("all")} {
		if _, err := cli.Get(ctx, key); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s's user read %s: %v, want permission denied", name, key, err)
		}
	}
	if _, err := cli.Get(ctx, k.gateways(), clientv3.WithPrefix()); err == nil {
		t.Errorf("%s's user listed every gateway's status", name)
	}
}

// TestFleetGatewayCannotChooseLabels: a compromised gateway, with its
// own etcd user, writes a status claiming site=factory (as a gateway's
// status once carried its labels) and writes whatever else it can. It
// is not given the objects for site=factory, an Apply to site=factory
// that its own objects would clash with is not refused, the factory
// gateways commit it, and the controller lists it with the labels the
// operator gave it. Its status outlives neither its lease nor a write
// outside it.
func TestFleetGatewayCannotChooseLabels(t *testing.T) {
	f := newAuthFleet(t, "gw1", "gw2", "evil")
	ctx := context.Background()
	if _, err := f.ctl.SetLabels(ctx, map[string]map[string]string{
		"gw1": {"site": "factory"}, "gw2": {"site": "factory"}, "evil": {"site": "office"}}); err != nil {
		t.Fatal(err)
	}
	m1, gw1, _ := f.member("gw1")
	m2, gw2, _ := f.member("gw2")
	evil, evilGW, evilCli := f.member("evil")
	// evil's own FAR 1, which a FAR 1 for site=factory would clash with
	// were evil one of them.
	rev, err := f.apply(&pb.Target{Gateway: "evil"}, farOp("create", 1, "pass"))
	if err != nil {
		t.Fatal(err)
	}
	waitMember(t, "evil", evil, rev)

	// The attack: a status claiming site=factory, under its lease as its
	// member writes it, and every key the old layout let it write.
	k := newKeys(DefaultPrefix)
	lease, err := evilCli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	claim, _ := json.Marshal(map[string]any{"labels": map[string]string{"site": "factory"}, "state": "converged", "committed_revision": 1 << 40})
	if _, err := evilCli.Put(ctx, k.status("evil"), string(claim), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	checkGatewayUser(t, evilCli, "evil", "gw1")

	rev, err = f.apply(&pb.Target{Selector: map[string]string{"site": "factory"}}, farOp("create", 1, "drop"), pdrOp(1, 1, "7777"))
	if err != nil {
		t.Fatalf("an Apply to site=factory while evil claims site=factory: %v; want it applied (evil is not of site=factory)", err)
	}
	waitMember(t, "gw1", m1, rev)
	waitMember(t, "gw2", m2, rev)
	for name, gw := range map[string]*fleetlab.NoDataplane{"gw1": gw1, "gw2": gw2} {
		if got := fars(gw); got[1] != "drop" || len(gw.Config().PDRs) != 1 {
			t.Errorf("%s (site=factory): FARs %v, PDRs %d; want FAR 1 drop and PDR 1", name, got, len(gw.Config().PDRs))
		}
	}
	// evil's member follows the revision, and commits its own objects
	// alone.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if st, _ := evil.Status(); st.Committed >= int64(rev) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := fars(evilGW); got[1] != "pass" || len(evilGW.Config().PDRs) != 0 {
		t.Errorf("evil holds FARs %v and %d PDRs; want its own FAR 1 pass and no PDR of site=factory", got, len(evilGW.Config().PDRs))
	}
	gws, err := f.ctl.Gateways(map[string]string{"site": "factory"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range gws {
		names = append(names, g.Name)
	}
	if strings.Join(names, ",") != "gw1,gw2" {
		t.Errorf("site=factory lists %v, want gw1,gw2", names)
	}

	// A status written outside the gateway's live lease (to outlive it)
	// is ignored, and one under its lease goes with it.
	if _, err := evilCli.Put(ctx, k.status("evil"), string(claim)); err != nil {
		t.Fatal(err)
	}
	// (evil's member may write its own status over it meanwhile: that
	// one is under its lease, and is not the claim.)
	gws, _ = f.ctl.Gateways(nil)
	for _, g := range gws {
		if g.Name == "evil" && g.CommittedRevision == 1<<40 {
			t.Errorf("a status written outside evil's lease is taken: %v", g)
		}
	}
	if _, err := evilCli.Put(ctx, k.status("evil"), string(claim), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := evilCli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	r, err := f.client("controller", "ctlpw").Get(ctx, k.status("evil"))
	if err != nil || len(r.Kvs) != 0 && (r.Kvs[0].Lease == int64(lease.ID) || string(r.Kvs[0].Value) == string(claim)) {
		t.Errorf("evil's status outlived its lease: %v (%v)", r.Kvs, err)
	}
}
