package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

const clusterFile = `{
  "nodes": [
    {"name": "cpu", "count": 2, "resources": {"CPU": 8, "memory": "32GiB"}, "labels": {"pool": "cpu"}},
    {"name": "big", "resources": {"CPU": 64.5, "memory": 137438953472, "scratch": "512MiB", "GPU": "2"},
     "labels": {"pool": "big", "zone": "a"}, "env": {"ROLE": "big"}}
  ],
  "tpuSlices": [
    {"generation": "v6e", "topology": "4x4", "count": 2},
    {"generation": "v5p", "topology": "2x2x2", "namePrefix": "train", "hostCPU": 16, "hostMemory": 1024}
  ]
}`

func TestParseClusterSpec(t *testing.T) {
	is := is.New(t)
	s, err := local.ParseClusterSpec([]byte(clusterFile))
	is.NoErr(err)
	is.Equal(len(s.Nodes), 2)

	cpu := s.Nodes[0]
	is.Equal(cpu.Name, "cpu")
	is.Equal(cpu.Count, 2)
	is.Equal(cpu.Resources, map[string]float64{"CPU": 8, "memory": 32 << 30}) // quantity strings parse
	is.Equal(cpu.Labels, map[string]string{"pool": "cpu"})

	big := s.Nodes[1]
	is.Equal(big.Count, 0)
	is.Equal(big.Resources, map[string]float64{"CPU": 64.5, "memory": 128 << 30, "scratch": 512 << 20, "GPU": 2})
	is.Equal(big.Labels, map[string]string{"pool": "big", "zone": "a"})
	is.Equal(big.Env, map[string]string{"ROLE": "big"})

	is.Equal(s.TPUSlices, []local.TPUSliceSpec{
		{Generation: "v6e", Topology: "4x4", Count: 2},
		{Generation: "v5p", Topology: "2x2x2", NamePrefix: "train", HostCPU: 16, HostMemory: 1024},
	})
}

func TestClusterSpecJSONRoundTrip(t *testing.T) {
	is := is.New(t)
	s, err := local.ParseClusterSpec([]byte(clusterFile))
	is.NoErr(err)
	data, err := json.Marshal(s)
	is.NoErr(err)
	again, err := local.ParseClusterSpec(data)
	is.NoErr(err)
	is.Equal(again, s) // what MarshalJSON writes, ParseClusterSpec reads back
}

func TestParseClusterSpecErrors(t *testing.T) {
	tests := []struct {
		name string
		json string
		want []string // substrings of the error
	}{
		{"unknown top-level field", `{"nodes": [], "node": []}`, []string{`unknown field "node"`}},
		{"unknown node field", `{"nodes": [{"name": "a", "cpus": 4}]}`, []string{`unknown field "cpus"`}},
		{"unknown TPU slice field", `{"tpuSlices": [{"generation": "v6e", "topology": "4x4", "hosts": 4}]}`, []string{`unknown field "hosts"`}},
		{"bad quantity", `{"nodes": [{"name": "a", "resources": {"memory": "lots"}}]}`, []string{`node "a"`, `resource "memory"`, "KiB/MiB/GiB/TiB"}},
		{"resource of the wrong type", `{"nodes": [{"name": "a", "resources": {"CPU": true}}]}`, []string{`node "a"`, `resource "CPU"`, "want a number or a quantity string"}},
		{"count of the wrong type", `{"nodes": [{"name": "a", "count": "2"}]}`, []string{"count"}},
		{"not JSON", `nodes: []`, []string{"invalid character"}},
		{"empty input", ``, []string{"EOF"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, err := local.ParseClusterSpec([]byte(tt.json))
			is.True(err != nil)
			is.Equal(ray.CodeOf(err), ray.InvalidArgument)
			is.True(strings.HasPrefix(err.Error(), "parse cluster spec: "))
			for _, want := range tt.want {
				is.True(strings.Contains(err.Error(), want)) // the error says what is wrong
			}
		})
	}
}

func TestParseClusterSpecRejectsTrailingData(t *testing.T) {
	for _, in := range []string{
		`{"nodes": [{"name": "a", "resources": {"CPU": 1}}]}}`,
		`{"nodes": [{"name": "a", "resources": {"CPU": 1}}]} {"nodes": []}`,
	} {
		t.Run(in, func(t *testing.T) {
			is := is.New(t)
			_, err := local.ParseClusterSpec([]byte(in))
			is.True(err != nil) // trailing data must be rejected
		})
	}
}

func TestNewSpecErrors(t *testing.T) {
	cpu := backend.Resources{"CPU": 1}
	tests := []struct {
		name string
		spec local.ClusterSpec
		want []string
	}{
		{"empty spec", local.ClusterSpec{}, []string{"no nodes"}},
		{"empty name", local.ClusterSpec{Nodes: []local.NodeSpec{{Resources: cpu}}}, []string{"empty name"}},
		{"duplicate name", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Resources: cpu}, {Name: "a"}}},
			[]string{`duplicate node name "a"`}},
		{"duplicate after count", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Count: 2}, {Name: "cpu-1"}}},
			[]string{`duplicate node name "cpu-1"`}},
		{"duplicate of a TPU host", local.ClusterSpec{
			Nodes:     []local.NodeSpec{{Name: "v6e-16-0-w1"}},
			TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4"}},
		}, []string{`duplicate node name "v6e-16-0-w1"`}},
		{"negative count", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Count: -1}}}, []string{`node "a"`, "negative count -1"}},
		{"negative resource", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Resources: backend.Resources{"CPU": -2}}}},
			[]string{`node "a"`, `resource "CPU"`, "-2"}},
		{"NaN quantity", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Resources: backend.Resources{"memory": math.NaN()}}}},
			[]string{`node "a"`, `resource "memory"`, "NaN"}},
		{"negative resource on a counted node", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Count: 3, Resources: backend.Resources{"GPU": -1}}}},
			[]string{`node "cpu-0"`, `resource "GPU"`}},
		{"invalid TPU topology", local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x5"}}},
			[]string{"TPU slice spec 0", `"4x5"`, "valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16"}},
		{"malformed TPU topology", local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v5p", Topology: "2x2"}}},
			[]string{"TPU slice spec 0", `"2x2"`, "v5p topologies are three-dimensional"}},
		{"unknown TPU generation", local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v9", Topology: "4x4"}}},
			[]string{"TPU slice spec 0", `"v9"`, "valid: v2, v3, v4, v5e, v5p, v6e, v7x"}},
		{"second TPU spec named", local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2"}, {Generation: "v6e", Topology: "3x3"}}},
			[]string{"TPU slice spec 1", `"3x3"`}},
		{"negative TPU count", local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: -2}}},
			[]string{"TPU slice spec 0", "negative count -2"}},
		{"count above MaxNodes", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Count: 1_000_000}}},
			[]string{`node "cpu"`, "count 1000000", "limit of 10000 nodes"}},
		{"counts add up above MaxNodes", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Count: 6000}, {Name: "b", Count: 6000}}},
			[]string{`node "b"`, "limit of 10000 nodes"}},
		{"TPU hosts above MaxNodes", local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "16x16", Count: 1000}}},
			[]string{"TPU slice spec 0", "1000 slices of 64 hosts", "limit of 10000 nodes"}},
		{"1e15 CPUs", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Resources: backend.Resources{"CPU": 1e15}}}},
			[]string{`node "a"`, `resource "CPU"`, "at most 1e+14"}},
		{"2 PiB memory in a cluster file unit", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Resources: backend.Resources{"memory": 2 << 50}}}},
			[]string{`node "a"`, `resource "memory"`, "at most"}},
		{"CPU that rounds to zero", local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Resources: backend.Resources{"CPU": 1e-5}}}},
			[]string{`node "a"`, "rounds to 0"}},
		{"negative TPU host CPU", local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", HostCPU: -1}}},
			[]string{`node "v6e-4-0-w0"`, `resource "CPU"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			b, err := local.New(tt.spec, nil)
			is.True(err != nil)
			is.True(b == nil)
			is.True(errors.Is(err, ray.ErrInvalidArgument))
			for _, want := range tt.want {
				is.True(strings.Contains(err.Error(), want)) // the error names the input and what is valid
			}
		})
	}
}

func TestNewRejectsEmptyNameWithCount(t *testing.T) {
	is := is.New(t)
	_, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Count: 2, Resources: backend.Resources{"CPU": 1}}}}, nil)
	is.True(err != nil) // an unnamed node must be rejected whatever its count
}

func TestLoadClusterSpec(t *testing.T) {
	dir := t.TempDir()
	write := func(t *testing.T, name, data string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Run("valid file", func(t *testing.T) {
		is := is.New(t)
		s, err := local.LoadClusterSpec(write(t, "cluster.json", clusterFile))
		is.NoErr(err)
		want, err := local.ParseClusterSpec([]byte(clusterFile))
		is.NoErr(err)
		is.Equal(s, want)
	})
	t.Run("missing file", func(t *testing.T) {
		is := is.New(t)
		path := filepath.Join(dir, "missing.json")
		_, err := local.LoadClusterSpec(path)
		is.True(err != nil)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(errors.Is(err, os.ErrNotExist))
		is.True(strings.Contains(err.Error(), path)) // names the file
	})
	t.Run("invalid file names the path", func(t *testing.T) {
		is := is.New(t)
		path := write(t, "bad.json", `{"nodes": [{"name": "a", "gpus": 1}]}`)
		_, err := local.LoadClusterSpec(path)
		is.True(err != nil)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), path))
		is.True(strings.Contains(err.Error(), `unknown field "gpus"`))
	})
}

// snapshot builds a backend from spec and returns its nodes by name, in
// spec order.
func snapshot(t *testing.T, spec local.ClusterSpec) ([]string, map[string]backend.NodeState) {
	t.Helper()
	b, err := local.New(spec, nil)
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	st, err := b.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	var names []string
	byName := map[string]backend.NodeState{}
	for _, n := range st.Nodes {
		names = append(names, n.Name)
		byName[n.Name] = n
	}
	return names, byName
}

func TestNodeNamingWithCount(t *testing.T) {
	cpu := backend.Resources{"CPU": 2}
	tests := []struct {
		name  string
		nodes []local.NodeSpec
		want  []string
	}{
		{"count 0 keeps the name", []local.NodeSpec{{Name: "head", Resources: cpu}}, []string{"head"}},
		{"count 1 keeps the name", []local.NodeSpec{{Name: "head", Count: 1, Resources: cpu}}, []string{"head"}},
		{"count 3", []local.NodeSpec{{Name: "cpu", Count: 3, Resources: cpu}}, []string{"cpu-0", "cpu-1", "cpu-2"}},
		{"spec order", []local.NodeSpec{{Name: "b", Count: 2}, {Name: "a"}}, []string{"b-0", "b-1", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			names, byName := snapshot(t, local.ClusterSpec{Nodes: tt.nodes})
			is.Equal(names, tt.want)
			for _, n := range byName {
				is.True(n.Alive)
				is.Equal(n.Free, n.Capacity) // nothing runs yet
			}
		})
	}
	t.Run("copies share labels and resources", func(t *testing.T) {
		is := is.New(t)
		labels := map[string]string{"pool": "cpu"}
		res := backend.Resources{"CPU": 4, "memory": 8 << 30}
		b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Count: 2, Resources: res, Labels: labels}}}, nil)
		is.NoErr(err)
		defer b.Close()
		labels["pool"] = "changed" // the backend keeps its own copies
		res["CPU"] = 99
		st, err := b.Snapshot(context.Background())
		is.NoErr(err)
		is.Equal(len(st.Nodes), 2)
		for _, n := range st.Nodes {
			is.Equal(n.Labels, map[string]string{"pool": "cpu"})
			is.Equal(n.Capacity, backend.Resources{"CPU": 4, "memory": 8 << 30})
		}
	})
}

func TestTPUHostNamingAndLabels(t *testing.T) {
	t.Run("v6e 4x4 twice", func(t *testing.T) {
		is := is.New(t)
		names, byName := snapshot(t, local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: 2}}})
		is.Equal(names, []string{
			"v6e-16-0-w0", "v6e-16-0-w1", "v6e-16-0-w2", "v6e-16-0-w3",
			"v6e-16-1-w0", "v6e-16-1-w1", "v6e-16-1-w2", "v6e-16-1-w3",
		})
		h := byName["v6e-16-1-w2"]
		is.Equal(h.Labels, map[string]string{
			tpu.LabelWorkerID:            "2",
			tpu.LabelSliceName:           "v6e-16-1",
			tpu.LabelPodType:             "v6e-16",
			tpu.LabelTopology:            "4x4",
			tpu.LabelAcceleratorType:     "TPU-V6E",
			tpu.LabelGKEAccelerator:      "tpu-v6e-slice",
			tpu.LabelGKETopology:         "4x4",
			tpu.LabelGKENodePool:         "v6e-16-1",
			tpu.LabelGKEAcceleratorCount: "4",
		})
		is.Equal(h.Capacity, backend.Resources{
			"CPU": 8, "memory": 64 << 30, "TPU": 4, "accelerator_type:TPU-V6E": 1,
		})
	})
	t.Run("name prefix and host sizes", func(t *testing.T) {
		is := is.New(t)
		names, byName := snapshot(t, local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{
			{Generation: "v5p", Topology: "2x2x2", NamePrefix: "train", HostCPU: 16, HostMemory: 128 << 30},
		}})
		is.Equal(names, []string{"train-0-w0", "train-0-w1"})
		h := byName["train-0-w1"]
		is.Equal(h.Labels[tpu.LabelSliceName], "train-0")
		is.Equal(h.Labels[tpu.LabelWorkerID], "1")
		is.Equal(h.Labels[tpu.LabelTopology], "2x2x2")
		is.Equal(h.Capacity, backend.Resources{
			"CPU": 16, "memory": 128 << 30, "TPU": 4, "accelerator_type:TPU-V5P": 1,
		})
	})
	t.Run("single-host slice", func(t *testing.T) {
		is := is.New(t)
		names, byName := snapshot(t, local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4"}}})
		is.Equal(names, []string{"v6e-8-0-w0"})
		is.Equal(byName["v6e-8-0-w0"].Capacity["TPU"], 8.0) // every chip on one host
	})
	t.Run("chips per host override", func(t *testing.T) {
		is := is.New(t)
		names, byName := snapshot(t, local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4", ChipsPerHost: 4}}})
		is.Equal(names, []string{"v6e-8-0-w0", "v6e-8-0-w1"})
		is.Equal(byName["v6e-8-0-w1"].Labels[tpu.LabelGKEAcceleratorCount], "4")
	})
	t.Run("CPU nodes first, then TPU hosts", func(t *testing.T) {
		is := is.New(t)
		names, _ := snapshot(t, local.ClusterSpec{
			Nodes:     []local.NodeSpec{{Name: "head", Resources: backend.Resources{"CPU": 4}}},
			TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2"}},
		})
		is.Equal(names, []string{"head", "v6e-4-0-w0"})
	})
}

func TestTPUSlicesFromSpec(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{
		{Generation: "v6e", Topology: "4x4", Count: 2},
		{Generation: "v5p", Topology: "2x2x2"},
	}}, nil)
	is.NoErr(err)
	defer b.Close()
	slices, err := b.Slices(context.Background())
	is.NoErr(err)
	is.Equal(len(slices), 3)
	type got struct {
		Name, Gen, Topo string
		Hosts           []string
		Intact, Idle    bool
	}
	var out []got
	for _, s := range slices {
		g := got{Name: s.Name, Gen: s.Generation, Topo: s.Topology, Intact: s.Intact, Idle: s.Idle}
		for _, h := range s.Hosts {
			g.Hosts = append(g.Hosts, h.Node)
			is.Equal(h.ChipsInUse, 0)
			is.Equal(h.Chips, 4)
		}
		out = append(out, g)
	}
	is.Equal(out, []got{
		{"v6e-16-0", "v6e", "4x4", []string{"v6e-16-0-w0", "v6e-16-0-w1", "v6e-16-0-w2", "v6e-16-0-w3"}, true, true},
		{"v6e-16-1", "v6e", "4x4", []string{"v6e-16-1-w0", "v6e-16-1-w1", "v6e-16-1-w2", "v6e-16-1-w3"}, true, true},
		{"v5p-16-0", "v5p", "2x2x2", []string{"v5p-16-0-w0", "v5p-16-0-w1"}, true, true},
	})
}

func TestSelectorClassKeyCollision(t *testing.T) {
	// This belongs in a scheduler test file; it lives here because this
	// change may only add the spec and example test files.
	is := is.New(t)
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{
		{Name: "n1", Resources: backend.Resources{"CPU": 1}, Labels: map[string]string{"rack": "b", "zone": "a"}},
	}}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	_, err = specNode.Remote(ctx, c, 0, ray.NodeSelector{"rack": "b", "zone": "a"}).Get(ctx)
	is.NoErr(err)
	err = specNode.Remote(ctx, c, 0, ray.NodeSelector{"rack": "b, zone=a"}).Err()
	is.Equal(ray.CodeOf(err), ray.InvalidArgument) // malformed selector is rejected whatever ran before
	err = specNode.Remote(ctx, c, 0, ray.NodeSelector{"rack=b, zone": "a"}).Err()
	is.Equal(ray.CodeOf(err), ray.Infeasible) // no node has the label "rack=b, zone"
}

var specNode = ray.NewTask("localspectest.node", func(ctx context.Context, _ int) (string, error) {
	rc, _ := ray.Runtime(ctx)
	return rc.NodeName(), nil
})

// TestClusterFileCountCapped: a tiny cluster file cannot make the
// simulator build a huge cluster; the count is refused before anything is
// allocated.
func TestClusterFileCountCapped(t *testing.T) {
	is := is.New(t)
	spec, err := local.ParseClusterSpec([]byte(`{"nodes":[{"name":"n","count":1000000,"resources":{"CPU":1}}]}`))
	is.NoErr(err)
	_, err = local.New(spec, nil)
	is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	is.True(strings.Contains(err.Error(), "limit of 10000 nodes")) // names the limit
}
