package kubernetes

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/backend"
)

// TestRunnerRenewsCertificates: renewal writes a new Secret generation
// (same CA and token, a new certificate, owned by the first Secret) that
// new pods read, and the renewed driver still works with a pod started
// before; two generations are kept, and Close deletes every Secret.
func TestRunnerRenewsCertificates(t *testing.T) {
	is := is.New(t)
	client := newFakeClient()
	k := startKubelet(t, client, "default")
	cfg := testConfig()
	cfg.Worker.Port, cfg.Worker.StartTimeout = int32(k.port), 10*time.Second
	cfg.Worker.CertValidity = time.Hour
	r, err := NewRunner(client, cfg, "c1")
	is.NoErr(err)
	exec, err := r.Start(t.Context(), echoExec{}, func(string, error) {})
	is.NoErr(err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = r.Close()
		}
	})
	ctx := t.Context()
	secrets := func() []string {
		list, err := client.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
		is.NoErr(err)
		var names []string
		for _, s := range list.Items {
			names = append(names, s.Name)
		}
		slices.Sort(names)
		return names
	}
	secretOfPodOn := func(node string) string {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		is.NoErr(err)
		for _, p := range pods.Items {
			if p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0] == node {
				for _, e := range p.Spec.Containers[0].Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						return e.ValueFrom.SecretKeyRef.Name
					}
				}
			}
		}
		t.Fatalf("no pod on %s", node)
		return ""
	}
	run := func(node string) {
		t.Helper()
		_, err := exec.RunTask(ctx, "echo", backend.Value{}, &backend.RuntimeInfo{Node: node})
		is.NoErr(err)
	}
	for _, n := range []string{"cpu-1", "cpu-2", "cpu-3"} {
		is.NoErr(r.NodeUp(ctx, cpuNode(cpuNodeObj(n))))
	}
	run("cpu-1")
	is.Equal(secretOfPodOn("cpu-1"), "goray-c1")

	first, err := client.CoreV1().Secrets("default").Get(ctx, "goray-c1", metav1.GetOptions{})
	is.NoErr(err)
	is.NoErr(r.renewCredentials(ctx))
	renewed, err := client.CoreV1().Secrets("default").Get(ctx, "goray-c1-1", metav1.GetOptions{})
	is.NoErr(err)
	is.True(bytes.Equal(renewed.Data[secretCAKey], first.Data[secretCAKey]))       // same CA
	is.True(bytes.Equal(renewed.Data[secretTokenKey], first.Data[secretTokenKey])) // same token
	is.True(!bytes.Equal(renewed.Data[secretCertKey], first.Data[secretCertKey]))  // a new certificate
	is.Equal(renewed.OwnerReferences[0].UID, first.UID)                            // collected with the first

	run("cpu-2") // a new pod, on the new generation, dialled with the new driver certificate
	is.Equal(secretOfPodOn("cpu-2"), "goray-c1-1")
	run("cpu-1") // the pod from before still serves

	is.NoErr(r.renewCredentials(ctx))
	is.NoErr(r.renewCredentials(ctx))
	is.Equal(secrets(), []string{"goray-c1", "goray-c1-2", "goray-c1-3"}) // the first and the last two
	run("cpu-3")
	is.Equal(secretOfPodOn("cpu-3"), "goray-c1-3")

	is.NoErr(r.Close())
	closed = true
	is.Equal(len(secrets()), 0) // Close deletes every generation
}
