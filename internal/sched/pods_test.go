// SPDX-License-Identifier: Apache-2.0

package sched_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgeplane/edgeplane/internal/config"
	"github.com/edgeplane/edgeplane/internal/sched"
	"github.com/edgeplane/edgeplane/internal/testutil"
)

// TestPodUID: the pod UID in a cgroup path under both of the kubelet's
// cgroup drivers, only where the kubelet makes pods (the kubepods
// hierarchy at the root); none outside a pod.
func TestPodUID(t *testing.T) {
	const uid = "0b7e6a3c-1f2d-4c5e-9a8b-7c6d5e4f3a2b"
	const other = "11111111-2222-4333-8444-555555555555"
	for path, want := range map[string]string{
		"/kubepods/burstable/pod" + uid + "/3f9a0c": uid,
		"/kubepods/pod" + uid:                       uid,
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-3f.scope": uid,
		"/system.slice/open5gs-upfd.service":                        "",
		"/kubepods/burstable/podnot-a-uid/x":                        "",
		"/user.slice/pod" + uid + "x/ctr":                           "",
		"/kubepods/pod" + strings.ReplaceAll(uid, "-", "") + "/ctr": strings.ReplaceAll(uid, "-", ""), // a static pod's hash
		// Only where the kubelet makes pods, at the root: not in a
		// user's delegated group, nor a group a pod made inside its own.
		"/user.slice/user-1000.slice/user@1000.service/pod" + uid:                                                         "",
		"/user.slice/user-1000.slice/user@1000.service/kubepods/burstable/pod" + uid + "/c":                               "",
		"/edgeplane-test/kubepods/pod" + uid:                                                                              "",
		"/kubepods/burstable/pod" + uid + "/ctr/pod" + other:                                                              uid,
		"/kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/x":                                   uid,
		"/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice": "",
		"/kubepods/guaranteed/pod" + uid:                                                                                  "",
	} {
		if got := sched.PodUID(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// kubepodsGroup makes a container's group of pod uid where the kubelet
// (cgroupfs driver) makes it in the cgroup v2 hierarchy at unified:
// /kubepods/burstable/pod<uid>/ctr. It is removed with the test, with
// the kubepods groups above it once empty, after the processes in it
// are moved back to the root.
func kubepodsGroup(t *testing.T, unified, uid string) string {
	t.Helper()
	group := filepath.Join(unified, "kubepods", "burstable", "pod"+uid, "ctr")
	if err := os.MkdirAll(group, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b, _ := os.ReadFile(filepath.Join(group, "cgroup.procs"))
		for _, pid := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(unified, "cgroup.procs"), []byte(pid), 0)
		}
		for d := group; d != unified; d = filepath.Dir(d) {
			_ = os.Remove(d) // fails while not empty: another test's
		}
	})
	return group
}

// podList is a v1 PodList of one pod with labels.
func podList(uid string, labels string) string {
	return `{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"gnb-0","namespace":"ran","uid":"` + uid +
		`","labels":{` + labels + `}},"spec":{"containers":[{"name":"gnb"}]}}]}`
}

// TestPodLabels: a strategy with pod_labels takes a process in the pod
// whose labels match — its pod the UID in its cgroup path (a real cgroup
// v2 group named as the kubelet names them), its labels from the
// kubelet's pod list (a file, and an HTTP endpoint as the kubelet's
// /pods) — and not one whose labels differ; with no pod list the
// strategy says why it matches nothing.
func TestPodLabels(t *testing.T) {
	testutil.RequireRoot(t)
	const uid = "9d1c2b3a-4e5f-4a6b-8c7d-0e1f2a3b4c5d"
	unified := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(unified, "cgroup.procs")); err != nil {
		unified = "/sys/fs/cgroup" // a cgroup v2 host
	}
	group := kubepodsGroup(t, unified, uid)
	tag := "edgeplane-pod-" + testutil.UniqueName("t")
	cmd := exec.Command("bash", "-c", "exec -a "+tag+" sleep 60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(filepath.Join(group, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(t.TempDir(), "pods.json")
	if err := os.WriteFile(list, []byte(podList(uid, `"app":"gnb","tier":"ran"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	s := strategy(t, `{id: 5, selectors: {pod_labels: {app: gnb}}, priority: true, policy: fifo, rt_priority: 5}`)
	policy := func() uint32 {
		a, err := unix.SchedGetAttr(pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Policy
	}

	e := sched.New("/proc", "")
	if _, _, err := e.Sync([]config.Strategy{s}); err != nil {
		t.Fatal(err)
	}
	if policy() != unix.SCHED_NORMAL || !strings.Contains(e.Errors[5], "no pod list") {
		t.Errorf("no pod list: policy %d, error %q; want nothing taken and why", policy(), e.Errors[5])
	}

	pods, err := sched.NewPods(list, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	e.SetPods(pods)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 || policy() != unix.SCHED_FIFO {
		t.Fatalf("pod labels app=gnb: %d taken, %v, policy %d (%v)", taken, err, policy(), e.Errors)
	}
	// The pod relabelled: no longer taken.
	if err := os.WriteFile(list, []byte(podList(uid, `"app":"upf"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if _, given, err := e.Sync([]config.Strategy{s}); err != nil || given != 1 || policy() != unix.SCHED_NORMAL {
		t.Errorf("pod relabelled app=upf: %d given back, %v, policy %d", given, err, policy())
	}

	// The kubelet's endpoint.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/pods" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(podList(uid, `"app":"gnb"`)))
	}))
	defer srv.Close()
	if pods, err = sched.NewPods(srv.URL+"/pods", time.Second); err != nil {
		t.Fatal(err)
	}
	e.SetPods(pods)
	if taken, _, err := e.Sync([]config.Strategy{s}); err != nil || taken != 1 || policy() != unix.SCHED_FIFO {
		t.Errorf("pod labels from the kubelet's /pods: %d taken, %v, policy %d (%v)", taken, err, policy(), e.Errors)
	}
	if err := e.RevertAll(); err != nil {
		t.Fatal(err)
	}
}
