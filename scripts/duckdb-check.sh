#!/usr/bin/env bash
# Writes Parquet, CSV and JSON Lines files with goray and reads them with
# DuckDB (an independent implementation, through its Node.js client from the
# npm registry, pinned and cached in .cache), comparing every value: a date,
# a decimal, a timestamp, a list, a UUID, NULLs, the empty string and a CRLF
# inside a field read back as written. CI runs it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=$("$repo/scripts/duckdb-node.sh")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$repo" && go run ./data/parquet/internal/duckdbcheck -dir "$dir")
cp "$repo/scripts/duckdb-check.mjs" "$prefix/check.mjs"
node "$prefix/check.mjs" "$dir"
