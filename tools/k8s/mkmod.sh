#!/usr/bin/env bash
# mkmod.sh [KUBE_VERSION] regenerates this module's go.mod for k8s.io/kubernetes.
#
# k8s.io/kubernetes cannot be required directly: its go.mod replaces every
# staging module (k8s.io/api, k8s.io/apiserver, ...) with ./staging/... and
# requires them at v0.0.0. This script reads the proxy's go.mod of
# k8s.io/kubernetes@KUBE_VERSION and adds `replace k8s.io/X => k8s.io/X v0.N.P`
# for every staging module, then tidies. Run it from tools/k8s only when
# bumping the Kubernetes version; the result (go.mod, go.sum) is committed.
set -euo pipefail
cd "$(dirname "$0")"
KV=${1:-v1.37.2}
SV=v0.${KV#v1.} # v1.37.2 -> v0.37.2
[ -f go.mod ] || go mod init github.com/goray-dev/goray/tools/k8s
go mod edit -go=1.26.0 -require=k8s.io/kubernetes@"$KV"
MOD=$(go mod download -json k8s.io/kubernetes@"$KV" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
for m in $(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$MOD"); do
	go mod edit -replace="$m=$m@$SV"
done
go mod tidy
