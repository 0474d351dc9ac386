package tpu_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

// dpEnv builds an expected device-plugin env: the always-set variables,
// the slice variables when wrap is not "", and extra.
func dpEnv(accel, topology, ports, wrap, hostBounds, chipBounds string, extra map[string]string) map[string]string {
	env := map[string]string{
		"TPU_SKIP_MDS_QUERY":        "true",
		"TPU_RUNTIME_METRICS_PORTS": ports,
		"TPU_TOPOLOGY":              topology,
		"TPU_ACCELERATOR_TYPE":      accel,
	}
	if wrap != "" {
		maps.Copy(env, map[string]string{
			"TPU_TOPOLOGY_ALT": "false", "ALT": "false",
			"TPU_TOPOLOGY_WRAP": wrap, "WRAP": wrap,
			"TPU_HOST_BOUNDS": hostBounds, "HOST_BOUNDS": hostBounds,
			"TPU_CHIPS_PER_HOST_BOUNDS": chipBounds, "CHIPS_PER_HOST_BOUNDS": chipBounds,
		})
	}
	maps.Copy(env, extra)
	return env
}

var (
	ports1 = "8431"
	ports2 = "8431,8432"
	ports4 = "8431,8432,8433,8434"
	ports8 = "8431,8432,8433,8434,8435,8436,8437,8438"
	single = map[string]string{"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "localhost"}
	ici    = map[string]string{"ENABLE_ICI_RESILIENCY": "true"}
	ff     = "false,false,false"
	tt3    = "true,true,true"
)

// TestDevicePluginEnv replays the GKE TPU device plugin's own TestInitEnvs
// cases (ai-on-gke/tpu-device-plugin pkg/tpu/util/util_test.go), minus
// VBAR_CONTROL_SERVICE_URL, WORKLOAD_NIC_PREFERRED_NUMA and
// TPU_VISIBLE_CHIPS, which DevicePluginEnv does not model. The sub-slice
// cases are in TestSubsliceEnv.
func TestDevicePluginEnv(t *testing.T) {
	tests := []struct {
		name         string
		g            tpu.Generation
		topology     string
		chipsPerHost int // node's chips (gke-accelerator-count)
		requested    int // container's chips; 0 = whole host
		want         map[string]string
	}{
		{"v3 device 2x2", tpu.V3, "2x2", 4, 0, dpEnv("v3-8", "2x2", ports4, "", "", "", single)},
		{"v3 slice 4x4", tpu.V3, "4x4", 4, 0, dpEnv("v3-32", "4x4", ports4, ff, "2,2,1", "2,2,1", nil)},
		{"v3 slice 16x16", tpu.V3, "16x16", 4, 0, dpEnv("v3-512", "16x16", ports4, ff, "8,8,1", "2,2,1", nil)},
		{"v4 2x2x1", tpu.V4, "2x2x1", 4, 0, dpEnv("v4-8", "2x2x1", ports4, ff, "1,1,1", "2,2,1", single)},
		{"v4 2x2x2", tpu.V4, "2x2x2", 4, 0, dpEnv("v4-16", "2x2x2", ports4, ff, "1,1,2", "2,2,1", nil)},
		{"v4 4x4x4", tpu.V4, "4x4x4", 4, 0, dpEnv("v4-128", "4x4x4", ports4, tt3, "2,2,4", "2,2,1", ici)},
		{"v5e 1x1", tpu.V5e, "1x1", 1, 0, dpEnv("v5litepod-1", "1x1", ports1, ff, "1,1,1", "1,1,1", single)},
		{"v5e 2x2", tpu.V5e, "2x2", 4, 0, dpEnv("v5litepod-4", "2x2", ports4, ff, "1,1,1", "2,2,1", single)},
		{"v5e 2x4 on 4-chip hosts", tpu.V5e, "2x4", 4, 0, dpEnv("v5litepod-8", "2x4", ports4, ff, "1,2,1", "2,2,1", nil)},
		{"v5e 2x4 on one 8-chip host", tpu.V5e, "2x4", 8, 0, dpEnv("v5litepod-8", "2x4", ports8, ff, "1,1,1", "2,4,1", single)},
		{"v5e 8x16", tpu.V5e, "8x16", 4, 0, dpEnv("v5litepod-128", "8x16", ports4, "false,true,false", "4,8,1", "2,2,1", nil)},
		{"v5e 16x16", tpu.V5e, "16x16", 4, 0, dpEnv("v5litepod-256", "16x16", ports4, "true,true,false", "8,8,1", "2,2,1", nil)},
		{"v5p 2x2x1", tpu.V5p, "2x2x1", 4, 0, dpEnv("v5p-8", "2x2x1", ports4, ff, "1,1,1", "2,2,1", single)},
		{"v5p 2x4x4", tpu.V5p, "2x4x4", 4, 0, dpEnv("v5p-64", "2x4x4", ports4, ff, "1,2,4", "2,2,1", nil)},
		{"v5p 4x4x4", tpu.V5p, "4x4x4", 4, 0, dpEnv("v5p-128", "4x4x4", ports4, tt3, "2,2,4", "2,2,1", ici)},
		{"v6e 1x1", tpu.V6e, "1x1", 1, 0, dpEnv("v6e-1", "1x1", ports1, ff, "1,1,1", "1,1,1", single)},
		{"v6e 2x4 on one 8-chip host", tpu.V6e, "2x4", 8, 0, dpEnv("v6e-8", "2x4", ports8, ff, "1,1,1", "2,4,1", single)},
		{"v6e 4x8", tpu.V6e, "4x8", 4, 0, dpEnv("v6e-32", "4x8", ports4, ff, "2,4,1", "2,2,1", nil)},
		{"v6e 8x16", tpu.V6e, "8x16", 4, 0, dpEnv("v6e-128", "8x16", ports4, "false,true,false", "4,8,1", "2,2,1", nil)},
		{"v6e 16x16", tpu.V6e, "16x16", 4, 0, dpEnv("v6e-256", "16x16", ports4, "true,true,false", "8,8,1", "2,2,1", nil)},
		// tpu7x: two devices per chip double the metrics ports; no
		// TPU_WORKER_ID even on a single host.
		{"tpu7x 1x1x1", tpu.V7x, "1x1x1", 1, 0, dpEnv("tpu7x-2", "1x1x1", ports2, ff, "1,1,1", "1,1,1", nil)},
		{"tpu7x 2x2x1", tpu.V7x, "2x2x1", 4, 0, dpEnv("tpu7x-8", "2x2x1", ports8, ff, "1,1,1", "2,2,1", nil)},
		{"tpu7x 2x2x1, a 2-chip container (one NUMA node)", tpu.V7x, "2x2x1", 4, 2, dpEnv("tpu7x-8", "2x2x1", ports8, ff, "2,1,1", "1,2,1", nil)},
		{"tpu7x 2x2x2", tpu.V7x, "2x2x2", 4, 0, dpEnv("tpu7x-16", "2x2x2", ports8, ff, "1,1,2", "2,2,1", nil)},
		{"tpu7x 4x4x4", tpu.V7x, "4x4x4", 4, 0, dpEnv("tpu7x-128", "4x4x4", ports8, tt3, "2,2,4", "2,2,1", ici)},
		{"tpu7x 12x24x24", tpu.V7x, "12x24x24", 4, 0, dpEnv("tpu7x-13824", "12x24x24", ports8, tt3, "6,12,24", "2,2,1", ici)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			shape := mustShape(t, tt.g, tt.topology, tt.chipsPerHost)
			env, err := tpu.DevicePluginEnv(shape, tt.requested)
			is.NoErr(err)
			is.Equal(env, tt.want)
		})
	}
}

func TestDevicePluginEnvErrors(t *testing.T) {
	tests := []struct {
		name     string
		shape    tpu.SliceShape
		chips    int
		sentinel error
		message  string
	}{
		{"more chips than the host", mustShape(t, tpu.V6e, "4x4", 0), 8, tpu.ErrInvalidArgument,
			"invalid argument: a container of a v6e 4x4 host cannot hold 8 chips; valid: 1,2,4"},
		{"not a chip grid", mustShape(t, tpu.V6e, "4x4", 0), 3, tpu.ErrInvalidArgument, ""},
		{"negative", mustShape(t, tpu.V6e, "4x4", 0), -1, tpu.ErrInvalidArgument, ""},
		{"invalid shape", tpu.SliceShape{Generation: tpu.V6e}, 0, tpu.ErrInvalidTopology, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			env, err := tpu.DevicePluginEnv(tt.shape, tt.chips)
			is.True(errors.Is(err, tt.sentinel))
			is.Equal(env, nil)
			if tt.message != "" {
				is.Equal(err.Error(), tt.message)
			}
		})
	}
}

// TestPartialHostEnv follows Ray's set_current_process_visible_accelerator_ids
// and its test test_set_tpu_visible_ids_and_bounds
// (python/ray/_private/accelerators/tpu.py,
// python/ray/tests/accelerators/test_tpu.py): 1 chip → bounds 1,1,1 and
// 1,1,1; 2 chips → 1,2,1 and 1,1,1; the whole host → nothing set.
func TestPartialHostEnv(t *testing.T) {
	v6e16 := mustShape(t, tpu.V6e, "4x4", 0)
	v6e8 := mustShape(t, tpu.V6e, "2x4", 0)
	tests := []struct {
		name  string
		shape tpu.SliceShape
		chips []int
		want  map[string]string
	}{
		{"one chip", v6e16, []int{3}, map[string]string{"TPU_VISIBLE_CHIPS": "3", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1", "TPU_HOST_BOUNDS": "1,1,1"}},
		{"two chips", v6e16, []int{0, 1}, map[string]string{"TPU_VISIBLE_CHIPS": "0,1", "TPU_CHIPS_PER_HOST_BOUNDS": "1,2,1", "TPU_HOST_BOUNDS": "1,1,1"}},
		{"four of eight: no bounds", v6e8, []int{4, 5, 6, 7}, map[string]string{"TPU_VISIBLE_CHIPS": "4,5,6,7"}},
		{"whole host: nothing", v6e16, []int{0, 1, 2, 3}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			env, err := tpu.PartialHostEnv(tt.shape, tt.chips)
			is.NoErr(err)
			is.Equal(env, tt.want)
		})
	}
	t.Run("errors", func(t *testing.T) {
		is := is.New(t)
		for _, chips := range [][]int{nil, {4}, {-1}, {0, 0}} {
			_, err := tpu.PartialHostEnv(v6e16, chips)
			is.True(errors.Is(err, tpu.ErrInvalidArgument))
		}
	})
}

// TestNodeEnvICIResiliency follows the device plugin's
// addPodsliceOrSliceEnvs (ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go):
// ENABLE_ICI_RESILIENCY is "true" for v4, v5p and tpu7x topologies of
// 4x4x4 or larger, and "false" when the node's
// cloud.google.com/gke-tpu-ici-resiliency label is "false" in any case;
// other shapes get no variable whatever the label says.
func TestNodeEnvICIResiliency(t *testing.T) {
	const label = "cloud.google.com/gke-tpu-ici-resiliency"
	for _, tt := range []struct {
		gen, topo string
		labels    map[string]string
		want      string // "" for unset
	}{
		{"v5p", "4x4x4", nil, "true"},
		{"v5p", "4x4x4", map[string]string{label: "false"}, "false"},
		{"v5p", "4x4x8", map[string]string{label: "False"}, "false"},
		{"v4", "4x4x4", map[string]string{label: "true"}, "true"},
		{"v7x", "4x4x4", map[string]string{label: "false"}, "false"},
		{"v7x", "4x4x4", map[string]string{label: "no"}, "true"}, // only "false" disables
		{"v5p", "2x2x4", map[string]string{label: "false"}, ""},
		{"v6e", "16x16", map[string]string{label: "false"}, ""},
	} {
		t.Run(tt.gen+" "+tt.topo, func(t *testing.T) {
			is := is.New(t)
			shape, err := tpu.NewSliceShape(tpu.Generation(tt.gen), tt.topo, 0)
			is.NoErr(err)
			env, err := tpu.DevicePluginEnv(shape, 0)
			is.NoErr(err)
			env = tpu.NodeEnv(env, tt.labels)
			got, ok := env["ENABLE_ICI_RESILIENCY"]
			is.Equal(ok, tt.want != "")
			is.Equal(got, tt.want)
		})
	}
}
