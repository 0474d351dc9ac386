#!/usr/bin/env bash
# tidy.sh runs `go mod tidy` in every goray module. goray's modules are
# developed together through go.work, but `go mod tidy` ignores the
# workspace and would look up the version a nested module requires of
# another (github.com/goray-dev/goray vX) on the public proxy. So this
# script serves the working tree's modules at those versions from a local
# file:// proxy, tidies, and then drops the go.sum lines of goray's own
# modules (the workspace never needs them; scripts/release.sh writes the
# real ones).
#
#   scripts/tidy.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
. scripts/modproxy.sh

tool=$(modproxy_tool)
tmp=$(mktemp -d)
trap 'modproxy_clean; rm -rf "$tmp"' EXIT

# The version the nested modules require of the root (one for all: they
# are released in lockstep).
version=$(awk '$1 == "github.com/goray-dev/goray" {print $2; exit}' backend/kubernetes/go.mod)
modproxy_snapshot "$tmp/src"
"$tool" build -version "$version" -out "$tmp/proxy" "$tmp/src" >/dev/null
modproxy_env "$tmp/proxy"
modproxy_clean
for m in $(git ls-files '*go.mod' | grep -v '^tools/' | xargs -n1 dirname | sort); do
  echo "== tidy $m"
  (cd "$m" && go mod tidy)
  [ -f "$m/go.sum" ] && sed -i '\#^github.com/goray-dev/goray#d' "$m/go.sum"
done
