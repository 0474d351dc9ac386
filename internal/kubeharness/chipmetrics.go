//go:build e2e

package kubeharness

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// DevicePluginMetricsPort is the port of the GKE TPU device plugin's
// metrics on a TPU node (its /metrics, Prometheus text format). Every TPU
// node of the node agent serves it on its InternalIP, in the plugin's
// names, labels and format, with the chip metrics SetChipMetrics gives.
const DevicePluginMetricsPort = 2112

// ChipMetrics is one chip's metrics as the harness's device plugin
// endpoint serves them: percentages and bytes. A negative value is left
// out of the exposition, as the plugin leaves out what it has not read.
type ChipMetrics struct {
	DutyCycle, TensorCoreUtilization, MemoryBandwidthUtilization float64
	HBMUsed, HBMTotal                                            float64
}

// hbmBytes is each accelerator's HBM per chip.
var hbmBytes = map[string]float64{
	"tpu-v4-podslice": 32 << 30, "tpu-v5-lite-podslice": 16 << 30, "tpu-v5p-slice": 95 << 30,
	"tpu-v6e-slice": 32 << 30, "tpu7x": 192 << 30,
}

// pluginServers are the device plugin endpoints of a control plane's
// agent TPU nodes.
type pluginServers struct {
	mu    sync.Mutex
	nodes map[string]*pluginNode
}

type pluginNode struct {
	srv             *http.Server
	instance        string
	model, topology string
	chips           []ChipMetrics
}

// serve starts node n's endpoint on its InternalIP, if it is a TPU node.
func (p *pluginServers) serve(n *corev1.Node) error {
	accel := n.Labels[LabelTPUAccelerator]
	if accel == "" {
		return nil
	}
	ip := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	q := n.Status.Capacity[ResourceTPU]
	chips := int(q.Value())
	h := fnv.New64a()
	h.Write([]byte(n.Name))
	pn := &pluginNode{instance: strconv.FormatUint(h.Sum64()>>1, 10), model: accel, topology: n.Labels[LabelTPUTopology], chips: make([]ChipMetrics, chips)}
	for i := range pn.chips {
		pn.chips[i] = ChipMetrics{HBMTotal: hbmBytes[accel], MemoryBandwidthUtilization: -1}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(DevicePluginMetricsPort)))
	if err != nil {
		return fmt.Errorf("serve the TPU device plugin's metrics of node %s: %w", n.Name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		p.mu.Lock()
		text := pn.exposition()
		p.mu.Unlock()
		w.Write([]byte(text))
	})
	pn.srv = &http.Server{Handler: mux}
	p.mu.Lock()
	if p.nodes == nil {
		p.nodes = map[string]*pluginNode{}
	}
	p.nodes[n.Name] = pn
	p.mu.Unlock()
	go pn.srv.Serve(ln)
	return nil
}

// exposition writes the plugin's node-level chip families, as its source
// declares them (pkg/tpu/metrics: name, help, labels make, accelerator_id,
// model, tpu_topology).
func (pn *pluginNode) exposition() string {
	var b strings.Builder
	for _, f := range []struct {
		name, help string
		value      func(ChipMetrics) float64
	}{
		{"duty_cycle_node", "Percent of time when the TPU was actively processing", func(c ChipMetrics) float64 { return c.DutyCycle }},
		{"memory_total_node", "Total memory available on the TPU in bytes", func(c ChipMetrics) float64 { return c.HBMTotal }},
		{"memory_used_node", "Allocated TPU memory in bytes", func(c ChipMetrics) float64 { return c.HBMUsed }},
		{"tensorcore_utilization_node", "Tensorcore percent utilization of the TPU device per node", func(c ChipMetrics) float64 { return c.TensorCoreUtilization }},
		{"memory_bandwidth_utilization_node", "Memory bandwidth utilization of the TPU device per node", func(c ChipMetrics) float64 { return c.MemoryBandwidthUtilization }},
	} {
		var lines []string
		for i, c := range pn.chips {
			if v := f.value(c); v >= 0 {
				lines = append(lines, fmt.Sprintf("%s{accelerator_id=%q,make=\"cloud-tpu\",model=%q,tpu_topology=%q} %s\n",
					f.name, pn.instance+"-"+strconv.Itoa(i), pn.model, pn.topology, strconv.FormatFloat(v, 'g', -1, 64)))
			}
		}
		if len(lines) == 0 {
			continue
		}
		sort.Strings(lines)
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", f.name, f.help, f.name)
		for _, l := range lines {
			b.WriteString(l)
		}
	}
	return b.String()
}

func (p *pluginServers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.nodes {
		n.srv.Close()
	}
	p.nodes = nil
}

// SetChipMetrics sets what TPU node node's device plugin endpoint serves
// for its chip device (0 to the node's chips - 1).
func (cp *ControlPlane) SetChipMetrics(node string, device int, m ChipMetrics) error {
	cp.plugins.mu.Lock()
	defer cp.plugins.mu.Unlock()
	n := cp.plugins.nodes[node]
	if n == nil {
		return fmt.Errorf("set chip metrics: %s is not a TPU node of the node agent", node)
	}
	if device < 0 || device >= len(n.chips) {
		return fmt.Errorf("set chip metrics: node %s has chips 0 to %d, not %d", node, len(n.chips)-1, device)
	}
	n.chips[device] = m
	return nil
}
