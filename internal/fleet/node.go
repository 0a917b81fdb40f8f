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
	"net/url"
	"os"
	"strings"
	"time"
)

// serviceAccount is where a pod's service account credentials are
// mounted (the agent's own, under the chart's DaemonSet).
const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// NodeLabels returns the labels of a Kubernetes node, the gateway's
// labels under the chart: node is the node's name, read from the API
// server with the pod's service account (in-cluster), or a file holding
// a v1 Node (a path with a slash).
func NodeLabels(ctx context.Context, node string) (map[string]string, error) {
	if strings.Contains(node, "/") {
		b, err := os.ReadFile(node)
		if err != nil {
			return nil, err
		}
		return nodeLabels(b)
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("node %s: not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST)", node)
	}
	token, err := os.ReadFile(serviceAccount + "/token")
	if err != nil {
		return nil, fmt.Errorf("node %s: service account token: %w", node, err)
	}
	ca, err := os.ReadFile(serviceAccount + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("node %s: service account CA: %w", node, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s/ca.crt: no certificate", serviceAccount)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	u := "https://" + net.JoinHostPort(host, port) + "/api/v1/nodes/" + url.PathEscape(node)
	return getNodeLabels(ctx, c, u, strings.TrimSpace(string(token)))
}

// getNodeLabels GETs a v1 Node from u with a bearer token.
func getNodeLabels(ctx context.Context, c *http.Client, u, token string) (map[string]string, error) {
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
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", u, resp.Status, b)
	}
	return nodeLabels(b)
}

func nodeLabels(b []byte) (map[string]string, error) {
	var n struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if n.Kind != "Node" {
		return nil, fmt.Errorf("node: got a %q, want a Node", n.Kind)
	}
	return n.Metadata.Labels, nil
}
