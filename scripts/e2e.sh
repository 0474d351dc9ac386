#!/usr/bin/env bash
# e2e.sh runs the tests that need a real Kubernetes control plane
# (internal/kubeharness, -tags e2e, GORAY_E2E=1). Files that import k8s.io
# carry //go:build e2e, so only this path compiles them; the README's
# `go test ./...` does not. It first builds the pinned binaries
# if they are missing (scripts/k8s-build.sh: about 15 minutes cold on 2
# cores, a minute with a warm Go build cache, under a second when built),
# so it works on a fresh clone; then Kueue (scripts/kueue-build.sh, its own
# cache folder). `make e2e` and .ci/run call it.
#
#   scripts/e2e.sh                 # all harness tests, -race
#   scripts/e2e.sh -run TestKwok -v
#
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/k8s-build.sh
# Kueue's controller manager for the LocalQueue-mode tests (its own folder).
scripts/kueue-build.sh

export GORAY_E2E=1
t0=$(date +%s)
# The harness is a module of its own (internal/kubeharness/go.mod), so the
# root module never requires the Kubernetes client.
(cd internal/kubeharness && go test -tags e2e -race -count=1 -timeout 30m "$@" ./...)
# The Kubernetes backend is its own module (backend/kubernetes/go.mod), so
# ./... of the root never reaches it; its end-to-end tests run here.
(cd backend/kubernetes && go test -tags e2e -race -count=1 -timeout 30m "$@" ./...)
# cmd/goray is its own module too: goray slices against the control plane.
(cd cmd/goray && go test -tags e2e -race -count=1 -timeout 30m "$@" ./...)
echo "e2e: harness tests passed in $(($(date +%s) - t0)) s"
