package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/dashboard"
)

// tokenEnv names the environment variable goray reads a driver's status
// token from when --token is not given.
const tokenEnv = "GORAY_STATUS_TOKEN"

func newStatus() *cobra.Command {
	var (
		driver, token                      string
		kubeconfig, kubeContext, namespace string
		port                               int
		asJSON                             bool
		timeout                            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status --driver ADDR",
		Short: "Print what a running driver is doing, as ray status does",
		Long: `Read the status endpoint of a running driver (a dashboard.Dashboard it serves,
see docs/dashboard.md) and print a summary: nodes and resources, TPU slices
by shape (free, busy, reserved, partial, broken), reservations, the
requests waiting for slices and for how long, tasks by name (running,
queued, submitted, finished, failed), actors, placement groups, the recent
failures, train runs, serve deployments, and what could not be read.

With --kubeconfig (and optionally --context and --namespace) it finds the
drivers of a namespace instead: the holders of its goray slice Leases,
each with the slices it holds, its pod (the pod name in the holder's
identity, as the Kubernetes backend makes it in a pod) and the summary
read from the pod's IP on --port. The exit code is 0 when the namespace
could be read, whatever state each driver is in (a gone driver is a line
of the listing); 1 when the API server cannot be reached.

--driver is host:port (127.0.0.1:8265 for a driver on this machine) or a
URL. The token of a driver that serves off loopback comes from --token or
$` + tokenEnv + `. A driver that cannot be reached, or does not answer
within --timeout, is reported gone (exit 1).`,
		Example: `  goray status --driver 127.0.0.1:8265
  GORAY_STATUS_TOKEN=$(cat token) goray status --driver 10.0.0.7:8265 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kube := cmd.Flags().Changed("kubeconfig") || cmd.Flags().Changed("context")
			switch {
			case driver != "" && kube:
				return usagef("--driver reads one driver and --kubeconfig/--context finds a namespace's drivers; give one of them")
			case driver == "" && !kube:
				return usagef("--driver ADDR is required (the host:port a driver serves its status on), or --kubeconfig PATH to find a namespace's drivers")
			}
			if timeout <= 0 {
				return usagef("--timeout %v must be positive", timeout)
			}
			if token == "" {
				token = os.Getenv(tokenEnv)
			}
			if kube {
				return kubeDrivers(cmd, kubernetes.Config{Kubeconfig: kubeconfig, Context: kubeContext, Namespace: namespace, Client: kubeClient}, port, token, timeout)
			}
			c := &dashboard.Client{Addr: driver, Token: token, HTTP: &http.Client{Timeout: timeout}}
			v, err := c.View(cmd.Context())
			var gone *dashboard.GoneError
			if errors.As(err, &gone) {
				return err // "the driver at ADDR is gone: ..."
			}
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			return dashboard.WriteStatus(cmd.OutOrStdout(), v)
		},
	}
	cmd.Flags().StringVar(&driver, "driver", "", "the driver's status endpoint, host:port or URL")
	cmd.Flags().StringVar(&token, "token", "", "the driver's status token (default $"+tokenEnv+")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the driver's view as JSON (as GET /api/view answers)")
	cmd.Flags().DurationVar(&timeout, "timeout", dashboard.DefaultClientTimeout, "how long to wait for the driver's answer")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "find the drivers of a Kubernetes namespace from its goray slice Leases and their pods (instead of --driver)")
	cmd.Flags().StringVar(&kubeContext, "context", "", "with --kubeconfig, the kubeconfig context")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "with --kubeconfig, the namespace (default \"default\")")
	cmd.Flags().IntVar(&port, "port", 8265, "with --kubeconfig, the port the drivers serve their status on")
	return cmd
}
