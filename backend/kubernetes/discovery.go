package kubernetes

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// This file turns Kubernetes nodes into the runtime's nodes: TPU hosts
// grouped into slices by their GKE labels, and CPU nodes.

// resourceTPU is the extended resource of TPU chips on GKE nodes.
const resourceTPU corev1.ResourceName = tpu.ResourceGKETPU

// isTPUNode reports whether n is a host of a GKE TPU node pool.
func isTPUNode(n *corev1.Node) bool {
	return n.Labels[tpu.LabelGKEAccelerator] != "" && n.Labels[tpu.LabelGKENodePool] != ""
}

// poolOf returns the node pool (the slice) of a TPU node, or "".
func poolOf(n *corev1.Node) string {
	if !isTPUNode(n) {
		return ""
	}
	return n.Labels[tpu.LabelGKENodePool]
}

// nodeUnusable returns why no work should be placed on n, or "" when it
// is Ready and schedulable.
func nodeUnusable(n *corev1.Node) string {
	if n.Spec.Unschedulable {
		return "node " + n.Name + " is cordoned (unschedulable)"
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			return fmt.Sprintf("node %s is not Ready (%s: %s)", n.Name, c.Reason, c.Message)
		}
	}
	return "node " + n.Name + " reports no Ready condition"
}

// tpuChips returns the google.com/tpu chips n offers.
func tpuChips(n *corev1.Node) int {
	q, ok := n.Status.Allocatable[resourceTPU]
	if !ok {
		return 0
	}
	return int(q.Value())
}

// slicePlan is one GKE TPU node pool checked intact: its shape and its
// nodes in worker-ID order.
type slicePlan struct {
	name  string
	shape tpu.SliceShape
	hosts []*corev1.Node
}

// planSlice checks that the nodes of one TPU node pool form a whole,
// usable slice: one generation and topology, as many hosts as the
// topology needs, every host Ready, schedulable and offering the chips
// per host of its machine type. Worker IDs follow the node label
// ray.io/tpu-worker-id when every node has one, else the node names in
// natural order (pool-2 before pool-10), so that they are the same in
// every driver.
func planSlice(pool string, nodes []*corev1.Node) (slicePlan, error) {
	if len(nodes) == 0 {
		return slicePlan{}, fmt.Errorf("TPU slice %q has no nodes", pool)
	}
	first := nodes[0]
	accel, topo := first.Labels[tpu.LabelGKEAccelerator], first.Labels[tpu.LabelGKETopology]
	chips := tpuChips(first)
	for _, n := range nodes {
		switch {
		case n.Labels[tpu.LabelGKEAccelerator] != accel || n.Labels[tpu.LabelGKETopology] != topo:
			return slicePlan{}, fmt.Errorf("TPU slice %q mixes shapes: node %s is %s %s, node %s is %s %s",
				pool, first.Name, accel, topo, n.Name, n.Labels[tpu.LabelGKEAccelerator], n.Labels[tpu.LabelGKETopology])
		case tpuChips(n) != chips:
			return slicePlan{}, fmt.Errorf("TPU slice %q: node %s has %d allocatable %s, node %s has %d (want the same on every host)",
				pool, first.Name, chips, resourceTPU, n.Name, tpuChips(n))
		}
		if c := n.Labels[tpu.LabelGKEAcceleratorCount]; c != "" && c != strconv.Itoa(chips) {
			return slicePlan{}, fmt.Errorf("TPU slice %q: node %s has %d allocatable %s but label %s=%s (the device plugin has not registered every chip)",
				pool, n.Name, tpuChips(n), resourceTPU, tpu.LabelGKEAcceleratorCount, c)
		}
	}
	if chips == 0 {
		return slicePlan{}, fmt.Errorf("TPU slice %q: node %s has no allocatable %s", pool, first.Name, resourceTPU)
	}
	shape, err := tpu.NewSliceShape(tpu.Generation(accel), topo, chips)
	if err != nil {
		return slicePlan{}, fmt.Errorf("TPU slice %q (labels %s=%s, %s=%s, %d chips per host): %w",
			pool, tpu.LabelGKEAccelerator, accel, tpu.LabelGKETopology, topo, chips, err)
	}
	if len(nodes) != shape.Hosts() {
		return slicePlan{}, fmt.Errorf("TPU slice %q (%s) has %d of its %d hosts", pool, shape, len(nodes), shape.Hosts())
	}
	for _, n := range nodes {
		if why := nodeUnusable(n); why != "" {
			return slicePlan{}, fmt.Errorf("TPU slice %q: %s", pool, why)
		}
	}
	hosts, err := orderHosts(pool, nodes)
	if err != nil {
		return slicePlan{}, err
	}
	return slicePlan{name: pool, shape: shape, hosts: hosts}, nil
}

// orderHosts puts a slice's nodes in worker-ID order.
func orderHosts(pool string, nodes []*corev1.Node) ([]*corev1.Node, error) {
	out := slices.Clone(nodes)
	labelled := !slices.ContainsFunc(out, func(n *corev1.Node) bool { return n.Labels[tpu.LabelWorkerID] == "" })
	if !labelled {
		slices.SortFunc(out, func(a, b *corev1.Node) int { return naturalCompare(a.Name, b.Name) })
		return out, nil
	}
	byID := make([]*corev1.Node, len(out))
	for _, n := range out {
		id, err := strconv.Atoi(n.Labels[tpu.LabelWorkerID])
		if err != nil || id < 0 || id >= len(out) || byID[id] != nil {
			return nil, fmt.Errorf("TPU slice %q: node %s has label %s=%q; want distinct worker IDs 0..%d",
				pool, n.Name, tpu.LabelWorkerID, n.Labels[tpu.LabelWorkerID], len(out)-1)
		}
		byID[id] = n
	}
	return byID, nil
}

// naturalCompare orders strings with their digit runs compared as
// numbers: "pool-2" < "pool-10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da != "" && db != "" {
			na, nb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// hostNode returns the runtime node of the host with worker ID wid of
// plan: the Kubernetes node's labels plus the TPU labels of package tpu
// (the slice name is the node pool), and Ray's TPU resources plus the
// node's allocatable CPU and memory.
func hostNode(shape tpu.SliceShape, slice string, wid int, n *corev1.Node) cluster.Node {
	lbl := maps.Clone(n.Labels)
	if lbl == nil {
		lbl = map[string]string{}
	}
	maps.Copy(lbl, tpu.HostLabels(shape, slice, slice, wid))
	lbl[LabelNode] = n.Name
	res := backend.Resources{}
	for k, v := range tpu.HostResources(shape, slice, wid) {
		res[k] = v
	}
	addCPUMemory(res, n)
	return cluster.Node{Name: runtimeName(n), Resources: res, Labels: lbl,
		TPU: &cluster.TPUHost{Slice: slice, Shape: shape, WorkerID: wid}, Handle: kubeNodeHandle(n.Name)}
}

// kubeNodeHandle is the Handle of the runtime's nodes (cluster.Node): the
// name of the Kubernetes node it is now, which the runner pins pods to.
type kubeNodeHandle string

// handleAt returns handles[i][j], or nil when there is none.
func handleAt(handles [][]any, i, j int) any {
	if i < len(handles) && j < len(handles[i]) {
		return handles[i][j]
	}
	return nil
}

// runtimeName is the name of n in the runtime: its LabelName, else its
// own name.
func runtimeName(n *corev1.Node) string {
	if v := n.Labels[LabelName]; v != "" {
		return v
	}
	return n.Name
}

// kubeNode is the Kubernetes node of a runtime node.
func kubeNode(n cluster.Node) string {
	if v := n.Labels[LabelNode]; v != "" {
		return v
	}
	return n.Name
}

// cpuNode returns the runtime node of a CPU node.
func cpuNode(n *corev1.Node) cluster.Node {
	res := backend.Resources{}
	addCPUMemory(res, n)
	lbl := maps.Clone(n.Labels)
	if lbl == nil {
		lbl = map[string]string{}
	}
	lbl[LabelNode] = n.Name
	return cluster.Node{Name: runtimeName(n), Resources: res, Labels: lbl, Handle: kubeNodeHandle(n.Name)}
}

// AnnotationResources on a node adds custom resources of the runtime to
// it, as a JSON object of names to amounts: {"special": 1}. (Kubernetes
// extended resources need a domain-prefixed name and a device plugin;
// this is the driver-side equivalent of Ray's custom resources.)
const AnnotationResources = labelPrefix + "resources"

func addCPUMemory(res backend.Resources, n *corev1.Node) {
	if a := n.Annotations[AnnotationResources]; a != "" {
		var extra map[string]float64
		if err := json.Unmarshal([]byte(a), &extra); err == nil {
			for k, v := range extra {
				if k != backend.CPU && k != backend.Memory && k != backend.TPU && v > 0 {
					res[k] = v
				}
			}
		}
	}
	if q, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
		res[backend.CPU] = float64(q.MilliValue()) / 1000
	}
	if q, ok := n.Status.Allocatable[corev1.ResourceMemory]; ok {
		res[backend.Memory] = float64(q.Value())
	}
}

// cpuEligible reports whether n may serve as a CPU node of the pool.
func cpuEligible(n *corev1.Node, sel labels.Selector) bool {
	return !isTPUNode(n) && sel.Matches(labels.Set(n.Labels)) && nodeUnusable(n) == ""
}
