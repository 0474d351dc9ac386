package backend

import (
	"context"

	"github.com/goray-dev/goray/tpu"
)

// ChipMetricsReader is implemented by backends that can read the per-chip
// metrics of their TPU nodes (on GKE, what the TPU device plugin serves on
// each node: duty cycle, tensor-core utilisation, HBM used and total).
type ChipMetricsReader interface {
	// ChipMetrics reads every TPU node's chips now. A node that could not
	// be read is listed with Err set, so one unreachable node does not
	// hide the others.
	ChipMetrics(ctx context.Context) ([]NodeChips, error)
}

// NodeChips is one TPU node's chip metrics, by device index.
type NodeChips struct {
	// Node is the node's runtime name (NodeState.Name).
	Node  string            `json:"node"`
	Chips []tpu.ChipMetrics `json:"chips,omitempty"`
	// Err says why the node's metrics could not be read, or is empty.
	Err string `json:"err,omitempty"`
}
