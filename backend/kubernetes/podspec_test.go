package kubernetes

import (
	"strings"
	"testing"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"

	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
	"github.com/goray-dev/goray/worker"
)

// The runtime derives every env of a reservation from HostNames: the
// pods' DNS names in the handle's headless Service, slice by slice in
// worker order, from the claim ID.
func TestHostNamesArePodDNSNames(t *testing.T) {
	is := is.New(t)
	r := &Runner{cfg: testConfig().withDefaults(), pt: podTemplate{cfg: testConfig().withDefaults(), service: "goray-c1"}}
	c := cluster.Claim{ID: "pg-7", Slices: []string{"a", "b"}, Hosts: [][]string{{"node-a0", "node-a1"}, {"node-b0", "node-b1"}}}
	is.Equal(r.HostNames(c), [][]string{
		{"r7-s0-w0.goray-c1.default.svc", "r7-s0-w1.goray-c1.default.svc"},
		{"r7-s1-w0.goray-c1.default.svc", "r7-s1-w1.goray-c1.default.svc"},
	})
	is.Equal(podHostnames(c)[1][0], "r7-s1-w0")
}

func TestPodProblem(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string // substring; "" means no problem
	}{
		{name: "pending", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}},
		{name: "creating", pod: waiting("ContainerCreating")},
		{name: "bad image", pod: waiting("ErrImagePull"), want: "cannot start: ErrImagePull: m"},
		{name: "bad secret", pod: waiting("CreateContainerConfigError"), want: "CreateContainerConfigError"},
		{name: "failed", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}}, want: "ended (Failed: Evicted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			got := podProblem(tt.pod)
			if tt.want == "" {
				is.Equal(got, "")
				return
			}
			is.True(strings.Contains(got, tt.want))
		})
	}
}

// TestPodSecretsAreReferences: the token and the TLS credentials reach the
// pods as references to the cluster's Secret, never as literals.
func TestPodSecretsAreReferences(t *testing.T) {
	pt := &podTemplate{cfg: testConfig().withDefaults(), cluster: "c1", secret: "goray-c1", service: "goray-c1"}
	pod := pt.pod(podSpec{name: "p", node: "n", chips: 4, env: map[string]string{tpu.EnvWorkerID: "0"}})
	refs := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
		if strings.Contains(e.Value, "PRIVATE KEY") || strings.Contains(e.Value, "CERTIFICATE") {
			t.Errorf("env %s holds a literal credential", e.Name)
		}
	}
	for _, tt := range []struct{ env, want string }{
		{worker.EnvToken, "goray-c1/token"},
		{worker.EnvTLSCA, "goray-c1/ca.crt"},
		{worker.EnvTLSCert, "goray-c1/tls.crt"},
		{worker.EnvTLSKey, "goray-c1/tls.key"},
	} {
		t.Run(tt.env, func(t *testing.T) {
			is := is.New(t)
			is.Equal(refs[tt.env], tt.want)
		})
	}
}
