package tpu_test

import (
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

func TestLabelAndResourceKeys(t *testing.T) {
	is := is.New(t)
	is.Equal(tpu.LabelGKEAccelerator, "cloud.google.com/gke-tpu-accelerator")
	is.Equal(tpu.LabelGKETopology, "cloud.google.com/gke-tpu-topology")
	is.Equal(tpu.LabelGKENodePool, "cloud.google.com/gke-nodepool")
	is.Equal(tpu.LabelGKEAcceleratorCount, "cloud.google.com/gke-accelerator-count")
	is.Equal(tpu.ResourceGKETPU, "google.com/tpu")
	is.Equal(tpu.LabelSliceName, "ray.io/tpu-slice-name")
	is.Equal(tpu.LabelWorkerID, "ray.io/tpu-worker-id")
	is.Equal(tpu.LabelPodType, "ray.io/tpu-pod-type")
	is.Equal(tpu.LabelTopology, "ray.io/tpu-topology")
	is.Equal(tpu.LabelAcceleratorType, "ray.io/accelerator-type")
	is.Equal(tpu.ResourceTPU, "TPU")
	is.Equal(tpu.ResourceAcceleratorTypePrefix+tpu.V6e.AcceleratorType(), "accelerator_type:TPU-V6E")
}

func TestHostLabels(t *testing.T) {
	tests := []struct {
		name         string
		g            tpu.Generation
		topology     string
		chipsPerHost int
		sliceName    string
		nodePool     string
		workerID     int
		want         map[string]string
	}{
		{
			name: "v6e 4x4 worker 2", g: tpu.V6e, topology: "4x4",
			sliceName: "train-0", nodePool: "pool-v6e-16", workerID: 2,
			want: map[string]string{
				"cloud.google.com/gke-tpu-accelerator":   "tpu-v6e-slice",
				"cloud.google.com/gke-tpu-topology":      "4x4",
				"cloud.google.com/gke-nodepool":          "pool-v6e-16",
				"cloud.google.com/gke-accelerator-count": "4",
				"ray.io/tpu-slice-name":                  "train-0",
				"ray.io/tpu-worker-id":                   "2",
				"ray.io/tpu-pod-type":                    "v6e-16",
				"ray.io/tpu-topology":                    "4x4",
				"ray.io/accelerator-type":                "TPU-V6E",
			},
		},
		{
			name: "v6e 2x4 single host", g: tpu.V6e, topology: "2x4",
			sliceName: "serve-0", nodePool: "pool-8t", workerID: 0,
			want: map[string]string{
				"cloud.google.com/gke-tpu-accelerator":   "tpu-v6e-slice",
				"cloud.google.com/gke-tpu-topology":      "2x4",
				"cloud.google.com/gke-nodepool":          "pool-8t",
				"cloud.google.com/gke-accelerator-count": "8",
				"ray.io/tpu-slice-name":                  "serve-0",
				"ray.io/tpu-worker-id":                   "0",
				"ray.io/tpu-pod-type":                    "v6e-8",
				"ray.io/tpu-topology":                    "2x4",
				"ray.io/accelerator-type":                "TPU-V6E",
			},
		},
		{
			name: "v5e 4x4", g: tpu.V5e, topology: "4x4",
			sliceName: "s", nodePool: "p", workerID: 3,
			want: map[string]string{
				"cloud.google.com/gke-tpu-accelerator":   "tpu-v5-lite-podslice",
				"cloud.google.com/gke-tpu-topology":      "4x4",
				"cloud.google.com/gke-nodepool":          "p",
				"cloud.google.com/gke-accelerator-count": "4",
				"ray.io/tpu-slice-name":                  "s",
				"ray.io/tpu-worker-id":                   "3",
				"ray.io/tpu-pod-type":                    "v5litepod-16",
				"ray.io/tpu-topology":                    "4x4",
				"ray.io/accelerator-type":                "TPU-V5LITEPOD",
			},
		},
		{
			name: "v7x 2x2x2 worker 1", g: tpu.V7x, topology: "2x2x2",
			sliceName: "ironwood-0", nodePool: "pool-7x", workerID: 1,
			want: map[string]string{
				"cloud.google.com/gke-tpu-accelerator":   "tpu7x",
				"cloud.google.com/gke-tpu-topology":      "2x2x2",
				"cloud.google.com/gke-nodepool":          "pool-7x",
				"cloud.google.com/gke-accelerator-count": "4",
				"ray.io/tpu-slice-name":                  "ironwood-0",
				"ray.io/tpu-worker-id":                   "1",
				"ray.io/tpu-pod-type":                    "v7x-16",
				"ray.io/tpu-topology":                    "2x2x2",
				"ray.io/accelerator-type":                "TPU-V7X",
			},
		},
		{
			name: "v4 2x2x2 without slice name or node pool", g: tpu.V4, topology: "2x2x2", workerID: 0,
			want: map[string]string{
				"cloud.google.com/gke-tpu-accelerator":   "tpu-v4-podslice",
				"cloud.google.com/gke-tpu-topology":      "2x2x2",
				"cloud.google.com/gke-accelerator-count": "4",
				"ray.io/tpu-worker-id":                   "0",
				"ray.io/tpu-pod-type":                    "v4-16",
				"ray.io/tpu-topology":                    "2x2x2",
				"ray.io/accelerator-type":                "TPU-V4",
			},
		},
		{
			name: "v2 has no GKE labels", g: tpu.V2, topology: "4x4",
			sliceName: "legacy", nodePool: "ignored", workerID: 1,
			want: map[string]string{
				"ray.io/tpu-slice-name":   "legacy",
				"ray.io/tpu-worker-id":    "1",
				"ray.io/tpu-pod-type":     "v2-32",
				"ray.io/tpu-topology":     "4x4",
				"ray.io/accelerator-type": "TPU-V2",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			shape, err := tpu.NewSliceShape(tt.g, tt.topology, tt.chipsPerHost)
			is.NoErr(err)
			is.Equal(tpu.HostLabels(shape, tt.sliceName, tt.nodePool, tt.workerID), tt.want)
		})
	}
}

// TestHostResources follows Ray's get_current_node_additional_resources
// (python/ray/_private/accelerators/tpu.py): {TPU_NAME: 1} on every host
// and {"TPU-<pod type>-head": 1} on worker 0.
func TestHostResources(t *testing.T) {
	v6e16 := mustShape(t, tpu.V6e, "4x4", 0)
	v7x8 := mustShape(t, tpu.V7x, "2x2x1", 0)
	tests := []struct {
		name      string
		shape     tpu.SliceShape
		sliceName string
		workerID  int
		want      map[string]float64
	}{
		{"worker 0 holds the head", v6e16, "pool-a", 0, map[string]float64{
			"TPU": 4, "accelerator_type:TPU-V6E": 1, "pool-a": 1, "TPU-v6e-16-head": 1}},
		{"other workers only the name", v6e16, "pool-a", 3, map[string]float64{
			"TPU": 4, "accelerator_type:TPU-V6E": 1, "pool-a": 1}},
		{"single host v7x", v7x8, "iw", 0, map[string]float64{
			"TPU": 4, "accelerator_type:TPU-V7X": 1, "iw": 1, "TPU-v7x-8-head": 1}},
		{"no name, no slice resources", v6e16, "", 0, map[string]float64{
			"TPU": 4, "accelerator_type:TPU-V6E": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			is.Equal(tpu.HostResources(tt.shape, tt.sliceName, tt.workerID), tt.want)
		})
	}
}
