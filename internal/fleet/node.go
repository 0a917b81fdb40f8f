// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// serviceAccount is where a pod's service account credentials are
// mounted (the controller's, under the chart's Deployment).
const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// DefaultNodePrefix is the node labels a controller takes by default:
// the NodeRestriction admission plugin forbids a kubelet to set labels
// under it on its own Node, so a compromised node cannot choose them.
const DefaultNodePrefix = "node-restriction.kubernetes.io/"

// InClusterNodes lists the Kubernetes nodes with the pod's service
// account (list on nodes) and returns their labels by node name.
func InClusterNodes(ctx context.Context) (map[string]map[string]string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST)")
	}
	token, err := os.ReadFile(serviceAccount + "/token")
	if err != nil {
		return nil, fmt.Errorf("service account token: %w", err)
	}
	ca, err := os.ReadFile(serviceAccount + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("service account CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s/ca.crt: no certificate", serviceAccount)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return getNodes(ctx, c, "https://"+net.JoinHostPort(host, port)+"/api/v1/nodes", strings.TrimSpace(string(token)))
}

// NodesFile returns a function that reads the labels of the nodes of a
// v1 NodeList (YAML or JSON, as `kubectl get nodes -o yaml` prints it)
// from path at each call.
func NodesFile(path string) func(context.Context) (map[string]map[string]string, error) {
	return func(context.Context) (map[string]map[string]string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		return nodeLabels(b)
	}
}

// getNodes GETs a v1 NodeList from u with a bearer token.
func getNodes(ctx context.Context, c *http.Client, u, token string) (map[string]map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", u, resp.Status, b)
	}
	return nodeLabels(b)
}

// nodeLabels reads a v1 NodeList (or a List of Nodes).
func nodeLabels(b []byte) (map[string]map[string]string, error) {
	type meta struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	var l struct {
		Kind  string `json:"kind"`
		Items []struct {
			Kind     string `json:"kind"`
			Metadata meta   `json:"metadata"`
		} `json:"items"`
	}
	j, err := yaml.YAMLToJSON(b)
	if err == nil {
		err = json.Unmarshal(j, &l)
	}
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	if l.Kind != "NodeList" && l.Kind != "List" {
		return nil, fmt.Errorf("nodes: got a %q, want a NodeList", l.Kind)
	}
	out := map[string]map[string]string{}
	for _, it := range l.Items {
		if it.Kind != "" && it.Kind != "Node" || it.Metadata.Name == "" {
			return nil, fmt.Errorf("nodes: an item that is not a named Node (%q %q)", it.Kind, it.Metadata.Name)
		}
		out[it.Metadata.Name] = it.Metadata.Labels
	}
	return out, nil
}
