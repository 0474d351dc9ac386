package kubernetes

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// pluginExposition is what the GKE TPU device plugin serves for a v6e
// host's four chips, in its names, labels and format.
func pluginExposition(duty [4]float64) string {
	var b strings.Builder
	b.WriteString("# HELP duty_cycle_node Percent of time when the TPU was actively processing\n# TYPE duty_cycle_node gauge\n")
	for i, d := range duty {
		b.WriteString(`duty_cycle_node{accelerator_id="4242-` + strconv.Itoa(i) + `",make="cloud-tpu",model="tpu-v6e-slice",tpu_topology="2x2"} ` + strconv.FormatFloat(d, 'g', -1, 64) + "\n")
	}
	b.WriteString("# HELP memory_used_node Allocated TPU memory in bytes\n# TYPE memory_used_node gauge\n")
	b.WriteString(`memory_used_node{accelerator_id="4242-1",make="cloud-tpu",model="tpu-v6e-slice",tpu_topology="2x2"} 1.6e+10` + "\n")
	b.WriteString("# HELP memory_total_node Total memory available on the TPU in bytes\n# TYPE memory_total_node gauge\n")
	b.WriteString(`memory_total_node{accelerator_id="4242-1",make="cloud-tpu",model="tpu-v6e-slice",tpu_topology="2x2"} 3.4359738368e+10` + "\n")
	return b.String()
}

// ChipMetrics reads each TPU node's device plugin metrics from its
// InternalIP on the configured port, and lists a node it cannot read with
// the reason instead of failing the others.
func TestChipMetrics(t *testing.T) {
	is := is.New(t)
	plugin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != tpu.DevicePluginMetricsPath {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(pluginExposition([4]float64{0, 87.5, 100, 3})))
	}))
	defer plugin.Close()
	_, port, err := net.SplitHostPort(plugin.Listener.Addr().String())
	is.NoErr(err)
	p, err := strconv.Atoi(port)
	is.NoErr(err)

	reachable := tpuNodes("a", "tpu-v6e-slice", "2x2", 1, 4)
	reachable[0].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	noIP := tpuNodes("b", "tpu-v6e-slice", "2x2", 1, 4)
	cfg := testConfig()
	cfg.ChipMetricsPort = p
	b, _ := startBackend(t, cfg, reachable, noIP, []*corev1.Node{cpuNodeObj("cpu")})
	var r backend.ChipMetricsReader = b
	nodes, err := r.ChipMetrics(t.Context())
	is.NoErr(err)
	is.Equal(len(nodes), 2) // the TPU nodes only
	is.Equal(nodes[0].Node, "a-0")
	is.Equal(nodes[0].Err, "")
	is.Equal(len(nodes[0].Chips), 4)
	is.Equal(nodes[0].Chips[1].DutyCycle, 87.5)
	is.Equal(nodes[0].Chips[1].HBMUsed, 1.6e10)
	is.Equal(nodes[0].Chips[1].HBMTotal, 3.4359738368e10)
	is.Equal(nodes[0].Chips[2].HBMUsed, -1.0) // not reported
	is.Equal(nodes[1].Node, "b-0")
	is.Equal(nodes[1].Err, "the node has no InternalIP")

	cfg.ChipMetricsPort = 70000
	is.True(cfg.Validate() != nil) // not a port
}
