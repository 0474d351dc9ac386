// Package layout holds tests of the repository's architectural promises:
// what a plain `go test ./...` compiles (no Kubernetes client, no heavy
// adapters), DESIGN.md's import layers (TestLayering: tpu below backend,
// the runtime, the fake and worker above it, the backends above those,
// ray above backend, the libraries above ray), no production package
// linking package testing, and a module layout that works when published
// (every module in go.work, no replace directive in a go.mod, nested
// modules requiring each other at one lockstep version). It has no code
// of its own.
//
// The README's `go test ./...` checks the root module and needs only its
// dependencies. With GORAY_NESTED_MODULES=1 (a step of .ci/run) the
// checks that list packages also cover the nested modules, whose
// dependencies (client-go, gocloud.dev, chromedp) are large downloads.
package layout
