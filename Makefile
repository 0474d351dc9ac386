# Kubernetes test-harness targets (internal/kubeharness); see docs/harness.md.
# Other targets may live beside these; these three are self-contained.

.PHONY: k8s-binaries e2e e2e-bench

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
