package kubernetes

import (
	"strings"
	"testing"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

func TestPlanSlice(t *testing.T) {
	v6e := func(hosts int) []*corev1.Node { return tpuNodes("pool", "tpu-v6e-slice", "4x4", hosts, 4) }
	tests := []struct {
		name    string
		nodes   []*corev1.Node
		hosts   []string
		wantErr string
	}{
		{name: "whole v6e 4x4", nodes: v6e(4), hosts: []string{"pool-0", "pool-1", "pool-2", "pool-3"}},
		{name: "one host of v5p 4x4x4", nodes: tpuNodes("p", "tpu-v5p-slice", "4x4x4", 16, 4)[8:9:9], wantErr: "has 1 of its 16 hosts"},
		{name: "missing host", nodes: v6e(3), wantErr: `TPU slice "pool" (v6e 4x4) has 3 of its 4 hosts`},
		{name: "not ready", nodes: func() []*corev1.Node {
			n := v6e(4)
			n[2].Status.Conditions[0].Status = corev1.ConditionFalse
			n[2].Status.Conditions[0].Reason = "KubeletNotReady"
			return n
		}(), wantErr: "node pool-2 is not Ready (KubeletNotReady"},
		{name: "cordoned", nodes: func() []*corev1.Node {
			n := v6e(4)
			n[1].Spec.Unschedulable = true
			return n
		}(), wantErr: "node pool-1 is cordoned"},
		{name: "chips not registered", nodes: func() []*corev1.Node {
			n := v6e(4)
			for _, x := range n {
				x.Status.Allocatable[resourceTPU] = resource.MustParse("2")
			}
			return n
		}(), wantErr: "label cloud.google.com/gke-accelerator-count=4"},
		{name: "uneven chips", nodes: func() []*corev1.Node {
			n := v6e(4)
			n[3].Status.Allocatable[resourceTPU] = resource.MustParse("0")
			return n
		}(), wantErr: "node pool-3 has 0"},
		{name: "bad topology", nodes: tpuNodes("pool", "tpu-v6e-slice", "4x5", 5, 4), wantErr: `topology "4x5" is not valid for v6e`},
		{name: "mixed shapes", nodes: append(v6e(2), tpuNodes("pool", "tpu-v6e-slice", "2x4", 1, 4)...), wantErr: "mixes shapes"},
		{name: "worker id labels win", nodes: func() []*corev1.Node {
			n := v6e(4)
			for i, x := range n {
				x.Labels[tpu.LabelWorkerID] = []string{"3", "2", "1", "0"}[i]
			}
			return n
		}(), hosts: []string{"pool-3", "pool-2", "pool-1", "pool-0"}},
		{name: "duplicate worker id", nodes: func() []*corev1.Node {
			n := v6e(4)
			for _, x := range n {
				x.Labels[tpu.LabelWorkerID] = "1"
			}
			return n
		}(), wantErr: "want distinct worker IDs 0..3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			plan, err := planSlice("pool", tt.nodes)
			if tt.wantErr != "" {
				is.True(err != nil)
				is.True(strings.Contains(err.Error(), tt.wantErr)) // error names the problem
				return
			}
			is.NoErr(err)
			var names []string
			for _, n := range plan.hosts {
				names = append(names, n.Name)
			}
			is.Equal(names, tt.hosts)
		})
	}
}

func TestWorkerIDsFollowNaturalNameOrder(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("big", "tpu-v6e-slice", "8x8", 16, 4)
	rev := make([]*corev1.Node, len(nodes))
	for i, n := range nodes {
		rev[len(nodes)-1-i] = n
	}
	plan, err := planSlice("big", rev)
	is.NoErr(err)
	for i, n := range plan.hosts {
		is.Equal(n.Name, nodes[i].Name) // big-2 before big-10, whatever the informer's order
	}
	h := hostNode(plan.shape, "big", 10, plan.hosts[10])
	is.Equal(h.Labels[tpu.LabelWorkerID], "10")
	is.Equal(h.Labels[tpu.LabelSliceName], "big")
	is.Equal(h.Resources[backend.TPU], 4.0)
	is.Equal(h.Resources[backend.CPU], 64.0)

	n := cpuNodeObj("c")
	n.Annotations = map[string]string{AnnotationResources: `{"special": 1, "CPU": 99}`}
	is.Equal(cpuNode(n).Resources, backend.Resources{backend.CPU: 8, backend.Memory: 32 << 30, "special": 1}) // CPU comes from allocatable only
}

func TestNaturalCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"a-2", "a-10", -1}, {"a-10", "a-2", 1}, {"a-02", "a-2", 0}, {"a", "a-1", -1}, {"b-1", "a-9", 1}, {"x1y2", "x1y10", -1},
	}
	for _, tt := range tests {
		t.Run(tt.a+"_"+tt.b, func(t *testing.T) {
			is := is.New(t)
			is.Equal(naturalCompare(tt.a, tt.b), tt.want)
		})
	}
}
