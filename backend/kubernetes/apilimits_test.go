package kubernetes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/matryer/is"
	"k8s.io/client-go/rest"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: "t"}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`

// TestAPILimits: a client the backend builds from a kubeconfig is not
// held to client-go's 5 requests per second, which spaced a 64-host
// reservation's pod creates 200 ms apart; limits a program sets are kept.
func TestAPILimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		cfg   Config
		qps   float32
		burst int
	}{
		{"kubeconfig, defaults", Config{Kubeconfig: path}, DefaultAPIQPS, DefaultAPIBurst},
		{"kubeconfig, API limits", Config{Kubeconfig: path, API: APILimits{QPS: 200, Burst: 400}}, 200, 400},
		{"REST without limits", Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}}, DefaultAPIQPS, DefaultAPIBurst},
		{"REST with its own limits", Config{REST: &rest.Config{Host: "https://127.0.0.1:1", QPS: 1000, Burst: 1000}}, 1000, 1000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			rc, err := tc.cfg.restConfig()
			is.NoErr(err)
			is.Equal(rc.QPS, tc.qps)
			is.Equal(rc.Burst, tc.burst)
		})
	}
	t.Run("REST is not modified", func(t *testing.T) {
		is := is.New(t)
		own := &rest.Config{Host: "https://127.0.0.1:1"}
		_, err := Config{REST: own}.restConfig()
		is.NoErr(err)
		is.Equal(own.QPS, float32(0))
	})
	t.Run("bad limits", func(t *testing.T) {
		is := is.New(t)
		err := Config{Worker: WorkerConfig{Image: "x"}, API: APILimits{QPS: 100, Burst: 10}}.Validate()
		is.True(err != nil)
		is.True(len(err.Error()) > 0)
	})
}
