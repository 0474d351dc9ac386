#!/usr/bin/env bash
# Regenerates the files under data/testdata/duckdb and
# data/parquet/testdata/duckdb with DuckDB (an independent Parquet, CSV and
# JSON implementation), through its Node.js client from the npm registry,
# pinned. The files are checked in, so tests never need this script; run it
# when the SQL in scripts/duckdb-testdata.mjs changes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=$("$repo/scripts/duckdb-node.sh")
cp "$repo/scripts/duckdb-testdata.mjs" "$prefix/gen.mjs"
node "$prefix/gen.mjs" "$repo"
