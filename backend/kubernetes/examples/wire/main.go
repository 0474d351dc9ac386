// Command wire builds a goray cluster on Kubernetes with a Wire injector
// (wire.go, generated into wire_gen.go) instead of by hand, and lists the
// cluster's TPU slices:
//
//	go run ./examples/wire -kubeconfig ~/.kube/config -namespace ml -image REGISTRY/app
//
// kubernetes.New does the same by hand; Wire is optional.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/ray"
)

func main() {
	ray.Main() // serve as a worker when the backend launched this binary as one
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (empty: in-cluster config)")
	namespace := flag.String("namespace", "default", "namespace of the worker pods and Leases")
	image := flag.String("image", "", "worker image: this program, built for example with ko")
	flag.Parse()
	cfg := kubernetes.Config{Kubeconfig: *kubeconfig, Namespace: *namespace, Worker: kubernetes.WorkerConfig{Image: *image}}
	if err := run(context.Background(), os.Stdout, cfg); err != nil {
		log.Fatal(err)
	}
}

// run builds the cluster through the injector and prints its slices.
func run(ctx context.Context, w io.Writer, cfg kubernetes.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c, cleanup, err := initCluster(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer cleanup()
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		return err
	}
	for _, s := range states {
		fmt.Fprintf(w, "%s %s %s intact=%v\n", s.Name, s.Generation, s.Topology, s.Intact)
	}
	return nil
}
