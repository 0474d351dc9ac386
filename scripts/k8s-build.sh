#!/usr/bin/env bash
# k8s-build.sh builds the binaries of the Kubernetes test harness
# (internal/kubeharness) from the Go module proxy at pinned versions:
#
#   etcd            go.etcd.io/etcd/server/v3   (module tools/etcd)
#   kube-apiserver  k8s.io/kubernetes           (module tools/k8s)
#   kube-scheduler  k8s.io/kubernetes           (module tools/k8s)
#   kube-controller-manager  k8s.io/kubernetes  (module tools/k8s)
#   coredns         github.com/coredns/coredns  (module tools/coredns: the
#                   kubernetes, template, bind, ready, health, errors and
#                   log plugins)
#   kwok            sigs.k8s.io/kwok/cmd/kwok   (go install, own k8s deps)
#   kwok-stages.yaml  kwok's node/pod Stage objects, copied from its module
#
# into a folder keyed by the versions, by default
#   <repo>/.cache/k8s/<key>/bin
# (override with GORAY_K8S_BIN_DIR). When every binary is already there it
# is a no-op that takes well under a second. A cold build takes about 12
# minutes on 2 cores; a build with a warm Go build cache (e.g. a fresh clone
# on the same machine) only relinks, about a minute. See docs/harness.md.
#
# The key below must match binDirKey in internal/kubeharness/binaries.go
# (a test checks it).
set -euo pipefail

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
KWOK_VERSION=v0.8.0
# COREDNS_VERSION must match the require line of tools/coredns/go.mod.
COREDNS_VERSION=v1.15.0
KEY="k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_coredns-${COREDNS_VERSION}"

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${GORAY_K8S_BIN_DIR:-$REPO/.cache/k8s/$KEY/bin}
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager coredns kwok kwok-stages.yaml)

# The Go build cache stays valid across runs as long as the flags stay the
# same: no -trimpath here (it changes every compile cache key); -ldflags only
# changes the link step.
export GOFLAGS=-buildvcs=false
export GOWORK=off

have_all() {
	for b in "${BINARIES[@]}"; do [ -s "$BIN/$b" ] || return 1; done
	[ -f "$BIN/.complete" ]
}

if have_all; then
	echo "k8s-build: cached in $BIN (nothing to do)"
	exit 0
fi

mkdir -p "$BIN"
# One build at a time per folder (two test runs may race to build).
exec 9>"$BIN/.lock"
flock 9
if have_all; then
	echo "k8s-build: cached in $BIN (built by a concurrent run)"
	exit 0
fi
rm -f "$BIN/.complete"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f s", b-a}'; }
T0=$(now)

# Builds go to a temporary folder and are moved in place at the end, so an
# interrupted build never leaves a half-written binary behind.
TMP=$(mktemp -d "$BIN/.build.XXXXXX")
# kwok is installed from outside every module of this repo, so that no go.mod
# or go.sum here is consulted or touched.
OUTSIDE=$(mktemp -d)
trap 'rm -rf "$TMP" "$OUTSIDE"' EXIT

if [ ! -s "$BIN/etcd" ]; then
	t=$(now)
	go build -C "$REPO/tools/etcd" -ldflags='-s -w' -o "$TMP/etcd" .
	mv "$TMP/etcd" "$BIN/etcd"
	echo "k8s-build: etcd $ETCD_VERSION built in $(since "$t")"
fi

if [ ! -s "$BIN/kube-apiserver" ] || [ ! -s "$BIN/kube-scheduler" ] || [ ! -s "$BIN/kube-controller-manager" ]; then
	t=$(now)
	MINOR=${KUBE_VERSION#v1.}
	MINOR=${MINOR%%.*}
	LD=""
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		LD+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR"
		LD+=" -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
	done
	go build -C "$REPO/tools/k8s" -ldflags "$LD" -o "$TMP/" ./cmd/kube-apiserver ./cmd/kube-scheduler ./cmd/kube-controller-manager
	mv "$TMP/kube-apiserver" "$TMP/kube-scheduler" "$TMP/kube-controller-manager" "$BIN/"
	echo "k8s-build: kube-apiserver, kube-scheduler, kube-controller-manager $KUBE_VERSION built in $(since "$t")"
fi

if [ ! -s "$BIN/coredns" ]; then
	t=$(now)
	grep -q "github.com/coredns/coredns $COREDNS_VERSION\$" "$REPO/tools/coredns/go.mod" ||
		{ echo "k8s-build: tools/coredns/go.mod does not pin coredns $COREDNS_VERSION" >&2; exit 1; }
	go build -C "$REPO/tools/coredns" -ldflags='-s -w' -o "$TMP/coredns" .
	mv "$TMP/coredns" "$BIN/coredns"
	echo "k8s-build: coredns $COREDNS_VERSION built in $(since "$t")"
fi

if [ ! -s "$BIN/kwok" ]; then
	t=$(now)
	# kwok pins its own k8s.io modules (v0.36.x), so it is built on its own,
	# outside any module of this repo.
	(cd "$OUTSIDE" && GOBIN="$TMP" go install sigs.k8s.io/kwok/cmd/kwok@"$KWOK_VERSION")
	mv "$TMP/kwok" "$BIN/kwok"
	echo "k8s-build: kwok $KWOK_VERSION built in $(since "$t")"
fi

if [ ! -s "$BIN/kwok-stages.yaml" ]; then
	# The kwok binary has no built-in stages; kwokctl normally generates
	# them. These are kwok's own "fast" stages. Left out on purpose: node
	# heartbeats (no kube-controller-manager watches them; 1,000 nodes
	# would cost ~50 writes/s) and pod-complete (it moves Job pods to
	# Succeeded at once).
	S=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
	[ -d "$S" ] || (cd "$OUTSIDE" && go mod download sigs.k8s.io/kwok@"$KWOK_VERSION")
	for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
		echo '---'
		cat "$S/$f"
	done >"$TMP/kwok-stages.yaml"
	mv "$TMP/kwok-stages.yaml" "$BIN/kwok-stages.yaml"
fi

touch "$BIN/.complete"
echo "k8s-build: all binaries in $BIN ($(since "$T0") total)"
