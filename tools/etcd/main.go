// Command etcd is etcd v3.7.3 built from the Go module proxy for the goray
// Kubernetes test harness (internal/kubeharness). See docs/harness.md.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
