package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/goray-dev/goray/dashboard"
)

// tokenEnv names the environment variable goray reads a driver's status
// token from when --token is not given.
const tokenEnv = "GORAY_STATUS_TOKEN"

func newStatus() *cobra.Command {
	var (
		driver, token string
		asJSON        bool
		timeout       time.Duration
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

--driver is host:port (127.0.0.1:8265 for a driver on this machine) or a
URL. The token of a driver that serves off loopback comes from --token or
$` + tokenEnv + `. A driver that cannot be reached, or does not answer
within --timeout, is reported gone (exit 1).`,
		Example: `  goray status --driver 127.0.0.1:8265
  GORAY_STATUS_TOKEN=$(cat token) goray status --driver 10.0.0.7:8265 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if driver == "" {
				return usagef("--driver ADDR is required (the host:port a driver serves its status on)")
			}
			if timeout <= 0 {
				return usagef("--timeout %v must be positive", timeout)
			}
			if token == "" {
				token = os.Getenv(tokenEnv)
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
	return cmd
}
