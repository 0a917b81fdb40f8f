// SPDX-License-Identifier: Apache-2.0

// Package helm_test renders the edgeplane Helm chart as `helm template`
// does and decodes every manifest strictly into the Kubernetes API types,
// so that a misspelled or misplaced field fails here instead of being
// dropped, with a warning at most, by the API server.
package helm_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gopkg.in/yaml.v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	kyaml "sigs.k8s.io/yaml"

	"github.com/edgeplane/edgeplane/internal/config/yamlcfg"
	"github.com/edgeplane/edgeplane/internal/fleet"
)

const (
	chartDir    = "edgeplane"
	releaseName = "edge"
	namespace   = "edgeplane-system"
)

// kubeVersion replaces helm's default capabilities' Kubernetes version
// (1.20, older than Chart.yaml's kubeVersion admits) with the oldest the
// chart admits. The manifests are decoded into k8s.io/api's newer types,
// so a field that 1.30 lacks would not show here.
var kubeVersion = chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}

// kinds maps every apiVersion and kind the chart may render to its Go
// type; a manifest of any other kind fails the test, so a new template
// brings its type here and is decoded like the rest.
var kinds = map[string]func() metav1.Object{
	"v1/ConfigMap":       func() metav1.Object { return &corev1.ConfigMap{} },
	"v1/Secret":          func() metav1.Object { return &corev1.Secret{} },
	"v1/Service":         func() metav1.Object { return &corev1.Service{} },
	"v1/ServiceAccount":  func() metav1.Object { return &corev1.ServiceAccount{} },
	"apps/v1/DaemonSet":  func() metav1.Object { return &appsv1.DaemonSet{} },
	"apps/v1/Deployment": func() metav1.Object { return &appsv1.Deployment{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() metav1.Object { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() metav1.Object { return &rbacv1.ClusterRoleBinding{} },
	"networking.k8s.io/v1/NetworkPolicy":              func() metav1.Object { return &networkingv1.NetworkPolicy{} },
}

// clusterScoped are the kinds that take no namespace.
var clusterScoped = map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true}

// object is one decoded manifest.
type object struct {
	source string // template file and document number, for messages
	kind   string
	obj    metav1.Object
}

func (o object) String() string { return fmt.Sprintf("%s %s (%s)", o.kind, o.obj.GetName(), o.source) }

// rendered is one release's manifests.
type rendered struct {
	objects []object
	notes   string
}

// decode turns one YAML document into its API type the way the API
// server's strict field validation does: duplicate keys, unknown fields
// and fields whose case differs from the type's JSON tag are errors. It
// returns a nil object for a document with no content (only comments, as
// a template whose condition is false leaves).
func decode(doc string) (string, metav1.Object, error) {
	j, err := kyaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return "", nil, fmt.Errorf("yaml: %w", err)
	}
	if s := strings.TrimSpace(string(j)); s == "null" || s == "{}" {
		return "", nil, nil
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return "", nil, fmt.Errorf("type: %w", err)
	}
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return tm.Kind, nil, fmt.Errorf("no Go type for apiVersion %q kind %q: add it to kinds", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return tm.Kind, nil, fmt.Errorf("decode %s: %w", tm.Kind, err)
	}
	if len(strict) > 0 {
		return tm.Kind, nil, fmt.Errorf("decode %s: %w", tm.Kind, errors.Join(strict...))
	}
	return tm.Kind, obj, nil
}

// loadChart loads the chart from its directory, as `helm template DIR`
// does (.helmignore applies).
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return chrt
}

// renderFiles renders the chart with values (YAML, as a -f file) into its
// template files, as `helm template` does, except that the engine is
// strict: a reference to a value that values.yaml lacks is an error
// instead of an empty string.
func renderFiles(t *testing.T, values string) map[string]string {
	t.Helper()
	chrt := loadChart(t)
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kubeVersion
	if !chartutil.IsCompatibleRange(chrt.Metadata.KubeVersion, caps.KubeVersion.String()) {
		t.Fatalf("chart's kubeVersion %q excludes %s", chrt.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(chrt, vals, opts, caps)
	if err != nil {
		t.Fatalf("render values: %v", err)
	}
	files, err := engine.Engine{Strict: true}.Render(chrt, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return files
}

// render renders the chart and decodes every manifest, failing the test
// on any document that does not decode.
func render(t *testing.T, values string) rendered {
	t.Helper()
	files := renderFiles(t, values)
	var r rendered
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if filepath.Base(name) == "NOTES.txt" {
			r.notes = files[name]
			continue
		}
		for i, line := range strings.Split(files[name], "\n") {
			if strings.TrimRight(line, " \t") != line {
				t.Errorf("%s:%d: trailing whitespace (a template's indentation is off): %q", name, i+1, line)
			}
		}
		docs := releaseutil.SplitManifests(files[name])
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for i, k := range keys {
			src := fmt.Sprintf("%s#%d", name, i)
			kind, obj, err := decode(docs[k])
			if err != nil {
				t.Errorf("%s: %v\n%s", src, err, docs[k])
				continue
			}
			if obj == nil {
				continue
			}
			r.objects = append(r.objects, object{source: src, kind: kind, obj: obj})
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return r
}

// only returns the single object of type T, failing when there is not
// exactly one.
func only[T metav1.Object](t *testing.T, r rendered) T {
	t.Helper()
	found := all[T](r)
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

// all returns the objects of type T.
func all[T metav1.Object](r rendered) []T {
	var found []T
	for _, o := range r.objects {
		if v, ok := o.obj.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

// flag returns the value of the flag called name in args ("--f v" or
// "--f=v") and whether it is there; it fails the test on a flag given
// twice, which pflag would take silently as the last one.
func flag(t *testing.T, args []string, name string) (string, bool) {
	t.Helper()
	var vals []string
	for i, a := range args {
		if a == name && i+1 < len(args) {
			vals = append(vals, args[i+1])
		} else if v, ok := strings.CutPrefix(a, name+"="); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) > 1 {
		t.Fatalf("%s given %d times in %q", name, len(vals), args)
	}
	if len(vals) == 0 {
		return "", false
	}
	return vals[0], true
}

// wantFlag checks that flag name is in args with the value want.
func wantFlag(t *testing.T, what string, args []string, name, want string) {
	t.Helper()
	got, ok := flag(t, args, name)
	if !ok {
		t.Errorf("%s: no %s in %q", what, name, args)
	} else if got != want {
		t.Errorf("%s: %s %q, want %q", what, name, got, want)
	}
}

// container returns the container called name of spec.
func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

// cmdline is what the container runs: its command, then its args.
func cmdline(c corev1.Container) []string { return slices.Concat(c.Command, c.Args) }

// hostMount returns the host path mounted at mountPath in container c of
// spec ("" when it is not a hostPath volume) and the mount.
func hostMount(t *testing.T, spec corev1.PodSpec, c corev1.Container, mountPath string) (string, corev1.VolumeMount) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath != mountPath {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name {
				if v.HostPath == nil {
					return "", m
				}
				return v.HostPath.Path, m
			}
		}
		t.Fatalf("mount %s names no volume %q", mountPath, m.Name)
	}
	t.Fatalf("container %s mounts nothing at %s", c.Name, mountPath)
	return "", corev1.VolumeMount{}
}

// strOrUnset prints an optional string field.
func strOrUnset[T ~string](p *T) string {
	if p == nil {
		return "unset"
	}
	return string(*p)
}

var (
	etcdTLSFlags  = []string{"--etcd-ca", "--etcd-cert", "--etcd-key"}
	etcdAuthFlags = []string{"--etcd-user", "--etcd-password-file"}
)

// valueSet is one set of values and what the release must then be.
type valueSet struct {
	name   string
	values string

	endpoints          []string
	privileged         bool
	tls, auth          bool
	tlsSecret          string // named in values; "" for the chart's hook's
	controller         bool
	controllerReplicas int32
	nodeSelector       map[string]string
	hostPassword       string // agent's password file on the host
	kubeletPodList     bool
	tokensSecret       string // named in values; "" for the chart's own
	metricsAddr        string
	labelsFromNodes    bool
	ctlPasswordSecret  string // named in values; "" for the chart's hook's
	// The peers the NetworkPolicies admit to the controller's API, the
	// agents' metrics and etcd (nil: no policy for etcd).
	apiPeers, metricsPeers, etcdPeers []string
}

var valueSets = []valueSet{{
	name:               "defaults",
	endpoints:          []string{"https://etcd:2379"},
	tls:                true,
	auth:               true,
	hostPassword:       "/etc/edgeplane/etcd-password",
	controller:         true,
	controllerReplicas: 1,
	nodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
	metricsAddr:        "127.0.0.1:9090",
	labelsFromNodes:    true,
	apiPeers:           []string{},
	metricsPeers:       []string{},
}, {
	name: "tls-auth-privileged",
	values: `
etcd:
  endpoints: [https://etcd-0.etcd:2379, https://etcd-1.etcd:2379, https://etcd-2.etcd:2379]
  tls: {enabled: true, secretName: etcd-client}
  auth:
    enabled: true
    agent: {passwordSecret: gw-etcd-password, passwordHostPath: ""}
    controller: {passwordSecret: controller-etcd-password}
  podSelector: {app.kubernetes.io/name: etcd}
networkPolicy:
  nodeCIDRs: [10.0.0.0/24]
  apiClients: [{podSelector: {matchLabels: {app: ci}}}]
agent:
  privileged: true
  nodeSelector: {edgeplane.io/gateway: "true"}
controller:
  replicas: 2
  apiTokensSecret: my-tokens
  gatewayLabels: {gw-1: {site: factory}}
`,
	endpoints:          []string{"https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379", "https://etcd-2.etcd:2379"},
	privileged:         true,
	tls:                true,
	tlsSecret:          "etcd-client",
	auth:               true,
	controller:         true,
	controllerReplicas: 2,
	nodeSelector:       map[string]string{"kubernetes.io/os": "linux", "edgeplane.io/gateway": "true"},
	tokensSecret:       "my-tokens",
	metricsAddr:        "127.0.0.1:9090",
	labelsFromNodes:    true,
	ctlPasswordSecret:  "controller-etcd-password",
	apiPeers:           []string{"pods app=ci to grpc,http"},
	metricsPeers:       []string{},
	etcdPeers: []string{
		"cidr 10.0.0.0/24 to 2379",
		"pods app.kubernetes.io/component=controller,app.kubernetes.io/instance=edge,app.kubernetes.io/name=edgeplane to 2379",
		"pods app.kubernetes.io/name=etcd to 2379,2380",
	},
}, {
	name: "insecure-explicit",
	values: `
etcd:
  endpoints: [http://etcd.storage.svc:2379]
  insecure: true
  tls: {enabled: false}
  auth:
    enabled: true
    agent: {passwordHostPath: /etc/edgeplane-host/etcd-password}
    controller: {passwordSecret: controller-etcd-password}
agent:
  privileged: false
  extraCapabilities: [SYS_PTRACE]
  podList: https://127.0.0.1:10250/pods
  metricsAddress: 0.0.0.0
  extraArgs: [--debug]
networkPolicy:
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
controller:
  labelsFromNodes: false
`,
	endpoints:          []string{"http://etcd.storage.svc:2379"},
	auth:               true,
	controller:         true,
	controllerReplicas: 1,
	nodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
	hostPassword:       "/etc/edgeplane-host/etcd-password",
	kubeletPodList:     true,
	metricsAddr:        "0.0.0.0:9090",
	ctlPasswordSecret:  "controller-etcd-password",
	apiPeers:           []string{},
	metricsPeers:       []string{"other to 9090"},
}, {
	name: "agents-only",
	values: `
controller: {enabled: false}
agent:
  config: |
    # a standalone gateway's seed
    interfaces:
      - {name: eth1, role: wan}
`,
	endpoints:    []string{"https://etcd:2379"},
	tls:          true,
	auth:         true,
	hostPassword: "/etc/edgeplane/etcd-password",
	nodeSelector: map[string]string{"kubernetes.io/os": "linux"},
	metricsAddr:  "127.0.0.1:9090",
	metricsPeers: []string{},
}}

func TestChart(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			r := render(t, vs.values)
			checkCommon(t, r)
			checkAgent(t, r, vs)
			checkController(t, r, vs)
			checkRBAC(t, r, vs)
			checkNetworkPolicies(t, r, vs)
			checkEtcdSecrets(t, r, vs)
		})
	}
}

// checkCommon checks what holds for every object: the standard labels,
// the release's namespace, and references between objects that the API
// server only checks when the pod starts (or never).
func checkCommon(t *testing.T, r rendered) {
	wantLabels := []string{
		"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
		"app.kubernetes.io/component", "app.kubernetes.io/managed-by",
	}
	names := map[string]bool{}
	for _, o := range r.objects {
		l := o.obj.GetLabels()
		for _, k := range wantLabels {
			if l[k] == "" {
				t.Errorf("%s: no label %s", o, k)
			}
		}
		if l["app.kubernetes.io/name"] != "edgeplane" || l["app.kubernetes.io/instance"] != releaseName {
			t.Errorf("%s: labels %v", o, l)
		}
		if ns := o.obj.GetNamespace(); clusterScoped[o.kind] != (ns == "") || (ns != "" && ns != namespace) {
			t.Errorf("%s: namespace %q", o, ns)
		}
		id := o.kind + "/" + o.obj.GetName()
		if names[id] {
			t.Errorf("%s: rendered twice", o)
		}
		names[id] = true
	}
	if strings.TrimSpace(r.notes) == "" {
		t.Error("NOTES.txt rendered empty")
	}
	if strings.Contains(r.notes, "<no value>") {
		t.Errorf("NOTES.txt: <no value>:\n%s", r.notes)
	}

	type workload struct {
		what     string
		selector *metav1.LabelSelector
		tpl      corev1.PodTemplateSpec
	}
	var wls []workload
	for _, ds := range all[*appsv1.DaemonSet](r) {
		wls = append(wls, workload{"DaemonSet " + ds.Name, ds.Spec.Selector, ds.Spec.Template})
	}
	for _, d := range all[*appsv1.Deployment](r) {
		wls = append(wls, workload{"Deployment " + d.Name, d.Spec.Selector, d.Spec.Template})
	}
	for _, w := range wls {
		if w.tpl.Labels["app.kubernetes.io/name"] != "edgeplane" {
			t.Errorf("%s: pod labels %v", w.what, w.tpl.Labels)
		}
		if w.selector == nil || len(w.selector.MatchLabels) == 0 {
			t.Errorf("%s: no selector", w.what)
			continue
		}
		for k, v := range w.selector.MatchLabels {
			if w.tpl.Labels[k] != v {
				t.Errorf("%s: selector %s=%s does not match the pod labels %v", w.what, k, v, w.tpl.Labels)
			}
		}
		if _, ok := w.selector.MatchLabels["app.kubernetes.io/version"]; ok {
			t.Errorf("%s: the selector holds the version, which would make an upgrade fail (selectors are immutable)", w.what)
		}
		sa := w.tpl.Spec.ServiceAccountName
		if !names["ServiceAccount/"+sa] {
			t.Errorf("%s: service account %q is not rendered", w.what, sa)
		}
		checkPod(t, w.what, w.tpl.Spec)
	}

	for _, svc := range all[*corev1.Service](r) {
		var match []workload
		for _, w := range wls {
			ok := len(svc.Spec.Selector) > 0
			for k, v := range svc.Spec.Selector {
				ok = ok && w.tpl.Labels[k] == v
			}
			if ok {
				match = append(match, w)
			}
		}
		if len(match) != 1 {
			t.Errorf("Service %s: selector %v matches %d workloads, want 1", svc.Name, svc.Spec.Selector, len(match))
			continue
		}
		for _, p := range svc.Spec.Ports {
			found := false
			for _, c := range match[0].tpl.Spec.Containers {
				for _, cp := range c.Ports {
					found = found || cp.Name == p.TargetPort.StrVal || cp.ContainerPort == p.TargetPort.IntVal
				}
			}
			if !found {
				t.Errorf("Service %s: port %s targets %s, which no container of %s has", svc.Name, p.Name, p.TargetPort.String(), match[0].what)
			}
		}
	}

	for _, b := range all[*rbacv1.ClusterRoleBinding](r) {
		if b.RoleRef.Kind != "ClusterRole" || !names["ClusterRole/"+b.RoleRef.Name] {
			t.Errorf("ClusterRoleBinding %s: role %s %q is not rendered", b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		for _, s := range b.Subjects {
			if s.Kind != "ServiceAccount" || s.Namespace != namespace || !names["ServiceAccount/"+s.Name] {
				t.Errorf("ClusterRoleBinding %s: subject %+v is not a rendered ServiceAccount", b.Name, s)
			}
		}
	}
}

// varRef is a $(VAR) reference, which the kubelet expands in command and
// args from the container's env, and leaves as it is when VAR is not
// defined there.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkPod checks that every mount names a volume of the pod, every
// volume is mounted, and every $(VAR) a command line uses is defined.
func checkPod(t *testing.T, what string, spec corev1.PodSpec) {
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = false
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("%s: container %s mounts volume %q, which the pod lacks", what, c.Name, m.Name)
			}
			vols[m.Name] = true
		}
		env := map[string]bool{}
		for _, e := range c.Env {
			env[e.Name] = true
		}
		for _, a := range cmdline(c) {
			for _, m := range varRef.FindAllStringSubmatch(a, -1) {
				if !env[m[1]] {
					t.Errorf("%s: container %s uses $(%s) with no such env", what, c.Name, m[1])
				}
			}
		}
	}
	for v, used := range vols {
		if !used {
			t.Errorf("%s: volume %q is not mounted", what, v)
		}
	}
}

// checkAgent checks the agents' DaemonSet, seed config and RBAC against
// what vs asks for.
func checkAgent(t *testing.T, r rendered, vs valueSet) {
	ds := only[*appsv1.DaemonSet](t, r)
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("agent: not on the host network")
	}
	if spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("agent: dnsPolicy %q, want %q (else the etcd Service's name does not resolve)", spec.DNSPolicy, corev1.DNSClusterFirstWithHostNet)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		ds.Spec.UpdateStrategy.RollingUpdate == nil || ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("agent: update strategy %+v, want RollingUpdate maxUnavailable 1", ds.Spec.UpdateStrategy)
	}
	if !maps.Equal(spec.NodeSelector, vs.nodeSelector) {
		t.Errorf("agent: nodeSelector %v, want %v", spec.NodeSelector, vs.nodeSelector)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("agent: tolerations %+v, want one that tolerates every taint", spec.Tolerations)
	}

	c := container(t, spec, "agent")
	args := cmdline(c)
	if len(args) < 2 || args[0] != "edgeplane" || args[1] != "agent" {
		t.Errorf("agent: command %q", args)
	}
	wantFlag(t, "agent", args, "--etcd", strings.Join(vs.endpoints, ","))
	wantFlag(t, "agent", args, "--gateway", "$(NODE_NAME)")
	for _, f := range []string{"--labels", "--labels-from-node"} {
		if _, ok := flag(t, args, f); ok {
			t.Errorf("agent: %s given: a gateway's labels are the controller's to give", f)
		}
	}
	wantFlag(t, "agent", args, "--pin-dir", "/sys/fs/bpf/edgeplane")
	wantFlag(t, "agent", args, "--config", "/var/lib/edgeplane/config.yaml")
	wantFlag(t, "agent", args, "--metrics-addr", vs.metricsAddr)
	wantFlag(t, "agent", args, "--grpc-addr", "")
	wantFlag(t, "agent", args, "--rest-addr", "")
	checkEtcdFlags(t, "agent", args, vs)
	if vs.auth {
		wantFlag(t, "agent", args, "--etcd-user", "gw-$(NODE_NAME)")
	}

	nodeName := false
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" {
			nodeName = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
		}
	}
	if !nodeName {
		t.Errorf("agent: NODE_NAME does not come from spec.nodeName: %+v", c.Env)
	}

	for _, p := range []string{"/sys/fs/bpf", "/run/edgeplane", "/sys/fs/cgroup", "/var/lib/edgeplane"} {
		host, m := hostMount(t, spec, c, p)
		if host != p {
			t.Errorf("agent: %s mounts host path %q, want %q", p, host, p)
		}
		if m.ReadOnly {
			t.Errorf("agent: %s is read-only", p)
		}
	}
	if vs.hostPassword != "" {
		if host, _ := hostMount(t, spec, c, "/etc/edgeplane/etcd-auth/password"); host != vs.hostPassword {
			t.Errorf("agent: password from host path %q, want %q", host, vs.hostPassword)
		}
	}
	_, bpffs := hostMount(t, spec, c, "/sys/fs/bpf")
	wantProp := corev1.MountPropagationHostToContainer
	if vs.privileged {
		wantProp = corev1.MountPropagationBidirectional
	}
	if got := bpffs.MountPropagation; got == nil || *got != wantProp {
		t.Errorf("agent: /sys/fs/bpf propagation %s, want %s", strOrUnset(got), wantProp)
	}
	if p := c.Ports; len(p) != 1 || p[0].Name != "metrics" || p[0].ContainerPort != 9090 {
		t.Errorf("agent: ports %+v, want metrics 9090", p)
	}
	for what, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/metrics" || pr.HTTPGet.Port.StrVal != "metrics" || pr.HTTPGet.Host != "127.0.0.1" {
			t.Errorf("agent: %s probe %+v, want GET /metrics on the metrics port at 127.0.0.1 (the node's loopback)", what, pr)
		}
	}
	if a := spec.AutomountServiceAccountToken; a == nil || *a != vs.kubeletPodList {
		t.Errorf("agent: automountServiceAccountToken %v, want %v (a token only to read the kubelet's pod list)", a, vs.kubeletPodList)
	}

	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil {
		t.Fatal("agent: securityContext.privileged unset")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("agent: not run as root, for which alone the added capabilities are effective")
	}
	if *sc.Privileged != vs.privileged {
		t.Errorf("agent: privileged %v, want %v", *sc.Privileged, vs.privileged)
	}
	if !vs.privileged {
		if sc.Capabilities == nil {
			t.Fatal("agent: not privileged and no capabilities")
		}
		for _, cap := range []corev1.Capability{"BPF", "NET_ADMIN", "PERFMON", "SYS_ADMIN", "SYS_RESOURCE", "SYS_NICE", "IPC_LOCK"} {
			if !slices.Contains(sc.Capabilities.Add, cap) {
				t.Errorf("agent: capability %s not added: %v", cap, sc.Capabilities.Add)
			}
		}
		if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("agent: drops %v, want ALL", sc.Capabilities.Drop)
		}
	}

	// The seed config is the agent's own format: the agent's parser,
	// which refuses unknown fields and wrong types, reads it. A seed with
	// no interfaces is what a fleet agent starts from (its objects come
	// from etcd), so that one complaint of the standalone validation is
	// let through.
	var seed *corev1.ConfigMap
	for _, cm := range all[*corev1.ConfigMap](r) {
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				seed = cm
			}
		}
	}
	if seed == nil {
		t.Fatal("agent: no seed ConfigMap mounted")
	}
	_, err := yamlcfg.Parse([]byte(seed.Data["config.yaml"]))
	if err != nil {
		t.Errorf("agent: seed config: %v\n%s", err, seed.Data["config.yaml"])
	}

}

// checkController checks the controller's Deployment, Service and
// tokens Secret, or that there are none when it is disabled.
func checkController(t *testing.T, r rendered, vs valueSet) {
	deps := all[*appsv1.Deployment](r)
	if !vs.controller {
		if len(deps) != 0 || len(all[*corev1.Service](r)) != 0 || secret(r, "edge-edgeplane-api-tokens") != nil || secret(r, "edge-edgeplane-etcd-controller") != nil {
			t.Errorf("controller disabled, but rendered: %v", r.objects)
		}
		return
	}
	d := only[*appsv1.Deployment](t, r)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != vs.controllerReplicas {
		t.Errorf("controller: replicas %v, want %d", d.Spec.Replicas, vs.controllerReplicas)
	}
	spec := d.Spec.Template.Spec
	c := container(t, spec, "controller")
	args := cmdline(c)
	if len(args) < 2 || args[0] != "edgeplane" || args[1] != "controller" {
		t.Errorf("controller: command %q", args)
	}
	wantFlag(t, "controller", args, "--etcd", strings.Join(vs.endpoints, ","))
	wantFlag(t, "controller", args, "--grpc-addr", ":50051")
	wantFlag(t, "controller", args, "--rest-addr", ":8080")
	wantFlag(t, "controller", args, "--api-tokens", "/etc/edgeplane/api/tokens")
	checkEtcdFlags(t, "controller", args, vs)
	if vs.auth {
		wantFlag(t, "controller", args, "--etcd-user", "edgeplane-controller")
	}
	if vs.labelsFromNodes {
		wantFlag(t, "controller", args, "--labels-from-nodes", "in-cluster")
		wantFlag(t, "controller", args, "--node-label-prefix", "node-restriction.kubernetes.io/")
	} else if _, ok := flag(t, args, "--labels-from-nodes"); ok {
		t.Errorf("controller: --labels-from-nodes with controller.labelsFromNodes false")
	}
	if a := spec.AutomountServiceAccountToken; a == nil || *a != vs.labelsFromNodes {
		t.Errorf("controller: automountServiceAccountToken %v, want %v (a token only to list nodes)", a, vs.labelsFromNodes)
	}

	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("controller: pod securityContext %+v, want runAsNonRoot with a non-zero user", psc)
	}
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("controller: container securityContext %+v", sc)
	}

	// The tokens Secret: the chart's own unless values name one.
	var tokens string
	for _, v := range spec.Volumes {
		if v.Secret != nil && slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Key == "tokens" }) {
			tokens = v.Secret.SecretName
		}
	}
	own := secret(r, "edge-edgeplane-api-tokens")
	if vs.tokensSecret != "" {
		if tokens != vs.tokensSecret || own != nil {
			t.Errorf("controller: tokens from %q, the chart's own Secret rendered %v; want %s and none", tokens, own != nil, vs.tokensSecret)
		}
	} else if own == nil || own.Name != tokens || len(own.Data["tokens"]) < 32 {
		t.Errorf("controller: tokens from %q, want the chart's own Secret with a token", tokens)
	}

	svc := only[*corev1.Service](t, r)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("controller Service: type %s", svc.Spec.Type)
	}
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["grpc"] != 50051 || ports["http"] != 8080 || len(ports) != 2 {
		t.Errorf("controller Service: ports %v, want grpc 50051 and http 8080", ports)
	}
}

// secret returns the Secret called name (nil: none).
func secret(r rendered, name string) *corev1.Secret {
	for _, s := range all[*corev1.Secret](r) {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// checkRBAC checks that the ClusterRoles grant exactly what the code
// calls: list on nodes to the controller when it takes labels from the
// nodes, get on nodes/proxy to the agents when they read the kubelet's
// pod list, nothing else.
func checkRBAC(t *testing.T, r rendered, vs valueSet) {
	want := map[string][]rbacv1.PolicyRule{}
	if vs.controller && vs.labelsFromNodes {
		want["edge-edgeplane-controller"] = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}}
	}
	if vs.kubeletPodList {
		want["edge-edgeplane-agent"] = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get"}}}
	}
	got := map[string][]rbacv1.PolicyRule{}
	for _, role := range all[*rbacv1.ClusterRole](r) {
		got[role.Name] = role.Rules
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ClusterRoles %v, want exactly %v", got, want)
	}
	bound := map[string]string{}
	for _, b := range all[*rbacv1.ClusterRoleBinding](r) {
		for _, s := range b.Subjects {
			bound[b.RoleRef.Name] = s.Name
		}
	}
	for name := range want {
		// Each role is its component's, named as its ServiceAccount.
		if bound[name] != name {
			t.Errorf("ClusterRole %s bound to %q, want ServiceAccount %s", name, bound[name], name)
		}
	}
	if len(bound) != len(want) {
		t.Errorf("ClusterRoleBindings %v, want one per ClusterRole %v", bound, want)
	}
}

// checkNetworkPolicies checks that the controller's API and the agents'
// metrics admit only the peers values name (none by default), and etcd,
// when the chart knows its pods, only the controller, the agents' nodes
// and etcd's own members.
func checkNetworkPolicies(t *testing.T, r rendered, vs valueSet) {
	pols := map[string]*networkingv1.NetworkPolicy{}
	for _, p := range all[*networkingv1.NetworkPolicy](r) {
		pols[p.Name] = p
		if !slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("NetworkPolicy %s: policy types %v, want Ingress", p.Name, p.Spec.PolicyTypes)
		}
	}
	peers := func(p *networkingv1.NetworkPolicy) []string {
		var out []string
		for _, in := range p.Spec.Ingress {
			var ports []string
			for _, port := range in.Ports {
				ports = append(ports, port.Port.String())
			}
			for _, f := range in.From {
				switch {
				case f.IPBlock != nil:
					out = append(out, "cidr "+f.IPBlock.CIDR+" to "+strings.Join(ports, ","))
				case f.PodSelector != nil && f.NamespaceSelector == nil:
					out = append(out, "pods "+labelsString(f.PodSelector.MatchLabels)+" to "+strings.Join(ports, ","))
				default:
					out = append(out, "other to "+strings.Join(ports, ","))
				}
			}
			if len(in.From) == 0 {
				out = append(out, "ANYONE to "+strings.Join(ports, ","))
			}
		}
		slices.Sort(out)
		return out
	}
	for _, p := range []struct {
		name      string
		selects   map[string]string
		rendered  bool
		wantPeers []string
	}{
		{"edge-edgeplane-controller", map[string]string{"app.kubernetes.io/component": "controller", "app.kubernetes.io/instance": releaseName}, vs.controller, vs.apiPeers},
		{"edge-edgeplane-agent", map[string]string{"app.kubernetes.io/component": "agent", "app.kubernetes.io/instance": releaseName}, true, vs.metricsPeers},
		{"edge-edgeplane-etcd", map[string]string{"app.kubernetes.io/name": "etcd"}, vs.etcdPeers != nil, vs.etcdPeers},
	} {
		pol := pols[p.name]
		if p.rendered != (pol != nil) {
			t.Errorf("NetworkPolicy %s rendered %v, want %v", p.name, pol != nil, p.rendered)
			continue
		}
		if pol == nil {
			continue
		}
		for k, v := range p.selects {
			if pol.Spec.PodSelector.MatchLabels[k] != v {
				t.Errorf("NetworkPolicy %s selects %v, want %s=%s", p.name, pol.Spec.PodSelector.MatchLabels, k, v)
			}
		}
		if got := peers(pol); fmt.Sprint(got) != fmt.Sprint(p.wantPeers) {
			t.Errorf("NetworkPolicy %s admits %v, want %v", p.name, got, p.wantPeers)
		}
	}
	if len(pols) != btoi(vs.controller)+1+btoi(vs.etcdPeers != nil) {
		t.Errorf("NetworkPolicies %v", slices.Sorted(maps.Keys(pols)))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func labelsString(l map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		out = append(out, k+"="+l[k])
	}
	return strings.Join(out, ",")
}

// checkEtcdSecrets checks the etcd certificates and the controller's
// password a hook of the chart creates when values name none: made
// before the pods (pre-install and pre-upgrade hooks), the server
// certificate valid for the endpoints' hosts and both certificates
// signed by the CA both Secrets carry.
func checkEtcdSecrets(t *testing.T, r rendered, vs valueSet) {
	client, server := secret(r, "edge-edgeplane-etcd-client"), secret(r, "edge-edgeplane-etcd-server")
	if made := vs.tls && vs.tlsSecret == ""; made != (client != nil) || made != (server != nil) {
		t.Fatalf("etcd certificate Secrets rendered: client %v, server %v; want %v", client != nil, server != nil, made)
	}
	pw := secret(r, "edge-edgeplane-etcd-controller")
	if made := vs.controller && vs.auth && vs.ctlPasswordSecret == ""; made != (pw != nil) {
		t.Fatalf("controller password Secret rendered %v, want %v", pw != nil, made)
	}
	if pw != nil {
		checkHook(t, pw)
		if len(pw.Data["password"]) < 24 {
			t.Errorf("controller password %q: too short", pw.Data["password"])
		}
	}
	if client == nil {
		return
	}
	for _, s := range []*corev1.Secret{client, server} {
		checkHook(t, s)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(client.Data["ca.crt"]) || string(client.Data["ca.crt"]) != string(server.Data["ca.crt"]) {
		t.Fatalf("etcd Secrets: ca.crt unreadable or not the same in both")
	}
	for _, tc := range []struct {
		s     *corev1.Secret
		usage x509.ExtKeyUsage
		host  string
	}{{client, x509.ExtKeyUsageClientAuth, ""}, {server, x509.ExtKeyUsageServerAuth, "etcd"}} {
		kp, err := tls.X509KeyPair(tc.s.Data["tls.crt"], tc.s.Data["tls.key"])
		if err != nil {
			t.Fatalf("%s: %v", tc.s.Name, err)
		}
		leaf, err := x509.ParseCertificate(kp.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("%s: %v", tc.s.Name, err)
		}
	}
}

// checkHook checks that o is created by a hook before install and
// upgrade, replacing the one before.
func checkHook(t *testing.T, o metav1.Object) {
	t.Helper()
	a := o.GetAnnotations()
	if a["helm.sh/hook"] != "pre-install,pre-upgrade" || a["helm.sh/hook-delete-policy"] != "before-hook-creation" {
		t.Errorf("%s: annotations %v, want a pre-install,pre-upgrade hook", o.GetName(), a)
	}
}

// checkEtcdFlags checks that the etcd TLS and auth flags are given
// exactly when values configure them.
func checkEtcdFlags(t *testing.T, what string, args []string, vs valueSet) {
	t.Helper()
	for _, f := range etcdTLSFlags {
		if _, ok := flag(t, args, f); ok != vs.tls {
			t.Errorf("%s: %s given %v, want %v", what, f, ok, vs.tls)
		}
	}
	if vs.tls {
		wantFlag(t, what, args, "--etcd-ca", "/etc/edgeplane/etcd/ca.crt")
		wantFlag(t, what, args, "--etcd-cert", "/etc/edgeplane/etcd/tls.crt")
		wantFlag(t, what, args, "--etcd-key", "/etc/edgeplane/etcd/tls.key")
	}
	for _, f := range etcdAuthFlags {
		if _, ok := flag(t, args, f); ok != vs.auth {
			t.Errorf("%s: %s given %v, want %v", what, f, ok, vs.auth)
		}
	}
	if vs.auth {
		wantFlag(t, what, args, "--etcd-password-file", "/etc/edgeplane/etcd-auth/password")
	}
}

// TestStrictDecode proves that the decoder the chart is checked with
// refuses what the API server's strict field validation refuses, so that
// TestChart can fail.
func TestStrictDecode(t *testing.T) {
	files := renderFiles(t, "")
	ds := files[chartDir+"/templates/daemonset.yaml"]
	if _, obj, err := decode(ds); err != nil || obj == nil {
		t.Fatalf("the rendered DaemonSet does not decode: %v", err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"misspelled field", "hostNetwork: true", "hostNetwrok: true"},
		{"field in the wrong case", "hostNetwork: true", "HostNetwork: true"},
		{"field at the wrong level", "      hostNetwork: true", "      hostNetwork: true\n      replicas: 2"},
		{"duplicate field", "hostNetwork: true", "hostNetwork: true\n      hostNetwork: false"},
		{"wrong type", "hostNetwork: true", "hostNetwork: yes-please"},
		{"unknown kind", "kind: DaemonSet", "kind: DaemonSett"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(ds, tc.from) {
				t.Fatalf("the rendered DaemonSet has no %q", tc.from)
			}
			bad := strings.Replace(ds, tc.from, tc.to, 1)
			if _, _, err := decode(bad); err == nil {
				t.Errorf("decoded with %q for %q", tc.to, tc.from)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// TestRenderFails checks that values that cannot work fail the render
// with a message, instead of rendering pods that never start.
func TestRenderFails(t *testing.T) {
	chrt := loadChart(t)
	for _, tc := range []struct{ name, values, want string }{
		{"no endpoints", "etcd: {endpoints: []}", "etcd.endpoints"},
		// Refused in clear unless insecure is said out loud.
		{"tls off", "etcd: {tls: {enabled: false}}", "etcd.insecure=true"},
		{"http endpoint", "etcd: {endpoints: [http://etcd:2379]}", "etcd.insecure=true"},
		{"http endpoint beside https", "etcd: {endpoints: [https://etcd-0:2379, http://etcd-1:2379]}", "etcd.endpoints: http://etcd-1:2379"},
		{"tls off with insecure false", "etcd: {insecure: false, tls: {enabled: false}, endpoints: [http://etcd:2379]}", "etcd.tls.enabled"},
		{"auth without agent password", "etcd: {auth: {enabled: true, agent: {passwordHostPath: \"\"}}}", "etcd.auth.agent"},
		{"etcd known without node addresses", "etcd: {podSelector: {app: etcd}}", "networkPolicy.nodeCIDRs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(tc.values))
			if err != nil {
				t.Fatal(err)
			}
			rv, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = engine.Engine{Strict: true}.Render(chrt, rv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestLint runs helm lint's checks (Chart.yaml, values, templates) on
// each value set; warnings fail too.
func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(vs.values))
			if err != nil {
				t.Fatal(err)
			}
			kv := kubeVersion
			res := lint.AllWithKubeVersion(chartDir, vals, namespace, &kv)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
		})
	}
}

// TestValuesDocumented checks that every key of values.yaml has a comment
// above it and that README.md's table lists every value, so that
// neither falls behind the other.
func TestValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		// Flow mappings ({type: Unconfined}) and lists are values, described
		// by their key's comment.
		if n.Kind != yaml.MappingNode || n.Style&yaml.FlowStyle != 0 {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := strings.TrimPrefix(path+"."+k.Value, ".")
			if strings.TrimSpace(k.HeadComment) == "" {
				t.Errorf("values.yaml:%d: %s has no comment", k.Line, p)
			}
			if v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0 && !isFreeMap(p) {
				walk(v, p)
				continue
			}
			if !strings.Contains(string(readme), "`"+p+"`") {
				t.Errorf("README.md: the values table lacks `%s`", p)
			}
		}
	}
	walk(doc.Content[0], "")
}

// isFreeMap reports whether the value at path is a map of the user's
// keys (labels, the update strategy), documented as one value.
func isFreeMap(path string) bool {
	return strings.HasSuffix(path, ".nodeSelector") || strings.HasSuffix(path, ".updateStrategy")
}

// TestREADMEGrants checks that the etcdctl grants README.md gives the
// controller's and each gateway's role are exactly the permissions the
// code needs (fleet.ControllerPermissions, fleet.GatewayPermissions):
// a gateway's user set up by the README can neither do less than its
// member needs nor more.
func TestREADMEGrants(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	grants := func(role string, perms []fleet.Permission) []string {
		var out []string
		for _, p := range perms {
			typ := "read"
			if p.Write {
				typ = "readwrite"
			}
			if p.RangeEnd == clientv3.GetPrefixRangeEnd(p.Key) {
				out = append(out, fmt.Sprintf("$E role grant-permission %s --prefix=true %s %s", role, typ, p.Key))
			} else {
				out = append(out, fmt.Sprintf("$E role grant-permission %s %s %s %s", role, typ, p.Key, p.RangeEnd))
			}
		}
		return out
	}
	want := append(grants("edgeplane-controller", fleet.ControllerPermissions("")), grants("gw-$NODE", fleet.GatewayPermissions("", "$NODE"))...)
	var got []string
	for _, line := range strings.Split(string(readme), "\n") {
		if line = strings.TrimSpace(line); strings.Contains(line, "role grant-permission") {
			got = append(got, line)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("README.md grants:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
