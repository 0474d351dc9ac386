#!/usr/bin/env bash
# kueue-build.sh builds Kueue's controller manager for the Kubernetes test
# harness (internal/kubeharness, ControlPlane.StartKueue) from the Go module
# proxy at a pinned version:
#
#   kueue                sigs.k8s.io/kueue/cmd/kueue  (module tools/kueue:
#                        upstream main.go copied, with one change marked
#                        "goray:", pinned by its go.mod and go.sum)
#   kueue-crds.yaml      Kueue's CRDs, copied from the module's
#                        config/components/crd/bases
#   kueue-webhooks.yaml  its webhook configurations, copied from
#                        config/components/webhook/manifests.yaml
#
# into a folder of its own, keyed by the version, beside the control-plane
# binaries of scripts/k8s-build.sh (whose folder it never touches): by
# default <repo>/.cache/k8s/kueue-<version>/bin; with GORAY_K8S_BIN_DIR set,
# kueue-<version>/bin next to that folder's key folder; GORAY_KUEUE_BIN_DIR
# overrides both (internal/kubeharness's KueueBinDir looks in the same place). When everything is
# there it is a no-op. A cold build compiles Kueue with its own k8s.io
# modules (v0.35) and controller-runtime: see docs/harness.md for the time.
#
# KUEUE_VERSION must match the require line of tools/kueue/go.mod and
# KueueVersion in internal/kubeharness/kueue.go (a test checks both).
set -euo pipefail

KUEUE_VERSION=v0.17.0
KEY="kueue-${KUEUE_VERSION}"

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${GORAY_KUEUE_BIN_DIR:-}" ]; then
	BIN=$GORAY_KUEUE_BIN_DIR
elif [ -n "${GORAY_K8S_BIN_DIR:-}" ]; then
	# Beside the control-plane binaries' key folder, as the harness looks.
	BIN=$(cd "$(dirname "$GORAY_K8S_BIN_DIR")/.." 2>/dev/null && pwd)/$KEY/bin
else
	BIN=$REPO/.cache/k8s/$KEY/bin
fi
FILES=(kueue kueue-crds.yaml kueue-webhooks.yaml)

# The same flags as scripts/k8s-build.sh, so the Go build cache is shared.
export GOFLAGS=-buildvcs=false
export GOWORK=off

have_all() {
	for f in "${FILES[@]}"; do [ -s "$BIN/$f" ] || return 1; done
	[ -f "$BIN/.complete" ]
}

if have_all; then
	echo "kueue-build: cached in $BIN (nothing to do)"
	exit 0
fi

mkdir -p "$BIN"
exec 9>"$BIN/.lock"
flock 9
if have_all; then
	echo "kueue-build: cached in $BIN (built by a concurrent run)"
	exit 0
fi
rm -f "$BIN/.complete"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f s", b-a}'; }

grep -q "sigs.k8s.io/kueue $KUEUE_VERSION\$" "$REPO/tools/kueue/go.mod" ||
	{ echo "kueue-build: tools/kueue/go.mod does not pin sigs.k8s.io/kueue $KUEUE_VERSION" >&2; exit 1; }

TMP=$(mktemp -d "$BIN/.build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

if [ ! -s "$BIN/kueue" ]; then
	t=$(now)
	go build -C "$REPO/tools/kueue" -ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
		-o "$TMP/kueue" .
	mv "$TMP/kueue" "$BIN/kueue"
	echo "kueue-build: kueue $KUEUE_VERSION built in $(since "$t")"
fi

if [ ! -s "$BIN/kueue-crds.yaml" ] || [ ! -s "$BIN/kueue-webhooks.yaml" ]; then
	DIR=$(go list -C "$REPO/tools/kueue" -m -f '{{.Dir}}' sigs.k8s.io/kueue)
	[ -d "$DIR/config/components" ] || { go mod download -C "$REPO/tools/kueue" sigs.k8s.io/kueue; DIR=$(go list -C "$REPO/tools/kueue" -m -f '{{.Dir}}' sigs.k8s.io/kueue); }
	for f in "$DIR"/config/components/crd/bases/*.yaml; do
		echo '---'
		cat "$f"
	done >"$TMP/kueue-crds.yaml"
	cp "$DIR/config/components/webhook/manifests.yaml" "$TMP/kueue-webhooks.yaml"
	mv "$TMP/kueue-crds.yaml" "$TMP/kueue-webhooks.yaml" "$BIN/"
fi

touch "$BIN/.complete"
echo "kueue-build: all files in $BIN"
