//go:build e2e

package kubernetes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// envDriverProvision, set with envDriver, makes the driver process a
// provisioning one (runProvisioningDriverProcess) in that mode.
const envDriverProvision = "K8STEST_DRIVER_PROVISION"

// runProvisioningDriverProcess is a driver program that asks the cluster
// for a v6e 2x4 it does not have (capacity on demand in mode), prints
// "cluster <id>" and waits for the slice, to be killed while it waits.
// Its worker pods in waiting wait for it for 5 minutes.
func runProvisioningDriverProcess(kubeconfig string, mode ProvisionMode) {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("driver failed:", err)
		os.Exit(1)
	}
	b, err := New(ctx, Config{
		Kubeconfig: kubeconfig, Namespace: "default", Identity: "doomed-requester",
		Worker:    WorkerConfig{Image: workerImage, StartTimeout: time.Minute, IdleTimeout: 5 * time.Minute},
		Lease:     LeaseConfig{Duration: deadDriverLease},
		Provision: ProvisionConfig{Mode: mode},
	})
	if err != nil {
		fail(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		fail(err)
	}
	fmt.Println("cluster", b.id)
	_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4, Timeout: 5 * time.Minute})
	fail(fmt.Errorf("the reservation returned before the kill: %v", err))
}

// TestE2EDeadRequesterLeavesNothing: a driver process asks for a v6e 2x4
// it does not have and is SIGKILLed while its capacity is pending, in each
// provisioning mode. The autoscaler makes the pool and the dead driver's
// worker pods in waiting run on it, holding its chips. Another driver reserving a v6e 2x4 gets that slice within
// the Lease duration plus seconds, having found the capacity held for a
// requester that is gone and removed what it left: its pods, its
// ProvisioningRequest and PodTemplate, its Secret, Service and handle
// Lease. Once the new driver releases, the pool is scaled away. (Pods that
// ended hold no pool on the harness's autoscaler, which scales it away:
// TestCapacityOfGoneRequesterIsCollected has the dead requester's pods
// Succeeded on a slice that is still there.)
func TestE2EDeadRequesterLeavesNothing(t *testing.T) {
	cp, as := startAutoscaledHarness(t, kubeharness.AutoscalerOptions{
		Delay: time.Second, ScaleDownAfter: time.Second, ProvisioningRequests: true,
		Quota: map[string]int{"tpu-v6e-slice": 8}, // one v6e 2x4: the dead driver's pool is the only one
	})
	rc := driverConfig(t, cp)
	kubeconfig := kubeconfigOf(t, rc)
	for _, mode := range []ProvisionMode{ProvisionPods, ProvisionRequest} {
		t.Run(string(mode), func(t *testing.T) {
			is := is.New(t)
			ctx := t.Context()
			admin := cp.Client()
			exe, err := osExecutable()
			is.NoErr(err)
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), envDriver+"="+kubeconfig, envDriverProvision+"="+string(mode))
			out, err := cmd.StdoutPipe()
			is.NoErr(err)
			cmd.Stderr = os.Stderr
			is.NoErr(cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			sc := bufio.NewScanner(out)
			dead := ""
			for dead == "" && sc.Scan() {
				l := sc.Text()
				if strings.HasPrefix(l, "driver failed") {
					t.Fatal(l)
				}
				dead, _ = strings.CutPrefix(l, "cluster ")
			}
			if dead == "" {
				t.Fatal("the driver process ended before it started its cluster")
			}
			go func() {
				for sc.Scan() { // drain; a failure before the kill is the test's
					if l := sc.Text(); strings.HasPrefix(l, "driver failed") {
						t.Error(l)
					}
				}
			}()
			owned := LabelCluster + "=" + dead
			// Kill it once its two capacity pods exist (pending: the pool
			// takes Delay to appear).
			_, err = cp.WaitForPods(ctx, "default", owned+","+labelCapacity, 2, func(*corev1.Pod) bool { return true })
			is.NoErr(err)
			is.NoErr(cmd.Process.Signal(syscall.SIGKILL))
			_ = cmd.Wait()
			killed := time.Now()

			// The pool comes up for the dead driver's pods, which run on it.
			_, err = cp.WaitForPods(ctx, "default", owned+","+labelCapacity, 2, func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodRunning
			})
			is.NoErr(err)
			t.Logf("the dead driver's capacity pods ran on the new pool %v after the kill; autoscaler: %v",
				time.Since(killed).Round(100*time.Millisecond), as.Events())

			_, c := provisioningCluster(t, rc, "next-driver-"+string(mode), ProvisionConfig{}, func(cfg *Config) {
				cfg.Lease = LeaseConfig{Duration: deadDriverLease}
			})
			rctx, cancel := context.WithTimeout(ctx, deadDriverLease+40*time.Second)
			defer cancel()
			spg, err := ray.NewSlicePlacementGroup(rctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4})
			is.NoErr(err) // the dead driver's capacity is the next driver's
			got, err := ray.RunOnSlice(rctx, spg, envPairTask, struct{}{})
			is.NoErr(err)
			is.Equal(len(got), 2)
			took := time.Since(killed)
			t.Logf("the slice was the next driver's %v after the kill (Lease %v)", took.Round(100*time.Millisecond), deadDriverLease)
			is.True(took < deadDriverLease+30*time.Second) // the Lease duration plus seconds

			// Nothing of the dead driver is left.
			deadline := time.Now().Add(30 * time.Second)
			for {
				left := leftovers(t, cp, dead)
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the dead driver's objects are still there 30 s after the claim: %v", left)
				}
				time.Sleep(200 * time.Millisecond)
			}
			is.NoErr(spg.Release(ctx))
			is.NoErr(c.Close())
			// Nothing holds the pool: it is scaled away.
			for len(as.Pools()) > 0 {
				if time.Now().After(deadline.Add(30 * time.Second)) {
					t.Fatalf("the pool %v was not scaled down after the release", as.Pools())
				}
				time.Sleep(100 * time.Millisecond)
			}
			pods, err := admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy})
			is.NoErr(err)
			is.Equal(len(pods.Items), 0)
		})
	}
}

// leftovers lists the objects of cluster handle id that exist.
func leftovers(t *testing.T, cp *kubeharness.ControlPlane, id string) []string {
	t.Helper()
	ctx := t.Context()
	admin := cp.Client()
	owned := metav1.ListOptions{LabelSelector: LabelCluster + "=" + id}
	var left []string
	pods, err := admin.CoreV1().Pods("default").List(ctx, owned)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		left = append(left, "pod/"+p.Name+" ("+string(p.Status.Phase)+")")
	}
	secrets, err := admin.CoreV1().Secrets("default").List(ctx, owned)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		left = append(left, "secret/"+s.Name)
	}
	svcs, err := admin.CoreV1().Services("default").List(ctx, owned)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		left = append(left, "service/"+s.Name)
	}
	tmpls, err := admin.CoreV1().PodTemplates("default").List(ctx, owned)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range tmpls.Items {
		left = append(left, "podtemplate/"+s.Name)
	}
	leases, err := admin.CoordinationV1().Leases("default").List(ctx, owned)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range leases.Items {
		left = append(left, "lease/"+s.Name)
	}
	raw, err := admin.Discovery().RESTClient().Get().AbsPath("/apis/"+provReqGroupVersion+"/namespaces/default/provisioningrequests").
		Param("labelSelector", owned.LabelSelector).Do(ctx).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []provReq `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	for _, pr := range list.Items {
		left = append(left, "provisioningrequest/"+pr.Metadata.Name)
	}
	return left
}
