//go:build e2e

package kubernetes

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/backend/kubernetes/deploy"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// envDriverJob set to 1 makes this test binary the driver program of
// TestE2EDriverJob (runDriverJob) instead of running tests.
const envDriverJob = "K8STEST_DRIVER_JOB"

// runDriverJob is a driver program as docs/kubernetes.md tells users to
// run one: in a pod, with an empty Config (but a longer worker start
// timeout), so the in-cluster config, the pod's namespace, the worker
// image (its own) and $POD_IP (for the rendezvous) come from the pod. It
// trains on one v6e 2x4 slice and prints the result.
func runDriverJob() {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("driver failed:", err)
		os.Exit(1)
	}
	b, err := New(ctx, Config{Worker: WorkerConfig{StartTimeout: time.Minute}})
	if err != nil {
		fail(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		fail(err)
	}
	tr, err := train.New(c, k8sAllReduce, 3, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerHost: 4},
		train.RunConfig{Name: "job", Progress: train.ProgressOff})
	if err != nil {
		fail(err)
	}
	res, err := tr.Fit(ctx)
	if err != nil {
		fail(err)
	}
	fmt.Printf("trained: ranks=%v sum=%v\n", res.Metrics["ranks"], res.Metrics["sum"])
	if err := c.Close(); err != nil {
		fail(err)
	}
	os.Exit(0)
}

// TestE2EDriverJob runs the driver in the cluster as docs/kubernetes.md
// says: a Job whose pod has the goray-driver ServiceAccount and the RBAC
// of deploy/rbac.yaml, POD_IP from the downward API, and nothing else. In
// its own network namespace, it reaches the API server with client-go's
// in-cluster config, reads its own image for the workers, reserves a v6e
// 2x4 slice, starts the worker pods and
// trains on them (they reach its rendezvous on its pod IP, and resolve
// each other through cluster DNS); the Job succeeds and nothing is left.
func TestE2EDriverJob(t *testing.T) {
	is := is.New(t)
	exe, err := osExecutable()
	is.NoErr(err)
	cp := kubeharness.Start(t, &kubeharness.Options{Images: map[string]string{workerImage: exe}, Network: kubeharness.NetworkIsolated})
	ctx := t.Context()
	_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	is.NoErr(err)
	_, err = cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)
	applyManifests(t, cp, deploy.RBAC)

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				ServiceAccountName: "goray-driver",
				RestartPolicy:      corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "driver", Image: workerImage,
					Args: []string{"-test.run=^$"}, // the test binary: never its tests
					Env: []corev1.EnvVar{
						{Name: envDriverJob, Value: "1"},
						{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					},
				}},
			}},
		},
	}
	_, err = cp.Client().BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{})
	is.NoErr(err)
	deadline := time.Now().Add(3 * time.Minute)
	var done *batchv1.Job
	for done == nil {
		j, err := cp.Client().BatchV1().Jobs("default").Get(ctx, "app", metav1.GetOptions{})
		is.NoErr(err)
		if j.Status.Succeeded > 0 || j.Status.Failed > 0 {
			done = j
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver Job did not finish in 3 minutes: %+v", j.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "job-name=app"})
	is.NoErr(err)
	is.Equal(len(pods.Items), 1)
	logs, _ := cp.PodLogs("default", pods.Items[0].Name, "")
	if done.Status.Succeeded != 1 || !strings.Contains(logs, "trained: ranks=2 sum=9") {
		t.Fatalf("driver Job: succeeded %d, failed %d; its log:\n%s", done.Status.Succeeded, done.Status.Failed, logs)
	}
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster)) // the driver's worker pods are gone
	leases, err := cp.Client().CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy})
	is.NoErr(err)
	is.Equal(len(leases.Items), 0) // and its slice Lease
}
