package dashboard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// chipMetricsTimeout bounds one read of the nodes' chip metrics.
const chipMetricsTimeout = 3 * time.Second

// chipMetricsTTL is how long one read serves the views built after it:
// streams to several browsers and a scraper read the nodes once.
const chipMetricsTTL = 2 * time.Second

// chipCache keeps the last read of the backend's chip metrics.
type chipCache struct {
	mu    sync.Mutex
	at    time.Time
	nodes []backend.NodeChips
	err   error
}

// chipMetrics returns the nodes' chip metrics when the backend reads them
// (backend.ChipMetricsReader; on Kubernetes, the GKE TPU device plugin's),
// at most chipMetricsTTL old, or nil.
func (d *Dashboard) chipMetrics(ctx context.Context) ([]backend.NodeChips, error) {
	r, ok := ray.As[backend.ChipMetricsReader](d.c)
	if !ok {
		return nil, nil
	}
	d.chips.mu.Lock()
	defer d.chips.mu.Unlock()
	if time.Since(d.chips.at) < chipMetricsTTL {
		return d.chips.nodes, d.chips.err
	}
	rctx, cancel := context.WithTimeout(ctx, chipMetricsTimeout)
	defer cancel()
	d.chips.nodes, d.chips.err = r.ChipMetrics(rctx)
	d.chips.at = time.Now()
	return d.chips.nodes, d.chips.err
}

// addChipMetrics puts each node's chip metrics on its chips in the slices'
// grids: the chips of a host, in grid order (x fastest, then y, then z),
// take its device indices in ascending order. Nodes that could not be
// read become problems (the first three, then a count).
func addChipMetrics(v *View, nodes []backend.NodeChips) {
	byNode := map[string][]tpu.ChipMetrics{}
	var failed []string
	for _, n := range nodes {
		if n.Err != "" {
			failed = append(failed, fmt.Sprintf("TPU chip metrics of %s: %s", n.Node, n.Err))
			continue
		}
		byNode[n.Node] = n.Chips
	}
	for i := range v.Shapes {
		for j := range v.Shapes[i].Slices {
			s := &v.Shapes[i].Slices[j]
			next := map[int]int{} // worker → its chips seen so far
			for k := range s.Chips {
				c := &s.Chips[k]
				if c.Worker < 0 || c.Worker >= len(s.Hosts) {
					continue
				}
				chips := byNode[s.Hosts[c.Worker].Node]
				if n := next[c.Worker]; n < len(chips) {
					m := chips[n]
					c.Metrics = &m
				}
				next[c.Worker]++
			}
		}
	}
	if len(failed) > 3 {
		failed = append(failed[:3], fmt.Sprintf("and %d more nodes whose TPU chip metrics could not be read", len(failed)-3))
	}
	v.Problems = append(v.Problems, failed...)
}
