package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
)

// dashboardKubernetes says where the dashboard of a Kubernetes cluster is.
const dashboardKubernetes = `The dashboard of a Kubernetes cluster is served by the driver that
holds the cluster (dashboard.New on its ray.Cluster, with the backend of
github.com/goray-dev/goray/backend/kubernetes); goray slices --kubeconfig
lists the cluster's slices and who holds them in the terminal.`

func newDashboard() *cobra.Command {
	var (
		file     string
		addr     string
		interval time.Duration
		demo     time.Duration
		driver   string
		token    string
	)
	cmd := &cobra.Command{
		Use:   "dashboard (--cluster FILE | --driver ADDR)",
		Short: "Serve the dashboard of a simulator cluster file, or show a running driver's",
		Long: `Start a simulator cluster from a cluster file and serve its dashboard until
interrupted (Ctrl-C exits 0). The page draws every TPU slice as its chip
grid, coloured by state, and follows the cluster live.

The dashboard is read-only and listens on loopback (127.0.0.1:8265) by
default. Binding another address exposes node names, labels and task names
to whoever can reach it: prefer an SSH tunnel (ssh -L
8265:127.0.0.1:8265 HOST) to --addr 0.0.0.0:8265, which needs --token
(every request must then send it as a bearer token). See docs/dashboard.md.

With --driver ADDR it starts no simulator: it shows the live page of a
running driver that serves its status endpoint there (host:port or URL),
through a proxy on --addr that adds the driver's token (--token, or
$GORAY_STATUS_TOKEN). The proxy listens on loopback only. While the
driver is gone the page says so.

With --demo PERIOD the command reserves one slice of the cluster's first
shape (as reservation "demo") for PERIOD, releases it for PERIOD, and
again, so the page shows slices changing.

` + dashboardKubernetes,
		Example: `  goray dashboard --cluster testdata/tpu-cluster.json --demo 3s   # the sample in cmd/goray of a clone
  goray dashboard --cluster cluster.json --addr 127.0.0.1:9000
  goray dashboard --driver 10.0.0.7:8265 --token "$(cat token)"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if driver != "" {
				if file != "" || demo != 0 {
					return usagef("--driver shows a running driver's page; --cluster and --demo start a simulator instead: give one of them")
				}
				return proxyDriver(cmd, driver, token, addr)
			}
			if file == "" {
				return usagef("--cluster FILE or --driver ADDR is required.\n%s", dashboardKubernetes)
			}
			if interval <= 0 {
				return usagef("--interval %v must be positive", interval)
			}
			if demo < 0 {
				return usagef("--demo %v is negative; omit it to turn the demo off", demo)
			}
			ctx := cmd.Context()
			c, err := openCluster(ctx, file)
			if err != nil {
				return err
			}
			defer c.Close()
			d, err := dashboard.New(c, &dashboard.Options{Interval: interval, Token: token})
			if err != nil {
				return err
			}
			ln, err := dashboard.Listen(addr)
			if err != nil {
				return err
			}
			if tcp, ok := ln.Addr().(*net.TCPAddr); token == "" && (!ok || !tcp.IP.IsLoopback()) {
				ln.Close()
				return usagef("--addr %s is not a loopback address: give --token TOKEN, which every request must then send as a bearer token, or keep the default and tunnel to it", addr)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "goray dashboard: serving http://%s/ (Ctrl-C to stop)\n", ln.Addr())
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			demoDone := make(chan error, 1)
			if demo > 0 {
				go func() { demoDone <- runDemo(ctx, c, demo) }()
			} else {
				demoDone <- nil
			}
			err = d.Serve(ctx, ln)
			cancel()
			return errors.Join(err, <-demoDone)
		},
	}
	cmd.Flags().StringVar(&file, "cluster", "", "simulator cluster file (JSON, as local.LoadClusterSpec reads)")
	cmd.Flags().StringVar(&addr, "addr", dashboard.DefaultAddr, "address to listen on; keep it on loopback unless you mean to expose the cluster's state")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often the page is updated")
	cmd.Flags().DurationVar(&demo, "demo", 0, "reserve and release a slice every PERIOD, to watch the page change (0: off)")
	cmd.Flags().StringVar(&driver, "driver", "", "show the live page of the driver serving its status on this host:port or URL (instead of --cluster)")
	cmd.Flags().StringVar(&token, "token", "", "with --driver, the driver's status token (default $"+tokenEnv+"); with --cluster, the token the page requires (needed off loopback)")
	return cmd
}

// proxyDriver serves, on addr (loopback), the live page of the driver at
// driver, adding its token, until interrupted.
func proxyDriver(cmd *cobra.Command, driver, token, addr string) error {
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	c := &dashboard.Client{Addr: driver, Token: token}
	if _, err := c.View(cmd.Context()); err != nil {
		return err // gone, or the token refused: say so now, not in the browser
	}
	ln, err := dashboard.Listen(addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "goray dashboard: the driver at %s on http://%s/ (Ctrl-C to stop)\n", driver, ln.Addr())
	return c.ServeProxy(cmd.Context(), ln)
}

// runDemo reserves one slice of the cluster's first shape for period,
// releases it for period, and again, until ctx ends.
func runDemo(ctx context.Context, c *ray.Cluster, period time.Duration) error {
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		return err
	}
	if len(states) == 0 {
		return errors.New("--demo: the cluster has no TPU slices to reserve")
	}
	spec := ray.SliceSpec{AcceleratorVersion: states[0].Generation, Topology: states[0].Topology, ChipsPerVM: states[0].ChipsPerHost, Name: "demo"}
	for {
		spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("--demo: %w", err)
		}
		wait(ctx, period)
		if err := spg.Release(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("--demo: %w", err)
		}
		if !wait(ctx, period) {
			return nil
		}
	}
}

// wait waits for d or ctx, and says whether ctx is still live.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
