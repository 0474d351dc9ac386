//go:build e2e

package kubernetes

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// envDriver, set to a kubeconfig path, makes this test binary a driver
// process (runDriverProcess) instead of running tests.
const envDriver = "K8STEST_DRIVER"

// deadDriverLease is the Lease duration of both drivers of
// TestE2EDeadDriverSlice.
const deadDriverLease = 6 * time.Second

// runDriverProcess is a driver program: it keeps a CPU worker pod (owned,
// like all its objects, by its token Secret), reserves the one v6e 2x4
// slice, runs a task on each host (so its worker pods hold the slice's
// chips), prints "ready <cluster id>" and waits to be killed.
func runDriverProcess(kubeconfig string) {
	if m := os.Getenv(envDriverProvision); m != "" {
		runProvisioningDriverProcess(kubeconfig, ProvisionMode(m))
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("driver failed:", err)
		os.Exit(1)
	}
	b, err := New(ctx, Config{
		Kubeconfig: kubeconfig, Namespace: "default", Identity: "doomed-driver",
		Worker:  WorkerConfig{Image: workerImage, StartTimeout: time.Minute},
		Lease:   LeaseConfig{Duration: deadDriverLease},
		CPUPool: CPUPool{Min: 1},
	})
	if err != nil {
		fail(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		fail(err)
	}
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4})
	if err != nil {
		fail(err)
	}
	if _, err := ray.RunOnSlice(ctx, spg, envPairTask, struct{}{}); err != nil {
		fail(err)
	}
	fmt.Println("ready", b.id)
	select {}
}

// TestE2EDeadDriverSlice: a driver process holding a slice (a Lease, and
// worker pods that hold the slice's google.com/tpu chips) is SIGKILLed.
// Another driver gets the slice within the Lease duration plus the time to
// replace the pods, runs on it, and what the dead driver left (its pods,
// token Secret and Service) is gone: its pods on the slice and its Secret
// and Service deleted by the taker, its CPU pod collected by
// kube-controller-manager's garbage collector through the Secret's owner
// reference.
func TestE2EDeadDriverSlice(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	is.NoErr(err)
	_, err = cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)
	kubeconfig := driverKubeconfig(t, cp)
	exe, err := osExecutable()
	is.NoErr(err)

	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envDriver+"="+kubeconfig)
	out, err := cmd.StdoutPipe()
	is.NoErr(err)
	cmd.Stderr = os.Stderr
	is.NoErr(cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var dead string
	timeout := time.After(2 * time.Minute)
	for dead == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the driver process ended before it reserved the slice")
			}
			if id, ok := strings.CutPrefix(l, "ready "); ok {
				dead = id
			} else if strings.HasPrefix(l, "driver failed") {
				t.Fatal(l)
			}
		case <-timeout:
			t.Fatal("the driver process did not reserve the slice within 2 minutes")
		}
	}
	owned := metav1.ListOptions{LabelSelector: LabelCluster + "=" + dead}
	pods, err := cp.Client().CoreV1().Pods("default").List(ctx, owned)
	is.NoErr(err)
	is.Equal(len(pods.Items), 3) // a worker pod on each host of the slice, and the CPU pod
	for _, p := range pods.Items {
		is.Equal(len(p.OwnerReferences), 1) // owned by the handle's Secret
		is.Equal(p.OwnerReferences[0].Kind, "Secret")
	}

	is.NoErr(cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	killed := time.Now()

	b, err := New(ctx, Config{
		Kubeconfig: kubeconfig, Namespace: "default", Identity: "next-driver",
		Worker: WorkerConfig{Image: workerImage, StartTimeout: time.Minute},
		Lease:  LeaseConfig{Duration: deadDriverLease},
	})
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, deadDriverLease+30*time.Second)
	defer cancel()
	spg, err := ray.NewSlicePlacementGroup(rctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4})
	is.NoErr(err) // the dead driver's slice is taken over
	got, err := ray.RunOnSlice(rctx, spg, envPairTask, struct{}{})
	is.NoErr(err)
	is.Equal(len(got), 2)
	took := time.Since(killed)
	t.Logf("slice usable by the next driver %v after the kill (Lease %v)", took.Round(100*time.Millisecond), deadDriverLease)
	is.True(took < deadDriverLease+20*time.Second) // Lease duration plus seconds, not Worker.IdleTimeout

	// Nothing of the dead handle is left.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		pods, err := cp.Client().CoreV1().Pods("default").List(ctx, owned)
		is.NoErr(err)
		for _, p := range pods.Items {
			left = append(left, "pod/"+p.Name)
		}
		secrets, err := cp.Client().CoreV1().Secrets("default").List(ctx, owned)
		is.NoErr(err)
		for _, s := range secrets.Items {
			left = append(left, "secret/"+s.Name)
		}
		svcs, err := cp.Client().CoreV1().Services("default").List(ctx, owned)
		is.NoErr(err)
		for _, s := range svcs.Items {
			left = append(left, "service/"+s.Name)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead driver's objects are still there 30 s after the takeover: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	is.NoErr(spg.Release(ctx))
}
