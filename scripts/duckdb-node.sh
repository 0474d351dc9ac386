#!/usr/bin/env bash
# Installs DuckDB's Node.js client (@duckdb/node-api, pinned) from the npm
# registry into .cache once, and prints the folder it is in. Used by
# duckdb-check.sh and duckdb-testdata.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
version=1.5.6-r.1
prefix="$repo/.cache/duckdb-node-$version"
if [ ! -d "$prefix/node_modules/@duckdb/node-api" ]; then
	mkdir -p "$prefix"
	npm install --silent --no-audit --no-fund --prefix "$prefix" "@duckdb/node-api@$version" >&2
fi
echo "$prefix"
