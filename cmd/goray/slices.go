package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// kubernetesLater is what goray says when asked for a Kubernetes cluster.
const kubernetesLater = `Reading the TPU slices of a Kubernetes cluster (from its nodes' GKE
labels, and who holds each from the reservation leases) is not in this
command yet: goray reads simulator cluster files only. The Kubernetes
backend (module github.com/goray-dev/goray/backend/kubernetes, see
docs/kubernetes.md) lists them with ray.TPUSlices, and
kubectl get leases -l goray.dev/cluster shows who holds which.`

func newSlices() *cobra.Command {
	var file string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "slices --cluster FILE",
		Short: "List the TPU slices of a simulator cluster file as chip grids",
		Long: `List the TPU slices of a cluster, grouped by shape with totals, then each
slice as its chip grid: one cell per chip, the letter of the reservation
holding it (. when free, # when busy outside a reservation, x on a dead
host) followed by the worker ID of its host. 3-D topologies are drawn as
z-layers side by side.

--cluster names a simulator cluster file (the JSON that
local.LoadClusterSpec reads, with "tpuSlices" node pools). A freshly
started simulator holds no reservations, so every slice is free.

` + kubernetesLater,
		Example: `  goray slices --cluster cmd/goray/testdata/tpu-cluster.json
  goray slices --cluster cluster.json --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("--cluster FILE is required.\n%s", kubernetesLater)
			}
			c, err := openCluster(cmd.Context(), file)
			if err != nil {
				return err
			}
			defer c.Close()
			states, err := ray.TPUSlices(cmd.Context(), c)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(states)
			}
			if len(states) == 0 {
				fmt.Fprintf(out, "%s has no TPU slices.\n", file)
				return nil
			}
			fmt.Fprint(out, ray.FormatSliceSummary(ray.SummarizeSlices(states)))
			fmt.Fprintln(out)
			fmt.Fprint(out, ray.FormatSlices(states))
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "cluster", "", "simulator cluster file (JSON, as local.LoadClusterSpec reads)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the slices' states as JSON instead of grids")
	return cmd
}

// openCluster starts a simulator cluster from a cluster file.
func openCluster(ctx context.Context, file string) (*ray.Cluster, error) {
	spec, err := local.LoadClusterSpec(file)
	if err != nil {
		return nil, err
	}
	b, err := local.New(spec, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster file %s: %w", file, err)
	}
	return ray.NewCluster(ctx, b, nil)
}
