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

const nodeJSON = `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","labels":{"site":"factory","kubernetes.io/hostname":"n1"}}}`

func TestNodeLabels(t *testing.T) {
	p := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(p, []byte(nodeJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := NodeLabels(context.Background(), p)
	if err != nil || l["site"] != "factory" {
		t.Fatalf("from a file: %v, %v", l, err)
	}
	// The API server's answer, and its refusal.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/api/v1/nodes/n1" {
			http.Error(w, `{"kind":"Status","reason":"Forbidden"}`, http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte(nodeJSON))
	}))
	defer srv.Close()
	l, err = getNodeLabels(context.Background(), srv.Client(), srv.URL+"/api/v1/nodes/n1", "tok")
	if err != nil || l["kubernetes.io/hostname"] != "n1" {
		t.Errorf("from the API server: %v, %v", l, err)
	}
	if _, err := getNodeLabels(context.Background(), srv.Client(), srv.URL+"/api/v1/nodes/n1", "bad"); err == nil {
		t.Errorf("a refused token gave labels")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := NodeLabels(context.Background(), "n1"); err == nil {
		t.Errorf("a node name outside a pod gave labels")
	}
}
