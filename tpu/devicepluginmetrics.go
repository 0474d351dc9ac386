package tpu

import (
	"fmt"
	"strconv"
	"strings"
)

// The GKE TPU device plugin serves each TPU node's chip metrics in the
// Prometheus text format on DevicePluginMetricsPort at
// DevicePluginMetricsPath. The node-level families (no pod labels) have
// one sample per chip, labelled make, accelerator_id ("<instance
// ID>-<device index>"), model and tpu_topology:
//
//	duty_cycle_node{accelerator_id="1234567890123456789-4",make="cloud-tpu",model="tpu7x",tpu_topology="2x2x2"} 99
//
// Names and labels as the plugin's source declares them
// (container-engine-accelerators, pkg/tpu/metrics).
const (
	DevicePluginMetricsPort = 2112
	DevicePluginMetricsPath = "/metrics"

	// MetricDutyCycle is the percent of time the chip was actively
	// processing.
	MetricDutyCycle = "duty_cycle_node"
	// MetricTensorCoreUtilization is the chip's tensor-core (MXU)
	// utilisation, in percent.
	MetricTensorCoreUtilization = "tensorcore_utilization_node"
	// MetricMemoryUsed and MetricMemoryTotal are the chip's HBM allocated
	// and in all, in bytes.
	MetricMemoryUsed  = "memory_used_node"
	MetricMemoryTotal = "memory_total_node"
	// MetricMemoryBandwidthUtilization is the chip's HBM bandwidth
	// utilisation, in percent.
	MetricMemoryBandwidthUtilization = "memory_bandwidth_utilization_node"
)

// ChipMetrics is one chip's metrics from the device plugin. A value the
// plugin did not report (no workload on the chip yet, or an older plugin)
// is -1.
type ChipMetrics struct {
	// Device is the chip's device index on its node: the number after the
	// last '-' of accelerator_id.
	Device int `json:"device"`
	// AcceleratorID is the plugin's accelerator_id label.
	AcceleratorID string `json:"acceleratorId"`
	// DutyCycle, TensorCoreUtilization and MemoryBandwidthUtilization are
	// percentages; HBMUsed and HBMTotal bytes.
	DutyCycle                  float64 `json:"dutyCycle"`
	TensorCoreUtilization      float64 `json:"tensorCoreUtilization"`
	MemoryBandwidthUtilization float64 `json:"memoryBandwidthUtilization"`
	HBMUsed                    float64 `json:"hbmUsed"`
	HBMTotal                   float64 `json:"hbmTotal"`
}

// ParseDevicePluginMetrics reads the node-level chip families of a
// device plugin's exposition (text) and returns one ChipMetrics per chip
// that any of them names, by device index. Other families (the per-pod
// duty_cycle, Go runtime metrics) are skipped; a malformed sample of a
// chip family is an error naming its line.
func ParseDevicePluginMetrics(text []byte) ([]ChipMetrics, error) {
	byID := map[string]*ChipMetrics{}
	var order []string
	for n, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue // a sample without labels: no chip family has one
		}
		var field func(*ChipMetrics) *float64
		switch name {
		case MetricDutyCycle:
			field = func(c *ChipMetrics) *float64 { return &c.DutyCycle }
		case MetricTensorCoreUtilization:
			field = func(c *ChipMetrics) *float64 { return &c.TensorCoreUtilization }
		case MetricMemoryUsed:
			field = func(c *ChipMetrics) *float64 { return &c.HBMUsed }
		case MetricMemoryTotal:
			field = func(c *ChipMetrics) *float64 { return &c.HBMTotal }
		case MetricMemoryBandwidthUtilization:
			field = func(c *ChipMetrics) *float64 { return &c.MemoryBandwidthUtilization }
		default:
			continue
		}
		labels, value, ok := strings.Cut(rest, "}")
		if !ok {
			return nil, fmt.Errorf("tpu: device plugin metrics line %d: no closing brace: %q", n+1, line)
		}
		id := labelValue(labels, "accelerator_id")
		if id == "" {
			return nil, fmt.Errorf("tpu: device plugin metrics line %d: no accelerator_id label: %q", n+1, line)
		}
		fields := strings.Fields(value) // the value, then an optional timestamp
		if len(fields) == 0 {
			return nil, fmt.Errorf("tpu: device plugin metrics line %d: no value: %q", n+1, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("tpu: device plugin metrics line %d: value %q: %w", n+1, fields[0], err)
		}
		c := byID[id]
		if c == nil {
			dash := strings.LastIndexByte(id, '-')
			dev, err := strconv.Atoi(id[dash+1:])
			if err != nil || dev < 0 {
				return nil, fmt.Errorf("tpu: device plugin metrics line %d: accelerator_id %q does not end in -<device index>", n+1, id)
			}
			c = &ChipMetrics{Device: dev, AcceleratorID: id, DutyCycle: -1, TensorCoreUtilization: -1, MemoryBandwidthUtilization: -1, HBMUsed: -1, HBMTotal: -1}
			byID[id] = c
			order = append(order, id)
		}
		*field(c) = v
	}
	out := make([]ChipMetrics, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	for i := 1; i < len(out); i++ { // by device index (few chips: insertion sort)
		for j := i; j > 0 && out[j].Device < out[j-1].Device; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// labelValue returns the value of label name in a sample's label list
// (`a="x",b="y"`), unescaped, or "".
func labelValue(labels, name string) string {
	for len(labels) > 0 {
		eq := strings.IndexByte(labels, '=')
		if eq < 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return ""
		}
		key := strings.TrimSpace(strings.TrimPrefix(labels[:eq], ","))
		var val strings.Builder
		i := eq + 2
		for ; i < len(labels) && labels[i] != '"'; i++ {
			if labels[i] == '\\' && i+1 < len(labels) {
				i++
				if labels[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(labels[i])
		}
		if key == name {
			return val.String()
		}
		if i+1 > len(labels) {
			return ""
		}
		labels = labels[i+1:]
	}
	return ""
}
