#!/usr/bin/env bash
# Regenerates the files under data/testdata/duckdb and
# data/parquet/testdata/duckdb with DuckDB (an independent Parquet, CSV and
# JSON implementation), through its Node.js client from the npm registry,
# pinned. The files are checked in, so tests never need this script; run it
# when the SQL in scripts/duckdb-testdata.mjs changes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
version=1.5.6-r.1
prefix="$repo/.cache/duckdb-node-$version"
if [ ! -d "$prefix/node_modules/@duckdb/node-api" ]; then
	mkdir -p "$prefix"
	npm install --silent --no-audit --no-fund --prefix "$prefix" "@duckdb/node-api@$version"
fi
cp "$repo/scripts/duckdb-testdata.mjs" "$prefix/gen.mjs"
node "$prefix/gen.mjs" "$repo"
