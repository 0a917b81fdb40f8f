// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

const nodesJSON = `{"kind":"NodeList","apiVersion":"v1","items":[{"metadata":{"name":"n1","labels":{"node-restriction.kubernetes.io/site":"factory","kubernetes.io/hostname":"n1"}}}]}`

func TestNodeLabels(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nodes.json")
	if err := os.WriteFile(p, []byte(nodesJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := NodesFile(p)(context.Background())
	if err != nil || l["n1"]["node-restriction.kubernetes.io/site"] != "factory" {
		t.Fatalf("from a file: %v, %v", l, err)
	}
	// The API server's answer, and its refusal.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/api/v1/nodes" {
			http.Error(w, `{"kind":"Status","reason":"Forbidden"}`, http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte(nodesJSON))
	}))
	defer srv.Close()
	l, err = getNodes(context.Background(), srv.Client(), srv.URL+"/api/v1/nodes", "tok")
	if err != nil || l["n1"]["kubernetes.io/hostname"] != "n1" {
		t.Errorf("from the API server: %v, %v", l, err)
	}
	if _, err := getNodes(context.Background(), srv.Client(), srv.URL+"/api/v1/nodes", "bad"); err == nil {
		t.Errorf("a refused token gave labels")
	}
	if _, err := nodeLabels([]byte(`{"kind":"Node","metadata":{"name":"n1"}}`)); err == nil {
		t.Errorf("a Node, not a NodeList, gave labels")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := InClusterNodes(context.Background()); err == nil {
		t.Errorf("outside a pod, nodes were listed")
	}
}
