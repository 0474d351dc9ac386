#!/usr/bin/env bash
# Writes Parquet, CSV and JSON Lines files with goray and reads them with
# DuckDB (an independent implementation, through its Node.js client from the
# npm registry, pinned and cached in .cache), comparing every value: a date,
# a decimal, a timestamp, a list, a UUID, NULLs, the empty string and a CRLF
# inside a field read back as written. CI runs it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
version=1.5.6-r.1
prefix="$repo/.cache/duckdb-node-$version"
if [ ! -d "$prefix/node_modules/@duckdb/node-api" ]; then
	mkdir -p "$prefix"
	npm install --silent --no-audit --no-fund --prefix "$prefix" "@duckdb/node-api@$version"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$repo" && go run ./data/parquet/internal/duckdbcheck -dir "$dir")
cp "$repo/scripts/duckdb-check.mjs" "$prefix/check.mjs"
node "$prefix/check.mjs" "$dir"
