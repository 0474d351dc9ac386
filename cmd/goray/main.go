// Command goray shows a goray cluster's TPU slices at a terminal and
// serves its dashboard.
//
//	goray slices --cluster cluster.json      the slices of a simulator cluster file, as chip grids
//	goray slices --kubeconfig PATH           the slices of a Kubernetes cluster and who holds each
//	goray validate v6e 4x4                   hosts, chips per host, pod type and labels of a slice shape
//	goray dashboard --cluster cluster.json   serve the dashboard of a simulator cluster on 127.0.0.1:8265
//	goray dashboard --driver ADDR            show a running driver's live page on 127.0.0.1:8265
//	goray status --driver ADDR               print what a running driver is doing, as ray status does
//
// Exit codes: 0 on success, 1 when the command failed (an invalid shape, an
// unreadable cluster file), 2 on a usage error (an unknown command or
// flag, a missing argument). Run goray help COMMAND for details.
//
// goray is a module of its own, so that the library's module never
// compiles client-go: run it from its directory (go -C cmd/goray run .
// ARGS) or install it (go -C cmd/goray install .).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
