package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

var _ backend.ChipMetricsReader = (*Backend)(nil)

// chipMetricsTimeout bounds the read of one node's device plugin metrics.
const chipMetricsTimeout = 2 * time.Second

// maxChipMetricsBody bounds one node's exposition.
const maxChipMetricsBody = 4 << 20

// ChipMetrics implements backend.ChipMetricsReader: it reads the GKE TPU
// device plugin's metrics (tpu.DevicePluginMetricsPort, or
// Config.ChipMetricsPort) from the InternalIP of every TPU node the
// backend knows, at most 16 at a time, each within 2s. The driver must
// reach the nodes' IPs on that port (inside the cluster's VPC it does;
// a NetworkPolicy or firewall may need to allow it).
func (b *Backend) ChipMetrics(ctx context.Context) ([]backend.NodeChips, error) {
	type target struct{ node, addr string }
	var targets []target
	for _, obj := range b.source.nodes.GetStore().List() {
		n, ok := obj.(*corev1.Node)
		if !ok || n.Labels[tpu.LabelGKEAccelerator] == "" {
			continue
		}
		ip := ""
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		targets = append(targets, target{node: b.source.runtimeNameOf(n.Name), addr: ip})
	}
	slices.SortFunc(targets, func(a, b target) int {
		switch {
		case a.node < b.node:
			return -1
		case a.node > b.node:
			return 1
		}
		return 0
	})
	out := make([]backend.NodeChips, len(targets))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	client := &http.Client{Timeout: chipMetricsTimeout}
	for i, t := range targets {
		out[i].Node = t.node
		if t.addr == "" {
			out[i].Err = "the node has no InternalIP"
			continue
		}
		g.Go(func() error {
			chips, err := readChipMetrics(gctx, client, net.JoinHostPort(t.addr, strconv.Itoa(b.chipMetricsPort)))
			if err != nil {
				out[i].Err = err.Error()
			}
			out[i].Chips = chips
			return nil
		})
	}
	g.Wait() //nolint:errcheck // errors are per node
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func readChipMetrics(ctx context.Context, client *http.Client, addr string) ([]tpu.ChipMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+tpu.DevicePluginMetricsPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the TPU device plugin's metrics at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the TPU device plugin's metrics at %s: %s", addr, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxChipMetricsBody))
	if err != nil {
		return nil, fmt.Errorf("read the TPU device plugin's metrics at %s: %w", addr, err)
	}
	return tpu.ParseDevicePluginMetrics(body)
}

// chipMetricsPort is Config.ChipMetricsPort with its default.
func chipMetricsPort(port int) int {
	if port == 0 {
		return tpu.DevicePluginMetricsPort
	}
	return port
}

// runtimeNameOf returns the runtime name of Kubernetes node kube.
func (s *Source) runtimeNameOf(kube string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runtimeOf(kube)
}
