# test is the README's test command: every package, without the files that
# import k8s.io (they build only with -tags e2e). ci is what CI runs.
.PHONY: test race vet modules tidy publish-check ci k8s-binaries e2e e2e-bench

test:
	go test ./...
	@echo "skipped: the Kubernetes end-to-end tests build only with -tags e2e; run make e2e"

race:
	go test -race ./...

# vet the root module; scripts/test-modules.sh vets the nested ones (with
# and without the e2e tag).
vet:
	go vet ./...

# The nested modules (adapters with heavy dependencies): vet and go test -race.
modules:
	scripts/test-modules.sh

# go mod tidy in every module (through a local proxy: see the README).
tidy:
	scripts/tidy.sh

# go get / go install of every module through a local module proxy.
publish-check:
	scripts/check-publish.sh

# gofmt, vet, test, race, modules, then e2e (.ci/run).
ci:
	.ci/run

# Kubernetes test-harness targets (internal/kubeharness); see docs/harness.md.

# etcd, kube-apiserver, kube-scheduler and kwok at pinned versions, cached in
# .cache/k8s/<versions>/bin (GORAY_K8S_BIN_DIR overrides): seconds when built.
k8s-binaries:
	scripts/k8s-build.sh
	scripts/kueue-build.sh

# The harness tests against a real control plane, under -race; builds the
# binaries first. Missing binaries fail the run instead of skipping.
e2e:
	scripts/e2e.sh

# The pods-to-Running baseline: 100 pods on 64 TPU nodes, 5 rounds, 3 runs.
e2e-bench: k8s-binaries
	GORAY_E2E=1 go test -tags e2e -run '^$$' -bench BenchmarkPodsToRunning -benchtime 5x -count 3 -timeout 30m ./internal/kubeharness/
