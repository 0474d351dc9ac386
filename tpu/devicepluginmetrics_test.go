package tpu_test

import (
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

// exposition is a device plugin's /metrics as a tpu7x node serves it:
// the per-pod families (skipped), the node-level chip families for chips
// -0 and -4, and Go runtime metrics. Names, labels and number formats as
// the plugin writes them.
const exposition = `# HELP duty_cycle Percent of time when the TPU was actively processing
# TYPE duty_cycle gauge
duty_cycle{accelerator_id="1234567890123456789-4",container="vllm-worker",make="cloud-tpu",model="tpu7x",namespace="test-namespace",pod="test-workload-pod",tpu_topology="2x2x2"} 42
# HELP duty_cycle_node Percent of time when the TPU was actively processing
# TYPE duty_cycle_node gauge
duty_cycle_node{accelerator_id="1234567890123456789-0",make="cloud-tpu",model="tpu7x",tpu_topology="2x2x2"} 0
duty_cycle_node{accelerator_id="1234567890123456789-4",make="cloud-tpu",model="tpu7x",tpu_topology="2x2x2"} 99
# HELP memory_total_node Total memory available on the TPU in bytes
# TYPE memory_total_node gauge
memory_total_node{accelerator_id="1234567890123456789-4",make="cloud-tpu",model="tpu7x",tpu_topology="2x2x2"} 2.03465670656e+11
# HELP memory_used_node Allocated TPU memory in bytes
# TYPE memory_used_node gauge
memory_used_node{accelerator_id="1234567890123456789-4",make="cloud-tpu",model="tpu7x",tpu_topology="2x2x2"} 1.017328353e+11
# HELP tensorcore_utilization_node Tensorcore percent utilization of the TPU device per node
# TYPE tensorcore_utilization_node gauge
tensorcore_utilization_node{accelerator_id="1234567890123456789-4",make="cloud-tpu",model="tpu7x",tpu_topology="2x2x2"} 37.5
# HELP memory_bandwidth_utilization_node Memory bandwidth utilization of the TPU device per node
# TYPE memory_bandwidth_utilization_node gauge
memory_bandwidth_utilization_node{accelerator_id="1234567890123456789-4",make="cloud-tpu",model="tpu7x",tpu_topology="2x2x2"} 12
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 12
`

func TestParseDevicePluginMetrics(t *testing.T) {
	is := is.New(t)
	chips, err := tpu.ParseDevicePluginMetrics([]byte(exposition))
	is.NoErr(err)
	is.Equal(chips, []tpu.ChipMetrics{
		{Device: 0, AcceleratorID: "1234567890123456789-0", DutyCycle: 0, TensorCoreUtilization: -1, MemoryBandwidthUtilization: -1, HBMUsed: -1, HBMTotal: -1},
		{Device: 4, AcceleratorID: "1234567890123456789-4", DutyCycle: 99, TensorCoreUtilization: 37.5, MemoryBandwidthUtilization: 12, HBMUsed: 1.017328353e+11, HBMTotal: 2.03465670656e+11},
	})

	for _, tt := range []struct{ name, text, want string }{
		{"no accelerator_id", `duty_cycle_node{make="cloud-tpu"} 1`, "no accelerator_id label"},
		{"a bad value", `duty_cycle_node{accelerator_id="x-1"} high`, `value "high"`},
		{"an id without a device", `duty_cycle_node{accelerator_id="chip"} 1`, `accelerator_id "chip" does not end in -<device index>`},
		{"no closing brace", `memory_used_node{accelerator_id="x-1" 1`, "no closing brace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, err := tpu.ParseDevicePluginMetrics([]byte("# comment\n" + tt.text + "\n"))
			is.True(err != nil && strings.Contains(err.Error(), tt.want))
			is.True(strings.Contains(err.Error(), "line 2")) // names the line
		})
	}
	chips, err = tpu.ParseDevicePluginMetrics([]byte("go_goroutines 3\n"))
	is.NoErr(err)
	is.Equal(len(chips), 0) // no chip families: no chips
}
