//go:build e2e

package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/goray-dev/goray/backend/kubernetes/deploy"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// TestMain serves this test binary as the worker image of the pods
// (ray.Main) and as the harness's test program.
func TestMain(m *testing.M) {
	if os.Getenv("K8STEST_HTTP_SERVER") != "" {
		runHTTPServer() // serve.Process's external server in the e2e tests
		return
	}
	ray.Main()
	if kc := os.Getenv(envDriver); kc != "" {
		runDriverProcess(kc) // a driver that TestE2EDeadDriverSlice kills
	}
	if os.Getenv(envDriverJob) == "1" {
		runDriverJob() // the driver pod of TestE2EDriverJob
	}
	kubeharness.RunTestProgram()
	os.Exit(m.Run())
}

// workerImage is the image the harness maps to this test binary.
const workerImage = "goray.test/kubernetes-worker"

// startHarness starts a control plane whose workerImage runs this test
// binary.
func startHarness(t *testing.T) *kubeharness.ControlPlane {
	t.Helper()
	exe, err := osExecutable()
	if err != nil {
		t.Fatal(err)
	}
	return kubeharness.Start(t, &kubeharness.Options{Images: map[string]string{workerImage: exe}})
}

// driverConfig applies deploy/rbac.yaml with the admin client and returns
// a REST config that authenticates as the ServiceAccount goray-driver
// (a token from the TokenRequest API): the e2e tests run with the least
// privilege the docs ask users to grant, not as an administrator.
func driverConfig(t testing.TB, cp *kubeharness.ControlPlane) *rest.Config {
	t.Helper()
	ctx := t.Context()
	applyManifests(t, cp, deploy.RBAC)
	tok, err := cp.Client().CoreV1().ServiceAccounts("default").CreateToken(ctx, "goray-driver",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("mint a token of ServiceAccount goray-driver: %v", err)
	}
	admin := cp.Config()
	rc := rest.AnonymousClientConfig(admin)
	rc.BearerToken = tok.Status.Token
	rc.QPS, rc.Burst = admin.QPS, admin.Burst
	return rc
}

// applyManifests creates the objects of a deploy/ manifest in namespace
// default (cluster-scoped kinds cluster-wide) with the admin client.
func applyManifests(t testing.TB, cp *kubeharness.ControlPlane, manifest []byte) {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		gvk := u.GroupVersionKind()
		gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resourceOf(gvk.Kind)}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		switch gvk.Kind {
		case "ClusterRole", "ClusterRoleBinding", "PriorityClass":
		default:
			ri = dyn.Resource(gvr).Namespace("default")
		}
		if _, err := ri.Create(ctx, &u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("apply %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
}

// driverKubeconfig writes a kubeconfig for the identity of driverConfig,
// for a driver that runs as its own process.
func driverKubeconfig(t testing.TB, cp *kubeharness.ControlPlane) string {
	t.Helper()
	return kubeconfigOf(t, driverConfig(t, cp))
}

// kubeconfigOf writes a kubeconfig for the token of rc.
func kubeconfigOf(t testing.TB, rc *rest.Config) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["harness"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos["goray-driver"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	cfg.Contexts["goray-driver"] = &clientcmdapi.Context{Cluster: "harness", AuthInfo: "goray-driver", Namespace: "default"}
	cfg.CurrentContext = "goray-driver"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func resourceOf(kind string) string {
	return map[string]string{
		"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
		"Role": "roles", "RoleBinding": "rolebindings", "PriorityClass": "priorityclasses",
	}[kind]
}

var osExecutable = os.Executable

var _ = context.Background

// slicesCluster starts a control plane whose pods are network-isolated
// (a network namespace each, cluster DNS from CoreDNS; the test skips where
// namespaces cannot be made) with one v6e node pool of topology per name in
// pools (4 chips per host), and a driver on it with the RBAC identity of
// deploy/, worker pods of this test binary, DriverHost the address at which
// pods reach the test process, and cfg's other settings as edit leaves
// them; the cluster is closed at cleanup.
func slicesCluster(t testing.TB, topology string, pools []string, edit func(*Config)) (*kubeharness.ControlPlane, *ray.Cluster) {
	t.Helper()
	exe, err := osExecutable()
	if err != nil {
		t.Fatal(err)
	}
	cp := kubeharness.Start(t, &kubeharness.Options{
		Images:  map[string]string{workerImage: exe},
		Network: kubeharness.NetworkIsolated,
	})
	ctx := t.Context()
	for _, pool := range pools {
		if _, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: pool, Generation: "v6e", Topology: topology, ChipsPerHost: 4}); err != nil {
			t.Fatal(err)
		}
	}
	client, err := k8s.NewForConfig(driverConfig(t, cp))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Client = client
	cfg.Worker.Image = workerImage
	cfg.Worker.StartTimeout = time.Minute
	cfg.DriverHost = cp.HostIP()
	if edit != nil {
		edit(&cfg)
	}
	b, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return cp, c
}

// waitRunning waits, up to a minute, until n tasks run across c's nodes.
func waitRunning(ctx context.Context, c *ray.Cluster, n int) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		snap, err := c.Snapshot(ctx)
		if err != nil {
			return false, err
		}
		running := 0
		for _, nd := range snap.Nodes {
			running += nd.Running
		}
		return running == n, nil
	})
}
