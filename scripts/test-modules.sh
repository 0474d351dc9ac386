#!/usr/bin/env bash
# test-modules.sh vets and tests (-race) every nested module of the
# repository: the adapters that keep heavy dependencies out of the root
# module's build (backend/kubernetes: client-go; storage/gocloud:
# gocloud.dev; data/parquet: parquet-go; ...). tools/ (control-plane
# builds) is left out. Each module's end-to-end tests are vetted with
# -tags e2e here and run by scripts/e2e.sh. `make modules` and .ci/run
# call it.
#
#   scripts/test-modules.sh            # every nested module
#   scripts/test-modules.sh data/parquet storage/gocloud
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -gt 0 ]; then
  mods=("$@")
else
  mapfile -t mods < <(git ls-files '*/go.mod' | grep -v '^tools/' | xargs -n1 dirname | sort)
fi
for m in "${mods[@]}"; do
  echo "== module $m"
  (
    cd "$m"
    go vet ./...
    if grep -rlq --include='*.go' '^//go:build.*e2e' .; then
      go vet -tags e2e ./...
    fi
    go test -race -count=1 ./...
  )
done
