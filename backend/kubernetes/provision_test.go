package kubernetes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
	"github.com/goray-dev/goray/worker"
)

func provConfig() Config {
	cfg := testConfig()
	cfg.Provision.Mode = ProvisionPods
	return cfg
}

func v6e4x4(t *testing.T) tpu.SliceShape {
	s, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestProvisionOffIsUnsupported(t *testing.T) {
	src, _, _ := runSource(t, testConfig())
	_, err := src.Provision(t.Context(), cluster.ProvisionRequest{Name: "r", Shape: v6e4x4(t), NumSlices: 1})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("err = %v, want errors.ErrUnsupported", err)
	}
}

func TestProvisionConfigValidate(t *testing.T) {
	cfg := testConfig()
	cfg.Provision = ProvisionConfig{Mode: "nodes", Spot: true, FlexStart: true, BindWait: -time.Second}
	err := cfg.Validate()
	errContains(t, err, "Provision.BindWait -1s: want a duration ≥ 0 (0 means 2s)")
	errContains(t, err, `Provision.Mode "nodes": want "" (off, the default), "pods" or "provisioning-request"`)
	errContains(t, err, "choose at most one way to buy the VMs")
}

// Capacity pods: one per host, pending, with GKE's selectors, the TPU
// request, and the affinity that keeps a slice's pods on one node pool and
// other groups off it; Close deletes every one.
func TestProvisionCapacityPods(t *testing.T) {
	is := is.New(t)
	cfg := provConfig()
	cfg.Provision.Spot = true
	src, client, _ := runSource(t, cfg)
	shape := v6e4x4(t)
	pv, err := src.Provision(t.Context(), cluster.ProvisionRequest{Name: "Train Job", Shape: shape, NumSlices: 2})
	is.NoErr(err)
	pods, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(pods.Items), 8) // 2 slices × 4 hosts
	groups := map[string]int{}
	for _, p := range pods.Items {
		g := p.Labels[labelCapacity]
		groups[g]++
		is.True(strings.HasPrefix(g, "goray-capacity-train-job-"))
		is.Equal(p.Labels[LabelCluster], "c1")
		is.Equal(p.Spec.NodeSelector[tpu.LabelGKEAccelerator], "tpu-v6e-slice")
		is.Equal(p.Spec.NodeSelector[tpu.LabelGKETopology], "4x4")
		is.Equal(p.Spec.NodeSelector[labelGKESpot], "true")
		q := p.Spec.Containers[0].Resources.Requests[resourceTPU]
		is.Equal(q.Value(), int64(4))
		aff := p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
		is.Equal(aff.TopologyKey, tpu.LabelGKENodePool)
		is.Equal(aff.LabelSelector.MatchLabels[labelCapacity], g)
		anti := p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
		is.Equal(anti.TopologyKey, tpu.LabelGKENodePool)
		is.Equal(anti.LabelSelector.MatchExpressions[1].Values, []string{g})
		is.Equal(p.Spec.Containers[0].Image, DefaultCapacityImage)
	}
	is.Equal(len(groups), 2)

	// What the cluster answered, from the pods' events.
	_, err = client.CoreV1().Events("default").Create(t.Context(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "e1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: pods.Items[0].Name, Namespace: "default"},
		Reason:         "NotTriggerScaleUp", Message: "pod didn't trigger scale-up: 1 quota exceeded (tpu-v6e-slice)",
		LastTimestamp: metav1.NewTime(time.Now()),
	}, metav1.CreateOptions{})
	is.NoErr(err)
	st := pv.Status(t.Context())
	is.True(strings.Contains(st, "8 of 8 capacity pods"))
	is.True(strings.Contains(st, "NotTriggerScaleUp: pod didn't trigger scale-up: 1 quota exceeded"))

	is.NoErr(pv.Close(t.Context()))
	pods, err = client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(pods.Items), 0)
}

// A slice whose nodes hold another driver's capacity pods is that
// driver's: the claim is refused as held; this driver's own capacity pods
// on the claimed hosts are deleted once it holds the slice.
func TestProvisionedSliceGoesToRequester(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("pool-a", "tpu-v6e-slice", "2x4", 2, 4)
	src, client, sink := runSource(t, provConfig(), objects(nodes)...)
	sink.waitFor(t, 2)
	bind := func(name, owner, node string) {
		p := src.capacityPod(name, 0, v6e2x4(t))
		p.Name = name + "-" + node
		p.Labels[LabelCluster] = owner
		p.Spec.NodeName = node
		_, err := client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{})
		is.NoErr(err)
	}
	bind("g-other", "c2", nodes[0].Name)
	claim := cluster.Claim{ID: "pg-1", Slices: []string{"pool-a"}}
	err := src.ClaimSlices(t.Context(), claim)
	var held *cluster.HeldError
	is.True(errors.As(err, &held))
	is.Equal(held.Slices, []string{"pool-a"})
	is.Equal(backend.CodeOf(err), backend.ResourceExhausted)

	is.NoErr(client.CoreV1().Pods("default").Delete(t.Context(), "g-other-"+nodes[0].Name, metav1.DeleteOptions{}))
	bind("g-mine", "c1", nodes[0].Name)
	bind("g-mine", "c1", nodes[1].Name)
	is.NoErr(src.ClaimSlices(t.Context(), claim))
	pods, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(pods.Items), 0) // replaced: the worker pods take the chips
}

// A claim replaces the whole group of this driver's capacity pods that
// sits on the claimed slice: the pods bound to its hosts and those the
// scheduler has not bound yet, which would go to the same pool and take
// chips the worker pods need. Another group's pending pods (another slice
// asked for) stay, and Close deletes them with one call per pod: those the
// claim deleted are found gone and not asked for again (they were retried
// with backoff for about 3 s, which every reservation of a provisioned
// slice waited for).
func TestProvisionClaimReplacesWholeGroup(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("pool-c", "tpu-v6e-slice", "2x4", 2, 4)
	src, client, sink := runSource(t, provConfig(), objects(nodes)...)
	sink.waitFor(t, 2)
	shape, err := tpu.NewSliceShape(tpu.V6e, "2x4", 4) // 2 hosts, as the nodes
	is.NoErr(err)
	pv, err := src.Provision(t.Context(), cluster.ProvisionRequest{Name: "r", Shape: shape, NumSlices: 2})
	is.NoErr(err)
	all, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(all.Items), 4) // 2 groups × 2 hosts
	mine := all.Items[0].Labels[labelCapacity]
	// The scheduler bound one pod of the group to the new pool; its
	// sibling is still pending.
	p, err := client.CoreV1().Pods("default").Get(t.Context(), mine+"-0", metav1.GetOptions{})
	is.NoErr(err)
	p.Spec.NodeName = nodes[0].Name
	_, err = client.CoreV1().Pods("default").Update(t.Context(), p, metav1.UpdateOptions{})
	is.NoErr(err)

	is.NoErr(src.ClaimSlices(t.Context(), cluster.Claim{ID: "pg-1", Slices: []string{"pool-c"}}))
	left, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(left.Items), 2) // the other group's
	for _, p := range left.Items {
		is.True(p.Labels[labelCapacity] != mine)
	}
	deletes := func() int { return podDeletes(client) }
	before := deletes()
	is.NoErr(pv.Close(t.Context()))
	is.Equal(deletes()-before, 4) // 2 groups × 2 hosts, once each: no retry of a pod found gone
	left, err = client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(left.Items), 0)
}

// Another driver's capacity pods still pending for a slice of this shape
// keep a slice that just appeared from this driver (the scheduler has not
// bound them yet).
func TestProvisionFreshSliceWaitsForPendingRequester(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("pool-b", "tpu-v6e-slice", "2x4", 2, 4)
	for _, n := range nodes {
		n.CreationTimestamp = metav1.NewTime(time.Now())
	}
	src, client, sink := runSource(t, provConfig(), objects(nodes)...)
	sink.waitFor(t, 2)
	p := src.capacityPod("g-other", 0, v6e2x4(t))
	p.Labels[LabelCluster] = "c2"
	_, err := client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{})
	is.NoErr(err)
	err = src.ClaimSlices(t.Context(), cluster.Claim{ID: "pg-1", Slices: []string{"pool-b"}})
	var held *cluster.HeldError
	is.True(errors.As(err, &held))

	// A pending pod of another shape does not hold it.
	is.NoErr(client.CoreV1().Pods("default").Delete(t.Context(), p.Name, metav1.DeleteOptions{}))
	p = src.capacityPod("g-other", 0, v6e4x4(t))
	p.Labels[LabelCluster] = "c2"
	_, err = client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	is.NoErr(err)
	is.NoErr(src.ClaimSlices(t.Context(), cluster.Claim{ID: "pg-1", Slices: []string{"pool-b"}}))
}

func v6e2x4(t *testing.T) tpu.SliceShape {
	s, err := tpu.NewSliceShape(tpu.V6e, "2x4", 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ProvisionRequest needs a real API server (the ProvisioningRequest CRD):
// on the client-go fake it fails at once with FailedPrecondition and
// leaves nothing.
func TestProvisionRequestNeedsRealServer(t *testing.T) {
	is := is.New(t)
	cfg := provConfig()
	cfg.Provision.Mode = ProvisionRequest
	src, client, _ := runSource(t, cfg)
	_, err := src.Provision(t.Context(), cluster.ProvisionRequest{Name: "r", Shape: v6e4x4(t), NumSlices: 2})
	is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
	errContains(t, err, "needs a client of a real API server")
	pods, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	is.NoErr(err)
	is.Equal(len(pods.Items), 0)
	pts, err := client.CoreV1().PodTemplates("default").List(t.Context(), metav1.ListOptions{})
	is.NoErr(err)
	is.Equal(len(pts.Items), 0)
}

// errContains fails t unless err is not nil and its message contains
// want, printing both.
func errContains(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v\ndoes not contain %q", err, want)
	}
}

// withWorkerPods makes src's capacity pods worker pods in waiting, as
// NewFromParts does, with the pod template of cfg.
func withWorkerPods(src *Source, cfg Config) *podTemplate {
	pt := &podTemplate{cfg: cfg.withDefaults(), cluster: "c1", secret: "goray-c1", service: "goray-c1"}
	src.workerPod = pt.pod
	return pt
}

// By default a capacity pod is a worker pod in waiting: the worker's
// image, env and resources with the host's google.com/tpu, the group's
// placement, its own DNS name in the handle's Service and the capacity
// class. A claim of its slice keeps it, to become the host's worker pod,
// and waits for the scheduler to bind the rest of its group (a claim
// follows the slice's last node by milliseconds); closing the
// provisioning leaves the adopted pods to the runner, and releasing the
// claim deletes them.
func TestProvisionCapacityPodsBecomeWorkerPods(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("pool-w", "tpu-v6e-slice", "2x4", 2, 4)
	cfg := provConfig()
	cfg.Worker.Image = "example.com/driver:1"
	src, client, sink := runSource(t, cfg, objects(nodes)...)
	sink.waitFor(t, 2)
	pt := withWorkerPods(src, cfg)
	shape, err := tpu.NewSliceShape(tpu.V6e, "2x4", 4) // 2 hosts, as the nodes
	is.NoErr(err)
	pv, err := src.Provision(t.Context(), cluster.ProvisionRequest{Name: "r", Shape: shape, NumSlices: 1})
	is.NoErr(err)
	all, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(all.Items), 2)
	for _, p := range all.Items {
		is.Equal(p.Spec.Hostname, p.Name)
		is.Equal(p.Spec.Subdomain, pt.service)
		c := p.Spec.Containers[0]
		is.Equal(c.Name, "worker")
		is.Equal(c.Image, "example.com/driver:1")
		is.Equal(c.Resources.Requests.Name(resourceTPU, resource.DecimalSI).Value(), int64(4))
		is.Equal(p.Spec.NodeSelector[tpu.LabelGKETopology], "2x4")
		is.Equal(p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey, tpu.LabelGKENodePool)
		is.True(p.Spec.Affinity.NodeAffinity == nil) // no node pin
		is.Equal(p.Spec.PriorityClassName, DefaultCapacityPriorityClass)
		_, pinned := p.Labels[LabelNode]
		is.True(!pinned)
		var envNames []string
		for _, e := range c.Env {
			envNames = append(envNames, e.Name)
		}
		is.True(slices.Contains(envNames, worker.EnvAddr))
		is.True(!slices.Contains(envNames, tpu.EnvWorkerID)) // the reservation's env comes in the handshake
	}
	g := all.Items[0].Labels[labelCapacity]
	bind := func(pod, node string) {
		p, err := client.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
		is.NoErr(err)
		p.Spec.NodeName = node
		_, err = client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{})
		is.NoErr(err)
	}
	// One pod bound, its sibling bound by the scheduler a moment after
	// the claim started.
	bind(g+"-0", nodes[1].Name)
	time.AfterFunc(50*time.Millisecond, func() { bind(g+"-1", nodes[0].Name) })
	claim := cluster.Claim{ID: "pg-1", Slices: []string{"pool-w"}}
	is.NoErr(src.ClaimSlices(t.Context(), claim))
	is.Equal(src.adoptionsOf("pg-1"), map[string]string{nodes[1].Name: g + "-0", nodes[0].Name: g + "-1"})

	deletes := func() int { return podDeletes(client) }
	is.Equal(deletes(), 0) // kept, not replaced
	is.NoErr(pv.Close(t.Context()))
	is.Equal(deletes(), 0) // the runner's now
	is.NoErr(src.ReleaseSlices(t.Context(), claim))
	is.Equal(deletes(), 2)
	left, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	is.NoErr(err)
	is.Equal(len(left.Items), 0)
	is.Equal(src.adoptionsOf("pg-1"), nil)
}

// With Placeholders the capacity pods run the placeholder image and a
// claim replaces them, as before worker pods in waiting.
func TestProvisionPlaceholders(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("pool-p", "tpu-v6e-slice", "2x4", 2, 4)
	cfg := provConfig()
	cfg.Provision.Placeholders = true
	src, client, sink := runSource(t, cfg, objects(nodes)...)
	sink.waitFor(t, 2)
	withWorkerPods(src, cfg)
	shape, err := tpu.NewSliceShape(tpu.V6e, "2x4", 4)
	is.NoErr(err)
	pv, err := src.Provision(t.Context(), cluster.ProvisionRequest{Name: "r", Shape: shape, NumSlices: 1})
	is.NoErr(err)
	all, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	for i, p := range all.Items {
		is.Equal(p.Spec.Containers[0].Image, DefaultCapacityImage)
		is.Equal(p.Spec.Hostname, "")
		p.Spec.NodeName = nodes[i].Name
		_, err = client.CoreV1().Pods("default").Update(t.Context(), &p, metav1.UpdateOptions{})
		is.NoErr(err)
	}
	is.NoErr(src.ClaimSlices(t.Context(), cluster.Claim{ID: "pg-1", Slices: []string{"pool-p"}}))
	is.Equal(src.adoptionsOf("pg-1"), nil)
	left, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(left.Items), 0) // replaced
	is.NoErr(pv.Close(t.Context()))
}

// podDeletes counts the pod deletes client has served.
func podDeletes(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}
