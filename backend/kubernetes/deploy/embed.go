// Package deploy holds the Kubernetes manifests of the goray driver: the
// least-privilege RBAC (rbac.yaml), the admission policy that lets a
// driver change only its own slice Leases (lease-policy.yaml) and the
// PriorityClass of capacity pods (capacity.yaml), embedded for tests and
// tools.
package deploy

import _ "embed"

// RBAC is rbac.yaml: the ServiceAccount goray-driver, a ClusterRole to
// read nodes and a Role to run worker pods and claim slices, with their
// bindings.
//
//go:embed rbac.yaml
var RBAC []byte

// LeasePolicy is lease-policy.yaml: a ValidatingAdmissionPolicy and its
// binding that refuse a change to a live slice Lease by anyone but its
// holder.
//
//go:embed lease-policy.yaml
var LeasePolicy []byte

// Capacity is capacity.yaml: the PriorityClass goray-capacity of the
// capacity pods a driver with Config.Provision makes (below every
// workload, so worker pods preempt them; -10, so they still trigger the
// cluster autoscaler).
//
//go:embed capacity.yaml
var Capacity []byte
