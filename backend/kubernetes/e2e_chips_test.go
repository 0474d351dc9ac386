//go:build e2e

package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
	"github.com/goray-dev/goray/tpu"
)

// chipUser is an actor that holds some of a host's chips: it reports the
// chips the runtime gave it and the pod it runs in.
type chipUser struct{ where chipWhere }

type chipWhere struct {
	Chips, Pod, Node string
}

var (
	chipUserClass = ray.NewActorClass("k8stest.chipuser", func(ctx context.Context, _ struct{}) (*chipUser, error) {
		rc, _ := ray.Runtime(ctx)
		return &chipUser{chipWhere{Chips: rc.Env(tpu.EnvVisibleChips), Pod: os.Getenv("POD_NAME"), Node: rc.NodeName()}}, nil
	})
	chipUserWhere = ray.NewMethod(chipUserClass, "where", func(ctx context.Context, u *chipUser, _ struct{}) (chipWhere, error) {
		return u.where, nil
	})
)

// TestE2EChipsOutsideReservations: work that asks for some of a TPU
// host's chips outside a slice reservation (Ray's {"TPU": 1}) runs in one
// pod on the host that requests all of its google.com/tpu, each piece
// with its own TPU_VISIBLE_CHIPS, while this driver holds the slice's
// Lease in shared mode, so that another driver can neither claim the
// slice nor the chips meanwhile. Once the host is idle for HostIdle, the
// pod is deleted and the Lease released, and the other driver gets the
// slice. serve's ChipsPerReplica runs the same way. Pods are
// network-isolated (a namespace each, names through CoreDNS).
func TestE2EChipsOutsideReservations(t *testing.T) {
	is := is.New(t)
	exe, err := osExecutable()
	is.NoErr(err)
	cp := kubeharness.Start(t, &kubeharness.Options{Images: map[string]string{workerImage: exe}, Network: kubeharness.NetworkIsolated})
	ctx := t.Context()
	_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "chips", Generation: "v6e", Topology: "2x2", ChipsPerHost: 4,
		Taints: []corev1.Taint{kubeharness.TPUTaint}})
	is.NoErr(err)
	_, err = cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)
	client, err := k8s.NewForConfig(driverConfig(t, cp))
	is.NoErr(err)
	newDriver := func(identity string) *ray.Cluster {
		cfg := testConfig()
		cfg.Identity = identity // the holder of the Leases it takes
		cfg.Client = client
		cfg.Worker.Image = workerImage
		cfg.Worker.StartTimeout = 30 * time.Second
		cfg.Worker.HostIdle = 300 * time.Millisecond
		cfg.DriverHost = cp.HostIP()
		b, err := New(ctx, cfg)
		is.NoErr(err)
		c, err := ray.NewCluster(ctx, b, nil)
		is.NoErr(err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	ns := cmp.Or(testConfig().Namespace, "default")
	a, other := newDriver("driver-a"), newDriver("driver-b")
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	// Four one-chip actors: chips 0-3 of the host, one each, all in one
	// pod that requests the host's four chips.
	var users []*ray.ActorHandle[*chipUser]
	var chips []string
	pod := ""
	for range 4 {
		u := chipUserClass.Remote(runCtx, a, struct{}{}, ray.Resources{ray.TPU: 1}, ray.MaxRestarts(1))
		w, err := chipUserWhere.Remote(runCtx, u, struct{}{}).Get(runCtx)
		is.NoErr(err)
		is.Equal(w.Node, "chips-0")
		is.True(pod == "" || w.Pod == pod) // one pod
		pod = w.Pod
		chips = append(chips, w.Chips)
		users = append(users, u)
	}
	slices.Sort(chips)
	is.Equal(chips, []string{"0", "1", "2", "3"})
	p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(p.Spec.NodeName, "chips-0")
	is.Equal(p.Spec.Containers[0].Resources.Requests.Name(resourceTPU, "").Value(), int64(4)) // the host's chips

	lease, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName("chips"), metav1.GetOptions{})
	is.NoErr(err) // the slice's Lease, held in shared mode
	is.Equal(lease.Annotations[annotationClaim], subsliceClaim)
	is.Equal(*lease.Spec.HolderIdentity, "driver-a")

	// The driver holds the slice: the other driver's reservation of it
	// waits, and its own chip work finds no host.
	short, stop := context.WithTimeout(runCtx, 2*time.Second)
	_, err = ray.NewSlicePlacementGroup(short, other, ray.SliceSpec{Topology: "2x2", AcceleratorVersion: "v6e"})
	stop()
	is.True(errors.Is(err, context.DeadlineExceeded))
	short, stop = context.WithTimeout(runCtx, 2*time.Second)
	waiting := chipUserClass.Remote(short, other, struct{}{}, ray.Resources{ray.TPU: 1})
	err = waiting.Ready(short)
	stop()
	is.True(errors.Is(err, context.DeadlineExceeded))
	is.NoErr(waiting.Kill(runCtx)) // it would take the host as soon as it is free
	others, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelReservation})
	is.NoErr(err)
	is.Equal(len(others.Items), 1) // the other driver started no pod for the host

	// The pod is deleted under the actors (an eviction): the host's claim
	// ends with it, the actors restart, and the host is claimed again,
	// with a new pod holding its chips, a chip for each actor.
	is.NoErr(client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}))
	chips = chips[:0]
	newPod, deleted := "", time.Now()
	for _, u := range users {
		var w chipWhere
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if w, err = chipUserWhere.Remote(runCtx, u, struct{}{}).Get(runCtx); err == nil && w.Pod != pod {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the actor did not come back in a new pod: %+v, %v", w, err)
			}
		}
		t.Logf("actor back in %s after %v", w.Pod, time.Since(deleted))
		is.True(newPod == "" || w.Pod == newPod) // one pod again
		newPod = w.Pod
		chips = append(chips, w.Chips)
	}
	slices.Sort(chips)
	is.Equal(chips, []string{"0", "1", "2", "3"})
	p, err = client.CoreV1().Pods(ns).Get(ctx, newPod, metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(p.Spec.Containers[0].Resources.Requests.Name(resourceTPU, "").Value(), int64(4))
	pod = newPod

	// Idle again: the pod is deleted, the Lease released, and the other
	// driver reserves the slice.
	for _, u := range users {
		is.NoErr(u.Kill(runCtx))
	}
	waitPodGone(t, client, ns, pod)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName("chips"), metav1.GetOptions{})
		if err != nil {
			break // released
		}
		if time.Now().After(deadline) {
			t.Fatal("the slice's Lease is still held 10s after its pod was deleted")
		}
	}
	spg, err := ray.NewSlicePlacementGroup(runCtx, other, ray.SliceSpec{Topology: "2x2", AcceleratorVersion: "v6e"})
	is.NoErr(err)
	is.NoErr(spg.Release(runCtx))

	// serve: four replicas of one chip each on the host, behind the router.
	srv := serve.New(a, nil)
	d := serve.Deployment{
		Name: "chips", Replica: serve.Actor(chipUserClass, struct{}{}, serve.Unary(chipUserWhere)),
		Accelerator: "v6e", Topology: "2x2", ChipsPerReplica: 1, MinReplicas: 4,
	}
	is.NoErr(srv.Deploy(runCtx, d))
	st, ok := srv.Status().Deployment("chips")
	is.True(ok)
	is.Equal(st.Ready, 4)
	is.Equal(st.ChipsHeld, 4)
	h, err := serve.Handle[struct{}, chipWhere](srv, "chips")
	is.NoErr(err)
	var seen []string
	for range 40 { // the router spreads calls over the replicas
		w, err := h.Call(runCtx, struct{}{})
		is.NoErr(err)
		if !slices.Contains(seen, w.Chips) {
			seen = append(seen, w.Chips)
		}
	}
	slices.Sort(seen)
	is.Equal(seen, []string{"0", "1", "2", "3"}) // a chip each
	is.NoErr(srv.Shutdown(runCtx))
}

// waitPodGone waits until pod no longer exists.
func waitPodGone(t *testing.T, client k8s.Interface, ns, pod string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
		if err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s still exists 30s after its host went idle", pod)
		}
	}
}
