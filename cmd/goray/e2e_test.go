//go:build e2e

package main

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"
	"go.uber.org/goleak"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/backend/kubernetes/deploy"
	"github.com/goray-dev/goray/internal/kubeharness"
)

// The harness keeps a signal handler and a process spawner for the life of
// the test binary.
func init() {
	leakOptions = append(leakOptions,
		goleak.IgnoreTopFunction("github.com/goray-dev/goray/internal/kubeharness.registerLive.func1.1"),
		goleak.IgnoreTopFunction("github.com/goray-dev/goray/internal/kubeharness.spawner"))
}

// TestE2ESlicesKubernetes runs goray slices --kubeconfig against a real
// control plane, as the driver's least-privilege ServiceAccount
// (deploy/rbac.yaml): two v6e 4x4 slices and a v5p 2x2x2, one v6e slice
// held by a driver's Lease.
func TestE2ESlicesKubernetes(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil) // skips unless GORAY_E2E=1
	ctx := t.Context()
	for _, p := range []kubeharness.NodePool{
		{Name: "train-a", Generation: "v6e", Topology: "4x4"},
		{Name: "train-b", Generation: "v6e", Topology: "4x4"},
		{Name: "big", Generation: "v5p", Topology: "2x2x2"},
	} {
		_, err := cp.AddTPUNodePool(ctx, p)
		is.NoErr(err)
	}
	leases, err := kubernetes.NewLeases(cp.Client(), kubernetes.Config{Worker: kubernetes.WorkerConfig{Image: "unused"}, Identity: "e2e-driver", Namespace: "default"})
	is.NoErr(err)
	is.NoErr(leases.Claim(ctx, "42", []string{"train-b"}))
	t.Cleanup(func() { leases.Release(ctx, []string{"train-b"}) })

	kubeconfig := driverKubeconfig(t, cp)
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"slices", "--kubeconfig", kubeconfig, "--namespace", "default"}, &stdout, &stderr)
	is.Equal(stderr.String(), "")
	is.Equal(code, exitOK)
	for _, want := range []string{
		"train-a (v6e 4x4, 4 hosts): free\n  .0 .0 .1 .1\n",
		"train-b (v6e 4x4, 4 hosts): A = e2e-driver (reservation 42)\n  A0 A0 A1 A1\n",
		"big (v5p 2x2x2, 2 hosts): free\n",
		"train-b  e2e-driver  42",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
}

// driverKubeconfig applies deploy/rbac.yaml with the admin client and
// writes a kubeconfig that authenticates as the ServiceAccount
// goray-driver, so the command runs with the least privilege the docs ask
// users to grant.
func driverKubeconfig(t *testing.T, cp *kubeharness.ControlPlane) string {
	t.Helper()
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]string{
		"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
		"Role": "roles", "RoleBinding": "rolebindings",
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(deploy.RBAC), 4096)
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
		gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resources[gvk.Kind]}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if gvk.Kind != "ClusterRole" && gvk.Kind != "ClusterRoleBinding" {
			ri = dyn.Resource(gvr).Namespace("default")
		}
		if _, err := ri.Create(ctx, &u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("apply %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
	tok, err := cp.Client().CoreV1().ServiceAccounts("default").CreateToken(ctx, "goray-driver",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("mint a token of ServiceAccount goray-driver: %v", err)
	}
	admin := cp.Config()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["harness"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	cfg.AuthInfos["goray-driver"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["goray-driver"] = &clientcmdapi.Context{Cluster: "harness", AuthInfo: "goray-driver", Namespace: "default"}
	cfg.CurrentContext = "goray-driver"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
