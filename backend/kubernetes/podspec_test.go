package kubernetes

import (
	"strings"
	"testing"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"

	"github.com/goray-dev/goray/tpu"
	"github.com/goray-dev/goray/worker"
)

func TestPodEnvRewritesHostnamesAndCoordinator(t *testing.T) {
	pt := &podTemplate{cfg: testConfig().withDefaults(), service: "goray-c1"}
	hosts := [][]string{{"r1-s0-w0", "r1-s0-w1"}, {"r1-s1-w0", "r1-s1-w1"}}
	tests := []struct {
		name  string
		env   map[string]string
		slice int
		want  map[string]string
	}{
		{name: "single slice", slice: 0,
			env:  map[string]string{tpu.EnvWorkerID: "1", tpu.EnvWorkerHostnames: "node-a,node-b"},
			want: map[string]string{tpu.EnvWorkerID: "1", tpu.EnvWorkerHostnames: "r1-s0-w0.goray-c1.default.svc,r1-s0-w1.goray-c1.default.svc"}},
		{name: "second slice of a multislice", slice: 1,
			env: map[string]string{tpu.EnvWorkerHostnames: "x,y", envMegascaleCoordinator: "node-a:8081", "MEGASCALE_SLICE_ID": "1"},
			want: map[string]string{tpu.EnvWorkerHostnames: "r1-s1-w0.goray-c1.default.svc,r1-s1-w1.goray-c1.default.svc",
				envMegascaleCoordinator: "r1-s0-w0.goray-c1.default.svc:8081", "MEGASCALE_SLICE_ID": "1"}},
		{name: "v7x process addresses, one process per host", slice: 0,
			env: map[string]string{tpu.EnvWorkerHostnames: "node-a,node-b", tpu.EnvProcessAddresses: "node-a:8471,node-b:8471", tpu.EnvProcessPort: "8471"},
			want: map[string]string{tpu.EnvWorkerHostnames: "r1-s0-w0.goray-c1.default.svc,r1-s0-w1.goray-c1.default.svc",
				tpu.EnvProcessAddresses: "r1-s0-w0.goray-c1.default.svc:8471,r1-s0-w1.goray-c1.default.svc:8471", tpu.EnvProcessPort: "8471"}},
		{name: "v7x process addresses, two processes per host", slice: 1,
			env:  map[string]string{tpu.EnvProcessAddresses: "x:8471,x:8472,y:8471,y:8472"},
			want: map[string]string{tpu.EnvProcessAddresses: "r1-s1-w0.goray-c1.default.svc:8471,r1-s1-w0.goray-c1.default.svc:8472,r1-s1-w1.goray-c1.default.svc:8471,r1-s1-w1.goray-c1.default.svc:8472"}},
		{name: "nothing to rewrite", slice: 0, env: map[string]string{"A": "b"}, want: map[string]string{"A": "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			is.Equal(pt.podEnv(tt.env, tt.slice, hosts), tt.want)
		})
	}
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
