#!/usr/bin/env bash
# release.sh tags every goray module at one version, in lockstep: the
# nested modules (backend/kubernetes, cmd/goray, data/parquet, ...) require
# the root and each other at exactly that version, so a user who gets any
# of them at vX.Y.Z builds the code that was tested together.
#
#   scripts/release.sh v0.2.0            # on a clean main: commit + tags
#   scripts/release.sh --dry-run v0.2.0  # the same in a temporary clone
#
# Steps: set every goray requirement (and go.work's version-pinned replace
# lines) to the version; tidy each module against a local proxy serving the
# tree at that version (a module's zip, and so its go.sum hash, is the same
# as the public proxy will compute from the tag), repeated until nothing
# changes (a nested module's hash covers its own go.sum); commit
# "release vX.Y.Z"; tag vX.Y.Z and <dir>/vX.Y.Z for every nested module
# (the tag form the go command looks for). It never pushes: it prints the
# push command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dry=0
if [ "${1:-}" = --dry-run ]; then dry=1; shift; fi
V=${1:-}
if ! [[ "$V" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "usage: scripts/release.sh [--dry-run] vMAJOR.MINOR.PATCH (got \"$V\")" >&2
  exit 2
fi
if [[ "$V" =~ ^v[2-9] ]]; then
  echo "release.sh: $V needs a /v${V:1:1} module path suffix first (go help modules)" >&2
  exit 2
fi

if [ "$dry" = 1 ]; then
  clone=$(mktemp -d)
  trap 'rm -rf "$clone"' EXIT
  git clone -q . "$clone/repo"
  # Uncommitted work is part of a dry run, so it can be tried before a commit.
  git diff HEAD --binary | (cd "$clone/repo" && git apply --allow-empty -)
  git ls-files -z --others --exclude-standard | xargs -0 -r cp --parents -t "$clone/repo"
  (cd "$clone/repo" && git add -A && git -c user.name=release -c user.email=release@localhost commit -qm "dry run: working tree" --allow-empty)
  (cd "$clone/repo" && GORAY_RELEASE_DRY_RUN=1 scripts/release.sh "$V")
  exit
fi

if [ -n "$(git status --porcelain)" ] && [ -z "${GORAY_RELEASE_DRY_RUN:-}" ]; then
  echo "release.sh: the working tree is not clean; commit or stash first" >&2
  exit 1
fi
if git rev-parse -q --verify "refs/tags/$V" >/dev/null; then
  echo "release.sh: tag $V exists" >&2
  exit 1
fi

REPO=$PWD
. scripts/modproxy.sh
tool=$(modproxy_tool)
tmp=$(mktemp -d)
trap 'modproxy_clean; chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

"$tool" setversion -version "$V" .
mapfile -t mods < <(git ls-files 'go.mod' '*/go.mod' | grep -v '^tools/' | xargs -n1 dirname | sort)
(
  modproxy_env "$tmp/proxy"
  for pass in 1 2 3 4; do
    rm -rf "$tmp/proxy" "$tmp/src"
    modproxy_snapshot "$tmp/src"
    "$tool" build -version "$V" -out "$tmp/proxy" "$tmp/src" >/dev/null
    modproxy_clean
    before=$(cat "${mods[@]/%//go.sum}" 2>/dev/null | sha256sum)
    # A module's hash covers its go.sum, so the hashes of goray's modules
    # are recomputed from this pass's proxy.
    for m in "${mods[@]}"; do
      [ -f "$m/go.sum" ] && sed -i '\#^github.com/goray-dev/goray#d' "$m/go.sum"
      (cd "$m" && go mod tidy)
    done
    after=$(cat "${mods[@]/%//go.sum}" 2>/dev/null | sha256sum)
    [ "$before" = "$after" ] && break
    [ "$pass" = 4 ] && { echo "release.sh: go.sum files did not settle" >&2; exit 1; }
  done
)

git add -A
git -c user.name="${GIT_AUTHOR_NAME:-release}" -c user.email="${GIT_AUTHOR_EMAIL:-release@localhost}" commit -qm "release $V: every module requires goray's modules at $V"
tags=("$V")
for m in "${mods[@]}"; do
  [ "$m" = . ] || tags+=("$m/$V")
done
for t in "${tags[@]}"; do git tag "$t"; done
echo "release.sh: tagged ${tags[*]}"
git show --stat --format='%h %s' HEAD | head -20
echo "push with: git push origin HEAD ${tags[*]}"
