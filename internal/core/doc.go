// Package core is the seam design of goray's shared cluster runtime
// (internal: designed, not yet implemented by backend/local; see
// docs/runtime.md for the plan): the
// two interfaces a backend implements so that one runtime — the
// scheduler, object store, dependency resolution, retries, actor mailboxes
// and restarts, the placement-group solver, the TPU slice index and each
// host's reservation env — serves every backend.
//
// A new backend implements a [NodeSource] (where nodes come from and go:
// their names, resources and labels, and add, drain and kill) and a
// [Runner] (how work runs on a node: goroutines, worker processes, pods);
// the runtime turns the two into a backend.Backend with TPU slices found
// from node labels.
//
// # Status
//
// Only the interfaces exist. The runtime itself is still the Backend type
// of backend/local; docs/runtime.md gives the plan for moving it here
// behind these seams, step by step, each step passing the conformance
// suite on local (both modes) and fake.
//
// # Node sources
//
// A source reports nodes to a [NodeSink] the runtime gives it: every node
// that exists when the source starts, then each change. A static cluster
// spec reports its nodes once and changes only on request (fault
// injection); a Kubernetes source would watch Node and Pod objects. TPU
// slices are not reported separately: the runtime groups hosts into slices
// by the GKE labels package tpu names (tpu.LabelGKETopology, the slice and
// worker-ID labels), as backend/local does today.
//
// # Runners
//
// A runner turns the program's executor into one that runs work on the
// node named in each call's backend.RuntimeInfo.Node, and tells the
// runtime when a node's worker is lost so that the runtime can fail and
// retry the work that ran there. The goroutine runner returns the executor
// itself; the process runner starts worker processes through package
// worker; a pod runner would dial one worker per pod.
package core
