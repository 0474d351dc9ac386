package kubernetes

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
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

// TestIdentityInPod: in a pod the default Identity starts with the
// ServiceAccount's user name and a "/", as deploy/lease-policy.yaml
// requires; outside one it is the host name and a suffix.
func TestIdentityInPod(t *testing.T) {
	is := is.New(t)
	old := inClusterTokenFile
	t.Cleanup(func() { inClusterTokenFile = old })
	inClusterTokenFile = filepath.Join(t.TempDir(), "token")
	is.True(!strings.Contains(Config{}.withDefaults().Identity, "/")) // no token: not in a pod

	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"system:serviceaccount:ml:goray-driver-a"}`))
	is.NoErr(os.WriteFile(inClusterTokenFile, []byte("e30."+payload+".sig\n"), 0o600))
	id := Config{}.withDefaults().Identity
	is.True(strings.HasPrefix(id, "system:serviceaccount:ml:goray-driver-a/"))
	is.Equal(Config{Identity: "mine"}.withDefaults().Identity, "mine") // a set Identity is kept

	// The name after the "/" is the pod's (goray status finds the driver's
	// pod by it): $POD_NAME, else $HOSTNAME, not the host name of the
	// system, which differs from the pod's name when spec.hostname is set
	// (an Indexed Job's pods).
	t.Setenv("HOSTNAME", "train-0")
	t.Setenv("POD_NAME", "train-0-x7k2q")
	is.True(podOfIdentity(t, Config{}.withDefaults().Identity) == "train-0-x7k2q")
	t.Setenv("POD_NAME", "")
	is.True(podOfIdentity(t, Config{}.withDefaults().Identity) == "train-0")
}

// podOfIdentity is the name in an identity "<user>/<name>-<suffix>".
func podOfIdentity(t *testing.T, id string) string {
	t.Helper()
	_, name, ok := strings.Cut(id, "/")
	i := strings.LastIndexByte(name, '-')
	if !ok || i < 0 {
		t.Fatalf("identity %q is not <user>/<name>-<suffix>", id)
	}
	return name[:i]
}
