package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goray-dev/goray/backend"
)

// TestForbiddenWhileNotReadyIsUnavailable: a Forbidden answer is
// Unavailable while the API server's /readyz is not "ok" (forbidden too,
// as while a restarted API server loads its RBAC rules, or failing), and
// stays FailedPrecondition from a ready API server.
func TestForbiddenWhileNotReadyIsUnavailable(t *testing.T) {
	forbidden := func(w http.ResponseWriter, what string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
			"message": `forbidden: User "u" cannot ` + what, "reason": "Forbidden", "code": 403})
	}
	for _, tc := range []struct {
		name   string
		readyz func(w http.ResponseWriter)
		want   backend.Code
	}{
		{"ready", func(w http.ResponseWriter) { fmt.Fprint(w, "ok") }, backend.FailedPrecondition},
		{"readyz forbidden", func(w http.ResponseWriter) { forbidden(w, `get path "/readyz"`) }, backend.Unavailable},
		{"not ready", func(w http.ResponseWriter) { http.Error(w, "[-]informer-sync failed", http.StatusInternalServerError) }, backend.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/readyz" {
					tc.readyz(w)
					return
				}
				forbidden(w, `list resource "pods"`)
			}))
			defer srv.Close()
			client, err := k8s.NewForConfig(&rest.Config{Host: srv.URL})
			is.NoErr(err)
			ctx := context.Background()
			_, lerr := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			is.True(lerr != nil)
			err = notReadyIsUnavailable(ctx, client, backend.Wrap(apiCode(lerr), "claim slices", lerr))
			is.Equal(backend.CodeOf(err), tc.want)
			is.True(strings.Contains(err.Error(), `cannot list resource "pods"`)) // the answer is kept
		})
	}
	is.New(t).Equal(notReadyIsUnavailable(context.Background(), nil, nil), nil)
}
