// Package layout holds tests of the repository's architectural promises:
// what a plain `go test ./...` compiles (no Kubernetes client, no heavy
// adapters), and a module layout that works when published (every module
// in go.work, no replace directive in a go.mod, nested modules requiring
// each other at one lockstep version). It has no code of its own.
package layout
