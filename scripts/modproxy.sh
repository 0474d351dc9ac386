# modproxy.sh is sourced by scripts that need goray's modules from a local
# module proxy (GOPROXY=file://...) instead of the go.work: tidy.sh,
# check-publish.sh and release.sh. It defines:
#
#   modproxy_tool            builds tools/modproxy once, prints its path
#   modproxy_snapshot DIR    copies the repository's files (tracked, and new
#                            ones not ignored) to DIR: what a tag would hold
#   modproxy_env PROXY       exports the environment that resolves goray's
#                            modules from PROXY and the rest from the public
#                            proxy, with no workspace
#   modproxy_clean           removes goray's modules from the module cache
#                            (local test versions must never be mistaken for
#                            published ones)

REPO=${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

modproxy_tool() {
  local bin="$REPO/.cache/bin/modproxy"
  mkdir -p "$REPO/.cache/bin"
  GOWORK=off go build -C "$REPO/tools/modproxy" -o "$bin" . >&2
  echo "$bin"
}

modproxy_snapshot() {
  local dst=$1
  mkdir -p "$dst"
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 cp --parents -t "$dst")
}

modproxy_env() {
  export GOWORK=off
  export GOFLAGS=-mod=mod
  export GOPROXY="file://$1,$(go env GOPROXY)"
  # The local versions are not in the public checksum database.
  export GONOSUMDB=github.com/goray-dev/goray
  export GONOSUMCHECK=github.com/goray-dev/goray
}

modproxy_clean() {
  local mc
  mc=$(go env GOMODCACHE)
  chmod -R u+w "$mc/github.com/goray-dev" "$mc/cache/download/github.com/goray-dev" 2>/dev/null || true
  rm -rf "$mc/github.com/goray-dev" "$mc/cache/download/github.com/goray-dev"
}
