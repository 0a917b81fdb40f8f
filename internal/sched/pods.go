// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Pods gives the labels of the pods on this node, by pod UID, from the
// kubelet's pod list (its /pods endpoint, as `kubectl get --raw
// /api/v1/nodes/NODE/proxy/pods` shows it) or a file holding one. A
// process's pod is the UID its cgroup is named by where the kubelet
// makes pods (PodUID), under both cgroup drivers.
type Pods struct {
	src    string // an http(s) URL or a file
	client *http.Client
	token  string
	every  time.Duration

	mu     sync.Mutex
	at     time.Time
	labels map[string]map[string]string
	err    error
}

// serviceAccount is where a pod's service account credentials are
// mounted (the agent's own, under a DaemonSet).
var serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// NewPods reads pod labels from src: a URL (such as the kubelet's
// https://127.0.0.1:10250/pods, authenticated by the service account's
// token and CA when mounted) or a file, re-read at most every every.
func NewPods(src string, every time.Duration) (*Pods, error) {
	p := &Pods{src: src, every: every, client: &http.Client{Timeout: 5 * time.Second}}
	if strings.HasPrefix(src, "https://") || strings.HasPrefix(src, "http://") {
		// The service account's token only over TLS: over http:// it
		// would cross the wire in clear, to whoever answers.
		if b, err := os.ReadFile(serviceAccount + "/token"); err == nil && strings.HasPrefix(src, "https://") {
			p.token = strings.TrimSpace(string(b))
		}
		if ca, err := os.ReadFile(serviceAccount + "/ca.crt"); err == nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return nil, fmt.Errorf("%s/ca.crt: no certificate", serviceAccount)
			}
			p.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
		}
	} else if _, err := os.Stat(src); err != nil {
		return nil, fmt.Errorf("pod list %s: %w", src, err)
	}
	return p, nil
}

// podList is the part of a v1 PodList the labels need.
type podList struct {
	Items []struct {
		Metadata struct {
			UID    string            `json:"uid"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	} `json:"items"`
}

// Labels returns the labels of the pod with UID uid (nil: no such pod),
// reading the list again when it is older than the period.
func (p *Pods) Labels(uid string) (map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.labels == nil || time.Since(p.at) >= p.every {
		p.labels, p.err = p.read()
		p.at = time.Now()
	}
	return p.labels[uid], p.err
}

func (p *Pods) read() (map[string]map[string]string, error) {
	var body []byte
	var err error
	if strings.HasPrefix(p.src, "https://") || strings.HasPrefix(p.src, "http://") {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, rerr := http.NewRequestWithContext(ctx, http.MethodGet, p.src, nil)
		if rerr != nil {
			return nil, rerr
		}
		if p.token != "" {
			req.Header.Set("Authorization", "Bearer "+p.token)
		}
		resp, rerr := p.client.Do(req)
		if rerr != nil {
			return nil, fmt.Errorf("pod list: %w", rerr)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("pod list %s: %s", p.src, resp.Status)
		}
		body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	} else {
		body, err = os.ReadFile(p.src)
	}
	if err != nil {
		return nil, fmt.Errorf("pod list: %w", err)
	}
	var l podList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("pod list %s: %w", p.src, err)
	}
	out := map[string]map[string]string{}
	for _, it := range l.Items {
		if it.Metadata.UID != "" {
			out[it.Metadata.UID] = it.Metadata.Labels
		}
	}
	return out, nil
}

// PodUID returns the UID of the pod whose cgroup path cgroup is, or "".
// A pod is found only where the kubelet makes pods, at the cgroup root
// (its default --cgroup-root): /kubepods[/burstable|/besteffort]/pod<uid>
// under the cgroupfs driver, /kubepods.slice[/kubepods-<qos>.slice]/
// kubepods[-<qos>]-pod<uid with _ for ->.slice under systemd's. Those
// are root's to make; a "pod<uid>" segment anywhere else (a user's
// delegated cgroup, a group inside a container) names nothing.
func PodUID(cgroup string) string {
	seg := strings.Split(strings.TrimPrefix(cgroup, "/"), "/")
	if len(seg) < 2 {
		return ""
	}
	switch seg[0] {
	case "kubepods":
		i := 1
		if seg[1] == "burstable" || seg[1] == "besteffort" {
			i = 2
		}
		if i < len(seg) {
			if u, ok := strings.CutPrefix(seg[i], "pod"); ok && podUID.MatchString(u) {
				return u
			}
		}
	case "kubepods.slice":
		i, prefix := 1, "kubepods-pod"
		for _, qos := range []string{"burstable", "besteffort"} {
			if seg[1] == "kubepods-"+qos+".slice" {
				i, prefix = 2, "kubepods-"+qos+"-pod"
			}
		}
		if i < len(seg) {
			u, ok := strings.CutPrefix(seg[i], prefix)
			if u, ok2 := strings.CutSuffix(u, ".slice"); ok && ok2 && podUIDSystemd.MatchString(u) {
				return strings.ReplaceAll(u, "_", "-")
			}
		}
	}
	return ""
}

// A pod's UID: a UUID, or the 32 hex digits of a static pod's hash; in
// a systemd slice name, with its dashes as underscores.
var (
	podUID        = regexp.MustCompile(`^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$`)
	podUIDSystemd = regexp.MustCompile(`^([0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}|[0-9a-f]{32})$`)
)

// errNoPods is a strategy's error when it names pod labels and the
// agent has no pod list.
var errNoPods = errors.New("pod_labels: the agent has no pod list (start it with --pod-list, the kubelet's /pods or a file)")
