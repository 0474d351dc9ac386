# test is the README's test command: every package, without the files that
# import k8s.io (they build only with -tags e2e). ci is what CI runs.
.PHONY: test race vet modules ci k8s-binaries e2e e2e-bench

test:
	go test ./...
	@echo "skipped: the Kubernetes end-to-end tests build only with -tags e2e; run make e2e"

race:
	go test -race ./...

# vet with and without the e2e tag, so the harness is vetted too.
vet:
	go vet ./...
	go vet -tags e2e ./...

# The nested modules (adapters with heavy dependencies): vet and go test -race.
modules:
	scripts/test-modules.sh

# gofmt, vet, test, race, modules, then e2e (.ci/run).
ci:
	.ci/run

# Kubernetes test-harness targets (internal/kubeharness); see docs/harness.md.

# etcd, kube-apiserver, kube-scheduler and kwok at pinned versions, cached in
# .cache/k8s/<versions>/bin (GORAY_K8S_BIN_DIR overrides): seconds when built.
k8s-binaries:
	scripts/k8s-build.sh

# The harness tests against a real control plane, under -race; builds the
# binaries first. Missing binaries fail the run instead of skipping.
e2e:
	scripts/e2e.sh

# The pods-to-Running baseline: 100 pods on 64 TPU nodes, 5 rounds, 3 runs.
e2e-bench: k8s-binaries
	GORAY_E2E=1 go test -tags e2e -run '^$$' -bench BenchmarkPodsToRunning -benchtime 5x -count 3 -timeout 30m ./internal/kubeharness/
