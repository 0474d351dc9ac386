//go:build e2e

package kubeharness

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GKE node labels and the TPU resource (tpu.LabelGKEAccelerator and its
// neighbours; ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go, and
// https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus).
const (
	LabelTPUAccelerator   = "cloud.google.com/gke-tpu-accelerator"
	LabelTPUTopology      = "cloud.google.com/gke-tpu-topology"
	LabelNodePool         = "cloud.google.com/gke-nodepool"
	LabelAcceleratorCount = "cloud.google.com/gke-accelerator-count"
	LabelInstanceType     = "node.kubernetes.io/instance-type"

	// ResourceTPU is the extended resource of TPU chips on a GKE node.
	ResourceTPU corev1.ResourceName = "google.com/tpu"

	// LabelAgent says who runs a harness node's pods: "node-agent" (local
	// processes) or "kwok" (simulated).
	LabelAgent = "kubeharness.goray.dev/agent"
	// AnnotationKwok is the annotation kwok is told to manage nodes by.
	AnnotationKwok = "kwok.x-k8s.io/node"
)

// TPUTaint is the taint GKE puts on TPU nodes; pods requesting
// google.com/tpu get a toleration for it from the ExtendedResourceToleration
// admission plugin. Node pools carry it only when asked (NodePool.Taints).
var TPUTaint = corev1.Taint{Key: string(ResourceTPU), Value: "present", Effect: corev1.TaintEffectNoSchedule}

// tpuGeneration is one row of the harness's private TPU table. It does not
// import the repo's tpu package on purpose: the harness must stay usable to
// test that package.
type tpuGeneration struct {
	name        string   // v4, v5e, v5p, v6e, v7x
	aliases     []string // accepted spellings besides name and accelerator
	accelerator string   // cloud.google.com/gke-tpu-accelerator value
	dims        int      // topology dimensions
	chipsPerVM  []int    // valid chips per host (VM)
	machine     string   // instance type; %d is chips per host
}

var tpuGenerations = []tpuGeneration{
	{"v4", nil, "tpu-v4-podslice", 3, []int{4}, "ct4p-hightpu-4t"},
	{"v5e", []string{"v5litepod", "v5lite", "tpu-v5-lite-device"}, "tpu-v5-lite-podslice", 2, []int{1, 4, 8}, "ct5lp-hightpu-%dt"},
	{"v5p", nil, "tpu-v5p-slice", 3, []int{4}, "ct5p-hightpu-4t"},
	{"v6e", nil, "tpu-v6e-slice", 2, []int{1, 4, 8}, "ct6e-standard-%dt"},
	{"v7x", []string{"tpu7x"}, "tpu7x", 3, []int{4}, "tpu7x-standard-4t"},
}

func lookupGeneration(s string) (tpuGeneration, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for _, g := range tpuGenerations {
		if k == g.name || k == g.accelerator || strings.TrimPrefix(k, "tpu-") == g.name || slices.Contains(g.aliases, k) {
			return g, nil
		}
	}
	var valid []string
	for _, g := range tpuGenerations {
		valid = append(valid, g.name+" ("+g.accelerator+")")
	}
	return tpuGeneration{}, fmt.Errorf("unknown TPU generation %q; valid: %s", s, strings.Join(valid, ", "))
}

// NodePool describes a simulated GKE TPU node pool: one node per TPU host
// (VM) of a slice, as GKE provisions a multi-host slice as its own pool.
type NodePool struct {
	// Name is the cloud.google.com/gke-nodepool label; nodes are named
	// <Name>-0 … <Name>-<Hosts-1>. Required.
	Name string
	// Generation is "v4", "v5e", "v5p", "v6e" or "v7x", or the GKE
	// accelerator label value ("tpu-v6e-slice", "tpu7x", …). Required.
	Generation string
	// Topology is the slice's chip grid, "4x4" (v5e, v6e) or "2x2x2" (v4,
	// v5p, v7x). Only its shape is checked, so the harness can also build
	// slices GKE would refuse. Required.
	Topology string
	// ChipsPerHost is the google.com/tpu capacity of each node. Default:
	// all chips for v5e/v6e 1x1, 2x2 and 2x4, else 4, as
	// tpu.Generation.DefaultChipsPerHost (Ray's get_chips_per_host in
	// python/ray/_private/accelerators/tpu.py).
	ChipsPerHost int
	// Hosts is the number of nodes; 0 derives it (chips / ChipsPerHost).
	// A non-zero value must agree with the topology.
	Hosts int
	// Kwok makes kwok simulate the nodes and their pods (Running, fake
	// IPs, no process) instead of the node agent.
	Kwok bool
	// CPU and Memory are each node's capacity; defaults "64" and "256Gi".
	CPU, Memory string
	// Labels are added to every node; Taints are put on every node.
	Labels map[string]string
	Taints []corev1.Taint
}

// CPUNodes describes plain nodes without TPUs.
type CPUNodes struct {
	// Name prefixes the nodes (<Name>-0 …) and is their gke-nodepool label.
	Name string
	// Count is the number of nodes (≥ 1).
	Count int
	// CPU and Memory are each node's capacity; defaults "8" and "32Gi".
	CPU, Memory string
	Kwok        bool
	Labels      map[string]string
	Taints      []corev1.Taint
}

// AddTPUNodePool creates the Ready nodes of a simulated GKE TPU node pool
// and returns them. Agent nodes run their pods as local processes; kwok
// nodes (p.Kwok) start kwok on first use.
func (cp *ControlPlane) AddTPUNodePool(ctx context.Context, p NodePool) ([]*corev1.Node, error) {
	spec, err := p.resolve()
	if err != nil {
		return nil, fmt.Errorf("add TPU node pool %q: %w", p.Name, err)
	}
	return cp.addNodes(ctx, spec)
}

// AddCPUNodes creates Ready nodes without TPUs and returns them.
func (cp *ControlPlane) AddCPUNodes(ctx context.Context, n CPUNodes) ([]*corev1.Node, error) {
	if n.Name == "" || n.Count < 1 {
		return nil, fmt.Errorf("add CPU nodes %q: need a name and a count ≥ 1, got count %d", n.Name, n.Count)
	}
	labels := map[string]string{LabelNodePool: n.Name}
	for k, v := range n.Labels {
		labels[k] = v
	}
	return cp.addNodes(ctx, nodeSpec{
		pool: n.Name, count: n.Count, kwok: n.Kwok, labels: labels, taints: n.Taints,
		capacity: corev1.ResourceList{
			corev1.ResourceCPU:    quantity(n.CPU, "8"),
			corev1.ResourceMemory: quantity(n.Memory, "32Gi"),
		},
	})
}

type nodeSpec struct {
	pool     string
	count    int
	kwok     bool
	labels   map[string]string
	taints   []corev1.Taint
	capacity corev1.ResourceList
}

// resolve checks p and computes the node spec.
func (p NodePool) resolve() (nodeSpec, error) {
	if p.Name == "" {
		return nodeSpec{}, fmt.Errorf("a node pool needs a Name")
	}
	g, err := lookupGeneration(p.Generation)
	if err != nil {
		return nodeSpec{}, err
	}
	topo := strings.ToLower(strings.TrimSpace(p.Topology))
	parts := strings.Split(topo, "x")
	chips := 1
	for _, s := range parts {
		d, err := strconv.Atoi(s)
		if err != nil || d < 1 {
			chips = 0
			break
		}
		chips *= d
	}
	if len(parts) != g.dims || chips == 0 {
		ex := "4x4"
		if g.dims == 3 {
			ex = "2x2x2"
		}
		return nodeSpec{}, fmt.Errorf("%s topology %q: want %d positive dimensions like %q", g.name, p.Topology, g.dims, ex)
	}
	cph := p.ChipsPerHost
	if cph == 0 {
		cph = 4
		if g.dims == 2 && (topo == "1x1" || topo == "2x2" || topo == "2x4") {
			cph = chips
		}
	}
	if !slices.Contains(g.chipsPerVM, cph) {
		return nodeSpec{}, fmt.Errorf("%s: %d chips per host is not a %s machine shape; valid: %v", g.name, cph, g.name, g.chipsPerVM)
	}
	if chips%cph != 0 {
		return nodeSpec{}, fmt.Errorf("%s topology %s has %d chips, not a multiple of %d chips per host", g.name, topo, chips, cph)
	}
	hosts := chips / cph
	if p.Hosts != 0 && p.Hosts != hosts {
		return nodeSpec{}, fmt.Errorf("%s topology %s with %d chips per host has %d hosts, not %d", g.name, topo, cph, hosts, p.Hosts)
	}
	machine := g.machine
	if strings.Contains(machine, "%d") {
		machine = fmt.Sprintf(machine, cph)
	}
	labels := map[string]string{
		LabelTPUAccelerator:   g.accelerator,
		LabelTPUTopology:      topo,
		LabelNodePool:         p.Name,
		LabelAcceleratorCount: strconv.Itoa(cph),
		LabelInstanceType:     machine,
	}
	for k, v := range p.Labels {
		labels[k] = v
	}
	return nodeSpec{
		pool: p.Name, count: hosts, kwok: p.Kwok, labels: labels, taints: p.Taints,
		capacity: corev1.ResourceList{
			ResourceTPU:           *resource.NewQuantity(int64(cph), resource.DecimalSI),
			corev1.ResourceCPU:    quantity(p.CPU, "64"),
			corev1.ResourceMemory: quantity(p.Memory, "256Gi"),
		},
	}, nil
}

func quantity(s, def string) resource.Quantity {
	if s == "" {
		s = def
	}
	return resource.MustParse(s)
}

// addNodes creates spec.count nodes, 32 at a time.
func (cp *ControlPlane) addNodes(ctx context.Context, spec nodeSpec) ([]*corev1.Node, error) {
	if spec.kwok {
		if err := cp.ensureKwok(); err != nil {
			return nil, fmt.Errorf("add nodes %q: %w", spec.pool, err)
		}
	}
	nodes := make([]*corev1.Node, spec.count)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range spec.count {
		g.Go(func() error {
			n := cp.newNode(fmt.Sprintf("%s-%d", spec.pool, i), spec)
			if !spec.kwok {
				cp.agent.expectNode(n.Name)
			}
			created, err := cp.client.CoreV1().Nodes().Create(gctx, n, metav1.CreateOptions{})
			if err != nil {
				if !spec.kwok {
					cp.agent.forgetNode(n.Name, "")
				}
				return fmt.Errorf("create node %s: %w", n.Name, err)
			}
			if !spec.kwok {
				cp.agent.adoptNode(created)
				if err := cp.plugins.serve(created); err != nil {
					return err
				}
			}
			nodes[i] = created
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("add nodes %q: %w", spec.pool, err)
	}
	return nodes, nil
}

func (cp *ControlPlane) newNode(name string, spec nodeSpec) *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		LabelAgent:               "node-agent",
	}
	var annotations map[string]string
	runtime := "kubeharness://" + KubeVersion
	if spec.kwok {
		labels[LabelAgent] = "kwok"
		annotations = map[string]string{AnnotationKwok: "fake"}
		runtime = "kwok-" + KwokVersion
	}
	for k, v := range spec.labels {
		labels[k] = v
	}
	capacity := spec.capacity.DeepCopy()
	capacity[corev1.ResourcePods] = resource.MustParse("110")
	capacity[corev1.ResourceEphemeralStorage] = resource.MustParse("100Gi")
	now := metav1.NewTime(time.Now())
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: append([]corev1.Taint(nil), spec.taints...)},
		// Node create keeps .status, so the node is Ready at once. With no
		// kube-controller-manager nothing marks it NotReady later, so the
		// agent sends no heartbeats.
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: cp.ips.next().String()},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion: KubeVersion, OperatingSystem: "linux", Architecture: "amd64",
				ContainerRuntimeVersion: runtime, OSImage: "kubeharness",
			},
		},
	}
}
