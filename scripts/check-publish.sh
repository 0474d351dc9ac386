#!/usr/bin/env bash
# check-publish.sh proves that goray's modules work once published, the way
# a user gets them: it serves the working tree's modules at a test version
# from a local module proxy (GOPROXY=file://..., built with golang.org/x/mod
# exactly as the public proxy builds zips; the rest of the world comes from
# the public proxy), then, from scratch modules outside the repository,
# with GOFLAGS=-mod=mod and no workspace:
#
#   1. go get of the root, backend/kubernetes, data/parquet and
#      storage/gocloud, each alone in its own scratch module, and all four
#      together in one; each builds and runs a small program
#      (scripts/testdata/publish/<module>/main.go);
#   2. a backend written outside the repository on the public runtime
#      (scripts/testdata/publish/outoftree: a static list of TPU VMs read
#      from a file, docs/backends.md) passes backendtest's conformance
#      suite and clustertest's seam tests;
#   3. go install github.com/goray-dev/goray/cmd/goray@<version>, and the
#      installed goray runs;
#   4. skew: the previous version's nested modules (the latest v* tag, or
#      HEAD~1 when there is none; GORAY_PREV_REF overrides) built against
#      the new root. Skew is reported; it fails the check only with
#      GORAY_STRICT_SKEW=1, since a release may change the seams on
#      purpose (the nested modules are released in lockstep).
#
#   scripts/check-publish.sh
#
# Test versions never reach the module cache for good: goray's modules are
# removed from it on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
. scripts/modproxy.sh

tool=$(modproxy_tool)
tmp=$(mktemp -d)
trap 'modproxy_clean; chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
stamp=$(date -u +%Y%m%d%H%M%S)
V=v0.1.1-check.$stamp   # the working tree
P=v0.1.0-prev.$stamp    # the previous version (sorts below V)
M=github.com/goray-dev/goray
t0=$(date +%s)

echo "== proxy: the working tree at $V"
modproxy_snapshot "$tmp/src"
"$tool" setversion -version "$V" "$tmp/src"
"$tool" build -version "$V" -out "$tmp/proxy" "$tmp/src"
modproxy_env "$tmp/proxy"
modproxy_clean

# scratch NAME MODULES... makes a module outside the repository that go
# gets MODULES at $V and holds the programs of scripts/testdata/publish
# named by NAME (one, or all).
scratch() {
  local name=$1; shift
  local dir="$tmp/scratch-$name"
  mkdir -p "$dir"
  (
    cd "$dir"
    go mod init example.com/scratch >/dev/null 2>&1
    for m in "$@"; do go get "$m@$V"; done
    if [ "$name" = all ]; then
      cp -r "$REPO"/scripts/testdata/publish/{root,kubernetes,parquet,gocloud} .
    else
      cp "$REPO/scripts/testdata/publish/$name/"*.go .
    fi
    go mod tidy
    # The scratch module must have resolved goray from the proxy at $V.
    for m in "$@"; do
      got=$(go list -m -f '{{.Version}}' "$m")
      [ "$got" = "$V" ] || { echo "check-publish: $m resolved to $got, want $V" >&2; exit 1; }
    done
    if [ "$name" = all ]; then
      for p in root kubernetes parquet gocloud; do go run "./$p"; done
    elif [ "$name" = outoftree ]; then
      go vet ./... && go test -count=1 ./...
    else
      go run .
    fi
  )
}

echo "== go get, each module alone"
scratch root "$M"
scratch kubernetes "$M/backend/kubernetes"
scratch parquet "$M/data/parquet"
scratch gocloud "$M/storage/gocloud"
echo "== a backend outside the repository (docs/backends.md): backendtest and clustertest"
scratch outoftree "$M"
echo "== go get, all together"
scratch all "$M" "$M/backend/kubernetes" "$M/data/parquet" "$M/storage/gocloud"

echo "== go install $M/cmd/goray@$V"
(cd "$tmp" && GOBIN="$tmp/bin" GOFLAGS= go install "$M/cmd/goray@$V")
"$tmp/bin/goray" validate v6e 4x4

prev=${GORAY_PREV_REF:-$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || echo HEAD~1)}
if ! git rev-parse -q --verify "$prev^{commit}" >/dev/null; then
  echo "== skew: skipped: $prev is not in this clone (a shallow clone?); set GORAY_PREV_REF"
  echo "check-publish: done in $(($(date +%s) - t0)) s"
  exit 0
fi
echo "== skew: the nested modules of $prev ($P) against the root at $V"
mkdir -p "$tmp/prev"
git archive "$prev" | tar -x -C "$tmp/prev"
# An old go.mod may still carry the replace directives of the layout
# before go.work; a published module would not.
find "$tmp/prev" -name go.mod -not -path '*/tools/*' -exec sed -i '/^replace (/,/^)/d; /^replace /d' {} +
"$tool" setversion -version "$P" "$tmp/prev"
"$tool" build -version "$P" -out "$tmp/proxy" "$tmp/prev" >/dev/null
skew=0
for m in backend/kubernetes data/parquet storage/gocloud cmd/goray; do
  [ -f "$tmp/prev/$m/go.mod" ] || continue
  dir="$tmp/skew-${m//\//-}"
  mkdir -p "$dir"
  if (cd "$dir" && go mod init example.com/skew >/dev/null 2>&1 &&
      go get "$M/$m@$P" "$M@$V" >"$dir/build.log" 2>&1 &&
      go build "$M/$m/..." >>"$dir/build.log" 2>&1); then
    echo "skew: $m@$prev builds against the root at $V"
  else
    skew=1
    echo "skew: $m@$prev does NOT build against the root at $V:"
    grep -v '^go: \(downloading\|finding\|found\|added\|upgraded\)' "$dir/build.log" | head -20 | sed 's/^/    /' || true
  fi
done
echo "check-publish: done in $(($(date +%s) - t0)) s"
if [ "$skew" = 1 ] && [ "${GORAY_STRICT_SKEW:-0}" = 1 ]; then
  echo "check-publish: skew between versions (GORAY_STRICT_SKEW=1)" >&2
  exit 1
fi
