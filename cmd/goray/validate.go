package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/goray-dev/goray/tpu"
)

func newValidate() *cobra.Command {
	var chips int
	cmd := &cobra.Command{
		Use:   "validate GENERATION [TOPOLOGY]",
		Short: "Check a TPU generation and topology and print its hosts, chips per host, pod type and labels",
		Long: `Check that GENERATION offers TOPOLOGY, and print the slice's hosts, chips
per host, Ray and GKE pod types, machine type, host bounds and the node
labels and Ray resources of its worker 0, as GKE and goray give them.
Without TOPOLOGY, list the generation's topologies, one per line, with
their chips and hosts.

GENERATION is any spelling package tpu parses: v6e, TPU-V6E, v5litepod,
tpu7x, tpu-v6e-slice. An invalid shape exits 1 with the valid choices.`,
		Example: `  goray validate v6e 4x4
  goray validate v6e 2x4 --chips-per-host 4
  goray validate tpu7x 2x2x2
  goray validate v5p`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("%s wants GENERATION and optionally TOPOLOGY; got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if chips < 0 {
				return usagef("--chips-per-host %d is negative; use 0 for the generation's default", chips)
			}
			g, err := tpu.ParseGeneration(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(args) == 1 {
				ts := g.ValidTopologies()
				fmt.Fprintf(out, "%s offers %d topologies:\n  %-9s %6s %6s\n", g, len(ts), "TOPOLOGY", "CHIPS", "HOSTS")
				for _, t := range ts {
					if shape, err := tpu.NewSliceShape(g, t.String(), chips); err == nil {
						fmt.Fprintf(out, "  %-9s %6d %6d\n", t, shape.Chips(), shape.Hosts())
					}
				}
				return nil
			}
			shape, err := tpu.NewSliceShape(g, args[1], chips)
			if err != nil {
				return err
			}
			row := func(k string, v any) { fmt.Fprintf(out, "%-23s %v\n", k+":", v) }
			row("shape", shape)
			row("generation", shape.Generation)
			row("topology", shape.Topology)
			row("chips", shape.Chips())
			row("hosts", shape.Hosts())
			row("chips per host", shape.ChipsPerHost)
			if opts := g.ValidChipsPerHost(shape.Topology); len(opts) > 1 {
				row("chips per host choices", strings.Trim(fmt.Sprint(opts), "[]")+" (--chips-per-host)")
			}
			if p := shape.ProcessesPerHost(); p > 1 {
				row("processes per host", p)
			}
			row("pod type", shape.PodType())
			row("GKE pod type", shape.GKEPodType())
			row("accelerator type", shape.AcceleratorType())
			row("GKE accelerator", shape.GKEAccelerator())
			row("machine type", shape.MachineType().Name)
			row("host bounds", shape.HostBounds())
			row("chips per host bounds", shape.ChipsPerHostBounds())
			fmt.Fprintln(out, "\nlabels of worker 0 (slice \"SLICE\", node pool \"POOL\"):")
			printMap(out, tpu.HostLabels(shape, "SLICE", "POOL", 0))
			fmt.Fprintln(out, "\nRay resources of worker 0:")
			printMap(out, tpu.HostResources(shape, "SLICE", 0))
			return nil
		},
	}
	cmd.Flags().IntVar(&chips, "chips-per-host", 0, "chips per host for shapes with a choice, such as v6e 2x4 (0: the default)")
	return cmd
}

func printMap[V any](out interface{ Write([]byte) (int, error) }, m map[string]V) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(out, "  %s=%v\n", k, m[k])
	}
}
