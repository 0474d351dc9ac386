// Package deploy holds the Kubernetes manifests of the goray driver: the
// least-privilege RBAC (rbac.yaml), embedded for tests and tools.
package deploy

import _ "embed"

// RBAC is rbac.yaml: the ServiceAccount goray-driver, a ClusterRole to
// read nodes and a Role to run worker pods and claim slices, with their
// bindings.
//
//go:embed rbac.yaml
var RBAC []byte
