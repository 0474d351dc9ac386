package tpu_test

import (
	"errors"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

func TestEnvNames(t *testing.T) {
	is := is.New(t)
	is.Equal(tpu.EnvWorkerID, "TPU_WORKER_ID")
	is.Equal(tpu.EnvWorkerHostnames, "TPU_WORKER_HOSTNAMES")
	is.Equal(tpu.EnvName, "TPU_NAME")
	is.Equal(tpu.EnvAcceleratorType, "TPU_ACCELERATOR_TYPE")
	is.Equal(tpu.EnvTopology, "TPU_TOPOLOGY")
	is.Equal(tpu.EnvHostBounds, "TPU_HOST_BOUNDS")
	is.Equal(tpu.EnvChipsPerHostBounds, "TPU_CHIPS_PER_HOST_BOUNDS")
	is.Equal(tpu.EnvSkipMDSQuery, "TPU_SKIP_MDS_QUERY")
	is.Equal(tpu.EnvVisibleChips, "TPU_VISIBLE_CHIPS")
	is.Equal(tpu.EnvResourcePerChip, "RAY_TPU_RESOURCE_PER_CHIP")
	is.Equal(tpu.EnvMegascaleCoordinatorAddress, "MEGASCALE_COORDINATOR_ADDRESS")
	is.Equal(tpu.EnvMegascalePort, "MEGASCALE_PORT")
	is.Equal(tpu.EnvMegascaleNumSlices, "MEGASCALE_NUM_SLICES")
	is.Equal(tpu.EnvMegascaleSliceID, "MEGASCALE_SLICE_ID")
	is.Equal(tpu.DefaultMegascalePort, 8081)
}

func mustShape(t *testing.T, g tpu.Generation, topology string, chipsPerHost int) tpu.SliceShape {
	t.Helper()
	s, err := tpu.NewSliceShape(g, topology, chipsPerHost)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestWorkerEnv(t *testing.T) {
	tests := []struct {
		name      string
		shape     tpu.SliceShape
		sliceName string
		hostnames []string
		workerID  int
		want      map[string]string
	}{
		{
			name:      "v6e 4x4 worker 1",
			shape:     mustShape(t, tpu.V6e, "4x4", 0),
			sliceName: "workers-0",
			hostnames: []string{"workers-0-0.rc-headless", "workers-0-1.rc-headless", "workers-0-2.rc-headless", "workers-0-3.rc-headless"},
			workerID:  1,
			want: map[string]string{
				"TPU_WORKER_ID":             "1",
				"TPU_WORKER_HOSTNAMES":      "workers-0-0.rc-headless,workers-0-1.rc-headless,workers-0-2.rc-headless,workers-0-3.rc-headless",
				"TPU_NAME":                  "workers-0",
				"TPU_ACCELERATOR_TYPE":      "v6e-16",
				"TPU_TOPOLOGY":              "4x4",
				"TPU_HOST_BOUNDS":           "2,2,1",
				"TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
				"TPU_SKIP_MDS_QUERY":        "true",
			},
		},
		{
			name:      "v7x 2x2x2 uses the GKE pod type",
			shape:     mustShape(t, tpu.V7x, "2x2x2", 0),
			sliceName: "iw",
			hostnames: []string{"h0", "h1"},
			workerID:  0,
			want: map[string]string{
				"TPU_WORKER_ID":        "0",
				"TPU_WORKER_HOSTNAMES": "h0,h1",
				"TPU_NAME":             "iw",
				// The webhook's getTPUProcessAddresses, for one
				// container per host (numTpuContainers 1).
				"TPU_PROCESS_ADDRESSES":     "h0:8471,h1:8471",
				"TPU_PROCESS_PORT":          "8471",
				"TPU_ACCELERATOR_TYPE":      "tpu7x-16",
				"TPU_TOPOLOGY":              "2x2x2",
				"TPU_HOST_BOUNDS":           "1,1,2",
				"TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
				"TPU_SKIP_MDS_QUERY":        "true",
			},
		},
		{
			name:      "v5e 2x4 as two 4-chip hosts",
			shape:     mustShape(t, tpu.V5e, "2x4", 4),
			sliceName: "lite",
			hostnames: []string{"a", "b"},
			workerID:  1,
			want: map[string]string{
				"TPU_WORKER_ID":             "1",
				"TPU_WORKER_HOSTNAMES":      "a,b",
				"TPU_NAME":                  "lite",
				"TPU_ACCELERATOR_TYPE":      "v5litepod-8",
				"TPU_TOPOLOGY":              "2x4",
				"TPU_HOST_BOUNDS":           "1,2,1",
				"TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
				"TPU_SKIP_MDS_QUERY":        "true",
			},
		},
		{
			name:      "single host defaults to localhost",
			shape:     mustShape(t, tpu.V6e, "2x4", 0),
			sliceName: "one",
			workerID:  0,
			want: map[string]string{
				"TPU_WORKER_ID":             "0",
				"TPU_WORKER_HOSTNAMES":      "localhost",
				"TPU_NAME":                  "one",
				"TPU_ACCELERATOR_TYPE":      "v6e-8",
				"TPU_TOPOLOGY":              "2x4",
				"TPU_HOST_BOUNDS":           "1,1,1",
				"TPU_CHIPS_PER_HOST_BOUNDS": "2,4,1",
				"TPU_SKIP_MDS_QUERY":        "true",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			env, err := tpu.WorkerEnv(tt.shape, tt.sliceName, tt.hostnames, tt.workerID)
			is.NoErr(err)
			// The rest of the env is the device plugin's, which
			// TestDevicePluginEnv pins against the plugin's own tests.
			dp, err := tpu.DevicePluginEnv(tt.shape, 0)
			is.NoErr(err)
			for k, v := range dp {
				if _, ok := tt.want[k]; !ok {
					tt.want[k] = v
				}
			}
			is.Equal(env, tt.want)
		})
	}
}

func TestWorkerEnvErrors(t *testing.T) {
	v6e16 := mustShape(t, tpu.V6e, "4x4", 0)
	four := []string{"h0", "h1", "h2", "h3"}
	tests := []struct {
		name      string
		shape     tpu.SliceShape
		sliceName string
		hostnames []string
		workerID  int
		sentinel  error
		message   string
	}{
		{"too few hostnames", v6e16, "s", []string{"h0", "h1"}, 0, tpu.ErrInvalidArgument,
			"invalid argument: v6e 4x4 has 4 hosts but 2 hostnames were given"},
		{"no hostnames for a multi-host slice", v6e16, "s", nil, 0, tpu.ErrInvalidArgument,
			"invalid argument: v6e 4x4 has 4 hosts but 0 hostnames were given"},
		{"too many hostnames", v6e16, "s", append(four, "h4"), 0, tpu.ErrInvalidArgument, ""},
		{"negative worker ID", v6e16, "s", four, -1, tpu.ErrInvalidArgument,
			"invalid argument: worker ID -1 is outside 0..3 for v6e 4x4"},
		{"worker ID past the last host", v6e16, "s", four, 4, tpu.ErrInvalidArgument,
			"invalid argument: worker ID 4 is outside 0..3 for v6e 4x4"},
		{"empty slice name", v6e16, "", four, 0, tpu.ErrInvalidArgument,
			"invalid argument: empty slice name for v6e 4x4"},
		{"empty hostname", v6e16, "s", []string{"h0", "", "h2", "h3"}, 0, tpu.ErrInvalidArgument,
			`invalid argument: hostname 1 ("") of v6e 4x4 is empty or contains a comma or space`},
		{"hostname with comma", v6e16, "s", []string{"h0", "h1,h2", "h2", "h3"}, 0, tpu.ErrInvalidArgument, ""},
		{"zero shape", tpu.SliceShape{}, "s", nil, 0, tpu.ErrUnknownGeneration, ""},
		{"invalid chips per host", tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4"), ChipsPerHost: 3},
			"s", four, 0, tpu.ErrInvalidChipsPerHost, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			env, err := tpu.WorkerEnv(tt.shape, tt.sliceName, tt.hostnames, tt.workerID)
			is.True(errors.Is(err, tt.sentinel))
			is.Equal(env, nil)
			if tt.message != "" {
				is.Equal(err.Error(), tt.message)
			}
		})
	}
}

func TestMultisliceEnv(t *testing.T) {
	tests := []struct {
		name      string
		addr      string
		port      int
		numSlices int
		sliceID   int
		want      map[string]string
	}{
		{"default port", "workers-0-0.rc-headless", 0, 2, 1, map[string]string{
			"MEGASCALE_COORDINATOR_ADDRESS": "workers-0-0.rc-headless",
			"MEGASCALE_PORT":                "8081",
			"MEGASCALE_NUM_SLICES":          "2",
			"MEGASCALE_SLICE_ID":            "1",
		}},
		{"explicit port, one slice", "10.0.0.7", 9000, 1, 0, map[string]string{
			"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.7",
			"MEGASCALE_PORT":                "9000",
			"MEGASCALE_NUM_SLICES":          "1",
			"MEGASCALE_SLICE_ID":            "0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			env, err := tpu.MultisliceEnv(tt.addr, tt.port, tt.numSlices, tt.sliceID)
			is.NoErr(err)
			is.Equal(env, tt.want)
		})
	}
}

func TestMultisliceEnvErrors(t *testing.T) {
	tests := []struct {
		name      string
		addr      string
		port      int
		numSlices int
		sliceID   int
		message   string
	}{
		{"empty address", "", 0, 2, 0, `invalid argument: multislice coordinator address "" is empty or contains spaces`},
		{"address with space", "a b", 0, 2, 0, ""},
		{"negative port", "c", -1, 2, 0, "invalid argument: multislice coordinator port -1 is outside 1..65535"},
		{"port too large", "c", 65536, 2, 0, "invalid argument: multislice coordinator port 65536 is outside 1..65535"},
		{"no slices", "c", 0, 0, 0, "invalid argument: number of slices 0 is below 1"},
		{"slice ID past the end", "c", 0, 2, 2, "invalid argument: slice ID 2 is outside 0..1"},
		{"negative slice ID", "c", 0, 2, -1, "invalid argument: slice ID -1 is outside 0..1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			env, err := tpu.MultisliceEnv(tt.addr, tt.port, tt.numSlices, tt.sliceID)
			is.True(errors.Is(err, tpu.ErrInvalidArgument))
			is.Equal(env, nil)
			if tt.message != "" {
				is.Equal(err.Error(), tt.message)
			}
		})
	}
}
