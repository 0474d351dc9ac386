package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

func newSlices() *cobra.Command {
	var file, kubeconfig, kubeContext, namespace string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "slices (--cluster FILE | --kubeconfig PATH [--context NAME] [--namespace NS])",
		Short: "List the TPU slices of a simulator cluster file or a Kubernetes cluster as chip grids",
		Long: `List the TPU slices of a cluster, grouped by shape with totals, then each
slice as its chip grid: one cell per chip, the letter of the reservation
holding it (. when free, # when busy outside a reservation, x on a dead
host) followed by the worker ID of its host. 3-D topologies are drawn as
z-layers side by side.

--cluster names a simulator cluster file (the JSON that
local.LoadClusterSpec reads, with "tpuSlices" node pools). A freshly
started simulator holds no reservations, so every slice is free.

--kubeconfig (and optionally --context) reads a Kubernetes cluster
instead: its TPU slices from the nodes' GKE labels (one slice per TPU
node pool), and who holds each from the goray slice Leases in
--namespace (the Leases the Kubernetes backend,
github.com/goray-dev/goray/backend/kubernetes, takes for each
reservation). A host whose node is not Ready or is cordoned is drawn
dead; a slice missing hosts is listed under "not whole". goray only
reads: it lists nodes and gets each slice's Lease in the namespace, which
the driver's RBAC (backend/kubernetes/deploy/rbac.yaml) allows.`,
		Example: `  goray slices --cluster testdata/tpu-cluster.json   # the sample in cmd/goray of a clone
  goray slices --cluster cluster.json --json
  goray slices --kubeconfig ~/.kube/config --context gke_proj_us-east5_tpus --namespace ml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kube := cmd.Flags().Changed("kubeconfig") || cmd.Flags().Changed("context")
			switch {
			case file != "" && kube:
				return usagef("--cluster reads a simulator cluster file and --kubeconfig/--context a Kubernetes cluster; give one of them")
			case kube:
				return kubeSlices(cmd, kubernetes.Config{Kubeconfig: kubeconfig, Context: kubeContext, Namespace: namespace, Client: kubeClient}, asJSON)
			case cmd.Flags().Changed("namespace"):
				return usagef("--namespace applies to a Kubernetes cluster; give --kubeconfig PATH too")
			case file == "":
				return usagef("--cluster FILE (a simulator cluster file) or --kubeconfig PATH (a Kubernetes cluster) is required")
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
				return writeJSON(out, states)
			}
			if len(states) == 0 {
				fmt.Fprintf(out, "%s has no TPU slices.\n", file)
				return nil
			}
			printGrids(out, states)
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "cluster", "", "simulator cluster file (JSON, as local.LoadClusterSpec reads)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file of a Kubernetes cluster to read instead (\"\" with --context: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&kubeContext, "context", "", "kubeconfig context (default: its current context)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", kubernetes.DefaultNamespace, "namespace of the slice Leases")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the slices' states as JSON instead of grids")
	return cmd
}

// kubeClient, when set (by tests), is the client goray slices uses for a
// Kubernetes cluster instead of one built from --kubeconfig.
var kubeClient k8s.Interface

// kubeSlices lists the TPU slices of a Kubernetes cluster and who holds
// each.
func kubeSlices(cmd *cobra.Command, cfg kubernetes.Config, asJSON bool) error {
	infos, err := kubernetes.InspectSlices(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return writeJSON(out, infos)
	}
	if len(infos) == 0 {
		fmt.Fprintln(out, "The cluster has no TPU slices (no node has GKE TPU node pool labels).")
		return nil
	}
	printGrids(out, kubernetes.SliceStates(infos))
	var held, broken []kubernetes.SliceInfo
	for _, si := range infos {
		if si.Holder != "" {
			held = append(held, si)
		}
		if si.Problem != "" {
			broken = append(broken, si)
		}
	}
	fmt.Fprintln(out)
	if len(held) == 0 {
		fmt.Fprintf(out, "No slice is held (no live goray slice Lease in namespace %s).\n", cfg.Namespace)
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SLICE\tHELD BY\tRESERVATION\tLEASE EXPIRES")
		for _, si := range held {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", si.Name, si.Holder, cmp.Or(si.Reservation, "-"), si.Expires.Format(time.RFC3339))
		}
		tw.Flush()
	}
	if len(broken) > 0 {
		fmt.Fprintln(out, "\nNot whole:")
		for _, si := range broken {
			fmt.Fprintf(out, "  %s: %s\n", si.Name, si.Problem)
		}
	}
	return nil
}

func printGrids(out io.Writer, states []backend.SliceState) {
	fmt.Fprint(out, ray.FormatSliceSummary(ray.SummarizeSlices(states)))
	fmt.Fprintln(out)
	fmt.Fprint(out, ray.FormatSlices(states))
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
